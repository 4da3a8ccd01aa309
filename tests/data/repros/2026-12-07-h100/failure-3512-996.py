#!/usr/bin/env python3
"""kfuse campaign: mismatch in a reduction fusion.

Found by: kfuse campaign --device cuda --budget 330 --out /tmp/tmp.1Z5dEn1bwr/campaign --seed 3061487043
round 996 of 13 examples, after 633 earlier examples in worker process 3512
Inputs: T0 torch Float (5, 6, 256, 9) strides (13824, 2304, 9, 1) on cuda:0; T1 torch Int (1, 1, 257) strides (257, 257, 1) on cuda:0; T2 torch Float (1, 9, 127, 13) strides (14859, 1651, 13, 1) on cuda:0

Mismatch: call 1 of 3: output 2 (T13): 13 of 257 Half elements are not close (rtol=0.002, atol=0.0001); worst at (0, 0, 25): actual -inf, expected 0.0 (in the kernel's precision 0.0)
"""
import sys
from pathlib import Path

from kfuse import DataType, FusionDefinition  # noqa: F401 (the definition uses both)
from kfuse.campaign.repro import replay

def kfuse_fusion(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1, -1, -1, -1], dtype=DataType.Float)
    T1 = fd.define_tensor(shape=[1, 1, -1], dtype=DataType.Int)
    T2 = fd.define_tensor(shape=[-1, -1, -1, -1], dtype=DataType.Float)
    T3 = fd.ops.bitwise_left_shift(T1, 63)
    T4 = fd.ops.sum(T0, dims=[0, 2], keepdim=False, dtype=DataType.Float)
    T5 = fd.ops.broadcast(T4, is_broadcast_dim=[True, False, True, False])
    T6 = fd.ops.cast(T3, dtype=DataType.Float)
    T7 = fd.ops.expm1(T6)
    T8 = fd.ops.abs(T5)
    T9 = fd.ops.add(T8, 0.5)
    T10 = fd.ops.log2(T9)
    T11 = fd.ops.bitwise_right_shift(T3, -1)
    T12 = fd.ops.permute(T10, dims=[0, 1, 3, 2])
    T13 = fd.ops.cast(T7, dtype=DataType.Half)
    fd.add_output(T11)
    fd.add_output(T12)
    fd.add_output(T13)

with FusionDefinition() as fd:
    kfuse_fusion(fd)

if __name__ == "__main__":
    sys.exit(replay(fd, Path(__file__).with_suffix(".npz"), sys.argv[1:]))
