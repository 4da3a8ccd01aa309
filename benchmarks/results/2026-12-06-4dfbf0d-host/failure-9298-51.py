#!/usr/bin/env python3
"""kfuse campaign: mismatch in a reduction fusion.

Found by: kfuse campaign --device emulator --budget 540 --workers 1 --kinds normalization reduction multi_reduction --favor-ops lt where ge mul add --seed 7100 --out /tmp/camp2-h100
round 51 of 7 examples, after 389 earlier examples in worker process 9298
Inputs: T0 torch Int32 (16, 15, 15) strides (225, 15, 1) on cpu; T1 torch Float (15, 1) strides (1, 1) on cpu
Other inputs (calls 4 and 5): T0 torch Int32 (16, 63, 3) strides (189, 3, 1) on cpu; T1 torch Float (63, 1) strides (1, 0) on cpu

Mismatch: call 4 of 5 (the other inputs): output 0 (T8): 3 of 3 Half elements are not close (rtol=0.0635, atol=0.00317); worst at (0, 0, 0): actual nan, expected inf (in the kernel's precision inf) (allowed there 0.00317)
"""
import sys
from pathlib import Path

from kfuse import DataType, FusionDefinition  # noqa: F401 (the definition uses both)
from kfuse.campaign.repro import replay

def kfuse_fusion(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Int32)
    T1 = fd.define_tensor(shape=[-1, 1], dtype=DataType.Float)
    T2 = fd.ops.cast(T0, dtype=DataType.Float)
    T3 = fd.ops.broadcast(T1, is_broadcast_dim=[True, False, False])
    T4 = fd.ops.nextafter(T3, T2)
    T5 = fd.ops.ge(T0, 2)
    T6 = fd.ops.sum(T4, dims=[0, 1], keepdim=False, dtype=DataType.Float)
    T7 = fd.ops.broadcast(T6, is_broadcast_dim=[True, True, False])
    T8 = fd.ops.cast(T7, dtype=DataType.Half)
    fd.add_output(T8)
    fd.add_output(T5)

with FusionDefinition() as fd:
    kfuse_fusion(fd)

if __name__ == "__main__":
    sys.exit(replay(fd, Path(__file__).with_suffix(".npz"), sys.argv[1:]))
