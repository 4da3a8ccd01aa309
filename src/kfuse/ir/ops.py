"""The table of pointwise ops: one row (kfuse.ir.op_info.OpInfo) per op, read by the
frontend, the builder, scalar folding, the reference, the code generator, the printer, the
docs' op list and the test strategies. The rows are in kfuse.ir.ops_unary,
kfuse.ir.ops_binary and kfuse.ir.ops_special; docs/guides/add-an-op.md says how to add one.

* category: 'float_math' (transcendental; integer and bool operands are first cast to Float),
  'arith' (computed in the promoted dtype), 'compare' (Bool result, operands in the promoted
  dtype), 'logical' (operands cast to Bool, Bool result), 'bitwise' (Bool or integer only).
* result: 'same' (the promoted operand dtype), 'float' (promoted, then Float if not floating:
  true division), 'bool', 'complex' (the complex type of Float or Double parts: complex).
  One exception: div of operands that promote to an integer dtype is nvFuser's integer
  division, an integer rounded toward zero (kfuse.ir.builder.is_integer_division; a zero
  divisor gives 0 in a kernel, an InputError in a scalar computed on the host);
  fd.ops.truediv and Python's `/` divide those as Floats. Complex operands
  (kfuse.ir.ops_complex) are taken by the rows whose on_complex says so: "complex" keeps
  the complex dtype, "real" gives its parts' dtype (abs, real, imag).

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

from kfuse.ir.op_info import OpInfo
from kfuse.ir.ops_binary import BINARY_ROWS, TERNARY_ROWS
from kfuse.ir.ops_complex import COMPLEX_ROWS, with_complex_forms
from kfuse.ir.ops_special import SPECIAL_BINARY_ROWS, SPECIAL_UNARY_ROWS
from kfuse.ir.ops_unary import UNARY_ROWS

__all__ = ["OPS", "OpInfo", "UNARY_OPS", "BINARY_OPS", "TERNARY_OPS", "REDUCTION_OPS", "fd_call"]

OPS: dict[str, OpInfo] = {
    row.name: with_complex_forms(row)
    for row in (
        *UNARY_ROWS,
        *SPECIAL_UNARY_ROWS,
        *BINARY_ROWS,
        *SPECIAL_BINARY_ROWS,
        *TERNARY_ROWS,
        *COMPLEX_ROWS,
    )
}
"""Every pointwise op kfuse knows, by name."""

UNARY_OPS = tuple(n for n, r in OPS.items() if r.arity == 1)
BINARY_OPS = tuple(n for n, r in OPS.items() if r.arity == 2)
TERNARY_OPS = tuple(n for n, r in OPS.items() if r.arity == 3)
REDUCTION_OPS = ("sum", "prod", "max", "min")
"""Ops a ReductionOp may carry."""


def fd_call(name: str) -> tuple[str, dict[str, str]]:
    """The fd.ops method and keyword arguments that build op `name` (gelu_tanh:
    ("gelu", {"approximate": "tanh"})): the printer writes it, the strategies call it."""
    row = OPS[name]
    if row.method_name is not None:
        return row.method_name, {}
    for other in OPS.values():
        for key, choices in other.keywords.items():
            for value, op in choices.items():
                if op == name and other.method_name is not None:
                    return other.method_name, {key: value}
    raise AssertionError(f"no fd.ops method builds {name}")  # every row is reachable


def _check_reachable() -> None:
    for name in OPS:
        fd_call(name)


_check_reachable()
