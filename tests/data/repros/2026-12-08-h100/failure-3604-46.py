#!/usr/bin/env python3
"""kfuse campaign: mismatch in a resize fusion.

Found by: kfuse campaign --device cuda --budget 456 --out /tmp/tmp.KUNoozwwqm/campaign --seed 3907987690
round 46 of 13 examples, after 26 earlier examples in worker process 3604
Inputs: T0 torch Half (2048, 1) strides (1, 1) on cuda:0; T2 torch Half (2048,) strides (1,) on cuda:0; T3 torch Half (2048,) strides (1,) on cuda:0
Other inputs (calls 4 and 5): T0 torch Half (8191, 1) strides (2, 1) on cuda:0; T2 torch Half (8191,) strides (1,) on cuda:0; T3 torch Half (8191,) strides (0,) on cuda:0

Mismatch: call 1 of 5: output 0 (T33): 2 of 2048 Half elements are not close (rtol=0.002, atol=0.0001); worst at (846,): actual 0.0, expected nan (in the kernel's precision nan) (allowed there 0.0001)
"""
import sys
from pathlib import Path

from kfuse import DataType, FusionDefinition  # noqa: F401 (the definition uses both)
from kfuse.campaign.repro import replay

def kfuse_fusion(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1, -1], dtype=DataType.Half)
    T1 = fd.ops.squeeze(T0, dims=[1])
    T2 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Half)
    T3 = fd.define_tensor(shape=[-1], dtype=DataType.Half)
    T4 = fd.ops.cast(T2, dtype=DataType.Float)
    T5 = fd.ops.isinf(T4)
    T6 = fd.ops.cast(T3, dtype=DataType.Float)
    T7 = fd.ops.tanh(T6)
    T8 = fd.ops.mul(T7, 0.001)
    T9 = fd.ops.add(T8, 1.0)
    T10 = fd.ops.prod(T9, dims=[0], keepdim=False, dtype=DataType.Float)
    T11 = fd.ops.pad(T3, pad_widths=[0, 1], value=-1.5)
    T12 = fd.ops.cast(T11, dtype=DataType.Float)
    S0 = fd.ops.size(T12, dim=0)
    T13 = fd.ops.slice(T12, start_indices=[2], end_indices=[S0], strides=[1])
    T14 = fd.ops.mul(T13, 2.0)
    T15 = fd.ops.add(T14, 1.5)
    T16 = fd.ops.sum(T15, dims=[0], keepdim=False, dtype=DataType.Float)
    T17 = fd.ops.cast(T3, dtype=DataType.Float)
    T18 = fd.ops.cast(T2, dtype=DataType.Float)
    T19 = fd.ops.nextafter(T17, T18)
    T20 = fd.ops.cast(T5, dtype=DataType.Float)
    T21, T22, T23 = fd.ops.welford(T20, dims=[0])
    S1 = fd.ops.size(T20, dim=0)
    S2 = fd.ops.cast(S1, dtype=DataType.Float)
    T24 = fd.ops.div(T22, S2)
    T25 = fd.ops.cast(T1, dtype=DataType.Float)
    T26 = fd.ops.cast(T2, dtype=DataType.Float)
    T27 = fd.ops.mul(T19, 1.0)
    T28 = fd.ops.mul(T26, T27)
    T29 = fd.ops.add(T25, T28)
    T30 = fd.ops.abs(T29)
    T31 = fd.ops.add(T30, 0.5)
    T32 = fd.ops.rsqrt(T31)
    T33 = fd.ops.cast(T32, dtype=DataType.Half)
    T34 = fd.ops.cast(T19, dtype=DataType.Half)
    T35 = fd.ops.cast(T19, dtype=DataType.Half)
    T36 = fd.ops.cast(T10, dtype=DataType.Half)
    T37 = fd.ops.cast(T16, dtype=DataType.BFloat16)
    T38 = fd.ops.cast(T24, dtype=DataType.Half)
    T39 = fd.ops.neg(T19)
    T40 = fd.ops.cat([T39, T19], dim=0)
    T41 = fd.ops.max(T19, dims=[0], keepdim=False, dtype=DataType.Float)
    T42 = fd.ops.abs(T40)
    T43 = fd.ops.mul(T42, 2.0)
    fd.add_output(T33)
    fd.add_output(T34)
    fd.add_output(T35)
    fd.add_output(T36)
    fd.add_output(T37)
    fd.add_output(T38)
    fd.add_output(T41)
    fd.add_output(T43)

with FusionDefinition() as fd:
    kfuse_fusion(fd)

if __name__ == "__main__":
    sys.exit(replay(fd, Path(__file__).with_suffix(".npz"), sys.argv[1:]))
