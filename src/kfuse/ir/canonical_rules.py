"""The algebraic rules of the canonical form (kfuse.ir.canonicalize), one function per op.

Each rule replaces an expr of a tensor by cheaper exprs that compute the same values, as
kfuse defines them: the float64 reference (kfuse.reference), the generated kernels and the
C math library agree on every input, NaN, infinities and signed zeros included. Where a
cheaper form differs on some special value, the rule guards it or does not apply:

* pow(x, 1) -> x; pow(x, 2) -> x * x (the correctly rounded square; also NumPy's and
  torch's); pow(x, -1) -> reciprocal(x) (C's pow(x, -1) is 1 / x, signed zeros and
  infinities included);
* pow(x, 0.5) -> where(x == -inf, inf, sqrt(x + 0.0)): pow(-0.0, 0.5) is +0.0 and
  pow(-inf, 0.5) is +inf, where sqrt gives -0.0 and NaN; x + 0.0 turns -0.0 into +0.0
  and is x otherwise. (pow(x, 3) stays: its products would round an intermediate to a
  reduced dtype; the code generator writes it as products within one expression.)
* reciprocal(sqrt(x)) -> rsqrt(x) (the reference's rsqrt is 1 / sqrt(x));
* x / c -> x * (1 / c) for a constant c = ±2**k when c and 1 / c are normal numbers of the
  type the op computes in: 1 / c is then exact and both forms are the correctly rounded
  x / c (a power of two closer to the limits would make 1 / c overflow, or c subnormal);
* cast(cast(x, B), C) -> cast(x, C) (and x itself when C is x's dtype) when every value of
  x's dtype is a value of B: the inner cast then changes no value;
* reshape(f(x, y, ...)) -> f(reshape(x), reshape(y), ...) for fusion inputs x, y, ... of
  the reshaped value's rank with no broadcast axes, and element-wise ops f (casts, unary,
  binary and ternary ops; other operands Scalars) between them: each acts on every element
  alone and its tensor operands have one shape, so f commutes with any reshape. The reshapes
  then read the inputs themselves, so they can be views of the inputs' layouts, folded into
  a kernel's operands (kfuse.engine.boundary_views) instead of a copy of computed values
  (Hugging Face attention's reshape(scores + mask) to [batch * heads, s, s]). A reshape that
  makes an output stays where it is (an output's reshape is always a view of the output, an
  input's only where the input's strides allow);
* slice(f(x, y, ...)) -> f(slice(x), slice(y), ...) for leaves x, y, ... (fusion inputs
  and library ops' outputs) and element-wise ops, permutes, broadcasts and expands f
  between them: each acts on every element alone (or moves it), so it commutes with
  keeping some of them, the slice's bounds following each axis through the permutes. An
  operand broadcast along an axis keeps that axis whole (its one value stands for every
  element), so the rule applies only where the slice keeps the element of every axis the
  value itself is broadcast along, and keeps every axis an expand widens whole (an extent
  both fixed numbers show it keeps). The slices then read the leaves themselves, each a
  view of its layout (a moved pointer), folded into the kernel's operands
  (kfuse.engine.boundary_views) instead of a copy of computed values (RoPE's halves of a
  rotated input; in its backward, of sdpfa_bwd's gradients times sin);
* an output f(reshape(v)) -> reshape(f(v)) for an element-wise op f of one tensor operand
  and a computed v: the output is then a reshape, a view of the output's allocation (the
  cast to bf16 after Hugging Face attention backward's reshape to [batch, heads, s, s] made
  that reshape a copy of its own);
* reshape(v) to rank 1, not an output, where every axis of v but one has size 1 (a
  broadcast axis, not expanded, or an axis defined of size 1) -> squeeze(v) of those
  axes: the element count fixes the one axis left, and a squeeze is what the kernels
  generate where a reshape is a segment of its own (Thunder's cross entropy reshapes the
  [rows, 1] gathered logits to [rows]);
* pad(v) of element-wise work on one side of one axis, read by more element-wise work ->
  a cat of it and a full (kfuse.ir.canonical_pads);
* a gather of element-wise ops or of a pad reads what they act on
  (kfuse.ir.canonical_gather).

Only exprs producing TensorViews are rewritten: scalar arithmetic is evaluated on the host
in Python, whose math.sqrt raises where C's returns NaN.
"""

from __future__ import annotations

import math
from typing import Any

