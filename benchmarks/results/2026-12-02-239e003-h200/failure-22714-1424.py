#!/usr/bin/env python3
"""kfuse campaign: mismatch in a pointwise fusion.

Found by: kfuse campaign --device cuda --budget 545 --out /tmp/kfuse-campaign --seed 2390 --shard 2/6
round 1424 of 41 examples, after 2186 earlier examples in worker process 22714
Inputs: T0 torch Int32 (1,) strides (1,) on cuda:0; T1 torch Float (1,) strides (1,) on cuda:0

Mismatch: call 1 of 3: output 2 (T3): 1 of 1 Bool elements differ; first at (0,): actual True, expected False
"""
import sys
from pathlib import Path

from kfuse import DataType, FusionDefinition  # noqa: F401 (the definition uses both)
from kfuse.campaign.repro import replay

def kfuse_fusion(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1], dtype=DataType.Int32)
    T1 = fd.define_tensor(shape=[1], dtype=DataType.Float)
    T2 = fd.ops.abs(T1)
    T3 = fd.ops.gt(T2, -1.0)
    T4 = fd.ops.abs(T0)
    fd.add_output(T4)
    fd.add_output(T2)
    fd.add_output(T3)

with FusionDefinition() as fd:
    kfuse_fusion(fd)

if __name__ == "__main__":
    sys.exit(replay(fd, Path(__file__).with_suffix(".npz"), sys.argv[1:]))
