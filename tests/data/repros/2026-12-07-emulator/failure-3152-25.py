#!/usr/bin/env python3
"""kfuse campaign: mismatch in a resize fusion.

Found by: kfuse campaign --device emulator --kinds resize pointwise --workers 1 --budget 900 --seed 8102 --out /tmp/camp/h200
round 25 of 26 examples, after 408 earlier examples in worker process 3152
Inputs: T0 torch Float (1, 1, 1, 1) strides (1, 1, 1, 1) on cpu

Mismatch: call 1 of 3: output 2 (T14): shape mismatch: actual (1, 1, 1, 1), expected (1, 1, 1, 0)
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
    S4 = fd.ops.size(T0, dim=0)
    S5 = fd.ops.size(T0, dim=1)
    S6 = fd.ops.sub(S5, 1)
    S7 = fd.ops.size(T0, dim=2)
    S8 = fd.ops.size(T0, dim=3)
    S9 = fd.ops.sub(S8, 1)
    T2 = fd.ops.slice(T0, start_indices=[0, 0, 0, 0], end_indices=[S4, S6, S7, S9], strides=[1, 1, 1, 1])
    T3 = fd.ops.mul(T2, 2.0)
    T4 = fd.ops.add(T3, 1.5)
    T5 = fd.ops.sum(T4, dims=[0], keepdim=False, dtype=DataType.Float)
    T6 = fd.ops.exp(T1)
    T7 = fd.ops.exp(T6)
    T8 = fd.ops.tanh(T7)
    T9 = fd.ops.exp(T8)
    T10 = fd.ops.exp(T0)
    T11 = fd.ops.cast(T10, dtype=DataType.Half)
    T12 = fd.ops.permute(T11, dims=[0, 3, 1, 2])
    T13 = fd.ops.cast(T5, dtype=DataType.Half)
    S10 = fd.ops.size(T9, dim=0)
    S11 = fd.ops.size(T9, dim=1)
    S12 = fd.ops.size(T9, dim=2)
    S13 = fd.ops.size(T9, dim=3)
    T14 = fd.ops.slice(T9, start_indices=[0, 0, 0, 2], end_indices=[S10, S11, S12, S13], strides=[1, 1, 1, 1])
    fd.add_output(T12)
    fd.add_output(T13)
    fd.add_output(T14)

with FusionDefinition() as fd:
    kfuse_fusion(fd)

if __name__ == "__main__":
    sys.exit(replay(fd, Path(__file__).with_suffix(".npz"), sys.argv[1:]))
