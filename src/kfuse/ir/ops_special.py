"""The op table's rows (kfuse.ir.ops) of nvFuser's less common pointwise ops: the inverse error
functions, lgamma, nextafter, gcd and the shifts.

Their CUDA forms are the runtime's optional special part (kf_special.cuh), which only the
kernels that call one of them include. The shifts define every count as torch's CUDA kernels
do (nvFuser emits C's shift, whose out-of-range counts that fit 32 bits the GPU's shift
instructions clamp to the same results): a left shift by a count outside [0, bits) gives 0,
an arithmetic right shift the sign; logical_right_shift gives what nvFuser's composite of
them gives.

Reference functions take the reference's array backend first (see kfuse.ir.ops_unary).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from kfuse.dtypes import DataType
from kfuse.ir.op_info import OpInfo

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_STANDARD_NORMAL = statistics.NormalDist()


# ---- the inverse error functions on Python floats (float64) ----
def _erfc_root_tiny(t: float) -> float:
    """x with erfc(x) = t for t below NormalDist's range (double subnormals, x > 26): the
    asymptotic series erfc(x) = e^-x^2 / (x sqrt(pi)) (1 - 1/(2x^2) + 3/(4x^4) - 15/(8x^6)),
    whose next term is below 1e-10 there, solved by fixed-point steps."""
    x = math.sqrt(-math.log(t))
    for _ in range(30):
        u = 1.0 / (2.0 * x * x)
        series = 1.0 - u + 3.0 * u * u - 15.0 * u**3
        x = math.sqrt(-math.log(t) - math.log(x * math.sqrt(math.pi)) + math.log(series))
    return x


def erfcinv(t: float) -> float:
    """The x with erfc(x) = t, for t in [0, 2] (NaN outside, +-inf at the ends)."""
    t = float(t)
    if math.isnan(t) or not 0.0 <= t <= 2.0:
        return math.nan
    if t == 0.0:
        return math.inf
    if t == 2.0:
        return -math.inf
    if 0.5 < t < 1.5:
        return erfinv(1.0 - t)  # 1 - t is exact for t in [0.5, 2], and within (-0.5, 0.5)
    tail = t if t < 1.0 else 2.0 - t  # 2 - t is exact for t in [1, 4]
    if tail / 2.0 == 0.0:
        x = _erfc_root_tiny(tail)
    else:
        # The standard normal's quantile (Wichura's AS241, accurate to about 1e-16) at t / 2,
        # then one Newton step on erfc itself.
        x = -_STANDARD_NORMAL.inv_cdf(tail / 2.0) / math.sqrt(2.0)
        slope = _TWO_OVER_SQRT_PI * math.exp(-x * x)
        if slope > 0.0:
            x += (math.erfc(x) - tail) / slope
    return x if t < 1.0 else -x


def erfinv(y: float) -> float:
    """The x with erf(x) = y, for y in [-1, 1] (NaN outside, +-inf at the ends)."""
    y = float(y)
    if math.isnan(y) or not -1.0 <= y <= 1.0:
        return math.nan
    if abs(y) == 1.0:
        return math.copysign(math.inf, y)
    if y == 0.0:
        return y  # keeps -0.0
    if abs(y) >= 0.5:
        return math.copysign(erfcinv(1.0 - abs(y)), y)  # 1 - |y| is exact here
    # Near 0, Newton's steps on erf from the quantile's value (1 + y) / 2 rounded loses y's
    # low bits, which the steps restore).
    x = _STANDARD_NORMAL.inv_cdf((1.0 + y) / 2.0) / math.sqrt(2.0)
    if x == 0.0:
        x = y / _TWO_OVER_SQRT_PI
    for _ in range(3):
        x -= (math.erf(x) - y) / (_TWO_OVER_SQRT_PI * math.exp(-x * x))
    return x


def lgamma(a: float) -> float:
    """log |gamma(a)|: +inf at the poles (0 and the negative integers) and where it exceeds
    the largest double (a above about 2.6e305), as C's lgamma; Python's raises there."""
    a = float(a)
    try:
        return math.lgamma(a)
    except (ValueError, OverflowError):
        return math.inf


def _per_element(fn: Any) -> Any:
    """A reference function applying the Python function fn to each element."""
    return lambda be, a: be.per_element(fn, a)


# ---- nextafter ----
def _nextafter_of(dtype: DataType, a: Any, b: Any) -> float:
    """The next value after a toward b in `dtype` (Float or Double)."""
    if dtype is DataType.Float:
        import numpy as np

        return float(np.nextafter(np.float32(a), np.float32(b)))
    return math.nextafter(float(a), float(b))


# ---- the integer ops, on Python ints of a width, and on arrays ----
def _wrap(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def _bits(dtype: DataType) -> int:
    return 8 * dtype.itemsize


def _gcd_of(dtype: DataType, a: int, b: int) -> int:
    # torch's loop on the magnitudes negated with wrapping, and C's remainder (toward zero).
    bits = _bits(dtype)
    a, b = _wrap(abs(a), bits), _wrap(abs(b), bits)
    while b != 0:
        remainder = abs(a) % abs(b)
        a, b = b, -remainder if a < 0 else remainder
    return a


def _shift_left_of(dtype: DataType, a: int, s: int) -> int:
    bits = _bits(dtype)
    return 0 if not 0 <= s < bits else _wrap(a << s, bits)


def _shift_right_of(dtype: DataType, a: int, s: int) -> int:
    bits = _bits(dtype)
    return (-1 if a < 0 else 0) if not 0 <= s < bits else a >> s


def _logical_shift_right_of(dtype: DataType, a: int, s: int) -> int:
    bits = _bits(dtype)
    if s == bits:
        return 0
    if not 0 <= s < bits:
        return -1 if a < 0 else 0
    return _wrap((a & ((1 << bits) - 1)) >> s, bits)


def _array_bits(a: Any) -> int:
    return 8 * (a.element_size() if hasattr(a, "element_size") else a.dtype.itemsize)


def _gcd_array(be: Any, a: Any, b: Any) -> Any:
    xp = be.xp
    # Broadcast first: the loop may not run (all of b 0, or no elements), and the result has
    # the operands' common shape all the same.
    a, b = a + b * 0, b + a * 0
    a, b = abs(a), abs(b)  # the frameworks' abs wraps the most negative value, as C's
    zero = a * 0
    while bool((b != 0).any()):
        divisor = xp.where(b != 0, b, zero + 1)
        a, b = xp.where(b != 0, b, a), xp.where(b != 0, be.fn("fmod")(a, divisor), zero)
    return a


def _in_range(s: Any, bits: int) -> Any:
    return (s >= 0) & (s < bits)


def _shift_left_array(be: Any, a: Any, s: Any) -> Any:
    bits = _array_bits(a)
    ok = _in_range(s, bits)
    return be.where(ok, a << be.where(ok, s, s * 0), a * 0)


def _sign_fill(be: Any, a: Any) -> Any:
    return be.where(a < 0, a * 0 - 1, a * 0)


def _shift_right_array(be: Any, a: Any, s: Any) -> Any:
    bits = _array_bits(a)
    ok = _in_range(s, bits)
    return be.where(ok, a >> be.where(ok, s, s * 0), _sign_fill(be, a))


def _logical_shift_right_array(be: Any, a: Any, s: Any) -> Any:
    bits = _array_bits(a)
    ok = _in_range(s, bits)
    count = be.where(ok, s, s * 0)
    # The bits an arithmetic shift copies from the sign, cleared: ~(-1 << (bits - count)),
    # written as two shifts that stay in [0, bits).
    ones = a * 0 - 1
    kept = ~((ones << (bits - 1 - count)) << 1)
    logical = (a >> count) & kept
    out_of_range = be.where(s == bits, a * 0, _sign_fill(be, a))
    return be.where(ok, logical, out_of_range)


def _integer_op(name: str, doc: str, of_dtype: Any, reference: Any) -> OpInfo:
    return OpInfo(
        name,
        2,
        "bitwise",
        "same",
        doc,
        lambda a, b: of_dtype(DataType.Int, a, b),
        accepts_bool=False,
        accepts_float=False,
        scalar_of_dtype=of_dtype,
        operands=("a", "shift") if "shift" in name else ("a", "b"),
        cuda=None,
        cuda_int=f"kf::{_FUNCTIONS[name]}({{0}}, {{1}})",
        reference=reference,
        precision="exact",
        bound="max",
        draw="integer",
    )


# The kf_special.cuh function of each integer op.
_FUNCTIONS = {
    "gcd": "gcd",
    "bitwise_left_shift": "shift_left",
    "bitwise_right_shift": "shift_right",
    "logical_right_shift": "shift_right_logical",
}


def _unary_special(name: str, doc: str, fn: Any, **extra: Any) -> OpInfo:
    return OpInfo(name, 1, "float_math", "same", doc, fn, reference=_per_element(fn), **extra)


SPECIAL_UNARY_ROWS: list[OpInfo] = [
    _unary_special(
        "erfinv",
        "inverse error function: the x with erf(x) = x's value, in [-1, 1]",
        erfinv,
        domain="unit",
        bound="log",
    ),
    _unary_special(
        "erfcinv",
        "inverse complementary error function: the x with erfc(x) = x's value, in [0, 2]",
        erfcinv,
        domain="zero_two",
        bound="log",
    ),
    _unary_special(
        "lgamma",
        "log |gamma(x)|, +inf at 0 and the negative integers",
        lgamma,
        bound="log",
    ),
]
"""The unary rows, in the order fd.ops lists them."""

SPECIAL_BINARY_ROWS: list[OpInfo] = [
    OpInfo(
        "nextafter",
        2,
        "arith",
        "same",
        "the next value after a toward b in their dtype (Float or Double only)",
        lambda a, b: math.nextafter(float(a), float(b)),
        accepts_bool=False,
        full_precision_only=True,
        scalar_of_dtype=_nextafter_of,
        cuda="kf::nextafter({0}, {1})",
        bound="max",
        draw="floating",
    ),
    _integer_op(
        "gcd",
        "greatest common divisor of abs(a) and abs(b) (integers only; gcd(0, 0) = 0)",
        _gcd_of,
        _gcd_array,
    ),
    _integer_op(
        "bitwise_left_shift",
        "a << shift (integers only); 0 for a shift outside [0, bits)",
        _shift_left_of,
        _shift_left_array,
    ),
    _integer_op(
        "bitwise_right_shift",
        "a >> shift, arithmetic (integers only); the sign for a shift outside [0, bits)",
        _shift_right_of,
        _shift_right_array,
    ),
    _integer_op(
        "logical_right_shift",
        "a >> shift with zeros shifted in (integers only); 0 for a shift of bits, the sign "
        "for one below 0 or above bits (as nvFuser's composite)",
        _logical_shift_right_of,
        _logical_shift_right_array,
    ),
]
"""The binary rows, in the order fd.ops lists them."""