from kfuse.dtypes import DataType
from kfuse.ir.canonical_gather import gather_of_computed
from kfuse.ir.canonical_pads import pad_of_computed
from kfuse.ir.canonical_slices import WHOLE, Bounds, movable, moved_slice
from kfuse.ir.canonical_terms import ELEMENTWISE, constant_value, is_leaf
from kfuse.ir.exprs import (
    BinaryOp,
    CastOp,
    CatOp,
    Expr,
    GatherOp,
    PadOp,
    ReductionOp,
    ReshapeOp,
    SegmentSetOp,
    SizeOp,
    SliceOp,
    SqueezeOp,
    StrideOrderOp,
    TernaryOp,
    UnaryOp,
)
from kfuse.ir.values import TensorView, Val

EXACT_WIDENINGS: dict[DataType, frozenset[DataType]] = {
    DataType.Bool: frozenset(DataType) - {DataType.Bool},
    DataType.Int32: frozenset({DataType.Int, DataType.Double}),
    DataType.Half: frozenset({DataType.Float, DataType.Double}),
    DataType.BFloat16: frozenset({DataType.Float, DataType.Double}),
    DataType.Float: frozenset({DataType.Double}),
}
"""src -> the dtypes that hold every value of src exactly (a cast there and back is the
identity). Not Float -> BFloat16 -> Float, Int -> Double or Int32 -> Float: those round."""

_NORMAL_EXPONENTS = {"float": 126, "double": 1022}
"""The largest k for which 2**k and 2**-k are both normal numbers of the compute type."""


def rewrite(ctx: Any, expr: Expr, inputs: tuple[Val, ...]) -> tuple[Val, ...] | None:
    """The canonical Vals for `expr`'s outputs (its operands already canonical: `inputs`),
    built through `ctx` (a kfuse.ir.canonicalize.Canonicalizer), or None when no rule
    applies."""
    if not isinstance(expr.outputs[0], TensorView):
        return None
    if isinstance(expr, StrideOrderOp):
        # A memory order places only an output; anywhere else the value is its input's
        # (Thunder orders a permute row major before reshaping it).
        placed = any(o is expr.outputs[0] for o in ctx.original.outputs)
        return None if placed else _alias(expr, inputs[0])
    if isinstance(expr, SegmentSetOp):
        return None  # the boundary the user placed: kept as built
    if isinstance(expr, BinaryOp) and expr.op == "pow":
        return _pow(ctx, expr, inputs)
    if isinstance(expr, BinaryOp) and expr.op == "div":
        return _div_by_power_of_two(ctx, expr, inputs)
    if isinstance(expr, UnaryOp) and expr.op == "reciprocal":
        return _reciprocal_sqrt(ctx, expr, inputs)
    if isinstance(expr, ELEMENTWISE):
        pushed = _elementwise_of_cat(ctx, expr, inputs)
        if pushed is not None:
            return pushed
    if isinstance(expr, CatOp):
        return _cat_of_cats(ctx, expr, inputs)
    is_output = any(o is expr.outputs[0] for o in ctx.original.outputs)
    if isinstance(expr, CastOp):
        done = _cast_of_widening(ctx, expr, inputs)
        if done is not None:
            return done
    if isinstance(expr, ReshapeOp) and not is_output:
        squeezed = _reshape_as_squeeze(ctx, expr, inputs)
        if squeezed is not None:
            return squeezed
        return _reshape_of_elementwise(ctx, expr, inputs)
    if isinstance(expr, SliceOp):
        return _slice_of_elementwise(ctx, expr, inputs)
    if isinstance(expr, PadOp):
        return pad_of_computed(ctx, expr, inputs)
    if isinstance(expr, GatherOp):
        return gather_of_computed(ctx, expr, inputs)
    if isinstance(expr, ReductionOp):
        return _sum_of_cat(ctx, expr, inputs)
    if isinstance(expr, ELEMENTWISE) and is_output:
        return _output_of_reshape(ctx, expr, inputs)
    return None


def is_power_of_two(value: float, compute_ctype: str) -> bool:
    """True for a constant ±2**k whose reciprocal is exact: 2**k and 2**-k both normal
    numbers of `compute_ctype` ('float' or 'double')."""
    if not (math.isfinite(value) and value != 0):
        return False
    mantissa, exponent = math.frexp(abs(value))  # abs(value) = mantissa * 2**exponent
    return mantissa == 0.5 and abs(exponent - 1) <= _NORMAL_EXPONENTS[compute_ctype]


def _alias(expr: Expr, v: Val) -> tuple[Val, ...] | None:
    """(v,) when v can stand for expr's output (same dtype and axes), else None."""
    out = expr.outputs[0]
    same_axes = isinstance(v, TensorView) and isinstance(out, TensorView) and v.axes == out.axes
    if v.dtype is out.dtype and same_axes:
        return (v,)
    return None


def _pow(ctx: Any, expr: Expr, inputs: tuple[Val, ...]) -> tuple[Val, ...] | None:
    x, exponent = inputs
    c = constant_value(exponent)
    if not x.dtype.is_floating or not isinstance(c, float):
        return None
    out = expr.outputs
    if c == 1.0:
        return _alias(expr, x)
    if c == 2.0:
        return ctx.emit(BinaryOp, (x, x), {"op": "mul"}, out)
    if c == -1.0:
        return ctx.emit(UnaryOp, (x,), {"op": "reciprocal"}, out)
    if c == 0.5:
        return _guarded_sqrt(ctx, expr, x)
    return None


def _guarded_sqrt(ctx: Any, expr: Expr, x: Val) -> tuple[Val, ...]:
    """pow(x, 0.5) as where(x == -inf, inf, sqrt(x + 0.0))."""
    axes = expr.outputs[0].axes  # type: ignore[attr-defined]
    (plus_zero,) = ctx.emit(
        BinaryOp, (x, ctx.constant(0.0, x.dtype)), {"op": "add"}, [ctx.new_val(x.dtype, axes)]
    )
    (root,) = ctx.emit(UnaryOp, (plus_zero,), {"op": "sqrt"}, [ctx.new_val(x.dtype, axes)])
    (is_minus_inf,) = ctx.emit(
        BinaryOp,
        (x, ctx.constant(-math.inf, x.dtype)),
        {"op": "eq"},
        [ctx.new_val(DataType.Bool, axes)],
    )
    return ctx.emit(
        TernaryOp,
        (is_minus_inf, ctx.constant(math.inf, x.dtype), root),
        {"op": "where"},
        expr.outputs,
    )


def _div_by_power_of_two(ctx: Any, expr: Expr, inputs: tuple[Val, ...]) -> tuple[Val, ...] | None:
    x, divisor = inputs
    c = constant_value(divisor)
    if not x.dtype.is_floating or not isinstance(c, float):
        return None
    # Kernels compute Half, BFloat16 and Float ops in float (kfuse.codegen.expressions).
    if not is_power_of_two(c, "double" if divisor.dtype is DataType.Double else "float"):
        return None
    return ctx.emit(
        BinaryOp, (x, ctx.constant(1.0 / c, divisor.dtype)), {"op": "mul"}, expr.outputs
    )


def _reciprocal_sqrt(ctx: Any, expr: Expr, inputs: tuple[Val, ...]) -> tuple[Val, ...] | None:
    producer = inputs[0].definition
    if not (isinstance(producer, UnaryOp) and producer.op == "sqrt"):
        return None
    return ctx.emit(UnaryOp, (producer.inputs[0],), {"op": "rsqrt"}, expr.outputs)


def _cast_of_widening(ctx: Any, expr: Expr, inputs: tuple[Val, ...]) -> tuple[Val, ...] | None:
    assert isinstance(expr, CastOp)
    inner = inputs[0].definition
    if not isinstance(inner, CastOp):
        return None
    source = inner.inputs[0]
    if inner.dtype not in EXACT_WIDENINGS.get(source.dtype, frozenset()):
        return None
    if source.dtype is expr.dtype:
        return _alias(expr, source)
    return ctx.emit(CastOp, (source,), {"dtype": expr.dtype}, expr.outputs)


def _elementwise_from_inputs(v: Val) -> tuple[list[Expr], list[TensorView]] | None:
    """(the element-wise exprs computing `v` from fusion inputs, each after those it reads,
    `v`'s own last; those inputs), when every tensor along the way has `v`'s rank and no
    broadcast axis (so all have one shape); None when `v` is an input itself or computed
    otherwise."""
    assert isinstance(v, TensorView)
    rank = v.ndim
    exprs: list[Expr] = []
    leaves: list[TensorView] = []
    seen: set[int] = set()

    def visit(u: Val) -> bool:
        if not isinstance(u, TensorView) or id(u) in seen:
            return True
        seen.add(id(u))
        if u.ndim != rank or any(ax.is_broadcast for ax in u.axes):
            return False
        if u.is_input:
            leaves.append(u)
            return True
        e = u.definition
        if not isinstance(e, ELEMENTWISE) or not all(visit(w) for w in e.inputs):
            return False
        exprs.append(e)  # after everything it reads
        return True

    if not visit(v) or not exprs:
        return None
    return exprs, leaves


def _reshape_of_elementwise(
    ctx: Any, expr: Expr, inputs: tuple[Val, ...]
) -> tuple[Val, ...] | None:
    assert isinstance(expr, ReshapeOp)
    found = _elementwise_from_inputs(inputs[0])
    if found is None:
        return None
    exprs, leaves = found
    out = expr.outputs[0]
    assert isinstance(out, TensorView)
    shape = tuple(ctx.val(v) for v in expr.shape)
    reshaped: dict[int, Val] = {}
    for leaf in leaves:
        (reshaped[id(leaf)],) = ctx.emit(
            ReshapeOp, (leaf, *inputs[1:]), {"shape": shape}, [ctx.new_val(leaf.dtype, out.axes)]
        )
    for k, e in enumerate(exprs):
        operands = tuple(reshaped.get(id(u), u) for u in e.inputs)
        like = expr.outputs if k == len(exprs) - 1 else [ctx.new_val(e.outputs[0].dtype, out.axes)]
        (reshaped[id(e.outputs[0])],) = ctx.emit(type(e), operands, e.attributes(), like)
    return (reshaped[id(inputs[0])],)


def _reshape_as_squeeze(ctx: Any, expr: Expr, inputs: tuple[Val, ...]) -> tuple[Val, ...] | None:
    from kfuse.ir.builder import is_expanded_axis

    value, out = inputs[0], expr.outputs[0]
    assert isinstance(value, TensorView) and isinstance(out, TensorView)
    if out.ndim != 1 or value.ndim < 2:
        return None
    ones = [
        d
        for d, ax in enumerate(value.axes)
        if ax.is_broadcast or (ax.extent == 1 and not is_expanded_axis(value, d))
    ]
    if len(ones) != value.ndim - 1:
        return None
    return ctx.emit(SqueezeOp, (value,), {"dims": tuple(ones), "expanded": ()}, expr.outputs)


def _slice_of_elementwise(ctx: Any, expr: Expr, inputs: tuple[Val, ...]) -> tuple[Val, ...] | None:
    assert isinstance(expr, SliceOp)
    value, out = inputs[0], expr.outputs[0]
    assert isinstance(value, TensorView) and isinstance(out, TensorView)
    if any(ax.is_broadcast and not kept.is_broadcast for ax, kept in zip(value.axes, out.axes)):
        return None  # the slice empties an axis the value is broadcast along
    if is_leaf(value):
        return None
    bounds = Bounds(
        tuple(ctx.val(v) for v in expr.starts),
        tuple(ctx.val(v) for v in expr.stops),
        expr.steps,
        expr.manual,
        out.axes,
    )

    def cut(m: int) -> bool:
        """Whether the slice keeps less than all of the value's axis m (known only where
        both extents are fixed numbers)."""
        whole, kept = value.axes[m].extent, out.axes[m].extent
        start = constant_value(bounds.starts[m])
        return not (whole is not None and kept == whole and start == 0 and bounds.steps[m] == 1)

    dropped: set[tuple[int, tuple[int, ...]]] = set()
    if not movable(value, cut, dropped=dropped):
        return None
    return (moved_slice(ctx, value, bounds, expr.outputs, dropped),)


def _cat_of_cats(ctx: Any, expr: Expr, inputs: tuple[Val, ...]) -> tuple[Val, ...] | None:
    """cat(cat(a, b), c) -> cat(a, b, c) along one axis (Llama's partial rotary: the rotated
    halves, then the rest), so that every part is one the kernels write into its window."""
    assert isinstance(expr, CatOp)
    inner = [u for u in inputs if isinstance(u.definition, CatOp) and u.definition.dim == expr.dim]
    if not inner:
        return None
    parts = [
        w
        for u in inputs
        for w in (u.definition.inputs if u in inner else (u,))  # type: ignore[union-attr]
    ]
    return ctx.emit(CatOp, tuple(parts), {"dim": expr.dim}, expr.outputs)


