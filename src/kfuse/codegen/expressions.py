"""Pointwise ops as C++ expression templates, and the per-element body built from them.

The table is data: a new op is one line here plus its reference implementation. Operands
arrive in the op's compute dtype (the frontend inserts the casts, see kfuse.ir.ops), so the
only type work left is that Half/BFloat16 values are storage types: they are widened to float
for the math and rounded back to their dtype when stored in a variable, which is exactly
PyTorch's eager rounding.
"""

from __future__ import annotations

import math
import struct
from typing import Any, cast

from kfuse.dtypes import REDUCED_FLOATS, DataType
from kfuse.ir.exprs import BinaryOp, CastOp, Expr, TernaryOp, UnaryOp
from kfuse.ir.values import Scalar

# Templates keyed by op name; {0} {1} {2} are operands already in the compute C++ type.
_FLOAT_TEMPLATES: dict[str, str] = {
    **{
        name: f"kf::{name}({{0}})"
        for name in (
            "exp exp2 expm1 log log2 log10 log1p sqrt rsqrt reciprocal sin cos tan asin acos atan "
            "sinh cosh tanh asinh acosh atanh erf erfc sigmoid silu gelu_tanh floor ceil round "
            "trunc sign abs neg relu isnan isinf isfinite"
        ).split()
    },
    "gelu": "kf::gelu_erf({0})",
    "add": "({0} + {1})",
    "sub": "({0} - {1})",
    "mul": "({0} * {1})",
    "div": "({0} / {1})",
    "maximum": "kf::maximum({0}, {1})",
    "minimum": "kf::minimum({0}, {1})",
    "fmod": "kf::fmod({0}, {1})",
    "remainder": "kf::remainder({0}, {1})",
    "pow": "kf::pow({0}, {1})",
    "atan2": "kf::atan2({0}, {1})",
    "eq": "({0} == {1})",
    "ne": "({0} != {1})",
    "lt": "({0} < {1})",
    "le": "({0} <= {1})",
    "gt": "({0} > {1})",
    "ge": "({0} >= {1})",
    "logical_not": "(!{0})",
    "logical_and": "({0} && {1})",
    "logical_or": "({0} || {1})",
    "where": "({0} ? {1} : {2})",
    "clamp": "kf::clamp({0}, {1}, {2})",
    "lerp": "kf::lerp({0}, {1}, {2})",
}

# Integer operands: rounding ops are the identity, bitwise ops are C operators.
_INT_TEMPLATES: dict[str, str] = {
    **_FLOAT_TEMPLATES,
    "floor": "{0}",
    "ceil": "{0}",
    "round": "{0}",
    "trunc": "{0}",
    # Wrapping, as torch's integers do (kf_math.cuh: a signed overflow is undefined in C++).
    "add": "kf::add({0}, {1})",
    "sub": "kf::sub({0}, {1})",
    "mul": "kf::mul({0}, {1})",
    "relu": "kf::maximum({0}, ({T})0)",
    "pow": "kf::ipow({0}, {1})",
    "bitwise_not": "(~{0})",
    "bitwise_and": "({0} & {1})",
    "bitwise_or": "({0} | {1})",
    "bitwise_xor": "({0} ^ {1})",
    # A selection may be a min/max in disguise (where(a > b, a, b)): kf::where keeps it
    # apart from the next min/max, as kf::maximum does (kf_math.cuh, minmax_barrier).
    "where": "kf::where({0}, {1}, {2})",
}

# Bool operands: torch's bool arithmetic is logical.
_BOOL_TEMPLATES: dict[str, str] = {
    **_FLOAT_TEMPLATES,
    "add": "({0} || {1})",
    "mul": "({0} && {1})",
    "maximum": "({0} || {1})",
    "minimum": "({0} && {1})",
    "abs": "{0}",
    "sign": "{0}",
    "isnan": "false",
    "isinf": "false",
    "isfinite": "true",
    "bitwise_not": "(!{0})",
    "bitwise_and": "({0} && {1})",
    "bitwise_or": "({0} || {1})",
    "bitwise_xor": "({0} != {1})",
}


