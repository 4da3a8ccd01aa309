#!/usr/bin/env python3
"""kfuse campaign: raw error in a resize fusion.

Found by: kfuse campaign --device emulator --kinds indexing resize pointwise reduction --dtypes Float Half BFloat16 Int32 Int Bool Float8_e4m3fn Float8_e5m2 --budget 300 --workers 1 --out /tmp/camp-f8-h100 --seed 141570240
round 62 of 7 examples, after 678 earlier examples in worker process 28149
Inputs: T0 torch Float8_e4m3fn (32, 1, 2) strides (2, 2, 1) on cpu; S0 = -0.5; T1 torch Float (32, 63, 2) strides (126, 2, 1) on cpu; T8 torch Float (32, 63, 2) strides (252, 4, 1) on cpu; T9 torch Float (32, 63, 2) strides (1, 64, 32) on cpu

RuntimeError: shape '[64]' is invalid for input of size 2
"""
import sys
from pathlib import Path

from kfuse import DataType, FusionDefinition  # noqa: F401 (the definition uses both)
from kfuse.campaign.repro import replay

def kfuse_fusion(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Float8_e4m3fn)
    S0 = fd.define_scalar(None, dtype=DataType.Double)
    T1 = fd.define_tensor(shape=[-1, -1, 2], dtype=DataType.Float)
    S1 = fd.ops.size(T1, dim=0)
    S2 = fd.ops.size(T1, dim=1)
    T2 = fd.ops.reshape(T1, new_shape=[S1, S2, 2, 1])
    T3 = fd.ops.slice(T2, start_indices=[0, 0, 0, 0], end_indices=[S1, S2, 1, 1], strides=[1, 1, 1, 1])
    T4 = fd.ops.slice(T2, start_indices=[0, 0, 1, 0], end_indices=[S1, S2, 2, 1], strides=[1, 1, 1, 1])
    T5 = fd.ops.neg(T4)
    T6 = fd.ops.cat([T5, T3], dim=2)
    T7 = fd.ops.reshape(T6, new_shape=[S1, S2, 2])
    T8 = fd.define_tensor(shape=[-1, -1, 2], dtype=DataType.Float)
    T9 = fd.define_tensor(shape=[-1, -1, 2], dtype=DataType.Float)
    T10 = fd.ops.mul(T1, T8)
    T11 = fd.ops.mul(T7, T9)
    T12 = fd.ops.add(T10, T11)
    T13 = fd.ops.pad(T0, pad_widths=[2, 2, -1, 0, 2, -1], value=0.0)
    T14 = fd.ops.cast(T13, dtype=DataType.Float)
    T15 = fd.ops.mul(T14, 2.0)
    T16 = fd.ops.add(T15, 1.5)
    T17 = fd.ops.cast(T0, dtype=DataType.Float)
    T18 = fd.ops.sum(T17, dims=[0], keepdim=False, dtype=DataType.Float)
    S3 = fd.ops.size(T17, dim=0)
    S4 = fd.ops.cast(S3, dtype=DataType.Float)
    T19 = fd.ops.div(T18, S4)
    T20 = fd.ops.broadcast(T19, is_broadcast_dim=[True, False, False])
    T21 = fd.ops.sub(T17, T20)
    T22 = fd.ops.cast(T21, dtype=DataType.Half)
    S5 = fd.ops.size(T22, dim=0)
    S6 = fd.ops.size(T22, dim=1)
    S7 = fd.ops.size(T22, dim=2)
    S8 = fd.ops.mul(S5, S6)
    S9 = fd.ops.mul(S8, S7)
    T23 = fd.ops.reshape(T22, new_shape=[S9])
    T24 = fd.ops.cast(T16, dtype=DataType.BFloat16)
    T25 = fd.ops.cast(T0, dtype=DataType.Float)
    S10 = fd.ops.size(T0, dim=2)
    S11 = fd.ops.size(T0, dim=0)
    S12 = fd.ops.size(T0, dim=1)
    T26 = fd.ops.slice(T0, start_indices=[0, 0, 0], end_indices=[S11, S12, 1], strides=[1, 1, 1])
    T27 = fd.ops.abs(T26)
    T28 = fd.ops.neg(T27)
    T29 = fd.ops.slice(T0, start_indices=[0, 0, 1], end_indices=[S11, S12, S10], strides=[1, 1, 1])
    T30 = fd.ops.cat([T28, T29], dim=2)
    T31 = fd.ops.abs(T30)
    T32 = fd.ops.mul(T31, 2.0)
    T33 = fd.ops.neg(T25)
    T34 = fd.ops.cat([T25, T33], dim=2)
    T35 = fd.ops.sum(T25, dims=[0, 1], keepdim=False, dtype=DataType.Float)
    fd.add_output(T23)
    fd.add_output(T12)
    fd.add_output(T24)
    fd.add_output(T32)
    fd.add_output(T35)
    fd.add_output(T34)

with FusionDefinition() as fd:
    kfuse_fusion(fd)

if __name__ == "__main__":
    sys.exit(replay(fd, Path(__file__).with_suffix(".npz"), sys.argv[1:]))
