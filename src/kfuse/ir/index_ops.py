"""Ops that read a tensor at positions another tensor holds (nvFuser's indexing ops):
index_select, gather and take_along_axis, built and sized here.

`build_index_select` and `build_gather` are fd.ops' definition-time halves; `indexed_shape`
the output's shape for a call (InputError where the shapes do not fit), and `positions` the
index that reads them with the arrays' own indexing, which NumPy, CuPy and torch share
(an integer array on the axis, a range broadcast on each other one): the reference and the
framework's evaluation (kfuse.schedule.expr_eval) both run it, after `check_positions` has
made sure every index is inside the axis. A position outside it is an InputError, never a
read outside the array (which on the GPU would stop the whole CUDA context).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kfuse.dtypes import DataType
from kfuse.errors import DefinitionError, InputError
from kfuse.ir.builder import as_index, describe
from kfuse.ir.exprs import GatherOp, IndexSelectOp
from kfuse.ir.values import Axis, TensorView


def _index_tensor(b: Any, index: Any, op: str, floating: bool = False) -> TensorView:
    """The index operand; with `floating`, a floating one converted to Int (rounded toward
    zero), as nvFuser's gather and take_along_axis read one (Thunder's cross-entropy hands
    them where(target != ignore, target, 0.0), a Float tensor of whole numbers)."""
    v = b.tensor(index, op, 1)
    if floating and v.dtype.is_floating:
        return b.cast(v, DataType.Int, op=op)
    if not v.dtype.is_integral:
        raise DefinitionError(f"{op}: the index {describe(v)} is not an integer tensor")
    return v


def build_index_select(
    b: Any, arg: Any, index: Any, dim: Any, op: str = "index_select"
) -> TensorView:
    """fd.ops.index_select: `arg` along axis `dim` at the positions of the 1-D integer
    tensor `index` (the axis takes index's size; a 0-D index is one position)."""
    v = b.tensor(arg, op)
    idx = _index_tensor(b, index, op)
    if idx.ndim == 0:  # one position, as torch.index_select takes it: the axis keeps size 1
        idx = b.broadcast(idx, [True])
    if idx.ndim != 1:
        raise DefinitionError(f"{op}: the index {describe(idx)} must have rank 0 or 1")
    (d,) = b.dims(v, [as_index(dim, op, "dim")], op)
    axes = [idx.axes[0] if i == d else a for i, a in enumerate(v.axes)]
    if axes[d].is_broadcast:  # one position: an axis of size 1, not a broadcast one
        axes[d] = Axis(False, 1)
    out = b.new_tensor(v.dtype, axes)
    b.add(IndexSelectOp(inputs=(v, idx), outputs=(out,), dim=d))
    return out


def build_gather(
    b: Any, arg: Any, index: Any, dim: Any, broadcast: bool, op: str = "gather"
) -> TensorView:
    """fd.ops.gather (torch.gather: the index no larger than `arg` off `dim`, the output of
    the index's shape) or, with `broadcast`, fd.ops.take_along_axis (the other axes of the
    two broadcast together): out[..., j, ...] = arg[..., index[..., j, ...], ...]."""
    v = b.tensor(arg, op)
    idx = _index_tensor(b, index, op, floating=True)
    if idx.ndim != v.ndim:
        raise DefinitionError(f"{op}: {describe(v)} and the index {describe(idx)} differ in rank")
    (d,) = b.dims(v, [as_index(dim, op, "dim")], op)
    axes = []
    for i, (a, x) in enumerate(zip(v.axes, idx.axes)):
        if i == d or not broadcast:
            axes.append(Axis(False, 1) if x.is_broadcast and i == d else x)
        else:
            axes.append(a if x.is_broadcast else x)
    out = b.new_tensor(v.dtype, axes)
    b.add(GatherOp(inputs=(v, idx), outputs=(out,), dim=d, broadcast=broadcast))
    return out


def indexed_shape(expr: IndexSelectOp | GatherOp, shapes: Any) -> tuple[int, ...]:
    """The output's shape for a call (`shapes`: each input's); InputError where the index
    does not fit the tensor off the indexed axis."""
    arg, index = expr.inputs
    a, x = shapes[arg], shapes[index]
    d, out = expr.dim, expr.outputs[0]
    if isinstance(expr, IndexSelectOp):
        return tuple(x[0] if i == d else n for i, n in enumerate(a))
    result = []
    for i, (n, m) in enumerate(zip(a, x)):
        if i == d:
            result.append(m)
        elif expr.broadcast:
            if n != m and 1 not in (n, m):
                raise InputError(
                    f"take_along_axis to {out.name}: axis {i} of {arg.name} (size {n}) and "
                    f"of the index {index.name} (size {m}) do not broadcast"
                )
            result.append(m if n == 1 else n)
        else:
            if m > n:
                raise InputError(
                    f"gather to {out.name}: axis {i} of the index {index.name} has size {m}, "
                    f"more than {arg.name}'s {n}"
                )
            result.append(m)
    return tuple(result)


def op_name(expr: IndexSelectOp | GatherOp) -> str:
    """The fd.ops name the expr was made by."""
    if isinstance(expr, IndexSelectOp):
        return "index_select"
    return "take_along_axis" if expr.broadcast else "gather"


def check_positions(expr: IndexSelectOp | GatherOp, index: Any, extent: int) -> None:
    """InputError unless every position in `index` (an array) is in [0, extent). It names
    the op and axis, not Vals: it runs on a segment's values, whose Vals are the segment's."""
    outside = (index < 0) | (index >= extent)
    if bool(outside.any()):
        first = index[outside].reshape(-1)[0]
        raise InputError(
            f"{op_name(expr)} along axis {expr.dim}: an index holds {int(first)}, outside "
            f"the axis (size {extent}); positions are in [0, {extent})"
        )


def positions(
    expr: IndexSelectOp | GatherOp,
    arg_shape: Sequence[int],
    index: Any,
    arange: Callable[[int], Any],
) -> tuple[Any, ...]:
    """The advanced index that reads `expr` out of an array of `arg_shape`: `index` on the
    indexed axis and, for a gather, a range on every other axis shaped to broadcast with it
    (`arange(n)`: the framework's 1-D range of n positions)."""
    d, rank = expr.dim, len(arg_shape)
    if isinstance(expr, IndexSelectOp):
        return (slice(None),) * d + (index,)
    parts: list[Any] = []
    for i in range(rank):
        if i == d:
            parts.append(index)
            continue
        n = arg_shape[i] if expr.broadcast else index.shape[i]
        parts.append(arange(n).reshape(tuple(n if j == i else 1 for j in range(rank))))
    return tuple(parts)
