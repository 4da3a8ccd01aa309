"""The rounding facts the reference's condition tracking shares (kfuse.reference.conditions,
kfuse.reference.order_marks): each floating dtype's unit roundoff, the range of the
precision a kernel computes in, where a cast to a narrower dtype overflows, and which sums a
kernel may compute as one fused multiply-add."""

from __future__ import annotations

from kfuse import switches
from kfuse.dtypes import DataType
from kfuse.ir.exprs import BinaryOp, Expr
from kfuse.ir.values import TensorView

EPSILON: dict[DataType, float] = {
    DataType.Double: 2.0**-52,
    DataType.Float: 2.0**-23,
    DataType.Half: 2.0**-10,
    DataType.BFloat16: 2.0**-7,
    DataType.Float8_e4m3fn: 2.0**-3,
    DataType.Float8_e5m2: 2.0**-2,
}
"""Each floating dtype's unit roundoff doubled (its spacing at 1): a value that a sum of n
terms rounded is within n of these times its terms' magnitudes of the exact result."""

SUM_ROUNDING = 4.0
"""A sum's allowance from its terms' magnitudes (kfuse.testing.assert_close's `magnitude`),
in units of the compute precision's epsilon times sqrt(terms): float32's own bound for a sum
of n terms is (n - 1) / 2 epsilon times the sum of |terms|, plus the terms' own rounding (an
ulp or two each); this covers both up to about 60 terms and grows like a random walk beyond.
The condition tracking (kfuse.reference.conditions, order_marks) takes a value's rounding
bound as this many times epsilon x terms x magnitude, the same allowance."""

OVERFLOW_AT: dict[DataType, float] = {
    DataType.Float: 2.0**128 - 2.0**103,
    DataType.Half: 65520.0,
    DataType.BFloat16: 2.0**128 - 2.0**119,
    DataType.Float8_e5m2: 61440.0,
    DataType.Float8_e4m3fn: 464.0,
}
"""The magnitude from which a value rounds past each narrow dtype's largest finite value when
cast to it (the largest plus half its last step: 65504 + 16 for Half), to an infinity, or to
NaN for Float8_e4m3fn, which has none."""


def largest_finite(expr: Expr) -> float:
    """The largest finite value of the precision `expr`'s (first) output is computed in:
    float64's for Double, float32's for the others (half and bfloat16 compute in float32)."""
    wide = expr.outputs[0].dtype is DataType.Double  # type: ignore[union-attr]
    return 1.7976931348623157e308 if wide else 3.4028234663852886e38


def may_fuse(expr: Expr) -> bool:
    """Whether `expr` is a float or double sum or difference with a product operand: the
    sums the kernels compute as one fma where nothing else reads the product (a superset of
    kfuse.codegen.contraction's, which this layer does not see), while switches.FMA_CONTRACT
    is on."""
    if not (switches.FMA_CONTRACT and isinstance(expr, BinaryOp) and expr.op in ("add", "sub")):
        return False
    if expr.outputs[0].dtype not in (DataType.Float, DataType.Double):
        return False
    return bool(fused_products(expr))


def fused_products(expr: Expr) -> list[TensorView]:
    """The operands of sum or difference `expr` that are products (mul's outputs)."""
    return [
        v
        for v in expr.inputs
        if isinstance(v, TensorView)
        and isinstance(v.definition, BinaryOp)
        and v.definition.op == "mul"
    ]
