#!/usr/bin/env python3
"""kfuse campaign: raw error in a multi_segment fusion.

Found by: kfuse campaign --device emulator --budget 1800 --workers 1 --seed 7301 --out /tmp/camp7301
round 212 of 15 examples, after 3926 earlier examples in worker process 19995
Inputs: T0 torch Float (1, 5) strides (5, 1) on cpu; T1 torch Float (1,) strides (1,) on cpu; T2 torch Float (1, 1) strides (1, 1) on cpu; S0 = -2.0; T3 torch Float (1, 1) strides (1, 1) on cpu; T4 torch Float (1, 1) strides (1, 1) on cpu

OverflowError: math range error
"""
import sys
from pathlib import Path

from kfuse import DataType, FusionDefinition  # noqa: F401 (the definition uses both)
from kfuse.campaign.repro import replay

def kfuse_fusion(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
    T1 = fd.define_tensor(shape=[1], dtype=DataType.Float)
    T2 = fd.define_tensor(shape=[1, 1], dtype=DataType.Float)
    S0 = fd.define_scalar(None, dtype=DataType.Double)
    T3 = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
    T4 = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
    T5 = fd.ops.linear(T3, T4)
    T6 = fd.ops.broadcast(T1, is_broadcast_dim=[True, False])
    T7 = fd.ops.nextafter(T2, T6)
    T8 = fd.ops.tanh(T5)
    T9 = fd.ops.exp(T8)
    T10 = fd.ops.lgamma(T7)
    fd.add_output(T10)
    fd.add_output(T9)

with FusionDefinition() as fd:
    kfuse_fusion(fd)

if __name__ == "__main__":
    sys.exit(replay(fd, Path(__file__).with_suffix(".npz"), sys.argv[1:]))
