#!/usr/bin/env python3
"""kfuse campaign: mismatch in a resize fusion.

Found by: kfuse campaign --device emulator --budget 300 --kinds resize library multi_segment --seed 2874117777 (KFUSE_EMULATOR_PROFILE=h100), at e90bab1
round 132 of 11 examples, after 586 earlier examples in worker process 2956
Inputs: T0 torch Int32 (1, 64, 7) strides (0, 7, 1) on cpu

Mismatch: call 1 of 3: output 3 (T36): 430 of 448 Int32 elements differ; first at (1, 0): actual -3, expected 21
"""
import sys
from pathlib import Path

from kfuse import DataType, FusionDefinition  # noqa: F401 (the definition uses both)
from kfuse.campaign.repro import replay

def kfuse_fusion(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Int32)
    T1 = fd.ops.neg(T0)
    T2 = fd.ops.squeeze(T1, dims=[0])
    S0 = fd.ops.size(T2, dim=0)
    T3 = fd.ops.iota(S0, 0, 1, dtype=DataType.Int)
    S1 = fd.ops.size(T2, dim=1)
    T4 = fd.ops.iota(S1, 1, 1, dtype=DataType.Int)
    T5 = fd.ops.broadcast(T3, is_broadcast_dim=[False, True])
    T6 = fd.ops.broadcast(T4, is_broadcast_dim=[True, False])
    T7 = fd.ops.ge(T5, T6)
    S2 = fd.ops.size(T2, dim=0)
    S3 = fd.ops.size(T2, dim=1)
    T8 = fd.ops.uniform(shape=[S2, S3], minval=0.0, maxval=1.0, rng_seed=1912, rng_offset=1479344, dtype=DataType.Float)
    T9 = fd.ops.cast(T2, dtype=DataType.Float)
    T10 = fd.ops.lt(T8, 0.5)
    T11 = fd.ops.where(T10, T9, 0.0)
    T12 = fd.ops.bitwise_and(T7, T7)
    T13 = fd.ops.clamp(T11, -2.0, 0.0)
    T14 = fd.ops.min(T12, dims=[1], keepdim=False, dtype=DataType.Bool)
    T15 = fd.ops.cast(T2, dtype=DataType.Float)
    T16, T17, T18 = fd.ops.welford(T15, dims=[0, 1])
    S4 = fd.ops.size(T15, dim=0)
    S5 = fd.ops.size(T15, dim=1)
    S6 = fd.ops.mul(S4, S5)
    S7 = fd.ops.cast(S6, dtype=DataType.Float)
    T19 = fd.ops.div(T17, S7)
    T20 = fd.ops.broadcast(T19, is_broadcast_dim=[True, True])
    T21, T22, T23 = fd.ops.welford(T13, dims=[0, 1])
    S8 = fd.ops.size(T13, dim=0)
    S9 = fd.ops.size(T13, dim=1)
    S10 = fd.ops.mul(S8, S9)
    S11 = fd.ops.sub(S10, 1)
    S12 = fd.ops.cast(S11, dtype=DataType.Float)
    T24 = fd.ops.div(T22, S12)
    T25 = fd.ops.broadcast(T24, is_broadcast_dim=[True, True])
    T26 = fd.ops.cast(T25, dtype=DataType.BFloat16)
    T27 = fd.ops.neg(T26)
    T28 = fd.ops.cat([T26, T27], dim=0)
    T29 = fd.ops.slice(T14, start_indices=[2], end_indices=[1048576], strides=[1])
    T30 = fd.ops.segment_set(T29)
    S13 = fd.ops.size(T2, dim=1)
    S14 = fd.ops.size(T2, dim=0)
    T31 = fd.ops.slice(T2, start_indices=[0, 0], end_indices=[S14, 4], strides=[1, 1])
    T32 = fd.ops.mul(T31, 3)
    T33 = fd.ops.slice(T2, start_indices=[0, 4], end_indices=[S14, 8], strides=[1, 1])
    T34 = fd.ops.mul(T33, 3)
    T35 = fd.ops.slice(T2, start_indices=[0, 8], end_indices=[S14, S13], strides=[1, 1])
    T36 = fd.ops.cat([T32, T34, T35], dim=1)
    fd.add_output(T28)
    fd.add_output(T30)
    fd.add_output(T20)
    fd.add_output(T36)

with FusionDefinition() as fd:
    kfuse_fusion(fd)

if __name__ == "__main__":
    sys.exit(replay(fd, Path(__file__).with_suffix(".npz"), sys.argv[1:]))
