#!/usr/bin/env python3
"""kfuse campaign: mismatch in a reduction fusion.

Found by: kfuse campaign --device cuda --budget 540 --out /tmp/kfuse-campaign --seed 2604 --shard 2/12
round 1951 of 23 examples, after 2800 earlier examples in worker process 32008
Inputs: T0 torch Int32 (1, 1, 0) strides (1, 1, 1) on cuda:0; T1 torch Float (1,) strides (1,) on cuda:0; T2 torch Float (1,) strides (1,) on cuda:0

Mismatch: call 1 of 3: output 0 (T8): 1 of 1 Int32 elements differ; first at (0, 0, 0): actual -2147483648, expected 1
"""
import sys
from pathlib import Path

from kfuse import DataType, FusionDefinition  # noqa: F401 (the definition uses both)
from kfuse.campaign.repro import replay

def kfuse_fusion(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Int32)
    T1 = fd.define_tensor(shape=[1], dtype=DataType.Float)
    T2 = fd.define_tensor(shape=[1], dtype=DataType.Float)
    T3 = fd.ops.max(T0, dims=[2], keepdim=False, dtype=DataType.Int32)
    T4 = fd.ops.broadcast(T3, is_broadcast_dim=[False, False, True])
    T5 = fd.ops.abs(T4)
    T6 = fd.ops.add(T5, 1)
    T7 = fd.ops.remainder(T4, T6)
    T8 = fd.ops.abs(T7)
    fd.add_output(T8)

with FusionDefinition() as fd:
    kfuse_fusion(fd)

if __name__ == "__main__":
    sys.exit(replay(fd, Path(__file__).with_suffix(".npz"), sys.argv[1:]))
