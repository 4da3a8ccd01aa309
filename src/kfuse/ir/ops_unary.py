"""The unary rows of the op table (kfuse.ir.ops): one OpInfo each.

Reference functions take the reference's array backend first (kfuse.reference.backends:
`fn(name)` is the framework's function for an op, `erf`, `constant`, `xp`, `name`).
"""

from __future__ import annotations

import math
from typing import Any

from kfuse.ir.op_info import OpInfo, div, float_only, is_nan, safe

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _sign(a: Any) -> Any:
    # sign(NaN) is 0, as torch.sign and the kernels' (x > 0) - (x < 0) give it (NumPy: NaN).
    if is_nan(a):
        return type(a)(0)
    return type(a)((a > 0) - (a < 0))


def _sign_array(be: Any, a: Any) -> Any:
    if be.name == "torch" or a.dtype.kind in "iub":
        return be.xp.sign(a)  # torch.sign of NaN is 0
    xp = be.xp
    return xp.where(xp.isnan(a), xp.zeros((), a.dtype), xp.sign(a))


def _signbit(a: Any) -> bool:
    if isinstance(a, float):
        return math.copysign(1.0, a) < 0  # -0.0 and a NaN of negative sign too
    return bool(a < 0)


def _frac(a: Any) -> Any:
    if isinstance(a, float):
        return a - math.trunc(a) if math.isfinite(a) else math.nan
    return 0


def _gelu_tanh(a: float) -> float:
    return 0.5 * a * (1.0 + math.tanh(_SQRT_2_OVER_PI * (a + 0.044715 * a**3)))


def _sigmoid(a: float) -> float:
    return 1.0 / (1.0 + math.exp(-a)) if a >= 0 else math.exp(a) / (1.0 + math.exp(a))


def _sigmoid_array(be: Any, a: Any) -> Any:
    # NumPy has no sigmoid; torch's is its own.
    return be.fn("sigmoid")(a) if be.name == "torch" else 1 / (1 + be.fn("exp")(-a))


def _relu_array(be: Any, a: Any) -> Any:
    zero = be.constant(0, a.dtype, a) if be.name == "torch" else be.xp.zeros((), a.dtype)
    return be.fn("maximum")(a, zero)


