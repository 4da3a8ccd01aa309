"""The per-element body of a kernel: straight-line C++ computing outputs from loaded operands.

Every kernel kind (pointwise, reduction prologue/epilogue, persistent) computes its elements
with the same body emitter, so an op behaves identically whatever scheduler runs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from kfuse.codegen.domain import Use, View
from kfuse.codegen.expressions import compute_ctype, expression, scalar_operand
from kfuse.dtypes import REDUCED_FLOATS, DataType
from kfuse.ir.exprs import BinaryOp, CastOp, TernaryOp, UnaryOp
from kfuse.ir.values import Scalar, TensorView, Val


def from_storage(expr: str, dtype: DataType) -> str:
    """A storage-typed value (as loaded from memory) in its compute type."""
    return f"kf::to_float({expr})" if dtype in REDUCED_FLOATS else expr


def to_storage(expr: str, dtype: DataType, exact: bool = False) -> str:
    """A compute-typed value converted to `dtype`'s storage type (exact for rounded values).

    exact: the value is known to be representable in bfloat16 (Body.exact), so narrowing is
    taking its top half; that saves a conversion instruction per element, and conversions run
    at a quarter of the arithmetic rate, where a bf16 kernel's compute budget is tightest."""
    if dtype is DataType.BFloat16 and exact:
        return f"kf::bfloat16_from_exact({expr})"
    return f"kf::cast<{dtype.cuda_type}>({expr})" if dtype in REDUCED_FLOATS else expr


def round_to_dtype(expr: str, dtype: DataType) -> str:
    """Round a compute-typed result to `dtype`'s precision, keeping the compute type."""
    if dtype in REDUCED_FLOATS:
        return f"kf::to_float(kf::cast<{dtype.cuda_type}>({expr}))"
    return expr


@dataclass
class Body:
    """Lines of C++ plus the variable holding each Use's compute-typed value."""

    lines: list[str]
    names: dict[Use, str]
    # Names of BFloat16 values computed here: rounded by round_to_dtype, so exact in bf16.
    exact: set[str]

    def store(self, use: Use) -> str:
        """The storage-typed expression of `use`'s value, for an output store."""
        name = self.names[use]
        return to_storage(name, use.val.dtype, exact=name in self.exact)


def emit_body(
    uses: list[Use],
    leaves: dict[Use, str],
    scalar_params: dict[Scalar, str],
    prefix: str = "v",
    fast: frozenset[Val] = frozenset(),
) -> Body:
    """Emit `const T name = ...;` for every non-leaf use, in order.

    leaves: compute-typed C++ expressions for the uses that are read, not computed (loaded
    inputs, reduction results). scalar_params: kernel parameter names of non-constant Scalars.
    fast: vals whose ops may take their approximate forms (kfuse.codegen.precision).
    """
    names: dict[Use, str] = dict(leaves)
    lines: list[str] = []
    exact: set[str] = set()
    for k, use in enumerate(uses):
        if use in names:
            continue
        val = use.val
        expr = val.definition
        assert expr is not None, f"{val.name} is neither computed nor a leaf"
        if isinstance(expr, (UnaryOp, BinaryOp, TernaryOp, CastOp)):
            operands = [
                _operand(inp, use, expr, i, names, scalar_params)
                for i, inp in enumerate(expr.inputs)
            ]
            value = round_to_dtype(expression(expr, operands, val in fast), val.dtype)
            if val.dtype is DataType.BFloat16:
                exact.add(f"{prefix}{k}")
        else:
            # Broadcast, expand, squeeze, permute: the value is the input's at the mapped view.
            from kfuse.codegen.domain import operand_views

            in_use = Use(expr.inputs[0], cast(View, operand_views(expr, use.view)[0]))
            value = names[in_use]
        name = f"{prefix}{k}"
        lines.append(f"const {compute_ctype(val.dtype)} {name} = {value};")
        names[use] = name
    return Body(lines, names, exact)


def _operand(
    inp: Val,
    use: Use,
    expr: object,
    index: int,
    names: dict[Use, str],
    scalar_params: dict[Scalar, str],
) -> str:
    if isinstance(inp, Scalar):
        return scalar_operand(inp, scalar_params.get(inp))
    assert isinstance(inp, TensorView)
    view = tuple(None if ax.is_broadcast else r for ax, r in zip(inp.axes, use.view))
    return names[Use(inp, view)]