def compute_ctype(dtype: DataType) -> str:
    """The C++ type arithmetic on `dtype` values is done in (float for Half/BFloat16)."""
    return "float" if dtype in REDUCED_FLOATS else dtype.cuda_type


def literal(value: object, dtype: DataType) -> str:
    """An exact C++ literal for a constant of `dtype` (its compute type)."""
    if dtype is DataType.Bool:
        return "true" if value else "false"
    if dtype.is_integral:
        v = int(cast(Any, value))
        if dtype is DataType.Int:
            # -2^63 has no literal form; spell it as an expression.
            return f"({v + 1}LL - 1LL)" if v == -(2**63) else f"{v}LL"
        return f"{v}"
    x = float(cast(Any, value))
    ctype = compute_ctype(dtype)
    if math.isfinite(x):
        return f"(({ctype}){x!r})"
    bits = struct.unpack("<q", struct.pack("<d", x))[0]
    return f"(({ctype})__longlong_as_double({bits}LL))"


def expression(expr: Expr, operands: list[str], fast: bool = False) -> str:
    """The C++ expression computing `expr`'s output from operand expressions.

    `operands` are in the operands' compute types (see `compute_ctype`); the result is in the
    output's compute type. `fast`: the op may use its approximate form (kfuse.codegen.precision
    decides when that is safe).
    """
    if fast and compute_ctype(expr.inputs[0].dtype) == "float":
        if isinstance(expr, UnaryOp):
            return f"kf::{expr.op}_fast({operands[0]})"
        if isinstance(expr, BinaryOp) and expr.op == "div":
            return f"kf::div_fast({operands[0]}, {operands[1]})"
    if isinstance(expr, CastOp):
        src = expr.inputs[0].dtype
        dst = expr.dtype
        return f"kf::cast<{compute_ctype(dst)}>(({compute_ctype(src)}){operands[0]})"
    assert isinstance(expr, (UnaryOp, BinaryOp, TernaryOp))
    power = _small_power(expr, operands)
    if power is not None:
        return power
    # The operand type decides the template family (for where: the values, not the condition).
    operand_dtype = expr.inputs[1 if expr.op == "where" else 0].dtype
    if operand_dtype is DataType.Bool:
        table = _BOOL_TEMPLATES
    elif operand_dtype.is_integral:
        table = _INT_TEMPLATES
    else:
        table = _FLOAT_TEMPLATES
    template = table.get(expr.op)
    if template is None:
        raise KeyError(f"no CUDA template for op {expr.op!r} on {operand_dtype.value}")
    return template.format(*operands, T=compute_ctype(operand_dtype))


def _small_power(expr: Expr, operands: list[str]) -> str | None:
    """pow(x, 3) of a floating x as products within one expression: powf costs about 40
    instructions where a product costs one (the result is within powf's error bound). The
    products are written here, not by the canonical form (kfuse.ir.canonical_rules, which
    takes pow by 1, 2, -1 and 0.5), because there x * x would be a Val of x's dtype,
    rounded to it when that is Half or BFloat16."""
    if getattr(expr, "op", None) != "pow" or not expr.inputs[0].dtype.is_floating:
        return None
    exponent = expr.inputs[1]
    if not (isinstance(exponent, Scalar) and exponent.is_constant and exponent.value == 3):
        return None
    x = operands[0]
    return f"(({x} * {x}) * {x})"


def scalar_operand(val: Scalar, param_name: str | None) -> str:
    """How the body reads a scalar: its literal, or the kernel parameter holding it."""
    if val.is_constant:
        return literal(val.value, val.dtype)
    assert param_name is not None
    return f"(({compute_ctype(val.dtype)}){param_name})"
