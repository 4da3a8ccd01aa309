"""Evaluation of scalar-only exprs with Python numbers (shape arithmetic, scalar math), with
the op table's scalar functions (kfuse.ir.ops: OpInfo.scalar).

Used by shape inference and by the reference. Results are converted to the output dtype's
Python kind (bool; an integer type's int: an int wrapped to the width, a float truncated and
saturated; float rounded for Float/Half/BFloat16/float8).
"""

from __future__ import annotations

import math
import struct
from typing import Any

from kfuse.dtypes import REAL_OF, DataType
from kfuse.errors import InputError
from kfuse.ir.ops import OPS


def to_python(value: Any, dtype: DataType) -> Any:
    """Convert a Python number to the Python kind of `dtype`, with its width and rounding.
    A complex number in a real dtype keeps its real part (in Bool: whether it is nonzero)."""
    if dtype.is_complex:
        value = complex(value)
        part = REAL_OF[dtype]
        return complex(to_python(value.real, part), to_python(value.imag, part))
    if dtype is DataType.Bool:
        return bool(value)
    if isinstance(value, complex):
        value = value.real
    if dtype.is_integral:
        bits = 8 * dtype.itemsize
        if isinstance(value, float):
            if not math.isfinite(value):
                raise InputError(f"cannot convert {value} to {dtype.value}")
            # Toward zero and saturated, as a kernel's conversion (cvt.rzi) gives it; integers
            # (below) wrap, as torch's integer arithmetic does.
            top = (1 << (bits - 1)) - 1
            return max(-top - 1, min(top, math.trunc(value)))
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
    """Evaluate pointwise `op` on Python numbers; the result has `dtype`'s Python kind."""
    row = OPS[op]
    if any(isinstance(a, complex) for a in args):
        fn = row.scalar_complex or row.scalar
        return to_python(fn(*args), dtype)
    kind = "bool" if dtype is DataType.Bool else "int" if dtype.is_integral else "float"
    if kind in row.identity_on:
        return to_python(args[0], dtype)
    if row.identity_on and dtype.is_floating:
        args = [float(a) for a in args]  # floor of an integer-valued constant is a Float
    if row.scalar_of_dtype is not None:
        return to_python(row.scalar_of_dtype(dtype, *args), dtype)
    if row.scalar_int is not None and dtype.is_integral:
        return to_python(row.scalar_int(*args), dtype)
    return to_python(row.scalar(*args), dtype)
