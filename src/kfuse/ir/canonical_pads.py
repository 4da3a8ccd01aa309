"""Canonical rules for pads (kfuse.ir.canonical_rules calls them).

* pad(v) of a v computed element-wise from leaves, on one side of one axis by a fixed
  width, that neither is an output nor feeds a gather -> cat(full, v) or cat(v, full):
  the pointwise kernel reads pads of its inputs only, and computes a cat with a full among
  its parts (Thunder's RoPE backward pads each half of a gradient back to the head's width).
"""

from __future__ import annotations

from typing import Any

from kfuse.dtypes import DataType
from kfuse.ir.canonical_terms import ELEMENTWISE, constant_value, is_full, is_leaf
from kfuse.ir.exprs import (
    BroadcastOp,
    CatOp,
    ExpandOp,
    Expr,
    GatherOp,
    GeneratedOp,
    PadOp,
    PermuteOp,
    SizeOp,
    SliceOp,
)
from kfuse.ir.values import Axis, Scalar, TensorView, Val


def pad_of_computed(ctx: Any, expr: Expr, inputs: tuple[Val, ...]) -> tuple[Val, ...] | None:
    """pad(v) of a value computed element-wise from leaves (or slices of them), widened on
    one side of one axis by a fixed width, read by other element-wise work (not an output,
    not a gather's source) -> cat(full, v) or cat(v, full) along it. The
    pointwise kernel reads pads of its inputs only, but computes a cat of parts made from
    them, a full among them (kfuse.codegen.domain.CatSelect); Thunder's RoPE backward pads
    each half of a gradient back to the head's width, one on each side."""
    assert isinstance(expr, PadOp)
    value, fill = inputs[0], inputs[1]
    assert isinstance(value, TensorView)
    if is_leaf(value) or not _computed_pointwise(value):
        return None
    padded = expr.outputs[0]
    if any(o is padded for o in ctx.original.outputs):
        # An output pad's value is written first and read back through the pad's window
        # (a cat as an output, its parts of one size, would be written part by part, which
        # a part that is an output itself forbids).
        return None
    if any(isinstance(e, GatherOp) and e.inputs[0] is padded for e in ctx.original.exprs):
        return None  # a gather reads the pad's few elements instead (canonical_gather)
    widths = [
        (constant_value(ctx.val(lo)), constant_value(ctx.val(hi)))
        for lo, hi in zip(expr.lows, expr.highs)
    ]
    if any(not isinstance(w, int) or w < 0 for pair in widths for w in pair):
        return None  # a width known only at run time, or a crop
    sides = [(d, k) for d, pair in enumerate(widths) for k in (0, 1) if pair[k]]
    if len(sides) != 1:
        return None  # a cat computed in a kernel holds one full at most
    ((d, k),) = sides
    if any(ax.is_broadcast for ax in value.axes):
        return None  # a full's axes are the cat's, none of them broadcast
    filled = _filled(ctx, value, d, widths[d][k], fill)
    parts = (value, filled) if k else (filled, value)
    return ctx.emit(CatOp, parts, {"dim": d}, expr.outputs)


def _filled(ctx: Any, like: TensorView, d: int, width: int, fill: Val) -> Val:
    """full(like's shape with axis d `width` long, fill) of like's dtype, the other axes'
    extents read from `like` (SizeOp: a constant 1 would make a broadcast axis)."""
    shape: list[Val] = []
    axes: list[Axis] = []
    for k, ax in enumerate(like.axes):
        if k == d:
            shape.append(ctx.constant(width, DataType.Int))
            axes.append(Axis(False, width))
            continue
        (size,) = ctx.emit(SizeOp, (like,), {"dim": k}, [ctx.new_val(DataType.Int, None)])
        shape.append(size)
        axes.append(Axis(False, ax.extent))
    operands = tuple(v for v in (*shape, fill) if not (isinstance(v, Scalar) and v.is_constant))
    attrs = {"op": "full", "shape": tuple(shape), "params": (fill,), "dtype": like.dtype}
    (made,) = ctx.emit(GeneratedOp, operands, attrs, [ctx.new_val(like.dtype, tuple(axes))])
    return made


def _computed_pointwise(u: Val) -> bool:
    """Whether u is computed from leaves (is_leaf) and slices of them by element-wise ops,
    permutes, broadcasts and expands only (and fulls: no element's index changes them): a
    kernel that reads the leaves computes any of its elements."""
    if not isinstance(u, TensorView) or is_leaf(u):
        return True
    e = u.definition
    if isinstance(e, GeneratedOp):  # an iota's values depend on where they are read
        return is_full(u)
    if isinstance(e, SliceOp):
        return is_leaf(e.inputs[0])
    if isinstance(e, (PermuteOp, BroadcastOp, ExpandOp)):
        return _computed_pointwise(e.inputs[0])
    return isinstance(e, ELEMENTWISE) and all(_computed_pointwise(w) for w in e.inputs)
