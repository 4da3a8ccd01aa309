#!/usr/bin/env python3
"""kfuse campaign: kfuse error in a reduction fusion.

Found by: kfuse campaign --device emulator --budget 1800 --workers 1 --seed 7301 --out /tmp/camp7301
round 421 of 23 examples, after 8634 earlier examples in worker process 19995
Inputs: T0 torch Float (0, 0, 1) strides (1, 1, 1) on cpu

KfuseError: internal error (a kfuse bug; please report it with the fusion): kernel kfuse_persistent_8a049aa13efcb6f1_eo would write output 1 (T9) through sizes (1, 1) and strides (0, 0) from byte 0, bytes [0, 8) of an output of 0; nothing was launched
"""
import sys
from pathlib import Path

from kfuse import DataType, FusionDefinition  # noqa: F401 (the definition uses both)
from kfuse.campaign.repro import replay

def kfuse_fusion(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Float)
    S0 = fd.ops.size(T0, dim=1)
    T1 = fd.ops.iota(S0, 0, 1, dtype=DataType.Int)
    S1 = fd.ops.size(T0, dim=2)
    T2 = fd.ops.iota(S1, 1, 1, dtype=DataType.Int)
    T3 = fd.ops.broadcast(T1, is_broadcast_dim=[True, False, True])
    T4 = fd.ops.broadcast(T2, is_broadcast_dim=[True, True, False])
    T5 = fd.ops.ge(T3, T4)
    T6 = fd.ops.sum(T0, dims=[0, 1], keepdim=False, dtype=DataType.Float)
    T7 = fd.ops.broadcast(T6, is_broadcast_dim=[True, True, False])
    T8 = fd.ops.cast(T5, dtype=DataType.Int)
    T9 = fd.ops.mul(2, T8)
    T10 = fd.ops.exp(T0)
    fd.add_output(T10)
    fd.add_output(T9)
    fd.add_output(T7)

with FusionDefinition() as fd:
    kfuse_fusion(fd)

if __name__ == "__main__":
    sys.exit(replay(fd, Path(__file__).with_suffix(".npz"), sys.argv[1:]))
