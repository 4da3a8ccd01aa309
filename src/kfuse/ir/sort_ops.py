"""Library ops that order or place elements along one axis (nvFuser's topk, argsort and
scatter): their checked construction and their per-call shapes.

nvFuser hands each of these to ATen when it stands alone in a segment; kfuse always does:
the expr_eval scheduler runs them through the inputs' framework (torch.topk / argsort /
scatter, NumPy's and CuPy's argsort and put_along_axis), and the segmenter puts the work
around them in generated segments. Rank-0 tensors are refused (nvFuser's rank-0 topk and
argsort are a copy and a 0; Thunder never sends them).
"""

from __future__ import annotations

import math
from typing import Any, cast

from kfuse.dtypes import DataType
from kfuse.errors import DefinitionError, InputError
from kfuse.ir.builder import as_index, describe
from kfuse.ir.exprs import ArgsortOp, ScatterOp, TopKOp
from kfuse.ir.values import Axis, Scalar, TensorView, Val


def _sorted_operand(b: Any, arg: Any, dim: Any, op: str) -> tuple[TensorView, int]:
    v = b.tensor(arg, op)
    if v.ndim == 0:
        raise DefinitionError(f"{op}: {describe(v)} has rank 0; kfuse's {op} takes rank >= 1")
    if v.dtype is DataType.Bool or v.dtype.is_float8 or v.dtype.is_complex:
        raise DefinitionError(
            f"{op}: {describe(v)} is {v.dtype.value}; torch has no {op} of it (cast it first)"
        )
    (d,) = b.dims(v, [as_index(dim, op, "dim")], op)
    return v, d


def build_topk(b: Any, arg: Any, k: Any, dim: Any, largest: bool, sorted: bool) -> list[Any]:
    """fd.ops.topk: [values, indices], the input's shape with axis `dim` of size k."""
    v, d = _sorted_operand(b, arg, dim, "topk")
    if isinstance(k, Scalar):
        b.operand(k, "topk", 1)
        if not k.dtype.is_integral:
            raise DefinitionError(f"topk: k {describe(k)} is not an integer")
        k_val = k
    else:
        count = as_index(k, "topk", "k")
        if count < 0:
            raise DefinitionError(f"topk: k is {count}; it must be >= 0")
        k_val = b.constant(count, DataType.Int, op="topk")
    if k_val.is_constant and v.axes[d].extent is not None and k_val.value > v.axes[d].extent:
        raise DefinitionError(
            f"topk: k = {k_val.value} but axis {d} of {describe(v)} has size {v.axes[d].extent}"
        )
    size = Axis(False, k_val.value) if k_val.is_constant else Axis(False, None)
    axes = [size if i == d else a for i, a in enumerate(v.axes)]
    values, indices = b.new_tensor(v.dtype, axes), b.new_tensor(DataType.Int, axes)
    b.add(
        TopKOp(
            inputs=(v, k_val),
            outputs=(values, indices),
            dim=d,
            largest=bool(largest),
            sorted=bool(sorted),
        )
    )
    return [values, indices]


def build_argsort(b: Any, arg: Any, dim: Any, descending: bool, stable: bool) -> TensorView:
    """fd.ops.argsort: Int positions, the input's shape."""
    v, d = _sorted_operand(b, arg, dim, "argsort")
    axes = [Axis(False, 1) if a.is_broadcast else a for a in v.axes]
    out = b.new_tensor(DataType.Int, axes)
    b.add(
        ArgsortOp(
            inputs=(v,), outputs=(out,), dim=d, descending=bool(descending), stable=bool(stable)
        )
    )
    return out


def build_scatter(b: Any, arg: Any, index: Any, src: Any, dim: Any) -> TensorView:
    """fd.ops.scatter(arg, index, src, dim) (nvFuser's python_direct order): a copy of arg
    with src written at the index's positions along `dim`."""
    op = "scatter"
    v = b.tensor(arg, op, 0)
    idx = b.tensor(index, op, 1)
    if v.ndim == 0:
        raise DefinitionError(f"{op}: {describe(v)} has rank 0; scatter takes rank >= 1")
    if not idx.dtype.is_integral:
        raise DefinitionError(f"{op}: the index {describe(idx)} is not an integer tensor")
    if idx.ndim != v.ndim:
        raise DefinitionError(f"{op}: {describe(v)} and the index {describe(idx)} differ in rank")
    source = b.operand(src, op, 2)
    if isinstance(source, TensorView):
        if source.ndim != v.ndim:
            raise DefinitionError(
                f"{op}: {describe(v)} and the source {describe(source)} differ in rank"
            )
        if source.dtype is not v.dtype:
            raise DefinitionError(
                f"{op}: the source {describe(source)} is not of {v.name}'s dtype "
                f"{v.dtype.value} (cast it first)"
            )
    elif source.dtype is not v.dtype:
        source = b.cast(source, v.dtype, op=op)
    (d,) = b.dims(v, [as_index(dim, op, "dim")], op)
    axes = [Axis(False, 1) if a.is_broadcast else a for a in v.axes]
    out = b.new_tensor(v.dtype, axes)
    b.add(ScatterOp(inputs=(v, idx, source), outputs=(out,), dim=d))
    return out


# ---- per-call shapes ----
def sort_shapes(expr: Any, shapes: dict[Val, Any]) -> list[tuple[int, ...]]:
    """The output shapes of a TopKOp / ArgsortOp / ScatterOp for a call (InputError where
    its sizes do not fit)."""
    x = expr.inputs[0]
    shape = tuple(shapes[x])
    if isinstance(expr, TopKOp):
        k_val = cast(Scalar, expr.inputs[1])
        k = k_val.value if k_val.is_constant else shapes[k_val]
        if not 0 <= k <= shape[expr.dim]:
            raise InputError(
                f"{expr.outputs[0].name} = topk({x.name}, k={k}, dim={expr.dim}): k must be "
                f"in [0, {shape[expr.dim]}], the size of axis {expr.dim} of {x.name}"
            )
        out = shape[: expr.dim] + (k,) + shape[expr.dim + 1 :]
        return [out, out]
    if isinstance(expr, ScatterOp):
        _check_scatter_sizes(expr, shapes)
    return [shape]


def _check_scatter_sizes(expr: ScatterOp, shapes: dict[Val, Any]) -> None:
    """torch.scatter's size rule: the index no larger than self off `dim`, nor than src."""
    x, index, src = expr.inputs
    sx, si = shapes[x], shapes[index]
    bounds = [(x, sx, [d for d in range(len(sx)) if d != expr.dim])]
    if isinstance(src, TensorView):
        bounds.append((src, shapes[src], list(range(len(sx)))))
    for v, sv, axes in bounds:
        for d in axes:
            if si[d] > sv[d]:
                raise InputError(
                    f"{expr.outputs[0].name} = scatter({x.name}, {index.name}, ..., "
                    f"dim={expr.dim}): the index has shape {tuple(si)}, larger than "
                    f"{v.name}'s {tuple(sv)} on axis {d}"
                )


def check_scatter_positions(expr: ScatterOp, index: Any, size: int) -> None:
    """InputError unless every position the index holds is inside the scattered axis
    (before any write: out of range, the GPU would write outside the array)."""
    # The shape's product: a torch tensor's size is a method, NumPy's and CuPy's a number.
    if math.prod(index.shape) == 0:
        return
    lo, hi = int(index.min()), int(index.max())
    if lo < 0 or hi >= size:
        bad = lo if lo < 0 else hi
        raise InputError(
            f"{expr.outputs[0].name} = scatter(..., dim={expr.dim}): the index "
            f"{expr.inputs[1].name} holds {bad}, outside axis {expr.dim} of size {size}"
        )


def scatter_positions(expr: ScatterOp, index: Any, arange: Any) -> tuple[Any, ...]:
    """The advanced index of the elements the scatter writes: along `dim` the index's
    positions, along each other axis a range broadcast over the index's shape (NumPy, CuPy
    and torch read and write through it alike)."""
    n = index.ndim
    out = []
    for d in range(n):
        if d == expr.dim:
            out.append(index)
        else:
            shape = [1] * n
            shape[d] = int(index.shape[d])
            out.append(arange(int(index.shape[d])).reshape(shape))
    return tuple(out)


def source_window(src: Any, index: Any) -> Any:
    """The part of a tensor src that the scatter reads: the index's shape from its start."""
    return src[tuple(slice(0, int(n)) for n in index.shape)]


def positive_nans(a: Any) -> Any:
    """A torch tensor `a` with the sign bit of its NaNs cleared (`a` itself when it holds no
    floats), for torch's sorts. Every NaN sorts as the largest value in torch's order, but
    torch's CUDA radix sort orders by bits and puts a NaN with its sign bit set (the NaN
    that x86 and some CUDA ops make) before -inf: a wrong order that a GPU campaign met in
    both argsort's output and the reference's (torch 2.11, pytorch/pytorch#190781), and in
    torch.topk's sorted output (its selection maps every NaN to the largest key, but the
    selected values are then sorted by that radix sort). NumPy's and CuPy's sorts test for
    NaN whatever its sign."""
    if a.dtype.is_floating_point:
        # Not abs(): torch's CUDA abs of a NaN keeps its sign bit (an H100 run showed it). The
        # fill is Python's NaN, whose sign bit is clear, converted to a's dtype.
        return a.masked_fill(a.isnan(), float("nan"))
    return a


def stable_order(xp: Any, a: Any, dim: int, descending: bool) -> Any:
    """NumPy/CuPy: the positions that sort `a` along `dim` stably, NaN as the largest value
    (torch's order); descending keeps equal elements in their order too."""
    if not descending:
        return xp.argsort(a, axis=dim, kind="stable").astype(xp.int64)
    # Sorting the reversed axis ascending and reading the result backwards gives the
    # descending order with equal elements (and NaNs, first) in their original order.
    n = a.shape[dim]
    backwards = xp.flip(xp.argsort(xp.flip(a, axis=dim), axis=dim, kind="stable"), axis=dim)
    return (n - 1 - backwards).astype(xp.int64)
