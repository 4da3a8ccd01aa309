"""Print a Fusion as a runnable Python function that rebuilds it through the frontend."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, cast

from kfuse.dtypes import python_scalar_dtype
from kfuse.ir.exprs import (
    BinaryOp,
    CastOp,
    Expr,
    GeneratedOp,
    LinearOp,
    MatmulOp,
    ReductionOp,
    ScanOp,
    SegmentSetOp,
    SizeOp,
    StrideOrderOp,
    TernaryOp,
    UnaryOp,
    WelfordOp,
    attribute_vals,
)
from kfuse.ir.generated import generated_call
from kfuse.ir.ops import fd_call
from kfuse.ir.scan_ops import scan_method
from kfuse.ir.structural import structural_info
from kfuse.ir.values import Scalar, TensorView, Val


def literal(v: Any, names: Mapping[int, str] | None = None) -> str:
    """A Python expression for an operand: a name, or a constant's literal (or the name it
    is printed under, where `names` (by id) has one: see _named_constants)."""
    if isinstance(v, Scalar) and v.is_constant:
        if names is not None and id(v) in names:
            return names[id(v)]
        return _number(v.value)
    if isinstance(v, Val):
        return v.name
    return repr(v)


def _number(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return f"float('{value}')"
    return repr(value)


def _extent_list(entries: tuple, names: Mapping[int, str]) -> str:
    return "[" + ", ".join("-1" if e is None else literal(e, names) for e in entries) + "]"


def _named_constants(exprs: Sequence[Expr]) -> set[int]:
    """The ids of the constants that are printed as named `fd.define_scalar(value,
    dtype=...)`s, because a bare literal in their place would come back with another dtype.

    A literal becomes a constant of its Python type's dtype (bool: Bool, int: Int, float:
    Double). A pointwise op then casts it to the dtype it computes in, which its tensor
    operands already have, and pad casts its value to the padded tensor's dtype
    (kfuse.ir.builder), so a constant of a tensor operand's dtype rebuilds itself. Anywhere
    else it keeps the literal's dtype: where's two scalar branches (whose dtype becomes the
    output's), an op of scalars only, a slice bound or pad width (an attribute)."""
    named: set[int] = set()
    for expr in exprs:
        tensor_dtypes = {v.dtype for v in expr.inputs if isinstance(v, TensorView)}
        for v in expr.inputs:
            if _is_typed_constant(v) and v.dtype not in tensor_dtypes:
                named.add(id(v))
        named.update(id(v) for v in attribute_vals(expr) if _is_typed_constant(v))
    return named


def _is_typed_constant(v: Val) -> bool:
    """A constant whose dtype is not the one its value's Python type gives."""
    return isinstance(v, Scalar) and v.is_constant and v.dtype is not python_scalar_dtype(v.value)


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


def _call(expr: Expr, names: Mapping[int, str]) -> str:
    a = [literal(v, names) for v in expr.inputs]
    if isinstance(expr, (UnaryOp, BinaryOp, TernaryOp)):
        method, keywords = fd_call(expr.op)
        return f"fd.ops.{method}({', '.join(a + [f'{k}={v!r}' for k, v in keywords.items()])})"
    if isinstance(expr, SegmentSetOp):
        return f"fd.ops.segment_set({a[0]})"
    if isinstance(expr, StrideOrderOp):
        return f"fd.ops.stride_order({a[0]}, stride_order={list(expr.order)})"
    if isinstance(expr, CastOp):
        return f"fd.ops.cast({a[0]}, dtype={expr.dtype!r})"
    if isinstance(expr, GeneratedOp):
        return generated_call(expr, lambda v: literal(v, names))
    if (row := structural_info(expr)) is not None:
        arguments = row.arguments(expr, a, lambda entries: _extent_list(entries, names))
        return f"fd.ops.{row.printed_method(expr)}({arguments})"
    if isinstance(expr, ReductionOp):
        return (
            f"fd.ops.{expr.op}({a[0]}, dims={list(expr.dims)}, keepdim=False, dtype={expr.dtype!r})"
        )
    if isinstance(expr, WelfordOp):
        return f"fd.ops.welford({a[0]}, dims={list(expr.dims)})"
    if isinstance(expr, ScanOp):
        return f"fd.ops.{scan_method(expr.op)}({a[0]}, dim={expr.dim})"
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
    named = _named_constants(fusion.exprs)
    # Named constants are C0, C1, ... in the order printed (their own names count every
    # constant ever made, so the rebuilt fusion's would differ), each defined just before
    # the first statement that uses it: the sort below is stable.
    names: dict[int, str] = {}
    for expr in sorted(fusion.exprs, key=lambda e: e.outputs[0].serial):
        key = expr.outputs[0].serial
        for v in (*expr.inputs, *attribute_vals(expr)):
            if id(v) in named and id(v) not in names:
                names[id(v)] = f"C{len(names)}"
                value = _number(cast(Scalar, v).value)
                statements.append(
                    (key, f"{names[id(v)]} = fd.define_scalar({value}, dtype={v.dtype!r})")
                )
        outs = ", ".join(v.name for v in expr.outputs)
        statements.append((key, f"{outs} = {_call(expr, names)}"))
    statements.sort(key=lambda s: s[0])
    lines = [f"def {name}(fd : FusionDefinition) -> None :"]
    lines += [f"    {text}" for _, text in statements]
    aliases = dict(fusion.output_aliases)
    for k, v in enumerate(fusion.outputs):
        if k not in fusion.hidden_outputs:
            lines.append(f"    fd.add_output({v.name})")
        if k in aliases:
            lines.append(
                f"    fd.add_output({v.name}, alias_input={fusion.inputs[aliases[k]].name})"
            )
    lines += ["", "with FusionDefinition() as fd:", f"    {name}(fd)", ""]
    return "\n".join(lines)
