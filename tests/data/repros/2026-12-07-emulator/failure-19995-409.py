#!/usr/bin/env python3
"""kfuse campaign: mismatch in a scan fusion.

Found by: kfuse campaign --device emulator --budget 1800 --workers 1 --seed 7301 --out /tmp/camp7301
round 409 of 23 examples, after 8193 earlier examples in worker process 19995
Inputs: T0 torch Float (3, 1024) strides (1024, 1) on cpu; T1 torch Float (1, 1) strides (1, 1) on cpu; T2 torch Float (1,) strides (1,) on cpu; S0 = -2.0

Mismatch: call 3 of 3: output 2 (T7): 2 of 3072 Float elements are not close (rtol=2.25e-05, atol=1.73e-05); worst at (1, 125): actual 8.709582328796387, expected 8.709023108318066 (in the kernel's precision 8.708860397338867)
"""
import sys
from pathlib import Path

from kfuse import DataType, FusionDefinition  # noqa: F401 (the definition uses both)
from kfuse.campaign.repro import replay

def kfuse_fusion(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
    T1 = fd.define_tensor(shape=[1, 1], dtype=DataType.Float)
    T2 = fd.define_tensor(shape=[1], dtype=DataType.Float)
    S0 = fd.define_scalar(None, dtype=DataType.Double)
    T3 = fd.ops.tanh(T0)
    T4 = fd.ops.mul(T3, 0.9)
    T5 = fd.ops.asin(T4)
    T6 = fd.ops.cummin(T5, dim=0)
    T7 = fd.ops.lgamma(T6)
    T8 = fd.ops.sum(T0, dims=[0], keepdim=False, dtype=DataType.Float)
    fd.add_output(T8)
    fd.add_output(T5)
    fd.add_output(T7)

with FusionDefinition() as fd:
    kfuse_fusion(fd)

if __name__ == "__main__":
    sys.exit(replay(fd, Path(__file__).with_suffix(".npz"), sys.argv[1:]))
