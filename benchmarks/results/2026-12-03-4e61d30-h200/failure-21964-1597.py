#!/usr/bin/env python3
"""kfuse campaign: raw error in a multi_reduction fusion.

Found by: kfuse campaign --device cuda --budget 555 --out /tmp/kfuse-campaign --seed 2603 --shard 2/12
round 1597 of 23 examples, after 2473 earlier examples in worker process 21964
Inputs: T0 torch Int32 (2,) strides (1,) on cuda:0; T1 torch Float (1,) strides (1,) on cuda:0

ValueError: Calling nonzero on 0d arrays is not allowed. Use np.atleast_1d(scalar).nonzero() instead. If the context of this error is of the form `arr[nonzero(cond)]`, just use `arr[cond]`.
"""
import sys
from pathlib import Path

from kfuse import DataType, FusionDefinition  # noqa: F401 (the definition uses both)
from kfuse.campaign.repro import replay

def kfuse_fusion(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1], dtype=DataType.Int32)
    T1 = fd.define_tensor(shape=[1], dtype=DataType.Float)
    T2 = fd.ops.cast(T0, dtype=DataType.Float)
    T3, T4, T5 = fd.ops.welford(T2, dims=[0])
    S0 = fd.ops.size(T2, dim=0)
    S1 = fd.ops.cast(S0, dtype=DataType.Float)
    T6 = fd.ops.div(T4, S1)
    T7 = fd.ops.neg(T0)
    T8 = fd.ops.max(T7, dims=[0], keepdim=False, dtype=DataType.Int32)
    T9 = fd.ops.exp(T1)
    fd.add_output(T9)
    fd.add_output(T6)
    fd.add_output(T8)

with FusionDefinition() as fd:
    kfuse_fusion(fd)

if __name__ == "__main__":
    sys.exit(replay(fd, Path(__file__).with_suffix(".npz"), sys.argv[1:]))
