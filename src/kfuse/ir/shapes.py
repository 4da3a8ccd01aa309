"""Shape inference: concrete extents of every TensorView from the inputs' sizes."""

from __future__ import annotations

import math
from typing import Any, cast

from kfuse.errors import InputError
from kfuse.ir.exprs import (
    BinaryOp,
    BroadcastOp,
    CastOp,
    CatOp,
    ExpandOp,
    Expr,
    GatherOp,
    IndexSelectOp,
    LinearOp,
    MatmulOp,
    PadOp,
    PermuteOp,
    ReductionOp,
    ReshapeOp,
    SizeOp,
    SliceOp,
    SqueezeOp,
    TernaryOp,
    UnaryOp,
    WelfordOp,
)
from kfuse.ir.index_ops import indexed_shape
from kfuse.ir.resize_ops import cat_windows, pad_windows, slice_ranges, sliced_shape
from kfuse.ir.scalar_eval import eval_scalar, to_python
from kfuse.ir.values import Scalar, TensorView, Val


class _Origin:
    """Where an extent came from, for error messages."""

    def __init__(self, text: str) -> None:
        self.text = text


def _shape_of(x: Any) -> tuple[int, ...] | None:
    if isinstance(x, (tuple, list)):
        return tuple(int(s) for s in x)
    shape = getattr(x, "shape", None)
    return None if shape is None else tuple(int(s) for s in shape)


def infer_shapes(fusion: Any, inputs: list[Any]) -> dict[Val, Any]:
    """See Fusion.infer_shapes. Returns {TensorView: tuple[int, ...], Scalar: value}."""
    if len(inputs) != len(fusion.inputs):
        raise InputError(f"the fusion takes {len(fusion.inputs)} inputs, got {len(inputs)}")
    shapes: dict[Val, Any] = {}
    origins: dict[Val, list[_Origin]] = {}
    for pos, (val, arg) in enumerate(zip(fusion.inputs, inputs, strict=False)):
        if isinstance(val, TensorView):
            shape = _shape_of(arg)
            where = f"input {pos} ({val.name})"
            if shape is None:
                raise InputError(f"{where} must be an array or a shape, got {type(arg).__name__}")
            if len(shape) != val.ndim:
                raise InputError(
                    f"{where} was defined with rank {val.ndim} but has shape "
                    f"{shape} (rank {len(shape)})"
                )
            for i, (axis, n) in enumerate(zip(val.axes, shape, strict=False)):
                if axis.is_broadcast and n != 1:
                    raise InputError(
                        f"{where} axis {i} was defined as a broadcast axis (size 1)"
                        f" but has size {n}"
                    )
                if axis.extent is not None and n != axis.extent:
                    raise InputError(
                        f"{where} axis {i} was defined with size {axis.extent} but has size {n}"
                    )
            shapes[val] = shape
            origins[val] = [_Origin(f"{where} axis {i}") for i in range(val.ndim)]
        else:
            value = arg.item() if hasattr(arg, "item") else arg
            shapes[val] = value
    for expr in fusion.exprs:
        _infer(expr, shapes, origins)
    return shapes


def _named(v: Val) -> str:
    """A scalar's name and, for a size, where it comes from."""
    d = v.definition
    return f"{v.name} (size {d.dim} of {d.inputs[0].name})" if isinstance(d, SizeOp) else v.name


def _value(v: Val, shapes: dict[Val, Any]) -> Any:
    if isinstance(v, Scalar) and v.is_constant:
        return v.value
    return shapes.get(v)


