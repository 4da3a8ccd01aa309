#!/usr/bin/env python3
"""kfuse campaign: mismatch in a scan fusion.

Found by: kfuse campaign --device cuda --budget 330 --out /tmp/tmp.1Z5dEn1bwr/campaign --seed 3061487043
round 16 of 16 examples, after 21 earlier examples in worker process 3524
Inputs: T0 torch Int32 (13, 1, 31, 7) strides (217, 217, 7, 1) on cuda:0

Mismatch: call 1 of 3: output 0 (T7): 1 of 2821 Float elements are not close (rtol=4.69e-05, atol=3.61e-05); worst at (12, 0, 29, 3): actual -0.6929793357849121, expected -0.6931471805597748 (in the kernel's precision -0.6931014060974121)
"""
import sys
from pathlib import Path

from kfuse import DataType, FusionDefinition  # noqa: F401 (the definition uses both)
from kfuse.campaign.repro import replay

def kfuse_fusion(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1, -1, -1, -1], dtype=DataType.Int32)
    T1 = fd.ops.cast(T0, dtype=DataType.Float)
    T2 = fd.ops.sinh(T1)
    T3 = fd.ops.cumsum(T2, dim=0)
    T4 = fd.ops.minimum(T3, 2.0)
    T5 = fd.ops.abs(T4)
    T6 = fd.ops.add(T5, 0.5)
    T7 = fd.ops.log(T6)
    fd.add_output(T7)

with FusionDefinition() as fd:
    kfuse_fusion(fd)

if __name__ == "__main__":
    sys.exit(replay(fd, Path(__file__).with_suffix(".npz"), sys.argv[1:]))
