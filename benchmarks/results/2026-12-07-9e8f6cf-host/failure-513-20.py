#!/usr/bin/env python3
"""kfuse campaign: mismatch in a library fusion.

Found by: kfuse campaign --device emulator --budget 300 --kinds resize library multi_segment pointwise --seed 1187303421 (KFUSE_EMULATOR_PROFILE=h200), at e130ae6
round 20 of 27 examples, after 135 earlier examples in worker process 513
Inputs: T0 torch Float (9, 3, 7, 16) strides (672, 224, 32, 2) on cpu; T1 torch Float (1, 1, 1, 16) strides (16, 16, 16, 1) on cpu
Other inputs (calls 4 and 5): T0 torch Float (1, 63, 3, 13) strides (2457, 39, 13, 1) on cpu; T1 torch Float (1, 1, 1, 13) strides (13, 13, 13, 1) on cpu

Mismatch: call 2 of 5: output 5 (T18): 2 of 3024 Float elements are not close (rtol=1.3e-05, atol=1e-05); worst at (4, 2, 4, 1): actual -inf, expected inf (in the kernel's precision inf)
"""
import sys
from pathlib import Path

from kfuse import DataType, FusionDefinition  # noqa: F401 (the definition uses both)
from kfuse.campaign.repro import replay

def kfuse_fusion(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1, -1, -1, -1], dtype=DataType.Float)
    T1 = fd.define_tensor(shape=[1, 1, 1, -1], dtype=DataType.Float)
    T2 = fd.ops.complex(T0, T1)
    T3 = fd.ops.abs(T2)
    T4 = fd.ops.max(T0, dims=[0], keepdim=False, dtype=DataType.Float)
    T5 = fd.ops.sub(T2, (-1+0j))
    T6 = fd.ops.argsort(T3, dim=3, descending=False, stable=True)
    T7 = fd.ops.take_along_axis(T3, T6, dim=3)
    T8 = fd.ops.neg(T2)
    T9 = fd.ops.abs(T8)
    T10 = fd.ops.tanh(T9)
    T11 = fd.ops.mul(T10, 0.9)
    T12 = fd.ops.acos(T11)
    T13 = fd.ops.sqrt(T8)
    T14 = fd.ops.sum(T12, dims=[1], keepdim=False, dtype=DataType.Float)
    S0 = fd.ops.size(T12, dim=1)
    S1 = fd.ops.cast(S0, dtype=DataType.Float)
    T15 = fd.ops.div(T14, S1)
    T16 = fd.ops.cast(T12, dtype=DataType.ComplexFloat)
    T17 = fd.ops.add(T13, T16)
    T18 = fd.ops.imag(T17)
    T19 = fd.ops.max(T12, dims=[3], keepdim=False, dtype=DataType.Float)
    T20 = fd.ops.broadcast(T19, is_broadcast_dim=[False, False, False, True])
    T21 = fd.ops.isreal(T5)
    T22 = fd.ops.permute(T21, dims=[2, 0, 3, 1])
    S2 = fd.ops.size(T22, dim=0)
    S3 = fd.ops.size(T22, dim=1)
    S4 = fd.ops.size(T22, dim=2)
    S5 = fd.ops.sub(S4, 3)
    S6 = fd.ops.size(T22, dim=3)
    T23 = fd.ops.slice(T22, start_indices=[2, 0, 1, 1], end_indices=[S2, S3, S5, S6], strides=[2, 1, 3, 2])
    T24 = fd.ops.cast(T4, dtype=DataType.BFloat16)
    T25 = fd.ops.permute(T7, dims=[2, 0, 3, 1])
    T26 = fd.ops.cast(T15, dtype=DataType.BFloat16)
    T27 = fd.ops.cast(T20, dtype=DataType.Half)
    T28 = fd.ops.permute(T27, dims=[2, 0, 3, 1])
    fd.add_output(T23)
    fd.add_output(T24)
    fd.add_output(T25)
    fd.add_output(T26)
    fd.add_output(T28)
    fd.add_output(T18, alias_input=T0)

with FusionDefinition() as fd:
    kfuse_fusion(fd)

if __name__ == "__main__":
    sys.exit(replay(fd, Path(__file__).with_suffix(".npz"), sys.argv[1:]))
