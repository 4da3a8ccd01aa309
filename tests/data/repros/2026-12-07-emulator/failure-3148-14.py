#!/usr/bin/env python3
"""kfuse campaign: mismatch in a resize fusion.

Found by: kfuse campaign --device emulator --kinds resize pointwise --workers 1 --budget 900 --seed 8101 --out /tmp/camp/h100
round 14 of 29 examples, after 193 earlier examples in worker process 3148
Inputs: T0 torch Int32 (5, 2, 6) strides (24, 12, 1) on cpu

Mismatch: call 1 of 3: output 0 (T25): shape mismatch: actual (1, 1, 1), expected (1, 2, 1)
"""
import sys
from pathlib import Path

from kfuse import DataType, FusionDefinition  # noqa: F401 (the definition uses both)
from kfuse.campaign.repro import replay

def kfuse_fusion(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Int32)
    S0 = fd.ops.size(T0, dim=0)
    S1 = fd.ops.size(T0, dim=1)
    S2 = fd.ops.size(T0, dim=2)
    C0 = fd.define_scalar(0.5, dtype=DataType.Float)
    T1 = fd.ops.full(shape=[S0, S1, S2], fill_value=C0, dtype=DataType.Float)
    T2 = fd.ops.mul(T0, 3)
    T3 = fd.ops.ne(T0, 2)
    T4 = fd.ops.trunc(T1)
    T5 = fd.ops.cast(T0, dtype=DataType.Float)
    T6, T7, T8 = fd.ops.welford(T5, dims=[0, 2])
    S3 = fd.ops.size(T5, dim=0)
    S4 = fd.ops.size(T5, dim=2)
    S5 = fd.ops.mul(S3, S4)
    S6 = fd.ops.cast(S5, dtype=DataType.Float)
    T9 = fd.ops.div(T7, S6)
    T10 = fd.ops.broadcast(T9, is_broadcast_dim=[True, False, True])
    T11 = fd.ops.broadcast(T6, is_broadcast_dim=[True, False, True])
    T12 = fd.ops.sub(T5, T11)
    T13 = fd.ops.add(T10, 1e-05)
    T14 = fd.ops.rsqrt(T13)
    T15 = fd.ops.mul(T12, T14)
    T16 = fd.ops.floor(T4)
    T17 = fd.ops.add(T4, 0.0)
    T18 = fd.ops.isnan(T4)
    T19 = fd.ops.where(T18, float('nan'), T17)
    T20 = fd.ops.signbit(T19)
    T21 = fd.ops.erf(T16)
    T22 = fd.ops.lgamma(T21)
    T23 = fd.ops.cast(T22, dtype=DataType.Half)
    S7 = fd.ops.size(T23, dim=0)
    S8 = fd.ops.sub(S7, 3)
    S9 = fd.ops.size(T23, dim=1)
    S10 = fd.ops.size(T23, dim=2)
    S11 = fd.ops.sub(S10, 3)
    T24 = fd.ops.slice(T23, start_indices=[0, 0, 2], end_indices=[S8, S9, S11], strides=[2, 1, 1])
    T25 = fd.ops.stride_order(T24, stride_order=[2, 0, 1])
    S12 = fd.ops.size(T3, dim=0)
    S13 = fd.ops.size(T3, dim=1)
    S14 = fd.ops.size(T3, dim=2)
    T26 = fd.ops.slice(T3, start_indices=[2, 0, 0], end_indices=[S12, S13, S14], strides=[1, 1, 1])
    T27 = fd.ops.pad(T15, pad_widths=[0, 1, 2, 2, 0, 0], value=0.0)
    T28 = fd.ops.neg(T2)
    T29 = fd.ops.cat([T2, T28], dim=1)
    T30 = fd.ops.logical_not(T20)
    T31 = fd.ops.cat([T20, T30], dim=1)
    fd.add_output(T25)
    fd.add_output(T26)
    fd.add_output(T27)
    fd.add_output(T29)
    fd.add_output(T31)

with FusionDefinition() as fd:
    kfuse_fusion(fd)

if __name__ == "__main__":
    sys.exit(replay(fd, Path(__file__).with_suffix(".npz"), sys.argv[1:]))