def _sum_of_cat(ctx: Any, expr: Expr, inputs: tuple[Val, ...]) -> tuple[Val, ...] | None:
    """sum(cat(a, b, ...), dims) -> sum(a, dims) + sum(b, dims) + ... where the cat's axis is
    summed, else cat(sum(a, dims), sum(b, dims), ...) along it: a reduction kernel computes
    no cat, and Thunder's RoPE loss summed its rotated halves' cat (made by
    _elementwise_of_cat), which a framework cat wrote out in full first."""
    assert isinstance(expr, ReductionOp)
    joined, out = inputs[0], expr.outputs[0]
    cat = joined.definition if isinstance(joined, TensorView) else None
    if expr.op != "sum" or not isinstance(cat, CatOp) or len(cat.inputs) < 2:
        return None
    assert isinstance(out, TensorView)
    d, attrs = cat.dim, expr.attributes()
    if d in expr.dims:
        sums = [
            ctx.emit(ReductionOp, (part,), attrs, [ctx.new_val(out.dtype, out.axes)])[0]
            for part in cat.inputs
        ]
        total = sums[0]
        for k, part_sum in enumerate(sums[1:], 2):
            like = expr.outputs if k == len(sums) else [ctx.new_val(out.dtype, out.axes)]
            (total,) = ctx.emit(BinaryOp, (total, part_sum), {"op": "add"}, like)
        return (total,)
    kept = d - sum(1 for r in expr.dims if r < d)  # the cat's axis among the sum's
    parts = []
    for part in cat.inputs:
        assert isinstance(part, TensorView)
        axes = tuple(part.axes[d] if i == kept else a for i, a in enumerate(out.axes))
        parts.append(ctx.emit(ReductionOp, (part,), attrs, [ctx.new_val(out.dtype, axes)])[0])
    return ctx.emit(CatOp, tuple(parts), {"dim": kept}, expr.outputs)


def _elementwise_of_cat(ctx: Any, expr: Expr, inputs: tuple[Val, ...]) -> tuple[Val, ...] | None:
    """f(cat(a, b), y) -> cat(f(a, y[window of a]), f(b, y[window of b])) along the cat's
    axis, the other operands' windows sliced off their inputs (an operand broadcast along
    that axis taken whole); None unless exactly one operand is a cat and the others are
    movable."""
    tensors = [u for u in inputs if isinstance(u, TensorView)]
    cats = [u for u in tensors if isinstance(u.definition, CatOp)]
    if len(cats) != 1:
        return None
    joined = cats[0]
    cat = joined.definition
    assert isinstance(cat, CatOp)
    if any(t is not joined and not movable(t, lambda m: m == cat.dim) for t in tensors):
        return None
    d, out = cat.dim, expr.outputs[0]
    assert isinstance(out, TensorView)
    zero, whole = ctx.constant(0, DataType.Int), ctx.constant(WHOLE, DataType.Int)
    start: Val = zero
    parts: list[Val] = []
    for part in cat.inputs:
        assert isinstance(part, TensorView)
        (size,) = ctx.emit(SizeOp, (part,), {"dim": d}, [ctx.new_val(DataType.Int, None)])
        stop = size
        if start is not zero:
            (stop,) = ctx.emit(
                BinaryOp, (start, size), {"op": "add"}, [ctx.new_val(DataType.Int, None)]
            )
        axes = tuple(part.axes[d] if i == d else a for i, a in enumerate(out.axes))
        operands: list[Val] = []
        for u in inputs:
            if u is joined:
                operands.append(part)
            elif isinstance(u, TensorView) and not u.axes[d].is_broadcast:
                window = tuple(part.axes[d] if i == d else a for i, a in enumerate(u.axes))
                bounds = Bounds(
                    tuple(start if i == d else zero for i in range(u.ndim)),
                    tuple(stop if i == d else whole for i in range(u.ndim)),
                    (1,) * u.ndim,
                    False,
                    window,
                )
                operands.append(moved_slice(ctx, u, bounds, [ctx.new_val(u.dtype, window)]))
            else:
                operands.append(u)
        (value,) = ctx.emit(
            type(expr), tuple(operands), expr.attributes(), [ctx.new_val(out.dtype, axes)]
        )
        parts.append(value)
        start = stop
    return ctx.emit(CatOp, tuple(parts), {"dim": d}, expr.outputs)


def _output_of_reshape(ctx: Any, expr: Expr, inputs: tuple[Val, ...]) -> tuple[Val, ...] | None:
    tensors = [u for u in inputs if isinstance(u, TensorView)]
    if len(tensors) != 1 or not isinstance(tensors[0].definition, ReshapeOp):
        return None
    reshape = tensors[0].definition
    source = reshape.inputs[0]
    assert isinstance(source, TensorView)
    if source.is_input:  # a reshape of an input may be a view of it already: keep it there
        return None
    operands = tuple(source if u is tensors[0] else u for u in inputs)
    (value,) = ctx.emit(
        type(expr), operands, expr.attributes(), [ctx.new_val(expr.outputs[0].dtype, source.axes)]
    )
    return ctx.emit(ReshapeOp, (value, *reshape.inputs[1:]), reshape.attributes(), expr.outputs)


__all__ = ["EXACT_WIDENINGS", "constant_value", "is_power_of_two", "rewrite"]
