#!/usr/bin/env python3
"""kfuse campaign: mismatch in a resize fusion.

Found by: kfuse campaign --device emulator --kinds resize pointwise --workers 1 --budget 900 --seed 8101 --out /tmp/camp/h100
round 16 of 19 examples, after 307 earlier examples in worker process 3148
Inputs: T0 torch Int32 (6, 8) strides (16, 1) on cpu

Mismatch: call 1 of 3: output 3 (T27): shape mismatch: actual (1, 1), expected (2, 3)
"""
import sys
from pathlib import Path

from kfuse import DataType, FusionDefinition  # noqa: F401 (the definition uses both)
from kfuse.campaign.repro import replay

def kfuse_fusion(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int32)
    S0 = fd.ops.size(T0, dim=0)
    S1 = fd.ops.size(T0, dim=1)
    C0 = fd.define_scalar(0.5, dtype=DataType.Float)
    T1 = fd.ops.full(shape=[S0, S1], fill_value=C0, dtype=DataType.Float)
    T2 = fd.ops.cast(T0, dtype=DataType.Float)
    T3 = fd.ops.max(T2, dims=[0], keepdim=False, dtype=DataType.Float)
    T4 = fd.ops.broadcast(T3, is_broadcast_dim=[True, False])
    T5 = fd.ops.sub(T2, T4)
    T6 = fd.ops.exp(T5)
    T7 = fd.ops.sum(T6, dims=[0], keepdim=False, dtype=DataType.Float)
    T8 = fd.ops.broadcast(T7, is_broadcast_dim=[True, False])
    T9 = fd.ops.div(T6, T8)
    T10 = fd.ops.cast(T0, dtype=DataType.Float)
    T11 = fd.ops.exp(T10)
    S2 = fd.ops.size(T0, dim=0)
    S3 = fd.ops.sub(S2, 1)
    S4 = fd.ops.size(T0, dim=1)
    T12 = fd.ops.slice(T0, start_indices=[0, 0], end_indices=[S3, S4], strides=[1, 1])
    T13 = fd.ops.mul(T12, 3)
    T14 = fd.ops.tanh(T11)
    T15 = fd.ops.mul(T14, 0.9)
    T16 = fd.ops.acos(T15)
    T17 = fd.ops.cast(T16, dtype=DataType.Half)
    T18 = fd.ops.permute(T17, dims=[1, 0])
    T19 = fd.ops.cast(T9, dtype=DataType.Half)
    T20 = fd.ops.permute(T19, dims=[1, 0])
    T21 = fd.ops.neg(T20)
    T22 = fd.ops.cat([T20, T21], dim=0)
    T23 = fd.ops.permute(T13, dims=[1, 0])
    T24 = fd.ops.abs(T1)
    S5 = fd.ops.size(T24, dim=1)
    S6 = fd.ops.sub(S5, 2)
    T25 = fd.ops.slice(T24, start_indices=[2, 1], end_indices=[1048576, S6], strides=[2, 2])
    T26 = fd.ops.abs(T25)
    T27 = fd.ops.mul(T26, 2.0)
    T28 = fd.ops.abs(T16)
    T29 = fd.ops.neg(T28)
    T30 = fd.ops.cat([T28, T29], dim=0)
    T31 = fd.ops.max(T28, dims=[0], keepdim=False, dtype=DataType.Float)
    T32 = fd.ops.abs(T30)
    T33 = fd.ops.mul(T32, 2.0)
    fd.add_output(T18)
    fd.add_output(T22)
    fd.add_output(T23)
    fd.add_output(T27)
    fd.add_output(T31)
    fd.add_output(T33)

with FusionDefinition() as fd:
    kfuse_fusion(fd)

if __name__ == "__main__":
    sys.exit(replay(fd, Path(__file__).with_suffix(".npz"), sys.argv[1:]))