def _infer(expr: Expr, shapes: dict[Val, Any], origins: dict[Val, list[_Origin]]) -> None:
    out = expr.outputs[0]
    if not isinstance(out, TensorView):
        infer_scalar(expr, shapes)
        return
    tv = expr.inputs[0]
    shape = shapes[tv] if isinstance(tv, TensorView) else ()
    orig = origins.get(tv, [])
    if isinstance(expr, (UnaryOp, BinaryOp, TernaryOp, CastOp)):
        shapes[out], origins[out] = _pointwise(expr, shapes, origins)
    elif isinstance(expr, BroadcastOp):
        it = iter(zip(shape, orig, strict=False))
        pairs = [
            (1, _Origin(f"broadcast axis of {out.name}")) if new else next(it)
            for new in expr.is_new_axis
        ]
        shapes[out] = tuple(p[0] for p in pairs)
        origins[out] = [p[1] for p in pairs]
    elif isinstance(expr, ExpandOp):
        shapes[out], origins[out] = _expand(expr, shape, orig, shapes)
    elif isinstance(expr, SqueezeOp):
        _check_squeezed(expr, shape, orig)
        keep = [i for i in range(len(shape)) if i not in expr.dims]
        shapes[out] = tuple(shape[i] for i in keep)
        origins[out] = [orig[i] for i in keep]
    elif isinstance(expr, PermuteOp):
        shapes[out] = tuple(shape[p] for p in expr.perm)
        origins[out] = [orig[p] for p in expr.perm]
    elif isinstance(expr, ReshapeOp):
        shapes[out] = _reshape(expr, shape, shapes)
        origins[out] = [_Origin(f"reshape to {out.name} axis {i}") for i in range(out.ndim)]
    elif isinstance(expr, SliceOp):
        ranges = slice_ranges(expr, shape, shapes)
        shapes[out] = sliced_shape(ranges)
        origins[out] = [
            o if r == (0, n, 1) else _Origin(f"slice to {out.name} axis {i}")
            for i, (o, r, n) in enumerate(zip(orig, ranges, shape))
        ]
    elif isinstance(expr, PadOp):
        shapes[out], _, _ = pad_windows(expr, shape, shapes)
        origins[out] = [_Origin(f"pad to {out.name} axis {i}") for i in range(out.ndim)]
    elif isinstance(expr, (IndexSelectOp, GatherOp)):
        shapes[out] = indexed_shape(expr, shapes)
        origins[out] = _indexed_origins(expr, shapes, origins)
    elif isinstance(expr, CatOp):
        shapes[out], _ = cat_windows(expr, [shapes[t] for t in expr.inputs])
        origins[out] = [
            _Origin(f"cat to {out.name} axis {i}") if i == expr.dim else o
            for i, o in enumerate(orig)
        ]
    elif isinstance(expr, (ReductionOp, WelfordOp)):
        keep = [i for i in range(len(shape)) if i not in expr.dims]
        for o in expr.outputs:
            shapes[o] = tuple(shape[i] for i in keep)
            origins[o] = [orig[i] for i in keep]
    elif isinstance(expr, (MatmulOp, LinearOp)):
        from kfuse.ir.library_ops import infer_library_shape

        shapes[out] = infer_library_shape(expr, shapes)
        origins[out] = [_Origin(f"{out.name} axis {i}") for i in range(out.ndim)]
    else:  # pragma: no cover - every Expr class is handled above
        raise InputError(f"shape inference does not know {type(expr).__name__}")


def _indexed_origins(
    expr: IndexSelectOp | GatherOp, shapes: dict[Val, Any], origins: dict[Val, list[_Origin]]
) -> list[_Origin]:
    """Where each axis of an index_select's or gather's output takes its size: the index's
    axis (a gather's are all the index's, take_along_axis's off the indexed one those of
    the larger), else the tensor's; so that an error about it names the input to change (a
    cross entropy's [N, 1] targets given as [N, 2], squeezed later)."""
    arg, index = expr.inputs
    if isinstance(expr, IndexSelectOp):
        return [origins[index][0] if i == expr.dim else o for i, o in enumerate(origins[arg])]
    return [
        origins[arg][i]
        if expr.broadcast and i != expr.dim and shapes[index][i] == 1
        else origins[index][i]
        for i in range(len(shapes[index]))
    ]


def _check_squeezed(expr: SqueezeOp, shape: tuple[int, ...], orig: list[_Origin]) -> None:
    """A squeezed axis the definition did not know to be of size 1 (a symbolic one) must be
    1 on this call: removing an axis of another size would drop its other elements, so the
    call stops here, before anything is compiled or launched for it. An expanded axis that
    squeeze_expanded removes may have any size."""
    tv = expr.inputs[0]
    for d in expr.dims:
        if d not in expr.expanded and shape[d] != 1:
            raise InputError(
                f"{expr.outputs[0].name} = squeeze({tv.name}, dims={list(expr.dims)}): axis {d} "
                f"of {tv.name} has size {shape[d]} (from {orig[d].text}); only an axis of "
                "size 1 can be squeezed"
            )


