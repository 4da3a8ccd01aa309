"""The binary and ternary rows of the op table (kfuse.ir.ops): one OpInfo each.

Reference functions take the reference's array backend first (see kfuse.ir.ops_unary).
"""

from __future__ import annotations

import math
import operator
from typing import Any

from kfuse.errors import InputError
from kfuse.ir.op_info import OpInfo, div, nan_max, nan_min


def _fmod(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int):
        return int(math.fmod(a, b)) if b else 0
    return math.fmod(a, b) if b else math.nan


def _remainder(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int):
        return a % b if b else 0
    if b == 0:
        return math.nan
    r = math.fmod(a, b)
    return r + b if r != 0 and (r < 0) != (b < 0) else r


def _pow(a: Any, b: Any) -> Any:
    """C's pow: a negative base to a fractional power is NaN (Python's ** is complex)."""
    if isinstance(a, int) and isinstance(b, int) and b >= 0:
        return a**b
    try:
        return math.pow(a, b)
    except OverflowError:
        return math.inf
    except ValueError:  # 0 to a negative power (a pole), or a negative base's root
        if a != 0:
            return math.nan
        odd = float(b).is_integer() and int(b) % 2 == 1
        return math.copysign(math.inf, a) if odd else math.inf


def _integer_div(a: int, b: int) -> int:
    """nvFuser's Int scalar division: C's `/`, the quotient rounded toward zero."""
    if b == 0:
        raise InputError(f"integer division of the scalar {a} by 0")
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient


def _div_array(be: Any, a: Any, b: Any) -> Any:
    """The reference's div: true division, of integer arrays the kernels' (kf::div_trunc):
    rounded toward zero, 0 for a zero divisor, a negation (wrapping) for -1."""
    if not _is_integer(a):
        return a / b
    xp = be.xp
    special = (b == 0) | (b == -1)
    safe = xp.where(special, xp.ones_like(b), b)
    floor = a // safe
    # Floor division rounds down: one more where the signs differ and it does not divide.
    inexact = (floor * safe != a) & ((a < 0) != (safe < 0))
    quotient = xp.where(inexact, floor + 1, floor)
    return xp.where(b == 0, xp.zeros_like(quotient), xp.where(b == -1, -a, quotient))


def _is_integer(a: Any) -> bool:
    dtype = a.dtype
    kind = getattr(dtype, "kind", None)  # NumPy and CuPy
    if kind is not None:
        return bool(kind in "iu")
    return not (dtype.is_floating_point or dtype.is_complex) and str(dtype) != "torch.bool"


def _pow_array(be: Any, a: Any, b: Any) -> Any:
    if be.name == "torch":
        return a**b
    # NumPy takes a ** b for a 0-d b of 0.5 as sqrt(a): -0.0 and -inf give -0.0 and NaN
    # where C's pow (the kernels', torch's) gives +0.0 and +inf. An exponent array of
    # a's shape, not a broadcast view of one value, always takes pow.
    a, b = be.xp.broadcast_arrays(a, b)
    return be.xp.power(a, be.xp.array(b, copy=True))


def _operator(fn: Any) -> Any:
    """A reference function applying a Python operator to the arrays."""
    return lambda be, a, b: fn(a, b)


def _part_by_part(fn: Any) -> Any:
    """A reference function for add and sub: Python's operator, and for torch's complex
    values each part on its own, as C (and kfuse's kf::complex, and NumPy) add them. torch's
    CPU complex subtraction gave nan+nanj for (nan-infj) - (-inf+0j) where the parts give
    nan-infj (a campaign's abs of it: inf, torch's nan)."""

    def apply(be: Any, a: Any, b: Any) -> Any:
        if be.name != "torch" or not any(_torch_complex(v) for v in (a, b)):
            return fn(a, b)
        import torch

        def parts(v: Any) -> tuple[Any, Any]:
            if isinstance(v, torch.Tensor) and v.is_complex():
                return v.real, v.imag
            if isinstance(v, complex):
                return v.real, v.imag
            return v, 0.0

        (ra, ia), (rb, ib) = parts(a), parts(b)
        like = next((v for v in (a, b) if isinstance(v, torch.Tensor) and v.is_complex()), None)
        if like is None:  # a real tensor and a Python complex: torch's own promotion
            return fn(a, b)
        real_dtype = torch.float32 if like.dtype == torch.complex64 else torch.float64
        real, imag = (
            torch.as_tensor(fn(x, y), device=like.device).to(real_dtype)
            for x, y in ((ra, rb), (ia, ib))
        )
        real, imag = torch.broadcast_tensors(real, imag)
        return torch.complex(real, imag)

    return apply


