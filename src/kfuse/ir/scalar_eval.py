"""Evaluation of scalar-only exprs with Python numbers (shape arithmetic, scalar math).

Used by shape inference and by the reference. Results are converted to the output dtype's
Python kind (bool, int wrapped to the integer width, float rounded for Float/Half/BFloat16/float8).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import Any

from kfuse.dtypes import DataType
from kfuse.errors import InputError


def _div(a: Any, b: Any) -> float:
    a, b = float(a), float(b)
    if b == 0.0:
        if a == 0.0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _safe(fn: Callable[..., float]) -> Callable[..., float]:
    def wrapped(*args: Any) -> float:
        try:
            return fn(*args)
        except (ValueError, ZeroDivisionError):
            return math.nan
        except OverflowError:
            return math.inf

    return wrapped


def _sign(a: Any) -> Any:
    if isinstance(a, float) and math.isnan(a):
        return a
    return type(a)((a > 0) - (a < 0))


def _gelu_tanh(a: float) -> float:
    return 0.5 * a * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (a + 0.044715 * a**3)))


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


def _nan_max(a: Any, b: Any) -> Any:
    if isinstance(a, float) and math.isnan(a) or isinstance(b, float) and math.isnan(b):
        return math.nan
    return max(a, b)


def _nan_min(a: Any, b: Any) -> Any:
    if isinstance(a, float) and math.isnan(a) or isinstance(b, float) and math.isnan(b):
        return math.nan
    return min(a, b)


_S = _safe
SCALAR_OPS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "neg": lambda a: -a,
    "exp": _S(math.exp),
    "exp2": _S(lambda a: 2.0**a),
    "expm1": _S(math.expm1),
    "log": _S(math.log),
    "log2": _S(math.log2),
    "log10": _S(math.log10),
    "log1p": _S(math.log1p),
    "sqrt": _S(math.sqrt),
    "rsqrt": _S(lambda a: _div(1.0, math.sqrt(a))),
    "reciprocal": lambda a: _div(1.0, a),
    "sin": _S(math.sin),
    "cos": _S(math.cos),
    "tan": _S(math.tan),
    "asin": _S(math.asin),
    "acos": _S(math.acos),
    "atan": math.atan,
    "sinh": _S(math.sinh),
    "cosh": _S(math.cosh),
    "tanh": math.tanh,
    "asinh": math.asinh,
    "acosh": _S(math.acosh),
    "atanh": _S(math.atanh),
    "erf": math.erf,
    "erfc": math.erfc,
    "sigmoid": _S(
        lambda a: 1.0 / (1.0 + math.exp(-a)) if a >= 0 else math.exp(a) / (1.0 + math.exp(a))
    ),
    "silu": _S(lambda a: a / (1.0 + math.exp(-a)) if a >= -700 else 0.0 * a),
    "gelu": lambda a: 0.5 * a * (1.0 + math.erf(a / math.sqrt(2.0))),
    "gelu_tanh": _S(_gelu_tanh),
    "relu": lambda a: a if a > 0 else a * 0,
    "floor": lambda a: float(math.floor(a)) if isinstance(a, float) and math.isfinite(a) else a,
    "ceil": lambda a: float(math.ceil(a)) if isinstance(a, float) and math.isfinite(a) else a,
    "round": lambda a: float(round(a)) if isinstance(a, float) and math.isfinite(a) else a,
    "trunc": lambda a: float(math.trunc(a)) if isinstance(a, float) and math.isfinite(a) else a,
    "sign": _sign,
    "isnan": lambda a: isinstance(a, float) and math.isnan(a),
    "isinf": lambda a: isinstance(a, float) and math.isinf(a),
    "isfinite": lambda a: not isinstance(a, float) or math.isfinite(a),
    "logical_not": lambda a: not a,
    "bitwise_not": lambda a: (not a) if isinstance(a, bool) else ~a,
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": _div,
    "fmod": _fmod,
    "remainder": _remainder,
    "pow": _S(lambda a, b: a**b),
    "atan2": math.atan2,
    "maximum": _nan_max,
    "minimum": _nan_min,
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "logical_and": lambda a, b: bool(a) and bool(b),
    "logical_or": lambda a, b: bool(a) or bool(b),
    "bitwise_and": lambda a, b: a & b,
    "bitwise_or": lambda a, b: a | b,
    "bitwise_xor": lambda a, b: a ^ b,
    "where": lambda c, a, b: a if c else b,
    "clamp": lambda x, lo, hi: _nan_min(_nan_max(x, lo), hi),
    "lerp": lambda s, e, w: s + w * (e - s),
}


def to_python(value: Any, dtype: DataType) -> Any:
    """Convert a Python number to the Python kind of `dtype`, with its width and rounding."""
    if dtype is DataType.Bool:
        return bool(value)
    if dtype.is_integral:
        if isinstance(value, float):
            if not math.isfinite(value):
                raise InputError(f"cannot convert {value} to {dtype.value}")
            value = math.trunc(value)
        bits = 8 * dtype.itemsize
        value = int(value) & ((1 << bits) - 1)
        return value - (1 << bits) if value >= 1 << (bits - 1) else value
    value = float(value)
    if dtype is DataType.Float:
        try:
            return struct.unpack("f", struct.pack("f", value))[0]
        except OverflowError:
            return math.copysign(math.inf, value)
    if dtype in (DataType.Half, DataType.BFloat16):
        import numpy as np

        from kfuse.dtypes import round_to_bfloat16

        if dtype is DataType.Half:
            return float(np.float16(value))
        return float(round_to_bfloat16(np.float32(value)))
    if dtype.is_float8:
        from kfuse.dtypes import round_to_float8

        return float(round_to_float8(value, dtype))
    return value


def eval_scalar(op: str, args: list[Any], dtype: DataType) -> Any:
    """Evaluate pointwise op `op` on Python numbers; the result has `dtype`'s Python kind."""
    if dtype.is_floating and op in ("floor", "ceil", "round", "trunc"):
        args = [float(a) for a in args]
    if op in ("floor", "ceil", "round", "trunc") and not dtype.is_floating:
        return to_python(args[0], dtype)
    if op == "div" and dtype.is_integral:
        return to_python(_integer_div(*args), dtype)
    return to_python(SCALAR_OPS[op](*args), dtype)


def _integer_div(a: int, b: int) -> int:
    """nvFuser's Int scalar division: C's `/`, the quotient rounded toward zero."""
    if b == 0:
        raise InputError(f"integer division of the scalar {a} by 0")
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient
