#!/usr/bin/env python3
"""kfuse campaign: mismatch in a reduction fusion.

Found by: kfuse campaign --device cuda --budget 540 --out /tmp/kfuse-campaign --seed 2402 --shard 0/6
round 1051 of 25 examples, after 1672 earlier examples in worker process 1955
Inputs: T0 torch Int32 (5, 5, 255) strides (1275, 255, 1) on cuda:0

Mismatch: call 1 of 3: output 1 (T3): 1 of 1275 Float elements are not close (rtol=2.91e-05, atol=2.24e-05); worst at (0, 152): actual np.float64(-3.0517578125e-05), expected np.float64(0.0) (in the kernel's precision np.float64(0.0))
"""
import sys
from pathlib import Path

from kfuse import DataType, FusionDefinition  # noqa: F401 (the definition uses both)
from kfuse.campaign.repro import replay

def kfuse_fusion(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Int32)
    T1 = fd.ops.cast(T0, dtype=DataType.Float)
    T2 = fd.ops.sinh(T1)
    T3 = fd.ops.sum(T2, dims=[0], keepdim=False, dtype=DataType.Float)
    T4 = fd.ops.cast(T0, dtype=DataType.Float)
    T5 = fd.ops.exp(T4)
    fd.add_output(T5)
    fd.add_output(T3)

with FusionDefinition() as fd:
    kfuse_fusion(fd)

if __name__ == "__main__":
    sys.exit(replay(fd, Path(__file__).with_suffix(".npz"), sys.argv[1:]))
