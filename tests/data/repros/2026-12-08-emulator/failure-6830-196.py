#!/usr/bin/env python3
"""kfuse campaign: mismatch in a multi_segment fusion.

Found by: kfuse campaign --device emulator --budget 2400 --workers 1 --seed 8203 --out /tmp/camp-s2/out
round 196 of 22 examples, after 3741 earlier examples in worker process 6830
Inputs: T0 torch Int32 (1,) strides (1,) on cpu; T1 torch Float (5, 5, 7) strides (35, 7, 1) on cpu; T2 torch Float (3, 7) strides (7, 1) on cpu

Mismatch: call 1 of 3: output 1 (T9): 1 of 75 Float elements are not close (rtol=3.44e-05, atol=2.65e-05); worst at (2, 3, 2): actual inf, expected 2.8238053417340847 (in the kernel's precision 2.7797625064849854) (allowed there 2.78e-05)
"""
import sys
from pathlib import Path

from kfuse import DataType, FusionDefinition  # noqa: F401 (the definition uses both)
from kfuse.campaign.repro import replay

def kfuse_fusion(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1], dtype=DataType.Int32)
    T1 = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Float)
    T2 = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
    T3 = fd.ops.linear(T1, T2)
    T4 = fd.ops.gelu(T3)
    T5 = fd.ops.lgamma(T4)
    T6 = fd.ops.set(T0)
    T7 = fd.ops.abs(T5)
    T8 = fd.ops.add(T7, 0.5)
    T9 = fd.ops.log(T8)
    fd.add_output(T6)
    fd.add_output(T9)

with FusionDefinition() as fd:
    kfuse_fusion(fd)

if __name__ == "__main__":
    sys.exit(replay(fd, Path(__file__).with_suffix(".npz"), sys.argv[1:]))
