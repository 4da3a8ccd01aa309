"""What rounding does to a unary function's value, beyond its slope: the poles an operand's
rounding bound may hold between its ends, and the functions whose accuracy near their zeros
is a few ulps of a size rather than of their value (kfuse.reference.conditions uses both).
"""

from __future__ import annotations

import math
from typing import Any

ABSOLUTE_NEAR_ZEROS: dict[str, float] = {"lgamma": 2.0, "sin": 1.0, "cos": 1.0, "tan": 1.0}
"""Functions accurate to a few ulps of this size, not of their value, near their zeros (the
kernels' and float64's implementations alike): a value one computed is taken as rounded by a
few ulps of |value| + this. A GPU campaign (478c30a) met lgamma(lgamma(u)) in double with u
near lgamma's zero at 1 or 2: the kernel's inner lgamma of 2.1e-7 and float64's differed by
8.2e-16, 3.7 ulps of 1, and the outer lgamma's slope of 5e6 there made it 2.5e-10 of the
result."""

OPERAND_SCALED_ERRORS: dict[str, float] = {"gelu": 1.0, "gelu_tanh": 1.0}
"""Functions x * f(x) whose f is a sum that cancels (gelu's 0.5 (1 + erf), gelu_tanh's 0.5
(1 + tanh)): for negative x the kernels' f (and torch's) is 0 or a few ulps of 1 where
float64's is tiny, so their value is accurate to a few ulps of this times |x|, not of
itself. An emulator campaign met lgamma(gelu(-5.548)): float32's gelu is -0.0 (lgamma inf),
float64's -8.0e-8 (lgamma 16.3)."""


def holds_pole(be: Any, op: str, lo: Any, hi: Any) -> Any:
    """Where [lo, hi] (float64 arrays of the reference backend `be`) holds a pole of unary
    `op`, which the values at its ends and middle need not show (lgamma is finite at
    -1e6 + 0.3 and at +- 0.5 around it, with a pole at -1e6): lgamma's at the integers <= 0,
    tan's at the odd multiples of pi / 2, reciprocal's at 0; None for other ops. A GPU
    campaign (478c30a) met lgamma of x - x * sum(x * x) over 682,885 x, whose float32 sum
    rounds by up to 2e5 and whose kernel value landed on an integer: lgamma inf, float64's
    -1.7e7."""
    ceil = be.fn("ceil")
    if op == "lgamma":
        first = ceil(lo)
        return (first <= hi) & (first <= 0)
    if op == "tan":
        k = ceil(lo / math.pi - 0.5)
        return (k + 0.5) * math.pi <= hi
    if op == "reciprocal":
        return (lo <= 0) & (hi >= 0)
    return None