def _torch_complex(v: Any) -> bool:
    return isinstance(v, complex) or bool(getattr(v, "is_complex", lambda: False)())


_ARITH: list[OpInfo] = [
    OpInfo(
        "add",
        2,
        "arith",
        "same",
        "a + b (or for Bool)",
        operator.add,
        cuda="({0} + {1})",
        # Wrapping, as torch's integers do (kf_math.cuh: a signed overflow is undefined).
        cuda_int="kf::add({0}, {1})",
        cuda_bool="({0} || {1})",
        infix="+",
        reference=_part_by_part(operator.add),
        bound="sum",
    ),
    OpInfo(
        "mul",
        2,
        "arith",
        "same",
        "a * b (and for Bool)",
        operator.mul,
        cuda="({0} * {1})",
        cuda_int="kf::mul({0}, {1})",
        cuda_bool="({0} && {1})",
        infix="*",
        reference=_operator(operator.mul),
        bound="product",
    ),
    OpInfo(
        "maximum",
        2,
        "arith",
        "same",
        "the larger of a and b, NaN if either is",
        nan_max,
        cuda="kf::maximum({0}, {1})",
        cuda_bool="({0} || {1})",
        precision="exact",
        bound="max",
    ),
    OpInfo(
        "minimum",
        2,
        "arith",
        "same",
        "the smaller of a and b, NaN if either is",
        nan_min,
        cuda="kf::minimum({0}, {1})",
        cuda_bool="({0} && {1})",
        precision="exact",
        bound="max",
    ),
    OpInfo(
        "sub",
        2,
        "arith",
        "same",
        "a - b",
        operator.sub,
        accepts_bool=False,
        cuda="({0} - {1})",
        cuda_int="kf::sub({0}, {1})",
        infix="-",
        reference=_part_by_part(operator.sub),
        bound="sum",
    ),
    OpInfo(
        "div",
        2,
        "arith",
        "float",
        "a / b: of integers the quotient rounded toward zero, as nvFuser's (a zero "
        "divisor gives 0 in a kernel); fd.ops.truediv divides them as Floats",
        div,
        scalar_int=_integer_div,
        cuda="({0} / {1})",
        cuda_int="kf::div_trunc({0}, {1})",
        cuda_fast="kf::div_fast({0}, {1})",
        precision="approximable",
        infix="/",
        reference=_div_array,
        draw="divide",
    ),
    OpInfo(
        "fmod",
        2,
        "arith",
        "same",
        "C's fmod: the remainder with a's sign",
        _fmod,
        accepts_bool=False,
        cuda="kf::fmod({0}, {1})",
        discontinuous=True,
        draw="divide",
    ),
    OpInfo(
        "mod",
        2,
        "arith",
        "same",
        "a % b of integers, as C's %: the remainder with a's sign (a zero divisor gives 0 "
        "in a kernel); fd.ops.fmod for floats",
        _fmod,
        accepts_bool=False,
        accepts_float=False,
        cuda=None,
        cuda_int="kf::fmod({0}, {1})",
        discontinuous=True,
        precision="exact",
        numpy="fmod",
        torch="fmod",
        draw="divide",
    ),
    OpInfo(
        "remainder",
        2,
        "arith",
        "same",
        "Python's %: the remainder with b's sign",
        _remainder,
        accepts_bool=False,
        cuda="kf::remainder({0}, {1})",
        infix="%",
        discontinuous=True,
        draw="divide",
    ),
    OpInfo(
        "pow",
        2,
        "arith",
        "same",
        "a to the power b",
        _pow,
        accepts_bool=False,
        cuda="kf::pow({0}, {1})",
        cuda_int="kf::ipow({0}, {1})",
        reference=_pow_array,
        draw="divide",
    ),
    OpInfo(
        "atan2",
        2,
        "float_math",
        "same",
        "the angle of the point (b, a), in [-pi, pi]",
        math.atan2,
        cuda="kf::atan2({0}, {1})",
        numpy="arctan2",
        discontinuous=True,
        shows_zero_sign=True,
        bound="angle",
    ),
]


