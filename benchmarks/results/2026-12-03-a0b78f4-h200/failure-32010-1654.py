#!/usr/bin/env python3
"""kfuse campaign: kfuse error in a normalization fusion.

Found by: kfuse campaign --device cuda --budget 540 --out /tmp/kfuse-campaign --seed 2604 --shard 2/12
round 1654 of 22 examples, after 2338 earlier examples in worker process 32010
Inputs: T0 torch BFloat16 (7, 32, 129, 8) strides (0, 1032, 8, 1) on cuda:0; T1 torch Double (1, 1, 1, 8) strides (16, 8, 8, 1) on cuda:0; S0 = -1.5

SchedulerError: ReductionParams need 65536 bytes of shared memory for the block combine (limit 49152); use fewer threads or a narrower vector
"""
import sys
from pathlib import Path

from kfuse import DataType, FusionDefinition  # noqa: F401 (the definition uses both)
from kfuse.campaign.repro import replay

def kfuse_fusion(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1, -1, -1, -1], dtype=DataType.BFloat16)
    T1 = fd.define_tensor(shape=[1, 1, 1, -1], dtype=DataType.Double)
    S0 = fd.define_scalar(None, dtype=DataType.Double)
    T2 = fd.ops.atan(T1)
    T3 = fd.ops.cast(T0, dtype=DataType.Float)
    S1 = fd.ops.cast(S0, dtype=DataType.Float)
    T4 = fd.ops.ge(S1, T3)
    T5 = fd.ops.sinh(T2)
    T6 = fd.ops.cast(T0, dtype=DataType.Float)
    T7 = fd.ops.isfinite(T6)
    T8 = fd.ops.cast(T4, dtype=DataType.Double)
    T9 = fd.ops.add(T5, T8)
    T10, T11, T12 = fd.ops.welford(T9, dims=[0])
    S2 = fd.ops.size(T9, dim=0)
    S3 = fd.ops.sub(S2, 1)
    S4 = fd.ops.cast(S3, dtype=DataType.Double)
    T13 = fd.ops.div(T11, S4)
    T14 = fd.ops.broadcast(T13, is_broadcast_dim=[True, False, False, False])
    T15 = fd.ops.cast(T14, dtype=DataType.BFloat16)
    fd.add_output(T15)
    fd.add_output(T7)

with FusionDefinition() as fd:
    kfuse_fusion(fd)

if __name__ == "__main__":
    sys.exit(replay(fd, Path(__file__).with_suffix(".npz"), sys.argv[1:]))
