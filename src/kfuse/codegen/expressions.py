"""Pointwise ops as C++ expression templates, and the per-element body built from them.

The templates are the op table's (kfuse.ir.ops: OpInfo.template, OpInfo.cuda_fast). Operands
arrive in the op's compute dtype (the frontend inserts the casts, see kfuse.ir.ops), so the
only type work left is that Half/BFloat16 values are storage types: they are widened to float
for the math and rounded back to their dtype when stored in a variable, which is exactly
PyTorch's eager rounding.
"""

from __future__ import annotations

import math
import struct
from typing import Any, cast

from kfuse.dtypes import REAL_OF, REDUCED_FLOATS, DataType
from kfuse.ir.exprs import BinaryOp, CastOp, Expr, TernaryOp, UnaryOp
from kfuse.ir.ops import OPS
from kfuse.ir.values import Scalar


def compute_ctype(dtype: DataType) -> str:
    """The C++ type arithmetic on `dtype` values is done in (float for Half/BFloat16)."""
    return "float" if dtype in REDUCED_FLOATS else dtype.cuda_type


def literal(value: object, dtype: DataType) -> str:
    """An exact C++ literal for a constant of `dtype` (its compute type)."""
    if dtype is DataType.Bool:
        return "true" if value else "false"
    if dtype.is_complex:
        z = complex(cast(Any, value))
        part = REAL_OF[dtype]
        return f"kf::make_complex({literal(z.real, part)}, {literal(z.imag, part)})"
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
        row = OPS.get(getattr(expr, "op", ""))
        fast_form = row.cuda_fast if row is not None else None
        if fast_form is not None:
            return fast_form.format(*operands)
    if isinstance(expr, CastOp):
        src = expr.inputs[0].dtype
        dst = expr.dtype
        return f"kf::cast<{compute_ctype(dst)}>(({compute_ctype(src)}){operands[0]})"
    assert isinstance(expr, (UnaryOp, BinaryOp, TernaryOp))
    power = _small_power(expr, operands)
    if power is not None:
        return power
    # The operand type decides the template (for where: the values, not the condition).
    row = OPS[expr.op]
    operand_dtype = expr.inputs[1 if row.has_condition else 0].dtype
    if operand_dtype.is_complex:
        kind = "complex"
    elif operand_dtype is DataType.Bool:
        kind = "bool"
    elif operand_dtype.is_integral:
        kind = "int"
    else:
        kind = "float"
    template = row.template(kind)
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