# name: (doc, scalar function, the row's other fields)
_FLOAT_MATH: dict[str, tuple[str, Any, dict[str, Any]]] = {
    "exp": (
        "e to the x",
        safe(math.exp),
        {"domain": "small", "bound": "exp", "cuda_fast": "kf::exp_fast({0})"},
    ),
    "exp2": ("2 to the x", safe(lambda a: 2.0**a), {"domain": "small", "bound": "exp"}),
    "expm1": ("e to the x, minus 1", safe(math.expm1), {"domain": "small", "bound": "exp"}),
    "log": ("natural logarithm", safe(math.log), {"domain": "pos", "bound": "log"}),
    "log2": ("base-2 logarithm", safe(math.log2), {"domain": "pos", "bound": "log"}),
    "log10": ("base-10 logarithm", safe(math.log10), {"domain": "pos", "bound": "log"}),
    "log1p": ("log(1 + x)", safe(math.log1p), {"domain": "nonneg", "bound": "log"}),
    "sqrt": ("square root", safe(math.sqrt), {"domain": "pos", "bound": "log"}),
    "rsqrt": (
        "1 / sqrt(x)",
        safe(lambda a: div(1.0, math.sqrt(a))),
        {"domain": "pos", "bound": "two", "reference": lambda be, a: 1 / be.fn("sqrt")(a)},
    ),
    "reciprocal": (
        "1 / x",
        lambda a: div(1.0, a),
        {"domain": "pos", "bound": "two", "reference": lambda be, a: 1 / a},
    ),
    "sin": ("sine", safe(math.sin), {"domain": "moderate", "bound": "unit", "slope": 1.0}),
    "cos": ("cosine", safe(math.cos), {"domain": "moderate", "bound": "unit"}),
    "tan": ("tangent", safe(math.tan), {"domain": "tan", "bound": "log"}),
    "asin": ("arcsine", safe(math.asin), {"domain": "unit", "bound": "log", "numpy": "arcsin"}),
    "acos": (
        "arccosine",
        safe(math.acos),
        {"domain": "unit", "bound": "log", "numpy": "arccos"},
    ),
    "atan": ("arctangent", math.atan, {"bound": "log", "numpy": "arctan", "slope": 1.0}),
    "sinh": ("hyperbolic sine", safe(math.sinh), {"domain": "small", "bound": "exp"}),
    "cosh": ("hyperbolic cosine", safe(math.cosh), {"domain": "small", "bound": "exp"}),
    "tanh": ("hyperbolic tangent", math.tanh, {"bound": "unit", "slope": 1.0}),
    "asinh": (
        "inverse hyperbolic sine",
        math.asinh,
        {"bound": "log", "numpy": "arcsinh", "slope": 1.0},
    ),
    "acosh": (
        "inverse hyperbolic cosine",
        safe(math.acosh),
        {"domain": "ge1", "bound": "log", "numpy": "arccosh"},
    ),
    "atanh": (
        "inverse hyperbolic tangent",
        safe(math.atanh),
        {"domain": "unit", "bound": "log", "numpy": "arctanh"},
    ),
    "erf": (
        "error function",
        math.erf,
        {"bound": "unit", "slope": 1.13, "reference": lambda be, a: be.erf(a)},
    ),
    "erfc": (
        "complementary error function, 1 - erf(x)",
        math.erfc,
        {"bound": "log", "reference": lambda be, a: be.erf(a, complement=True)},
    ),
    "sigmoid": (
        "1 / (1 + e^-x)",
        safe(_sigmoid),
        {"bound": "unit", "reference": _sigmoid_array, "cuda_fast": "kf::sigmoid_fast({0})"},
    ),
    "silu": (
        "x * sigmoid(x)",
        safe(lambda a: a / (1.0 + math.exp(-a)) if a >= -700 else 0.0 * a),
        {
            "slope": 1.1,
            "reference": lambda be, a: a * _sigmoid_array(be, a),
            "cuda_fast": "kf::silu_fast({0})",
        },
    ),
    "gelu": (
        "GELU, exact erf form (fd.ops.gelu(x), approximate='none')",
        lambda a: 0.5 * a * (1.0 + math.erf(a / math.sqrt(2.0))),
        {
            "slope": 1.13,
            "cuda": "kf::gelu_erf({0})",
            "keywords": {"approximate": {"none": "gelu", "tanh": "gelu_tanh"}},
            "reference": lambda be, a: 0.5 * a * (1 + be.erf(a * 0.7071067811865476)),
        },
    ),
    "gelu_tanh": (
        "GELU, tanh approximation (fd.ops.gelu(x, approximate='tanh'))",
        safe(_gelu_tanh),
        {
            "slope": 1.13,
            "method": None,
            "reference": lambda be, a: (
                0.5 * a * (1 + be.fn("tanh")(_SQRT_2_OVER_PI * (a + 0.044715 * a * a * a)))
            ),
            "cuda_fast": "kf::gelu_tanh_fast({0})",
        },
    ),
}


def _float_math() -> list[OpInfo]:
    rows = []
    for name, (doc, scalar, extra) in _FLOAT_MATH.items():
        if "cuda_fast" in extra:
            extra = {**extra, "precision": "approximable"}
        rows.append(OpInfo(name, 1, "float_math", "same", doc, scalar, **extra))
    return rows


def _rounding(name: str, doc: str, fn: Any, numpy: str = "") -> OpInfo:
    return OpInfo(
        name,
        1,
        "arith",
        "same",
        doc,
        float_only(fn),
        accepts_bool=False,
        identity_on=("int",),
        numpy=numpy,
        precision="exact",
        discontinuous=True,
    )


def _frac_row() -> OpInfo:
    # nvFuser's frac is x - trunc(x), exact in every floating dtype: x and trunc(x) share
    # their leading bits.
    return OpInfo(
        "frac",
        1,
        "arith",
        "same",
        "x - trunc(x): the fractional part, with x's sign (NaN for infinities; 0 for integers)",
        _frac,
        accepts_bool=False,
        cuda="({0} - kf::trunc({0}))",
        cuda_int="(({T})0)",
        precision="exact",
        discontinuous=True,
        bound="unit",
        reference=lambda be, a: a - be.xp.trunc(a),
    )


