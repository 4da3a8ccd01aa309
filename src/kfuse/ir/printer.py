"""Print a Fusion as a runnable Python function that rebuilds it through the frontend.

Two spellings (a PrintStyle): kfuse's own (KFUSE_STYLE: the Vals' names, exact numbers, the
lines that call the function), and nvFuser's (NVFUSER_STYLE: what nvFuser's translate_fusion
prints, for kfuse.nvfuser_direct: tv0.. and c0.., six significant digits, no default keyword).
"""

from __future__ import annotations

import cmath
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from kfuse.dtypes import DataType, python_scalar_dtype
from kfuse.ir.exprs import (
    LIBRARY_EXPRS,
    ArgsortOp,
    BinaryOp,
    CastOp,
    Expr,
    GeneratedOp,
    LinearOp,
    MatmulOp,
    ReductionOp,
    ScanOp,
    ScatterOp,
    SdpaBwdOp,
    SdpaFwdOp,
    SegmentSetOp,
    SizeOp,
    StrideOrderOp,
    TernaryOp,
    TopKOp,
    UnaryOp,
    WelfordOp,
    attribute_vals,
)
from kfuse.ir.generated import generated_call
from kfuse.ir.ops import fd_call
from kfuse.ir.random_ops import RANDOM_OPS
from kfuse.ir.scan_ops import scan_method
from kfuse.ir.structural import structural_info
from kfuse.ir.values import Scalar, TensorView, Val


