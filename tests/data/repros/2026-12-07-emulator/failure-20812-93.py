#!/usr/bin/env python3
"""kfuse campaign: kfuse error in a resize fusion.

Found by: kfuse campaign --device emulator --kinds resize --budget 300 --workers 2 --out /tmp/camp-views --seed 422486972
round 93 of 9 examples, after 371 earlier examples in worker process 20812
Inputs: T0 torch Float (1, 7, 8) strides (56, 8, 1) on cpu; T1 torch Float (64,) strides (1,) on cpu

KfuseError: internal error (a kfuse bug; please report it with the fusion): kernel kfuse_pointwise_35ee6c8fc6c8cd48 would write output 1 (T6) through sizes (7,) and strides (2,) from byte 0, bytes [0, 13) of an output of 7; nothing was launched
"""
import sys
from pathlib import Path

from kfuse import DataType, FusionDefinition  # noqa: F401 (the definition uses both)
from kfuse.campaign.repro import replay

def kfuse_fusion(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Float)
    T1 = fd.define_tensor(shape=[-1], dtype=DataType.Float)
    T2 = fd.ops.sum(T0, dims=[0, 2], keepdim=False, dtype=DataType.Float)
    T3 = fd.ops.broadcast(T2, is_broadcast_dim=[True, False, True])
    S0 = fd.ops.size(T1, dim=0)
    T4 = fd.ops.slice(T1, start_indices=[2], end_indices=[S0], strides=[1])
    T5 = fd.ops.mul(T4, -0.5)
    T6 = fd.ops.add(T5, 1.5)
    T7 = fd.ops.floor(T0)
    T8 = fd.ops.isinf(T3)
    T9 = fd.ops.cast(T8, dtype=DataType.Float)
    T10 = fd.ops.lgamma(T9)
    T11 = fd.ops.tanh(T7)
    T12 = fd.ops.mul(T11, 0.001)
    T13 = fd.ops.add(T12, 1.0)
    T14 = fd.ops.prod(T13, dims=[0], keepdim=False, dtype=DataType.Float)
    T15 = fd.ops.cosh(T10)
    S1 = fd.ops.size(T8, dim=0)
    S2 = fd.ops.size(T8, dim=1)
    S3 = fd.ops.size(T8, dim=2)
    S4 = fd.ops.mul(S2, S3)
    T16 = fd.ops.reshape(T8, new_shape=[S1, S4])
    T17 = fd.ops.slice(T16, start_indices=[0, 0], end_indices=[S1, 3], strides=[1, 1])
    T18 = fd.ops.slice(T16, start_indices=[0, 3], end_indices=[S1, S4], strides=[1, 1])
    T19 = fd.ops.cat([T18, T17], dim=1)
    T20 = fd.ops.reshape(T19, new_shape=[S1, S2, S3])
    T21 = fd.ops.permute(T20, dims=[0, 2, 1])
    T22 = fd.ops.cast(T3, dtype=DataType.Half)
    T23 = fd.ops.permute(T22, dims=[0, 2, 1])
    T24 = fd.ops.cast(T15, dtype=DataType.Half)
    T25 = fd.ops.permute(T24, dims=[0, 2, 1])
    T26 = fd.ops.stride_order(T25, stride_order=[1, 2, 0])
    S5 = fd.ops.size(T14, dim=0)
    T27 = fd.ops.slice(T14, start_indices=[0, 1], end_indices=[S5, 1048576], strides=[1, 1])
    T28 = fd.ops.logical_not(T8)
    T29 = fd.ops.cat([T8, T28], dim=2)
    fd.add_output(T21)
    fd.add_output(T23)
    fd.add_output(T26)
    fd.add_output(T6)
    fd.add_output(T27)
    fd.add_output(T29)

with FusionDefinition() as fd:
    kfuse_fusion(fd)

if __name__ == "__main__":
    sys.exit(replay(fd, Path(__file__).with_suffix(".npz"), sys.argv[1:]))
