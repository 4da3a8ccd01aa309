#!/usr/bin/env python3
"""kfuse campaign: mismatch in a scan fusion.

Found by: kfuse campaign --device cuda --budget 456 --out /tmp/tmp.KUNoozwwqm/campaign --seed 3907987690
round 958 of 7 examples, after 503 earlier examples in worker process 3604
Inputs: T0 torch Float (2, 5, 98989) strides (494945, 98989, 1) on cuda:0; T1 torch Int (1, 127, 1) strides (127, 1, 0) on cuda:0

Mismatch: call 2 of 3: output 1 (T17): 1 of 989890 Half elements are not close (rtol=0.629, atol=0.0315); worst at (773975,): actual inf, expected 65504.0 (in the kernel's precision 65504.0) (allowed there 16.8)
"""
import sys
from pathlib import Path

from kfuse import DataType, FusionDefinition  # noqa: F401 (the definition uses both)
from kfuse.campaign.repro import replay

def kfuse_fusion(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Float)
    T1 = fd.define_tensor(shape=[1, -1, -1], dtype=DataType.Int)
    T2 = fd.ops.squeeze(T1, dims=[2])
    T3 = fd.ops.expm1(T0)
    T4 = fd.ops.cumsum(T3, dim=2)
    T5 = fd.ops.sub(T0, 3.0)
    T6 = fd.ops.mul(T0, T5)
    T7 = fd.ops.sum(T6, dims=[2], keepdim=False, dtype=DataType.Float)
    T8 = fd.ops.broadcast(T7, is_broadcast_dim=[False, False, True])
    T9 = fd.ops.mul(T5, T8)
    T10 = fd.ops.sub(T0, T9)
    T11 = fd.ops.min(T6, dims=[0, 1], keepdim=False, dtype=DataType.Float)
    T12 = fd.ops.abs(T2)
    T13 = fd.ops.add(T12, 1)
    T14 = fd.ops.fmod(T2, T13)
    S0 = fd.ops.size(T14, dim=0)
    S1 = fd.ops.size(T14, dim=1)
    S2 = fd.ops.mul(S0, S1)
    T15 = fd.ops.reshape(T14, new_shape=[S2])
    T16 = fd.ops.cast(T4, dtype=DataType.Half)
    S3 = fd.ops.size(T16, dim=0)
    S4 = fd.ops.size(T16, dim=1)
    S5 = fd.ops.size(T16, dim=2)
    S6 = fd.ops.mul(S3, S4)
    S7 = fd.ops.mul(S6, S5)
    T17 = fd.ops.reshape(T16, new_shape=[S7])
    T18 = fd.ops.permute(T10, dims=[2, 1, 0])
    T19 = fd.ops.stride_order(T18, stride_order=[1, 0, 2])
    fd.add_output(T15)
    fd.add_output(T17)
    fd.add_output(T19)
    fd.add_output(T11)

with FusionDefinition() as fd:
    kfuse_fusion(fd)

if __name__ == "__main__":
    sys.exit(replay(fd, Path(__file__).with_suffix(".npz"), sys.argv[1:]))