def _number(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return f"float('{value}')"
    if isinstance(value, complex) and not cmath.isfinite(value):  # repr gives (inf+1j)
        return f"complex({_number(value.real)}, {_number(value.imag)})"
    return repr(value)


def _nvfuser_number(value: Any) -> str:
    """A number as nvFuser's printer writes it: C++'s `<< std::showpoint` of a double (six
    significant digits, trailing zeros kept: 3.00000, 1.00000e-05), ints and bools as such."""
    if isinstance(value, float):
        if math.isnan(value):
            return 'float("nan")'
        if math.isinf(value):
            return 'float("-inf")' if value < 0 else 'float("inf")'
        return f"{value:#.6g}"
    if isinstance(value, complex):
        return f"complex({_nvfuser_number(value.real)}, {_nvfuser_number(value.imag)})"
    return repr(value)


@dataclass(frozen=True)
class PrintStyle:
    """How a printed definition is spelled where kfuse's and nvFuser's printers differ."""

    function: str  # the name of the printed function
    number: Callable[[Any], str]  # a constant's literal
    own_names: bool  # the Vals' own names (T0, S0), else nvFuser's tv0.. and c0..
    kfuse_calls: bool  # kfuse's calls (default keywords, alias_input=, factories), else nvFuser's
    call_lines: bool  # the `with FusionDefinition() as fd:` lines after the function
    full_inputs: bool  # define_tensor with is_cpu and nvFuser's default contiguity (False)
    exprs_order: bool  # inputs first, then nvFuser's Fusion::exprs() order (else creation)


KFUSE_STYLE = PrintStyle("kfuse_fusion", _number, True, True, True, False, False)
NVFUSER_STYLE = PrintStyle("nvfuser_fusion", _nvfuser_number, False, False, False, True, True)


def literal(
    v: Any, names: Mapping[int, str] | None = None, number: Callable[[Any], str] = _number
) -> str:
    """A Python expression for an operand: a name, or a constant's literal (or the name it
    is printed under, where `names` (by id) has one: see _named_constants)."""
    if isinstance(v, Scalar) and v.is_constant:
        if names is not None and id(v) in names:
            return names[id(v)]
        return number(v.value)
    if isinstance(v, Val):
        return v.name if names is None else names.get(id(v), v.name)
    return repr(v)


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
    output's), an op of scalars only, a slice bound or pad width (an attribute). nvFuser's
    printer does the same: it keeps a literal's Double where kfuse casts it to the tensor's
    dtype, so both print the literal there."""
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


def _define_input(v: Val, names: Mapping[int, str], style: PrintStyle) -> str:
    name = names.get(id(v), v.name)
    if isinstance(v, TensorView):
        shape = [-1 if a.extent is None else a.extent for a in v.axes]
        args = [f"shape={shape}"]
        contiguity = v.contiguity
        if contiguity is None and style.full_inputs:  # nvFuser's default: False
            contiguity = tuple(None if a.is_broadcast else False for a in v.axes)
        if contiguity is not None:
            args.append(f"contiguity={list(contiguity)}")
        args.append(f"dtype={v.dtype!r}")
        if style.full_inputs:
            args.append("is_cpu=False")
        if v.stride_order is not None:
            args.append(f"stride_order={list(v.stride_order)}")
        return f"{name} = fd.define_tensor({', '.join(args)})"
    return f"{name} = fd.define_scalar(None, dtype={v.dtype!r})"


def _reduction_call(expr: ReductionOp, operand: str, style: PrintStyle) -> str:
    if style.kfuse_calls:
        keywords = f"dims={list(expr.dims)}, keepdim=False, dtype={expr.dtype!r}"
    elif expr.op in ("max", "min"):  # nvFuser prints their dtype as Null, the default
        keywords = f"dims={list(expr.dims)}"
    else:
        keywords = f"dims={list(expr.dims)}, dtype={expr.dtype!r}"
    return f"fd.ops.{expr.op}({operand}, {keywords})"


def _generated_call(expr: GeneratedOp, lit: Callable[[Val], str], style: PrintStyle) -> str:
    """A factory's call; nvFuser's printer writes iota's arguments as keywords and a random
    op's distribution parameters and shape positionally, leaving out the default dtype (Int
    for iota, Float for the random ops); full is spelled alike."""
    if style.kfuse_calls or not (expr.op == "iota" or expr.op in RANDOM_OPS):
        return generated_call(expr, lit)
    if expr.op == "iota":
        start, step = (lit(v) for v in expr.params)
        dtype = "" if expr.dtype is DataType.Int else f", dtype={expr.dtype!r}"
        return f"fd.ops.iota(length={lit(expr.shape[0])}, start={start}, step={step}{dtype})"
    a, b, *seed = (lit(v) for v in expr.params)
    arguments = [a, b, "[" + ", ".join(lit(s) for s in expr.shape) + "]"]
    if seed:
        arguments += [f"rng_seed={seed[0]}", f"rng_offset={seed[1]}"]
    if expr.dtype is not DataType.Float:
        arguments.append(f"dtype={expr.dtype!r}")
    return f"fd.ops.{expr.op}({', '.join(arguments)})"


def _call(expr: Expr, names: Mapping[int, str], style: PrintStyle = KFUSE_STYLE) -> str:
    a = [literal(v, names, style.number) for v in expr.inputs]
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
        return _generated_call(expr, lambda v: literal(v, names, style.number), style)
    if (row := structural_info(expr)) is not None:
        arguments = row.arguments(expr, a, lambda entries: _extent_list(entries, names))
        return f"fd.ops.{row.printed_method(expr)}({arguments})"
    if isinstance(expr, ReductionOp):
        return _reduction_call(expr, a[0], style)
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
    if isinstance(expr, LIBRARY_EXPRS):
        return _library_call(expr, a)
    raise TypeError(f"no printer for {type(expr).__name__}")  # pragma: no cover


def _library_call(expr: Any, a: list[str]) -> str:
    """The fd.ops call of topk, argsort, scatter, sdpfa_fwd/bwd or grouped_mm, in nvFuser's
    argument order (`a`: the expr's inputs printed)."""
    if isinstance(expr, TopKOp):
        flags = f"largest={expr.largest}, sorted={expr.sorted}"
        return f"fd.ops.topk({a[0]}, {a[1]}, dim={expr.dim}, {flags})"
    if isinstance(expr, ArgsortOp):
        flags = f"descending={expr.descending}, stable={expr.stable}"
        return f"fd.ops.argsort({a[0]}, dim={expr.dim}, {flags})"
    if isinstance(expr, ScatterOp):
        return f"fd.ops.scatter({a[0]}, {a[1]}, {a[2]}, dim={expr.dim})"
    if isinstance(expr, SdpaFwdOp):
        scored = ["bias"] * expr.has_bias + ["mask"] * expr.has_mask
        given = "".join(f"{k}={a[3 + i]}, " for i, k in enumerate(scored))
        n = 3 + len(scored)  # the scalars follow the tensors
        scale = a[n + 2] if expr.has_scale else "None"
        return (
            f"fd.ops.sdpfa_fwd({a[0]}, {a[1]}, {a[2]}, {given}dropout_p={a[n]}, "
            f"is_causal={a[n + 1]}, scale={scale})"
        )
    if isinstance(expr, SdpaBwdOp):
        scale = a[10] if expr.has_scale else "None"
        return f"fd.ops.sdpfa_bwd({', '.join(a[:6] + a[8:10] + a[6:8])}, {scale})"
    return f"fd.ops.grouped_mm({a[0]}, {a[1]}, {a[2]})"


def fusion_to_python(fusion: Any, name: str | None = None, style: PrintStyle = KFUSE_STYLE) -> str:
    """The source of `def name(fd): ...` rebuilding `fusion` (name: the style's), and in
    kfuse's style the lines that call it."""
    ordered = _statement_order(fusion, style)
    named = _named_constants(fusion.exprs)
    names = {} if style.own_names else _nvfuser_names(fusion.inputs, fusion.exprs, named)
    statements = [(key, _define_input(v, names, style)) for key, v in _input_order(fusion, style)]
    # Named constants are C0, C1, ... in the order printed (their own names count every
    # constant ever made, so the rebuilt fusion's would differ), each defined just before
    # the first statement that uses it: the sort below is stable.
    defined: set[int] = set()
    for key, expr in ordered:
        for v in (*expr.inputs, *attribute_vals(expr)):
            if id(v) in named and id(v) not in defined:
                defined.add(id(v))
                if style.own_names:
                    names[id(v)] = f"C{len(defined) - 1}"
                value = style.number(cast(Scalar, v).value)
                statements.append(
                    (key, f"{names[id(v)]} = fd.define_scalar({value}, dtype={v.dtype!r})")
                )
        outs = ", ".join(names.get(id(v), v.name) for v in expr.outputs)
        statements.append((key, f"{outs} = {_call(expr, names, style)}"))
    statements.sort(key=lambda s: s[0])
    function = name or style.function
    lines = [f"def {function}(fd : FusionDefinition) -> None :"]
    lines += [f"    {text}" for _, text in statements]
    lines += _output_lines(fusion, names, style)
    if style.call_lines:
        lines += ["", "with FusionDefinition() as fd:", f"    {function}(fd)"]
    lines.append("")
    return "\n".join(lines)


def _input_order(fusion: Any, style: PrintStyle) -> list[tuple[int, Val]]:
    """The inputs with their sort keys: kfuse prints each where it was defined, nvFuser
    all of them first."""
    if not style.exprs_order:
        return [(v.serial, v) for v in fusion.inputs]
    return [(-1, v) for v in fusion.inputs]


def _statement_order(fusion: Any, style: PrintStyle) -> list[tuple[int, Expr]]:
    """The exprs with their sort keys: kfuse prints them in definition order; nvFuser in
    its Fusion::exprs() order, a depth-first walk from the outputs in turn that prints an
    expr after its inputs' (in operand order), leaving out what reaches no output."""
    if not style.exprs_order:
        return [(e.outputs[0].serial, e) for e in sorted(fusion.exprs, key=_first_serial)]
    order: list[Expr] = []
    seen: set[int] = set()
    for out in fusion.outputs:
        stack: list[tuple[Expr, int]] = []
        if out.definition is not None and id(out.definition) not in seen:
            seen.add(id(out.definition))
            stack.append((out.definition, 0))
        while stack:  # iterative post-order: a long chain of ops must not recurse
            expr, k = stack.pop()
            operands = (*expr.inputs, *attribute_vals(expr))
            if k < len(operands):
                stack.append((expr, k + 1))
                producer = operands[k].definition
                if producer is not None and id(producer) not in seen:
                    seen.add(id(producer))
                    stack.append((producer, 0))
            else:
                order.append(expr)
    return list(enumerate(order))


def _first_serial(expr: Expr) -> int:
    return expr.outputs[0].serial


def _nvfuser_names(inputs: Sequence[Val], exprs: Sequence[Expr], named: set[int]) -> dict[int, str]:
    """nvFuser's printed names: tv0, tv1, ... for tensors and c0, c1, ... for the scalars
    that are not literals, each numbered in the order the definition created them."""
    vals = {id(v): v for v in inputs}
    for expr in exprs:
        for v in (*expr.inputs, *attribute_vals(expr), *expr.outputs):
            if not (isinstance(v, Scalar) and v.is_constant) or id(v) in named:
                vals.setdefault(id(v), v)
    names: dict[int, str] = {}
    counts = {"tv": 0, "c": 0}
    for v in sorted(vals.values(), key=lambda v: v.serial):
        prefix = "tv" if isinstance(v, TensorView) else "c"
        names[id(v)] = f"{prefix}{counts[prefix]}"
        counts[prefix] += 1
    return names


def _output_lines(fusion: Any, names: Mapping[int, str], style: PrintStyle) -> list[str]:
    def name(v: Val) -> str:
        return names.get(id(v), v.name)

    lines = []
    aliases = dict(fusion.output_aliases)
    for k, v in enumerate(fusion.outputs):
        if k not in fusion.hidden_outputs:
            lines.append(f"    fd.add_output({name(v)})")
        if k in aliases:
            target = name(fusion.inputs[aliases[k]])
            # nvFuser prints the aliased input as a second positional argument.
            keyword = "alias_input=" if style.kfuse_calls else ""
            lines.append(f"    fd.add_output({name(v)}, {keyword}{target})")
    return lines