def _expand(
    expr: ExpandOp, shape: tuple[int, ...], orig: list[_Origin], shapes: dict[Val, Any]
) -> tuple[tuple[int, ...], list[_Origin]]:
    """An expand's shape: each broadcast axis given an extent takes it; any other axis must
    be asked for its own size."""
    out, tv = expr.outputs[0], expr.inputs[0]
    new_shape, new_orig = list(shape), list(orig)
    for i, ext in enumerate(expr.extents):
        if ext is None:
            continue
        n = _value(ext, shapes)
        if n is None or int(n) < 0:
            raise InputError(
                f"{out.name} = expand(...): extent {ext.name} of axis {i} is {n}, not a size"
            )
        if not cast(TensorView, tv).axes[i].is_broadcast:
            # Only broadcast axes expand; the size asked of any other must be its size.
            if int(n) != shape[i]:
                asked = str(int(n)) if ext.is_constant else f"{_named(ext)} = {int(n)}"
                raise InputError(
                    f"{out.name} = expand({tv.name}, ...): {orig[i].text} has "
                    f"size {shape[i]}, but axis {i} was asked to be {asked}"
                )
            continue
        new_shape[i] = int(n)
        new_orig[i] = _Origin(f"expand extent {ext} of {out.name} axis {i}")
    return tuple(new_shape), new_orig


def _pointwise(
    expr: Expr, shapes: dict[Val, Any], origins: dict[Val, list[_Origin]]
) -> tuple[tuple[int, ...], list[_Origin]]:
    out = cast(TensorView, expr.outputs[0])
    result: list[int] = [1] * out.ndim
    res_orig: list[_Origin | None] = [None] * out.ndim
    for operand in expr.inputs:
        if not isinstance(operand, TensorView):
            continue
        for i, axis in enumerate(operand.axes):
            if axis.is_broadcast:
                continue
            n = shapes[operand][i]
            first = res_orig[i]
            if first is None:
                result[i], res_orig[i] = n, origins[operand][i]
            elif n != result[i]:
                raise InputError(
                    f"{first.text} has size {result[i]} but {origins[operand][i].text} "
                    f"has size {n}; they meet in {out.name} = {expr._math()}"
                )
    final = [o if o is not None else _Origin(f"broadcast axis of {out.name}") for o in res_orig]
    return tuple(result), final


def _reshape(expr: ReshapeOp, shape: tuple[int, ...], shapes: dict[Val, Any]) -> tuple[int, ...]:
    out = cast(TensorView, expr.outputs[0])
    total = math.prod(shape)
    entries = [_value(s, shapes) for s in expr.shape]
    if any(e is None for e in entries):
        raise InputError(f"reshape to {out.name}: a shape entry has no value")
    entries = [int(e) for e in entries]
    known = math.prod(e for e in entries if e != -1)
    if -1 in entries:
        if known == 0 or total % known:
            raise InputError(
                f"reshape of {expr.inputs[0].name} with shape {shape} "
                f"({total} elements) to {entries}: the sizes do not divide"
            )
        entries[entries.index(-1)] = total // known
    elif known != total:
        raise InputError(
            f"reshape of {expr.inputs[0].name} with shape {shape} ({total} "
            f"elements) to {tuple(entries)} ({known} elements)"
        )
    for i, (axis, n) in enumerate(zip(out.axes, entries, strict=False)):
        if axis.is_broadcast and n != 1:
            raise InputError(f"reshape to {out.name}: axis {i} must be 1, got {n}")
    return tuple(entries)


def infer_scalar(expr: Expr, shapes: dict[Val, Any]) -> None:
    """The value of `expr`'s scalar output into `shapes`, from its inputs' values there (also
    what the host fast path runs for scalars computed from scalar inputs)."""
    out = expr.outputs[0]
    if isinstance(expr, SizeOp):
        shapes[out] = shapes[expr.inputs[0]][expr.dim]
        return
    args = [_value(v, shapes) for v in expr.inputs]
    if any(a is None for a in args):
        shapes[out] = None  # depends on a scalar input whose value was not given
    elif isinstance(expr, CastOp):
        shapes[out] = to_python(args[0], expr.dtype)
    else:
        shapes[out] = eval_scalar(cast(Any, expr).op, args, out.dtype)


def infer_added(exprs: list[Expr], shapes: dict[Val, Any]) -> None:
    """The extents of the outputs of tensor `exprs` (in order) into `shapes`, from those of
    their inputs there, which shape inference has checked: the segmenter's own exprs
    (kfuse.engine.segmenter.split_reductions), whose values the fusion does not have."""
    origins: dict[Val, list[_Origin]] = {}
    for expr in exprs:
        for v in expr.inputs:
            if isinstance(v, TensorView) and v not in origins:
                origins[v] = [_Origin(f"{v.name} axis {i}") for i in range(v.ndim)]
        _infer(expr, shapes, origins)
