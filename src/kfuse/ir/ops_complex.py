"""Complex numbers in the op table (kfuse.ir.ops): the rows of real, imag and complex, and
which of the other rows take complex operands.

A complex value is ComplexFloat or ComplexDouble: two parts of Float or Double, the real part
first (C's and torch's layout). The ops that take complex operands are those nvFuser and
torch both define on them; every other op refuses them at definition time (the builder's
check of OpInfo.on_complex), since an order (lt, max, floor, clamp) or a bit pattern
(bitwise ops) has no complex meaning. The kernels compute them with kf::complex<T>
(kf_complex.cuh: operators and kf:: overloads, so that most rows' own CUDA templates serve
complex operands too); the reference computes them with NumPy's or torch's complex arrays.
"""

from __future__ import annotations

import cmath
import dataclasses
import operator
from typing import Any

from kfuse.ir.op_info import OpInfo


def _complex_div(a: Any, b: Any) -> complex:
    """a / b of Python complex numbers; a zero divisor gives NaN parts (Python raises)."""
    try:
        return complex(a) / complex(b)
    except ZeroDivisionError:
        return complex(float("nan"), float("nan"))


def _nan_safe(fn: Any) -> Any:
    """fn of a complex number, NaN parts where cmath raises (log(0), overflow)."""

    def wrapped(a: Any) -> complex:
        try:
            return complex(fn(complex(a)))
        except (ValueError, OverflowError, ZeroDivisionError):
            return complex(float("nan"), float("nan"))

    return wrapped


def _part(which: str) -> Any:
    # Every Python and NumPy number has .real and .imag: a complex scalar input may be
    # given as an int or a float (imaginary part 0).
    def part(a: Any) -> Any:
        return getattr(a, which)

    return part


def _complex_array(be: Any, re: Any, im: Any) -> Any:
    """The complex array of parts re and im, built part by part: re + 1j * im would turn
    an infinite im into a NaN real part (inf * 1j is (nan + inf j))."""
    if be.name == "torch":
        return be.xp.complex(re, im)
    xp = be.xp
    re, im = xp.broadcast_arrays(re, im)
    out = xp.empty(re.shape, xp.complex128 if re.dtype == xp.float64 else xp.complex64)
    out.real = re
    out.imag = im
    return out


def _real_imag_rows() -> list[OpInfo]:
    return [
        # nvFuser's real of a real operand is its set: a copy.
        OpInfo(
            "real",
            1,
            "arith",
            "same",
            "the real part of a complex x, as its Float or Double; a real x copied",
            _part("real"),
            cuda="{0}",
            cuda_complex="kf::real({0})",
            on_complex="real",
            precision="exact",
            slope=1.0,
            reference=lambda be, a: be.xp.real(a),
        ),
        # nvFuser refuses imag of a real operand (OpInfo.complex_only).
        OpInfo(
            "imag",
            1,
            "arith",
            "same",
            "the imaginary part of a complex x, as its Float or Double (complex x only)",
            _part("imag"),
            cuda=None,
            cuda_complex="kf::imag({0})",
            on_complex="real",
            complex_only=True,
            precision="exact",
            reference=lambda be, a: be.xp.imag(a),
        ),
        OpInfo(
            "complex",
            2,
            "arith",
            "complex",
            "the complex number re + im i, of two Float or two Double parts",
            lambda re, im: complex(re, im),
            operands=("re", "im"),
            full_precision_only=True,
            cuda="kf::make_complex({0}, {1})",
            precision="exact",
            reference=_complex_array,
        ),
    ]


COMPLEX_ROWS: list[OpInfo] = _real_imag_rows()
"""The ops that make or take apart complex values, in the order fd.ops lists them."""

# Each op that takes complex operands: what it gives ("complex", or "real" for abs), and
# where a row's own CUDA template, reference or scalar function does not serve complex
# operands, the one that does.
_ON_COMPLEX: dict[str, dict[str, Any]] = {
    "set": {"on_complex": "complex"},
    "neg": {"on_complex": "complex"},
    "abs": {
        "on_complex": "real",
        "scalar_complex": abs,
        "doc": "absolute value; of a complex x its modulus, a Float or Double",
    },
    "add": {"on_complex": "complex"},
    "sub": {"on_complex": "complex"},
    "mul": {"on_complex": "complex"},
    "div": {"on_complex": "complex", "scalar_complex": _complex_div},
    "reciprocal": {
        "on_complex": "complex",
        "scalar_complex": lambda a: _complex_div(1.0, a),
    },
    "exp": {"on_complex": "complex", "scalar_complex": _nan_safe(cmath.exp)},
    "log": {"on_complex": "complex", "scalar_complex": _nan_safe(cmath.log)},
    "sqrt": {"on_complex": "complex", "scalar_complex": _nan_safe(cmath.sqrt)},
    "rsqrt": {
        "on_complex": "complex",
        "scalar_complex": lambda a: _complex_div(1.0, cmath.sqrt(a)),
    },
    "sin": {"on_complex": "complex", "scalar_complex": _nan_safe(cmath.sin)},
    "cos": {"on_complex": "complex", "scalar_complex": _nan_safe(cmath.cos)},
    "tanh": {"on_complex": "complex", "scalar_complex": _nan_safe(cmath.tanh)},
    "eq": {"on_complex": "complex", "scalar_complex": operator.eq},
    "ne": {"on_complex": "complex", "scalar_complex": operator.ne},
    "where": {"on_complex": "complex"},
    "isnan": {"on_complex": "complex", "scalar_complex": cmath.isnan},
    "isinf": {"on_complex": "complex", "scalar_complex": cmath.isinf},
    "isfinite": {"on_complex": "complex", "scalar_complex": cmath.isfinite},
    "isreal": {
        "on_complex": "complex",
        "cuda_complex": "kf::isreal({0})",
        "scalar_complex": lambda a: complex(a).imag == 0,
        "reference": lambda be, a: be.xp.isreal(a),
    },
}


def with_complex_forms(row: OpInfo) -> OpInfo:
    """`row` with its complex facts (_ON_COMPLEX) filled in; rows without them as they are."""
    extra = _ON_COMPLEX.get(row.name)
    return dataclasses.replace(row, **extra) if extra else row