def _arith() -> list[OpInfo]:
    return [
        # nvFuser's set (a LoadStoreOp): the operand copied into a value of its own, which
        # add_output(..., alias_input=) may write into an input while the operand is read.
        OpInfo(
            "set",
            1,
            "arith",
            "same",
            "a copy of x as a new value (nvFuser's LoadStoreOp)",
            lambda a: a,
            cuda="{0}",
            precision="exact",
            slope=1.0,
            reference=lambda be, a: a,
        ),
        OpInfo(
            "abs",
            1,
            "arith",
            "same",
            "absolute value",
            abs,
            accepts_bool=False,
            cuda_bool="{0}",
            precision="exact",
            reference=lambda be, a: abs(a),
        ),
        OpInfo(
            "neg",
            1,
            "arith",
            "same",
            "-x",
            lambda a: -a,
            accepts_bool=False,
            precision="exact",
            reference=lambda be, a: -a,
        ),
        OpInfo(
            "relu",
            1,
            "arith",
            "same",
            "max(x, 0), keeping NaN and -0.0",
            lambda a: a if a > 0 else a * 0,
            accepts_bool=False,
            cuda_int="kf::maximum({0}, ({T})0)",
            precision="exact",
            slope=1.0,
            reference=_relu_array,
        ),
        _rounding("floor", "round toward -inf", math.floor),
        _rounding("ceil", "round toward +inf", math.ceil),
        _rounding("round", "round half to even", round, numpy="rint"),
        _rounding("trunc", "round toward zero", math.trunc),
        _frac_row(),
        OpInfo(
            "sign",
            1,
            "arith",
            "same",
            "-1, 0 or 1 as x is negative, zero (or NaN) or positive, as torch.sign",
            _sign,
            identity_on=("bool",),
            precision="exact",
            discontinuous=True,
            bound="unit",
            reference=_sign_array,
        ),
    ]


def _infinity_and_real_tests(test: Any) -> list[OpInfo]:
    """nvFuser's isposinf, isneginf and isreal (`test` makes a compare row, as in _compare)."""
    return [
        test(
            "isposinf",
            "x is +inf",
            lambda a: isinstance(a, float) and a == math.inf,
            "false",
            cuda="(kf::isinf({0}) && !signbit({0}))",
            cuda_int="false",
            numpy="isposinf",
        ),
        test(
            "isneginf",
            "x is -inf",
            lambda a: isinstance(a, float) and a == -math.inf,
            "false",
            cuda="(kf::isinf({0}) && signbit({0}))",
            cuda_int="false",
            numpy="isneginf",
        ),
        # A real dtype has no imaginary part; of complex operands (kfuse.ir.ops_complex)
        # isreal tests that it is zero.
        test(
            "isreal",
            "x's imaginary part is zero (true for every real dtype)",
            lambda a: True,
            "true",
            cuda="true",
            cuda_int="true",
            reference=lambda be, a: (a == a) | (a != a),
        ),
    ]


def _compare() -> list[OpInfo]:
    def test(name: str, doc: str, fn: Any, on_bool: str, **extra: Any) -> OpInfo:
        return OpInfo(
            name,
            1,
            "compare",
            "bool",
            doc,
            fn,
            casts_operands=False,
            cuda_bool=on_bool,
            precision="exact",
            bound="unit",
            **extra,
        )

    return [
        test("isnan", "x is NaN", is_nan, "false"),
        test(
            "isinf", "x is +inf or -inf", lambda a: isinstance(a, float) and math.isinf(a), "false"
        ),
        test(
            "isfinite",
            "x is neither NaN nor infinite",
            lambda a: not isinstance(a, float) or math.isfinite(a),
            "true",
        ),
        *_infinity_and_real_tests(test),
        test(
            "signbit",
            "x's sign bit is set: true for -0.0 and a negative NaN; x < 0 for integers",
            _signbit,
            "false",
            cuda="signbit({0})",
            cuda_int="({0} < 0)",
            discontinuous=True,
            shows_zero_sign=True,
        ),
        OpInfo(
            "logical_not",
            1,
            "logical",
            "bool",
            "not x (x cast to Bool)",
            lambda a: not a,
            cuda="(!{0})",
            precision="exact",
            discontinuous=True,
            bound="unit",
        ),
        OpInfo(
            "bitwise_not",
            1,
            "bitwise",
            "same",
            "~x for integers, not x for Bool",
            lambda a: (not a) if isinstance(a, bool) else ~a,
            accepts_float=False,
            cuda=None,
            cuda_int="(~{0})",
            cuda_bool="(!{0})",
            numpy="invert",
            precision="exact",
        ),
    ]


UNARY_ROWS: list[OpInfo] = [*_float_math(), *_arith(), *_compare()]
"""The unary ops, in the order fd.ops lists them."""
