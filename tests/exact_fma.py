"""The fused multiply-add a * b + c rounded once, computed exactly, for the tests of
kfuse.codegen.contraction.

NumPy has no fma. Computing a float32 one in float64 (the product is exact there: 48 bits)
and rounding that to float32 rounds twice: a sum just above a float32 midpoint by less than
float64's half ulp lands on the midpoint, which ties-to-even may then round the wrong way. So
each element is computed in rational arithmetic (Fraction), which is exact, and rounded once
to the dtype, ties to even, with its subnormals and its overflow to infinity. The same code
serves float64, so the reference shares nothing with the libm fma the emulator calls.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

# (bits after the point, smallest normal exponent, largest exponent) of each dtype.
_FORMATS = {np.dtype(np.float32): (23, -126, 127), np.dtype(np.float64): (52, -1022, 1023)}


def _rounded(q: Fraction, dtype: np.dtype) -> float:
    """q rounded to the nearest value of `dtype`, ties to even (q nonzero)."""
    bits, min_exp, max_exp = _FORMATS[dtype]
    sign = -1.0 if q < 0 else 1.0
    q = abs(q)
    exp = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** exp > q:
        exp -= 1
    ulp = Fraction(2) ** (max(exp, min_exp) - bits)  # subnormals share the smallest ulp
    scaled = q / ulp
    whole, rest = divmod(scaled.numerator, scaled.denominator)
    half = Fraction(rest, scaled.denominator) - Fraction(1, 2)
    if half > 0 or (half == 0 and whole % 2 == 1):
        whole += 1
    value = whole * ulp
    if value >= Fraction(2) ** (max_exp + 1):
        return sign * math.inf
    return sign * float(value)  # exact: value is a float of `dtype`


def _one(a: float, b: float, c: float, dtype: np.dtype) -> float:
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact != 0:
        return _rounded(exact, dtype)
    # An exact zero: -0 only where both terms are zeros of negative sign (IEEE 754's sum).
    product_negative = math.copysign(1.0, a) * math.copysign(1.0, b) < 0
    both_negative = product_negative and c == 0 and math.copysign(1.0, c) < 0
    return -0.0 if both_negative else 0.0


def exact_fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """a * b + c rounded once to the arrays' dtype, element by element (finite inputs)."""
    dtype = np.result_type(a, b, c)
    a, b, c = np.broadcast_arrays(a, b, c)
    assert np.isfinite(a).all() and np.isfinite(b).all() and np.isfinite(c).all()
    flat = [_one(float(x), float(y), float(z), dtype) for x, y, z in zip(a.flat, b.flat, c.flat)]
    return np.array(flat, dtype=np.float64).astype(dtype).reshape(a.shape)
