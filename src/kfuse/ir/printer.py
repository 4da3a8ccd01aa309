"""Print a Fusion as a runnable Python function that rebuilds it through the frontend."""

from __future__ import annotations

import math
from typing import Any

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
from kfuse.ir.index_ops import op_name
from kfuse.ir.values import Scalar, TensorView, Val


def literal(v: Any) -> str:
    """A Python expression for an operand: a name, or a constant's literal."""
    if isinstance(v, Scalar) and v.is_constant:
        value = v.value
        if isinstance(value, float) and not math.isfinite(value):
            return f"float('{value}')"
        return repr(value)
    if isinstance(v, Val):
        return v.name
    return repr(v)


def _extent_list(entries: tuple) -> str:
    return "[" + ", ".join("-1" if e is None else literal(e) for e in entries) + "]"


def _define_input(v: Val) -> str:
    if isinstance(v, TensorView):
        shape = [-1 if a.extent is None else a.extent for a in v.axes]
        args = [f"shape={shape}"]
        if v.contiguity is not None:
            args.append(f"contiguity={list(v.contiguity)}")
        args.append(f"dtype={v.dtype!r}")
        if v.stride_order is not None:
            args.append(f"stride_order={list(v.stride_order)}")
        return f"{v.name} = fd.define_tensor({', '.join(args)})"
    return f"{v.name} = fd.define_scalar(None, dtype={v.dtype!r})"


def _call(expr: Expr) -> str:
    a = [literal(v) for v in expr.inputs]
    if isinstance(expr, UnaryOp):
        if expr.op == "gelu_tanh":
            return f"fd.ops.gelu({a[0]}, approximate='tanh')"
        return f"fd.ops.{expr.op}({a[0]})"
    if isinstance(expr, (BinaryOp, TernaryOp)):
        return f"fd.ops.{expr.op}({', '.join(a)})"
    if isinstance(expr, CastOp):
        return f"fd.ops.cast({a[0]}, dtype={expr.dtype!r})"
    if isinstance(expr, BroadcastOp):
        return f"fd.ops.broadcast({a[0]}, is_broadcast_dim={list(expr.is_new_axis)})"
    if isinstance(expr, ExpandOp):
        return f"fd.ops.expand({a[0]}, shape={_extent_list(expr.extents)})"
    if isinstance(expr, SqueezeOp):
        # As nvFuser's printer, squeeze_expanded only where it is needed (True).
        expanded = ", squeeze_expanded=True" if expr.expanded else ""
        return f"fd.ops.squeeze({a[0]}, dims={list(expr.dims)}{expanded})"
    if isinstance(expr, PermuteOp):
        return f"fd.ops.permute({a[0]}, dims={list(expr.perm)})"
    if isinstance(expr, ReshapeOp):
        return f"fd.ops.reshape({a[0]}, new_shape={_extent_list(expr.shape)})"
    if isinstance(expr, SliceOp):
        return (
            f"fd.ops.slice({a[0]}, start_indices={_extent_list(expr.starts)}, "
            f"end_indices={_extent_list(expr.stops)}, strides={list(expr.steps)}"
            + (", manual_normalization=True)" if expr.manual else ")")
        )
    if isinstance(expr, PadOp):
        widths = [w for lo, hi in zip(expr.lows[::-1], expr.highs[::-1]) for w in (lo, hi)]
        return f"fd.ops.pad({a[0]}, pad_widths={_extent_list(tuple(widths))}, value={a[1]})"
    if isinstance(expr, (IndexSelectOp, GatherOp)):
        return f"fd.ops.{op_name(expr)}({a[0]}, {a[1]}, dim={expr.dim})"
    if isinstance(expr, CatOp):
        return f"fd.ops.cat([{', '.join(a)}], dim={expr.dim})"
    if isinstance(expr, ReductionOp):
        return (
            f"fd.ops.{expr.op}({a[0]}, dims={list(expr.dims)}, keepdim=False, dtype={expr.dtype!r})"
        )
    if isinstance(expr, WelfordOp):
        return f"fd.ops.welford({a[0]}, dims={list(expr.dims)})"
    if isinstance(expr, SizeOp):
        return f"fd.ops.size({a[0]}, dim={expr.dim})"
    if isinstance(expr, MatmulOp):
        return f"fd.ops.matmul({a[0]}, {a[1]})"
    if isinstance(expr, LinearOp):
        return f"fd.ops.linear({', '.join(a)})"
    raise TypeError(f"no printer for {type(expr).__name__}")  # pragma: no cover


def fusion_to_python(fusion: Any, name: str = "kfuse_fusion") -> str:
    """The source of `def name(fd): ...` rebuilding `fusion`, and the lines that call it."""
    statements: list[tuple[int, str]] = [(v.serial, _define_input(v)) for v in fusion.inputs]
    for expr in fusion.exprs:
        outs = ", ".join(v.name for v in expr.outputs)
        statements.append((expr.outputs[0].serial, f"{outs} = {_call(expr)}"))
    statements.sort(key=lambda s: s[0])
    lines = [f"def {name}(fd : FusionDefinition) -> None :"]
    lines += [f"    {text}" for _, text in statements]
    lines += [f"    fd.add_output({v.name})" for v in fusion.outputs]
    lines += ["", "with FusionDefinition() as fd:", f"    {name}(fd)", ""]
    return "\n".join(lines)
