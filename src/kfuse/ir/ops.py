"""The table of pointwise op names, shared by the frontend, the reference and the code generator.

Each entry: name -> OpInfo(arity, category, result, accepts_bool, accepts_float).

* category: 'float_math' (transcendental; integer and bool operands are first cast to Float),
  'arith' (computed in the promoted dtype), 'compare' (Bool result, operands in the promoted
  dtype), 'logical' (operands cast to Bool, Bool result), 'bitwise' (Bool or integer only).
* result: 'same' (the promoted operand dtype), 'float' (promoted, then Float if not floating:
  true division), 'bool'. One exception: div of two integer scalars is nvFuser's Int
  division, an integer rounded toward zero (kfuse.ir.builder.is_integer_scalar_division);
  fd.ops.truediv and Python's `/` divide those as Floats.

The frontend inserts casts so that every operand of a UnaryOp/BinaryOp/TernaryOp has the op's
*compute dtype* (for where: the condition is Bool and the two values share the compute dtype);
the output dtype is the compute dtype, except for 'bool' results. Scalar constants are created
with the compute dtype, symbolic scalars get a CastOp. So consumers never promote.

Semantics that both the reference and the code generator must follow:
  round: half to even (rint); remainder: result has the sign of the divisor (Python %);
  fmod: sign of the dividend (C fmod); maximum/minimum and max/min reductions propagate NaN;
  gelu: exact erf form; gelu_tanh: tanh approximation; sign(0) = 0; bitwise_not on Bool is
  logical not; float -> integer casts truncate; float -> Bool is x != 0.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OpInfo:
    """One row of the op table."""

    name: str
    arity: int
    category: str  # 'float_math' | 'arith' | 'compare' | 'logical' | 'bitwise'
    result: str  # 'same' | 'float' | 'bool'
    accepts_bool: bool = True
    accepts_float: bool = True


def _table() -> dict[str, OpInfo]:
    rows: list[OpInfo] = []
    for name in (
        "exp exp2 expm1 log log2 log10 log1p sqrt rsqrt reciprocal sin cos tan asin "
        "acos atan sinh cosh tanh asinh acosh atanh erf erfc sigmoid silu gelu "
        "gelu_tanh"
    ).split():
        rows.append(OpInfo(name, 1, "float_math", "same"))
    rows.append(OpInfo("abs", 1, "arith", "same", accepts_bool=False))
    rows.append(OpInfo("neg", 1, "arith", "same", accepts_bool=False))
    rows.append(OpInfo("relu", 1, "arith", "same", accepts_bool=False))
    for name in ("floor", "ceil", "round", "trunc"):
        rows.append(OpInfo(name, 1, "arith", "same", accepts_bool=False))
    rows.append(OpInfo("sign", 1, "arith", "same"))
    for name in ("isnan", "isinf", "isfinite"):
        rows.append(OpInfo(name, 1, "compare", "bool"))
    rows.append(OpInfo("logical_not", 1, "logical", "bool"))
    rows.append(OpInfo("bitwise_not", 1, "bitwise", "same", accepts_float=False))

    for name in ("add", "mul", "maximum", "minimum"):
        rows.append(OpInfo(name, 2, "arith", "same"))
    rows.append(OpInfo("sub", 2, "arith", "same", accepts_bool=False))
    rows.append(OpInfo("div", 2, "arith", "float"))
    for name in ("fmod", "remainder", "pow"):
        rows.append(OpInfo(name, 2, "arith", "same", accepts_bool=False))
    rows.append(OpInfo("atan2", 2, "float_math", "same"))
    for name in ("eq", "ne", "lt", "le", "gt", "ge"):
        rows.append(OpInfo(name, 2, "compare", "bool"))
    for name in ("logical_and", "logical_or"):
        rows.append(OpInfo(name, 2, "logical", "bool"))
    for name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
        rows.append(OpInfo(name, 2, "bitwise", "same", accepts_float=False))

    rows.append(OpInfo("where", 3, "arith", "same"))
    rows.append(OpInfo("clamp", 3, "arith", "same", accepts_bool=False))
    rows.append(OpInfo("lerp", 3, "float_math", "same"))
    return {r.name: r for r in rows}


OPS: dict[str, OpInfo] = _table()
"""Every pointwise op kfuse knows, by name."""

UNARY_OPS = tuple(n for n, r in OPS.items() if r.arity == 1)
BINARY_OPS = tuple(n for n, r in OPS.items() if r.arity == 2)
TERNARY_OPS = tuple(n for n, r in OPS.items() if r.arity == 3)
REDUCTION_OPS = ("sum", "prod", "max", "min")
"""Ops a ReductionOp may carry."""

# Aliases accepted by fd.ops and mapped onto table names (truediv is its own method).
ALIASES = {"truediv": "div", "gelu_none": "gelu"}
