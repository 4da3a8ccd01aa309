"""Rotary position embedding without a concatenation (nvFuser's test_rope.py, the
`without_cat` variant of rope_ops.py): each pair (q_real, q_image) of a head's features is
turned by a 2 x 2 matrix of cos and sin, precomputed per position as a [S, 2, F/2, 2] table,
so that the fusion is a reshape and permute of q, a broadcast product with the table and a
sum over the last axis of 2, then a reshape to [B, H, S, F]. The permute makes the output's
order (heads before positions) differ from q's.

The product is spelled with casts to Float that rope_ops.py leaves out: nvFuser computes
arithmetic on BFloat16 and Half operands in Float (its type promotion casts a reduced common
type to Float), and its test_rope.py checks this fusion bit-exactly against products and sums
in float32 rounded once to bf16; kfuse types a product of bf16 tensors bf16, as torch does,
rounding it before the sum. Written out, the casts make kfuse compute what nvFuser computes
(and are what nvFuser's llama RoPE fusions spell).

Shapes are [batch, sequence, heads, features per head] (q's). API differences: no is_cpu;
kfuse's reshape takes the sizes of the shape, as nvFuser's does.
"""

from __future__ import annotations

import functools
from typing import Any

from kfuse import DataType, FusionDefinition
from models.case import Shape, sweep_case

# Llama-2 7B's attention (32 heads of 128) at nvFuser's sequence of 4096; batch 8 (a 256 MiB
# q), where nvFuser runs 32 (1 GiB), for the suite's 5-minute budget.
ROPE = ((8, 4096, 32, 128),)
ROPE_QUICK = ROPE
TEST_ROPE = (2, 5, 3, 8)
GPU_TEST_ROPE = (2, 512, 8, 128)


def rope_without_cat_definition(dtype: DataType) -> FusionDefinition:
    # from rope_ops.py::rope_without_cat_fusion (test_rope.py::test_rope_benchmark)
    with FusionDefinition() as fd:
        q = fd.define_tensor(shape=[-1] * 4, contiguity=[True] * 4, dtype=dtype)
        table = fd.define_tensor(shape=[-1, 2, -1, 2], contiguity=[True] * 4, dtype=dtype)
        b, s, h, f = (fd.ops.size(q, i) for i in range(4))
        half = fd.ops.size(table, 2)
        q = fd.ops.reshape(q, new_shape=[b, s, h, 2, half])
        q = fd.ops.permute(q, dims=[0, 2, 1, 4, 3])
        q = fd.ops.broadcast_in_dim(q, shape=[b, h, s, 1, half, 2], broadcast_dims=[0, 1, 2, 4, 5])
        table = fd.ops.broadcast_in_dim(
            table, shape=[b, h, s, 2, half, 2], broadcast_dims=[2, 3, 4, 5]
        )
        product = fd.ops.mul(
            fd.ops.cast(q, dtype=DataType.Float), fd.ops.cast(table, dtype=DataType.Float)
        )
        out = fd.ops.sum(product, dims=[-1])
        out = fd.ops.cast(out, dtype=dtype)
        fd.add_output(fd.ops.reshape(out, new_shape=[b, h, s, f]))
    return fd


def _rotate(q: Any, table: Any, compute: Any) -> Any:
    """The fusion's arithmetic in dtype `compute` (q's own: as torch computes it)."""
    b, s, h, f = q.shape
    pairs = q.to(compute).reshape(b, s, h, 2, f // 2).permute(0, 2, 1, 4, 3).unsqueeze(3)
    return (pairs * table.to(compute)).sum(-1).reshape(b, h, s, f)


def rope_without_cat_torch(q: Any, table: Any) -> tuple[Any]:
    # As a torch user writes it, in q's dtype: torch.compile computes the bf16 product and
    # sum in float32 and rounds once, as nvFuser does (and as fast as it computes anything
    # here: the same function with explicit float32 casts took 243 us on an H200, this one
    # 193 us). torch eager rounds the product to bf16 before the sum, so at the suite's size
    # it is a cancelling pair's bf16 ulp off the reference and its row says so.
    return (_rotate(q, table, q.dtype),)


def rope_without_cat_reference(q: Any, table: Any) -> tuple[Any]:
    import torch

    return (_rotate(q, table, torch.float64),)


def _inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    """q, and the table nvFuser's benchmark stacks from random angles: [S, 2, F/2, 2] with
    rows (cos, -sin) and (sin, cos)."""
    b, s, h, f = shape
    q = torch.randn(shape, device=device, dtype=torch.float32).to(dtype)
    angles = torch.randn(s, f // 2, device=device, dtype=torch.float32)
    cos, sin = angles.cos(), angles.sin()
    table = torch.stack([torch.stack([cos, -sin], dim=-1), torch.stack([sin, cos], dim=-1)], dim=1)
    return [q, table.to(dtype)]


_case = functools.partial(sweep_case, "rope", sweep=(ROPE, ROPE_QUICK, TEST_ROPE, GPU_TEST_ROPE))

CASES = [
    _case(
        "rope_without_cat",
        "test_rope.py::test_rope_benchmark",
        rope_without_cat_definition,
        (rope_without_cat_torch, rope_without_cat_reference, _inputs),
    ),
]
