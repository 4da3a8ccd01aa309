"""Probe cases for slices and concatenation (not in the suite until measured:
`registry.PROBE_CASES`, which the tools take by name, `tools/kernel_times.py
rope_rotate_half --tc` say): RoPE's rotation
of [B, H, S, D] by cos and sin tables of [S, D/2], as models write it with the two halves of
the last axis.

* rope_rotate_half: the halves sliced and each output half written by its own output
  (x1 * cos - x2 * sin, x2 * cos + x1 * sin): one kernel reading two views of x.
* rope_cat: torch's rotate_half, x * cos + cat(-x2, x1) * sin over the whole D (tables of
  [S, D]): the multiply and add move into the cat's parts, and one kernel writes both
  halves of the output.
* rope_partial: the partial rotary of GPT-NeoX-like models (rotary on the first quarter of
  D, tables of [S, D/8]): cat(cat(x1 * cos - x2 * sin, x2 * cos + x1 * sin), x[..., D/4:]),
  a cat of three parts of two sizes that one kernel computes over its output.

They compute in float32 and round once to the input's dtype, as nvFuser's RoPE fusions do.
"""

from __future__ import annotations

import functools
from typing import Any

from kfuse import DataType, FusionDefinition
from models.case import Shape, sweep_case

# Llama-2 7B's heads (32 of 128) over 4096 positions, batch 8: a 256 MiB bf16 x.
ROPE = ((8, 32, 4096, 128),)
TEST_ROPE = (2, 3, 5, 8)
GPU_TEST_ROPE = (2, 8, 512, 128)


def _halves(fd: FusionDefinition, x: Any) -> tuple[Any, Any]:
    """x's two halves of its last axis, in float."""
    b, h, s, d = (fd.ops.size(x, i) for i in range(4))
    half = fd.ops.div(d, 2)
    x1 = fd.ops.slice(x, [0, 0, 0, 0], [b, h, s, half])
    x2 = fd.ops.slice(x, [0, 0, 0, half], [b, h, s, d])
    return fd.ops.cast(x1, DataType.Float), fd.ops.cast(x2, DataType.Float)


def _table(fd: FusionDefinition, t: Any) -> Any:
    """A [S, n] table broadcast over batch and heads, in float."""
    return fd.ops.cast(fd.ops.broadcast(t, [True, True, False, False]), DataType.Float)


def _rope_inputs(fd: FusionDefinition, dtype: DataType) -> tuple[Any, Any, Any]:
    """x [B, H, S, D] and the cos and sin tables [S, n], contiguous."""
    x = fd.define_tensor(shape=[-1] * 4, contiguity=[True] * 4, dtype=dtype)
    cos = fd.define_tensor(shape=[-1, -1], contiguity=[True] * 2, dtype=dtype)
    sin = fd.define_tensor(shape=[-1, -1], contiguity=[True] * 2, dtype=dtype)
    return x, cos, sin


def rope_rotate_half_definition(dtype: DataType) -> FusionDefinition:
    with FusionDefinition() as fd:
        x, cos, sin = _rope_inputs(fd, dtype)
        x1, x2 = _halves(fd, x)
        c, n = _table(fd, cos), _table(fd, sin)
        fd.add_output(fd.ops.cast(fd.ops.sub(fd.ops.mul(x1, c), fd.ops.mul(x2, n)), dtype))
        fd.add_output(fd.ops.cast(fd.ops.add(fd.ops.mul(x2, c), fd.ops.mul(x1, n)), dtype))
    return fd


def rope_cat_definition(dtype: DataType) -> FusionDefinition:
    with FusionDefinition() as fd:
        x, cos, sin = _rope_inputs(fd, dtype)
        x1, x2 = _halves(fd, x)
        rotated = fd.ops.cat([fd.ops.neg(x2), x1], dim=-1)
        whole = fd.ops.cast(x, DataType.Float)
        out = fd.ops.add(fd.ops.mul(whole, _table(fd, cos)), fd.ops.mul(rotated, _table(fd, sin)))
        fd.add_output(fd.ops.cast(out, dtype))
    return fd


