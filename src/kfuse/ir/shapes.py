"""Shape inference: concrete extents of every TensorView from the inputs' sizes."""

from __future__ import annotations

from typing import Any, cast

from kfuse.errors import InputError
from kfuse.ir.exprs import (
    LIBRARY_EXPRS,
    BinaryOp,
    CastOp,
    Expr,
    GeneratedOp,
    ReductionOp,
    ScanOp,
    SizeOp,
    TernaryOp,
    UnaryOp,
    WelfordOp,
)
from kfuse.ir.scalar_eval import eval_scalar, to_python
from kfuse.ir.structural import structural_info
from kfuse.ir.structural_shapes import Origin, value_of
from kfuse.ir.values import TensorView, Val


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
    origins: dict[Val, list[Origin]] = {}
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
            origins[val] = [Origin(f"{where} axis {i}") for i in range(val.ndim)]
        else:
            value = arg.item() if hasattr(arg, "item") else arg
            shapes[val] = value
    for expr in fusion.exprs:
        _infer(expr, shapes, origins)
    return shapes


def _infer(expr: Expr, shapes: dict[Val, Any], origins: dict[Val, list[Origin]]) -> None:
    out = expr.outputs[0]
    if not isinstance(out, TensorView):
        infer_scalar(expr, shapes)
        return
    if isinstance(expr, GeneratedOp):  # no tensor input: its scalars give the shape
        from kfuse.ir.generated import generated_shape

        shapes[out] = generated_shape(expr, shapes)
        origins[out] = [Origin(f"{expr.op} to {out.name} axis {i}") for i in range(out.ndim)]
        return
    tv = expr.inputs[0]
    shape = shapes[tv] if isinstance(tv, TensorView) else ()
    orig = origins.get(tv, [])
    if isinstance(expr, (UnaryOp, BinaryOp, TernaryOp, CastOp)):
        shapes[out], origins[out] = _pointwise(expr, shapes, origins)
    elif (row := structural_info(expr)) is not None:
        shapes[out], origins[out] = row.infer(expr, shapes, origins)
    elif isinstance(expr, (ReductionOp, WelfordOp)):
        keep = [i for i in range(len(shape)) if i not in expr.dims]
        for o in expr.outputs:
            shapes[o] = tuple(shape[i] for i in keep)
            origins[o] = [orig[i] for i in keep]
    elif isinstance(expr, ScanOp):  # the input's shape, element for element
        shapes[out], origins[out] = shape, list(orig)
    elif isinstance(expr, LIBRARY_EXPRS):
        from kfuse.ir.library_ops import library_shapes

        for o, o_shape in zip(expr.outputs, library_shapes(expr, shapes), strict=True):
            shapes[o] = o_shape
            origins[o] = [Origin(f"{o.name} axis {i}") for i in range(len(o_shape))]
    else:  # pragma: no cover - every Expr class is handled above
        raise InputError(f"shape inference does not know {type(expr).__name__}")


def _pointwise(
    expr: Expr, shapes: dict[Val, Any], origins: dict[Val, list[Origin]]
) -> tuple[tuple[int, ...], list[Origin]]:
    out = cast(TensorView, expr.outputs[0])
    result: list[int] = [1] * out.ndim
    res_orig: list[Origin | None] = [None] * out.ndim
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
    final = [o if o is not None else Origin(f"broadcast axis of {out.name}") for o in res_orig]
    return tuple(result), final


def infer_scalar(expr: Expr, shapes: dict[Val, Any]) -> None:
    """The value of `expr`'s scalar output into `shapes`, from its inputs' values there (also
    what the host fast path runs for scalars computed from scalar inputs)."""
    out = expr.outputs[0]
    if isinstance(expr, SizeOp):
        shapes[out] = shapes[expr.inputs[0]][expr.dim]
        return
    args = [value_of(v, shapes) for v in expr.inputs]
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
    origins: dict[Val, list[Origin]] = {}
    for expr in exprs:
        for v in expr.inputs:
            if isinstance(v, TensorView) and v not in origins:
                origins[v] = [Origin(f"{v.name} axis {i}") for i in range(v.ndim)]
        _infer(expr, shapes, origins)
