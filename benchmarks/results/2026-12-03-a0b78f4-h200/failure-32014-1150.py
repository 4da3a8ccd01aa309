#!/usr/bin/env python3
"""kfuse campaign: mismatch in a normalization fusion.

Found by: kfuse campaign --device cuda --budget 540 --out /tmp/kfuse-campaign --seed 2604 --shard 2/12
round 1150 of 34 examples, after 1659 earlier examples in worker process 32014
Inputs: T0 torch Float (128,) strides (0,) on cuda:0; T1 torch Float (1,) strides (1,) on cuda:0; T2 torch Float (128,) strides (1,) on cuda:0

Mismatch: call 3 of 3: output 0 (T9): 7 of 128 Half elements are not close (rtol=0.0226, atol=0.00113); worst at (34,): actual -inf, expected nan (in the kernel's precision nan)
"""
import sys
from pathlib import Path

from kfuse import DataType, FusionDefinition  # noqa: F401 (the definition uses both)
from kfuse.campaign.repro import replay

def kfuse_fusion(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1], dtype=DataType.Float)
    T1 = fd.define_tensor(shape=[1], dtype=DataType.Float)
    T2 = fd.define_tensor(shape=[-1], dtype=DataType.Float)
    T3 = fd.ops.sum(T0, dims=[0], keepdim=False, dtype=DataType.Float)
    S0 = fd.ops.size(T0, dim=0)
    S1 = fd.ops.cast(S0, dtype=DataType.Float)
    T4 = fd.ops.div(T3, S1)
    T5 = fd.ops.broadcast(T4, is_broadcast_dim=[True])
    T6 = fd.ops.sub(T0, T5)
    T7 = fd.ops.gelu(T6, approximate='tanh')
    T8 = fd.ops.mul(T7, T2)
    T9 = fd.ops.cast(T8, dtype=DataType.Half)
    fd.add_output(T9)

with FusionDefinition() as fd:
    kfuse_fusion(fd)

if __name__ == "__main__":
    sys.exit(replay(fd, Path(__file__).with_suffix(".npz"), sys.argv[1:]))
