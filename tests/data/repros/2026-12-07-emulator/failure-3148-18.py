#!/usr/bin/env python3
"""kfuse campaign: kfuse error in a resize fusion.

Found by: kfuse campaign --device emulator --kinds resize pointwise --workers 1 --budget 900 --seed 8101 --out /tmp/camp/h100
round 18 of 29 examples, after 411 earlier examples in worker process 3148
Inputs: T0 torch Float (1, 1, 1, 3) strides (3, 3, 3, 1) on cpu

InputError: input 0 (T0) axis 3 has size 3 but broadcast axis of T24 has size 1; they meet in T9 = lerp(T23, T23, T24)
"""
import sys
from pathlib import Path

from kfuse import DataType, FusionDefinition  # noqa: F401 (the definition uses both)
from kfuse.campaign.repro import replay

def kfuse_fusion(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1, -1, -1, -1], dtype=DataType.Float)
    S0 = fd.ops.size(T0, dim=0)
    S1 = fd.ops.size(T0, dim=1)
    S2 = fd.ops.size(T0, dim=2)
    S3 = fd.ops.size(T0, dim=3)
    C0 = fd.define_scalar(0.5, dtype=DataType.Float)
    T1 = fd.ops.full(shape=[S0, S1, S2, S3], fill_value=C0, dtype=DataType.Float)
    T2 = fd.ops.mul(T0, 2.0)
    T3 = fd.ops.add(T2, 1.5)
    T4 = fd.ops.sum(T3, dims=[0], keepdim=False, dtype=DataType.Float)
    T5 = fd.ops.exp2(T0)
    T6 = fd.ops.exp(T1)
    T7 = fd.ops.lerp(T0, T0, T6)
    T8 = fd.ops.exp(T0)
    S4 = fd.ops.size(T7, dim=0)
    S5 = fd.ops.size(T7, dim=1)
    S6 = fd.ops.size(T7, dim=2)
    S7 = fd.ops.size(T7, dim=3)
    T9 = fd.ops.slice(T7, start_indices=[0, 0, 0, 0], end_indices=[S4, S5, S6, S7], strides=[1, 1, 2, 1])
    T10 = fd.ops.abs(T0)
    T11 = fd.ops.neg(T10)
    T12 = fd.ops.cat([T11, T10], dim=0)
    fd.add_output(T8)
    fd.add_output(T5)
    fd.add_output(T4)
    fd.add_output(T9)
    fd.add_output(T12)

with FusionDefinition() as fd:
    kfuse_fusion(fd)

if __name__ == "__main__":
    sys.exit(replay(fd, Path(__file__).with_suffix(".npz"), sys.argv[1:]))
