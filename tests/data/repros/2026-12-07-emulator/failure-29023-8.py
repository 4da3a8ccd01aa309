#!/usr/bin/env python3
"""kfuse campaign: kfuse error in a resize fusion.

Found by: kfuse campaign --device emulator --kinds resize --budget 60 --workers 2 --seed 7 --out /tmp/camp_exp
round 8 of 10 examples, after 34 earlier examples in worker process 29023
Inputs: T0 torch Float (1,) strides (1,) on cpu; T1 torch Float (1,) strides (1,) on cpu; T2 torch Int32 (1,) strides (1,) on cpu

InputError: T16 = expand(T17, ...): slice to T17 axis 0 has size 0, but axis 0 was asked to be S0 (size 0 of T0) = 1
"""
import sys
from pathlib import Path

from kfuse import DataType, FusionDefinition  # noqa: F401 (the definition uses both)
from kfuse.campaign.repro import replay

def kfuse_fusion(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1], dtype=DataType.Float)
    T1 = fd.define_tensor(shape=[1], dtype=DataType.Float)
    T2 = fd.define_tensor(shape=[-1], dtype=DataType.Int32)
    S0 = fd.ops.size(T0, dim=0)
    T3 = fd.ops.expand(T2, shape=[S0])
    T4 = fd.ops.mul(T0, 2.0)
    T5 = fd.ops.add(T4, 1.5)
    T6 = fd.ops.sum(T5, dims=[0], keepdim=False, dtype=DataType.Float)
    T7 = fd.ops.gcd(T3, 0)
    S1 = fd.ops.size(T7, dim=0)
    S2 = fd.ops.sub(S1, 1)
    T8 = fd.ops.slice(T7, start_indices=[0], end_indices=[S2], strides=[1])
    T9 = fd.ops.abs(T0)
    T10 = fd.ops.neg(T9)
    T11 = fd.ops.cat([T10, T9], dim=0)
    fd.add_output(T8)
    fd.add_output(T6)
    fd.add_output(T11)

with FusionDefinition() as fd:
    kfuse_fusion(fd)

if __name__ == "__main__":
    sys.exit(replay(fd, Path(__file__).with_suffix(".npz"), sys.argv[1:]))