def _compare() -> list[OpInfo]:
    def compare(name: str, doc: str, fn: Any, infix: str) -> OpInfo:
        return OpInfo(
            name,
            2,
            "compare",
            "bool",
            doc,
            fn,
            cuda=f"({{0}} {infix} {{1}})",
            infix=infix,
            reference=_operator(fn),
            precision="exact",
            discontinuous=True,
            bound="max",
        )

    def logical(name: str, doc: str, fn: Any, infix: str) -> OpInfo:
        return OpInfo(
            name,
            2,
            "logical",
            "bool",
            doc,
            fn,
            cuda=f"({{0}} {infix} {{1}})",
            infix=infix,
            precision="exact",
            discontinuous=True,
            bound="max",
        )

    def bitwise(name: str, doc: str, fn: Any, infix: str, on_bool: str) -> OpInfo:
        return OpInfo(
            name,
            2,
            "bitwise",
            "same",
            doc,
            fn,
            accepts_float=False,
            cuda=None,
            cuda_int=f"({{0}} {infix} {{1}})",
            cuda_bool=on_bool,
            infix=infix,
            precision="exact",
            bound="max",
        )

    return [
        compare("eq", "a == b", operator.eq, "=="),
        compare("ne", "a != b", operator.ne, "!="),
        compare("lt", "a < b", operator.lt, "<"),
        compare("le", "a <= b", operator.le, "<="),
        compare("gt", "a > b", operator.gt, ">"),
        compare("ge", "a >= b", operator.ge, ">="),
        logical("logical_and", "a and b (cast to Bool)", lambda a, b: bool(a) and bool(b), "&&"),
        logical("logical_or", "a or b (cast to Bool)", lambda a, b: bool(a) or bool(b), "||"),
        bitwise("bitwise_and", "a & b (integers or Bool)", operator.and_, "&", "({0} && {1})"),
        bitwise(
            "bitwise_or",
            "a OR b, bitwise (integers or Bool)",
            operator.or_,
            "|",
            "({0} || {1})",
        ),
        bitwise("bitwise_xor", "a ^ b (integers or Bool)", operator.xor, "^", "({0} != {1})"),
    ]


def _lerp_array(be: Any, start: Any, end: Any, w: Any) -> Any:
    # torch's formula: accurate at both ends of the weight range.
    return be.where(abs(w) < 0.5, start + w * (end - start), end - (end - start) * (1 - w))


def _ternary() -> list[OpInfo]:
    return [
        OpInfo(
            "where",
            3,
            "arith",
            "same",
            "a where the Bool condition is true, else b",
            lambda c, a, b: a if c else b,
            has_condition=True,
            operands=("condition", "a", "b"),
            cuda="({0} ? {1} : {2})",
            # A selection may be a min/max in disguise (where(a > b, a, b)): kf::where keeps
            # it apart from the next min/max, as kf::maximum does (kf_math.cuh).
            cuda_int="kf::where({0}, {1}, {2})",
            reference=lambda be, c, a, b: be.where(c, a, b),
            precision="exact",
            bound="max",
            draw="where",
        ),
        OpInfo(
            "clamp",
            3,
            "arith",
            "same",
            "min(max(x, lo), hi), NaN-propagating",
            lambda x, lo, hi: nan_min(nan_max(x, lo), hi),
            accepts_bool=False,
            operands=("x", "lo", "hi"),
            cuda="kf::clamp({0}, {1}, {2})",
            reference=lambda be, x, lo, hi: be.fn("minimum")(be.fn("maximum")(x, lo), hi),
            precision="exact",
            bound="max",
            draw="clamp",
        ),
        # nvFuser's threshold (torch.nn.functional.threshold): x above the threshold, else
        # the value; NaN stays NaN (NaN <= t is false).
        OpInfo(
            "threshold",
            3,
            "arith",
            "same",
            "x where x > threshold, else value",
            lambda x, t, v: v if x <= t else x,
            accepts_bool=False,
            operands=("x", "threshold", "value"),
            cuda="(({0} <= {1}) ? {2} : {0})",
            cuda_int="kf::where({0} <= {1}, {2}, {0})",
            reference=lambda be, x, t, v: be.where(x <= t, v, x),
            precision="exact",
            discontinuous=True,
            bound="max",
            draw="clamp",
        ),
        OpInfo(
            "lerp",
            3,
            "float_math",
            "same",
            "start + weight * (end - start)",
            lambda s, e, w: s + w * (e - s),
            operands=("start", "end", "weight"),
            cuda="kf::lerp({0}, {1}, {2})",
            reference=_lerp_array,
            draw="floating",
        ),
    ]


BINARY_ROWS: list[OpInfo] = [*_ARITH, *_compare()]
TERNARY_ROWS: list[OpInfo] = _ternary()