def rope_partial_definition(dtype: DataType) -> FusionDefinition:
    with FusionDefinition() as fd:
        x, cos, sin = _rope_inputs(fd, dtype)
        b, h, s, d = (fd.ops.size(x, i) for i in range(4))
        rotary = fd.ops.div(d, 4)
        half = fd.ops.div(rotary, 2)
        x1 = fd.ops.cast(fd.ops.slice(x, [0, 0, 0, 0], [b, h, s, half]), DataType.Float)
        x2 = fd.ops.cast(fd.ops.slice(x, [0, 0, 0, half], [b, h, s, rotary]), DataType.Float)
        rest = fd.ops.slice(x, [0, 0, 0, rotary], [b, h, s, d])
        c, n = _table(fd, cos), _table(fd, sin)
        first = fd.ops.cast(fd.ops.sub(fd.ops.mul(x1, c), fd.ops.mul(x2, n)), dtype)
        second = fd.ops.cast(fd.ops.add(fd.ops.mul(x2, c), fd.ops.mul(x1, n)), dtype)
        fd.add_output(fd.ops.cat([fd.ops.cat([first, second], dim=-1), rest], dim=-1))
    return fd


def _rotate_half(x: Any, cos: Any, sin: Any, compute: Any) -> tuple[Any, Any]:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].to(compute), x[..., half:].to(compute)
    c, n = cos.to(compute), sin.to(compute)
    return x1 * c - x2 * n, x2 * c + x1 * n


def rope_rotate_half_torch(x: Any, cos: Any, sin: Any) -> tuple[Any, Any]:
    import torch

    return tuple(v.to(x.dtype) for v in _rotate_half(x, cos, sin, torch.float32))  # type: ignore[return-value]


def rope_rotate_half_reference(x: Any, cos: Any, sin: Any) -> tuple[Any, Any]:
    import torch

    return _rotate_half(x, cos, sin, torch.float64)


def _with_cat(x: Any, cos: Any, sin: Any, compute: Any) -> Any:
    import torch

    half = x.shape[-1] // 2
    xc = x.to(compute)
    rotated = torch.cat([-xc[..., half:], xc[..., :half]], dim=-1)
    return xc * cos.to(compute) + rotated * sin.to(compute)


def rope_cat_torch(x: Any, cos: Any, sin: Any) -> tuple[Any]:
    import torch

    return (_with_cat(x, cos, sin, torch.float32).to(x.dtype),)


def rope_cat_reference(x: Any, cos: Any, sin: Any) -> tuple[Any]:
    import torch

    return (_with_cat(x, cos, sin, torch.float64),)


def _partial(x: Any, cos: Any, sin: Any, compute: Any, rounded: Any) -> tuple[Any]:
    import torch

    rotary = x.shape[-1] // 4
    rotated = _rotate_half(x[..., :rotary], cos, sin, compute)
    first, second = (v.to(rounded) for v in rotated)
    return (torch.cat([first, second, x[..., rotary:].to(rounded)], dim=-1),)


def rope_partial_torch(x: Any, cos: Any, sin: Any) -> tuple[Any]:
    import torch

    return _partial(x, cos, sin, torch.float32, x.dtype)


def rope_partial_reference(x: Any, cos: Any, sin: Any) -> tuple[Any]:
    import torch

    return _partial(x, cos, sin, torch.float64, torch.float64)


def _inputs(table_width: Any, torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    """x and cos / sin tables of random angles, [S, table_width(D)]."""
    _, _, s, d = shape
    x = torch.randn(shape, device=device, dtype=torch.float32).to(dtype)
    angles = torch.randn(s, table_width(d), device=device, dtype=torch.float32)
    return [x, angles.cos().to(dtype), angles.sin().to(dtype)]


_case = functools.partial(sweep_case, "resize", sweep=(ROPE, ROPE, TEST_ROPE, GPU_TEST_ROPE))

PROBE_CASES = [
    _case(
        "rope_rotate_half",
        "rope_ops.py::apply_rope (its halves, without the cat)",
        rope_rotate_half_definition,
        (
            rope_rotate_half_torch,
            rope_rotate_half_reference,
            functools.partial(_inputs, lambda d: d // 2),
        ),
    ),
    _case(
        "rope_cat",
        "rope_ops.py::apply_rope",
        rope_cat_definition,
        (rope_cat_torch, rope_cat_reference, functools.partial(_inputs, lambda d: d)),
    ),
    _case(
        "rope_partial",
        "GPT-NeoX's partial rotary (rotary_pct 0.25): cat(rotated, q[..., n:])",
        rope_partial_definition,
        (
            rope_partial_torch,
            rope_partial_reference,
            functools.partial(_inputs, lambda d: d // 8),
        ),
    ),
]
