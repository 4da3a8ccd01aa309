"""Canonical rules for a gather (take_along_axis, torch.gather) of a computed value
(kfuse.ir.canonical_rules calls them): the gather is moved onto what the computation reads.

A gather no kernel takes runs as a framework call (the expr_eval scheduler) on its source
made in full; and a kernel's indexed read needs its source in memory. So where the source is
cheap to compute again per gathered element, the gather reads what it is computed from:

* gather(f(x), index) -> f(gather(x, index)) for element-wise ops f of one tensor operand
  (casts, unary ops, binary and ternary ops whose other operands are Scalars), through a
  chain of them: f acts on every element alone, so it may act on the gathered ones only
  (a cross entropy's take_along_axis(cast(logits, Float), target) cast the whole bf16
  logits to a new fp32 tensor to read one element a row);
* gather(pad(x, value), index) along the padded axis, padded after its end only (no other
  axis padded or cropped) -> where(index < n, gather(x, where(index < n, index, 0)), value)
  with n the axis' extent in x: an index into the padding reads `value`, any other reads x
  (Thunder's nll_loss pads the fp32 log-probabilities with one column of zeros for the
  ignored targets, which made a copy of the whole padded tensor to read one element a
  row). The inner gather then goes through the first rule.
"""

from __future__ import annotations

from typing import Any

from kfuse.dtypes import DataType
from kfuse.ir.canonical_terms import ELEMENTWISE, constant_value
from kfuse.ir.exprs import (
    BinaryOp,
    Expr,
    GatherOp,
    PadOp,
    SegmentSetOp,
    SizeOp,
    TernaryOp,
)
from kfuse.ir.values import TensorView, Val


def gather_of_computed(ctx: Any, expr: Expr, inputs: tuple[Val, ...]) -> tuple[Val, ...] | None:
    """The canonical outputs of GatherOp `expr` (its operands canonical: `inputs`), built
    through `ctx` (a kfuse.ir.canonicalize.Canonicalizer), or None when no rule applies."""
    assert isinstance(expr, GatherOp)
    source = inputs[0]
    pad = source.definition if isinstance(source, TensorView) else None
    if isinstance(pad, PadOp):
        padded_end = _padded_end(pad, expr.dim)
        if padded_end:
            return _gather_of_pad(ctx, expr, inputs, pad)
    return _gather_of_elementwise(ctx, expr, inputs, expr.outputs)


def _padded_end(pad: PadOp, dim: int) -> bool:
    """Whether `pad` only adds elements after the end of axis `dim` (constant widths)."""
    lows = [constant_value(v) for v in pad.lows]
    highs = [constant_value(v) for v in pad.highs]
    if any(w != 0 for w in lows) or any(w != 0 for i, w in enumerate(highs) if i != dim):
        return False
    high = highs[dim]
    return isinstance(high, int) and high >= 0


def _gather_of_pad(
    ctx: Any, expr: GatherOp, inputs: tuple[Val, ...], pad: PadOp
) -> tuple[Val, ...]:
    x, value = pad.inputs[0], pad.inputs[1]
    index = inputs[1]
    assert isinstance(x, TensorView) and isinstance(index, TensorView)
    out = expr.outputs[0]
    assert isinstance(out, TensorView)
    (extent,) = ctx.emit(SizeOp, (x,), {"dim": expr.dim}, [ctx.new_val(DataType.Int, None)])
    (inside,) = ctx.emit(
        BinaryOp, (index, extent), {"op": "lt"}, [ctx.new_val(DataType.Bool, index.axes)]
    )
    zero = ctx.constant(0, index.dtype)
    (safe,) = ctx.emit(
        TernaryOp, (inside, index, zero), {"op": "where"}, [ctx.new_val(index.dtype, index.axes)]
    )
    like = [ctx.new_val(out.dtype, out.axes)]
    gathered = _gather_of_elementwise(ctx, expr, (x, safe, *inputs[2:]), like)
    if gathered is None:
        gathered = ctx.emit(GatherOp, (x, safe, *inputs[2:]), expr.attributes(), like)
    return ctx.emit(TernaryOp, (inside, gathered[0], value), {"op": "where"}, expr.outputs)


def _gather_of_elementwise(
    ctx: Any, expr: Expr, inputs: tuple[Val, ...], like: Any
) -> tuple[Val, ...] | None:
    """gather(f(g(x)), index) -> f(g(gather(x, index))) through every element-wise op of one
    tensor operand between x and the gather (None when there is none); the last op's
    output is made like `like`."""
    chain: list[Expr] = []
    source = inputs[0]
    while isinstance(source, TensorView) and _one_tensor_elementwise(source.definition):
        e = source.definition
        assert e is not None
        chain.append(e)
        source = next(u for u in e.inputs if isinstance(u, TensorView))
    if not chain:
        return None
    out = expr.outputs[0]
    assert isinstance(out, TensorView) and isinstance(source, TensorView)
    (value,) = ctx.emit(
        GatherOp, (source, *inputs[1:]), expr.attributes(), [ctx.new_val(source.dtype, out.axes)]
    )
    for k, e in enumerate(reversed(chain)):
        operands = tuple(value if isinstance(u, TensorView) else u for u in e.inputs)
        last = k == len(chain) - 1
        made = like if last else [ctx.new_val(e.outputs[0].dtype, out.axes)]
        (value,) = ctx.emit(type(e), operands, e.attributes(), made)
    return (value,)


def _one_tensor_elementwise(e: Expr | None) -> bool:
    """Whether `e` is an element-wise op with exactly one tensor operand (a segment boundary
    the user placed is kept)."""
    if not isinstance(e, ELEMENTWISE) or isinstance(e, SegmentSetOp):
        return False
    return sum(isinstance(u, TensorView) for u in e.inputs) == 1


__all__ = ["gather_of_computed"]
