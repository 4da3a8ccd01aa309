#!/usr/bin/env python3
"""kfuse campaign: mismatch in a reduction fusion.

Found by: kfuse campaign --device cuda --budget 555 --out /tmp/kfuse-campaign --seed 2603 --shard 2/12
round 1509 of 25 examples, after 2307 earlier examples in worker process 21965
Inputs: T0 torch Int32 (1, 13, 31) strides (403, 31, 1) on cuda:0; T1 torch Float (1,) strides (1,) on cuda:0

Mismatch: call 1 of 3: output 0 (T3): 9 of 31 Int32 elements differ; first at (0, 7): actual 6, expected 8
"""
import sys
from pathlib import Path

from kfuse import DataType, FusionDefinition  # noqa: F401 (the definition uses both)
from kfuse.campaign.repro import replay

def kfuse_fusion(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Int32)
    T1 = fd.define_tensor(shape=[1], dtype=DataType.Float)
    T2 = fd.ops.neg(T0)
    T3 = fd.ops.max(T2, dims=[1], keepdim=False, dtype=DataType.Int32)
    fd.add_output(T3)

with FusionDefinition() as fd:
    kfuse_fusion(fd)

if __name__ == "__main__":
    sys.exit(replay(fd, Path(__file__).with_suffix(".npz"), sys.argv[1:]))
