#!/usr/bin/env python3
"""kfuse campaign: raw error in a multi_reduction fusion.

Found by: kfuse campaign --device cuda --budget 555 --out /tmp/kfuse-campaign --seed 2603 --shard 2/12
round 110 of 43 examples, after 208 earlier examples in worker process 21961
Inputs: T0 torch Int32 (2,) strides (1,) on cuda:0

ValueError: Calling nonzero on 0d arrays is not allowed. Use np.atleast_1d(scalar).nonzero() instead. If the context of this error is of the form `arr[nonzero(cond)]`, just use `arr[cond]`.
"""
import sys
from pathlib import Path

from kfuse import DataType, FusionDefinition  # noqa: F401 (the definition uses both)
from kfuse.campaign.repro import replay

def kfuse_fusion(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1], dtype=DataType.Int32)
    T1 = fd.ops.neg(T0)
    T2 = fd.ops.cast(T0, dtype=DataType.Int)
    T3 = fd.ops.sum(T2, dims=[0], keepdim=False, dtype=DataType.Int)
    T4 = fd.ops.max(T1, dims=[0], keepdim=False, dtype=DataType.Int32)
    fd.add_output(T4)
    fd.add_output(T3)

with FusionDefinition() as fd:
    kfuse_fusion(fd)

if __name__ == "__main__":
    sys.exit(replay(fd, Path(__file__).with_suffix(".npz"), sys.argv[1:]))
