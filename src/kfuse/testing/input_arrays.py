"""The arrays of inputs_for and refill (kfuse.testing.inputs): a tensor input's values drawn
for its dtype (uniform floats rounded to it, small integers, random Bool, NaN/inf/-0.0 mixed
in on request), laid out in a given memory layout (contiguous, offset by an element,
strided, permuted, broadcast) as a NumPy, torch or CuPy array, or laid out exactly as another
array is, down to its data pointer's 16-byte alignment class.

Apart from the drawing of shapes and layouts because these depend on no fusion, only on an
input's dtype and the layout asked for; campaign repros rebuild arrays with the same
alignment rule (aligned_start).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from kfuse.dtypes import REAL_OF, DataType
from kfuse.errors import InputError
from kfuse.ir.values import TensorView
from kfuse.runtime.arrays import numpy_strided


def _values(rng: Any, dtype: DataType, n: int, value_range: float, special: bool) -> Any:
    import numpy as np

    from kfuse.dtypes import round_to_bfloat16, round_to_float8

    if dtype is DataType.Bool:
        return rng.integers(0, 2, n).astype(np.bool_)
    if dtype.is_integral:
        return rng.integers(-8, 9, n).astype(np.int32 if dtype is DataType.Int32 else np.int64)
    if dtype.is_complex:  # finite parts: infinities' complex results are each library's own
        parts = [_values(rng, REAL_OF[dtype], n, value_range, False) for _ in range(2)]
        out = np.empty(n, np.complex64 if dtype is DataType.ComplexFloat else np.complex128)
        out.real, out.imag = parts
        return out
    vals = rng.uniform(-value_range, value_range, n)
    if special and n:
        picks = rng.integers(0, n, max(1, n // 8))
        vals[picks] = rng.choice([np.nan, np.inf, -np.inf, -0.0], len(picks))
    if dtype is DataType.BFloat16:
        return round_to_bfloat16(vals)
    if dtype.is_float8:  # float32 holding float8 values, as for BFloat16
        return round_to_float8(vals, dtype).astype(np.float32)
    return vals.astype(
        {DataType.Half: np.float16, DataType.Float: np.float32, DataType.Double: np.float64}[dtype]
    )


def make_array(
    draw: Any,
    rng: Any,
    v: TensorView,
    shape: tuple[int, ...],
    layout: str,
    framework: str,
    device: Any,
    value_range: float,
    special: bool,
) -> Any:

    n = len(shape)
    order = list(range(n))
    declared = v.stride_order
    if declared is not None:  # declared memory order: outermost = highest rank
        order = sorted(range(n), key=lambda i: -declared[i])
    if layout == "permuted" and n > 1:
        order = list(draw(st.permutations(order)))
    padded = draw(st.integers(0, n - 1)) if layout == "strided" and n else None
    bcast = set()
    if layout == "broadcast" and n:
        bcast = {draw(st.integers(0, n - 1))}
    offset = 1 if layout == "offset" else 0
    strides = [0] * n
    acc = 1
    for ax in reversed(order):
        if ax in bcast:
            continue
        mult = 2 if ax == padded else 1
        strides[ax] = acc * mult
        acc *= mult * max(shape[ax], 1)
    base = _values(rng, v.dtype, offset + acc, value_range, special)
    if framework == "numpy":
        base = _as_numpy(base, v.dtype)
        item = base.itemsize
        return numpy_strided(base[offset:], shape, [s * item for s in strides])
    if framework == "torch":
        import torch

        buf = _as_torch(base, v.dtype).to(device or "cpu")
        return torch.as_strided(buf, shape, strides, offset)
    if framework == "cupy":
        import cupy

        if v.dtype is DataType.BFloat16 or v.dtype.is_float8:
            raise InputError(f"CuPy has no {v.dtype.value} arrays")
        buf = cupy.asarray(base)
        return cupy.lib.stride_tricks.as_strided(
            buf[offset:], shape, [s * base.itemsize for s in strides]
        )
    raise InputError(f"unknown framework {framework!r}")


def refilled_array(
    rng: Any,
    v: TensorView,
    array: Any,
    value_range: float,
    special: bool,
    positions: int | None = None,
) -> Any:
    """A new array laid out as `array` is (see refill), of values drawn as inputs_for
    draws them, or (positions: the bound) of positions in [0, positions)."""
    import numpy as np

    from kfuse.runtime.arrays import framework_of, layout_of

    lay = layout_of(array, v.name)
    if any(s < 0 for s in lay.strides):
        raise InputError(f"{v.name}: refill takes arrays with non-negative strides")
    # Elements the view spans, plus room to move its start onto the same alignment class.
    span = 1 + sum((n - 1) * s for n, s in zip(lay.shape, lay.strides)) if all(lay.shape) else 1
    if positions is None:
        base = _values(rng, v.dtype, span + 16, value_range, special)
    else:
        base = rng.integers(0, max(positions, 1), span + 16)
        base = base.astype(np.int32 if v.dtype is DataType.Int32 else np.int64)
    framework = framework_of(array)
    if framework == "torch":
        import torch

        buf = _as_torch(base, v.dtype).to(array.device)
        start = aligned_start(lay.data_ptr, buf.data_ptr(), buf.element_size())
        return torch.as_strided(buf, lay.shape, lay.strides, start)
    if framework == "cupy":
        import cupy

        buf = cupy.asarray(base)
        start = aligned_start(lay.data_ptr, buf.data.ptr, buf.itemsize)
        return cupy.lib.stride_tricks.as_strided(
            buf[start:], lay.shape, [s * buf.itemsize for s in lay.strides]
        )

    base = _as_numpy(base, v.dtype)
    start = aligned_start(lay.data_ptr, base.ctypes.data, base.itemsize)
    return numpy_strided(base[start:], lay.shape, [s * base.itemsize for s in lay.strides])


def _as_torch(values: Any, dtype: DataType) -> Any:
    """`_values`' array as a CPU torch tensor of `dtype` (BFloat16 and float8 values come as
    float32 holding them, so the conversion is exact)."""
    import torch

    from kfuse.dtypes import to_torch_dtype

    buf = torch.from_numpy(values)
    if dtype is DataType.BFloat16 or dtype.is_float8:
        buf = buf.to(to_torch_dtype(dtype))
    return buf


def _as_numpy(values: Any, dtype: DataType) -> Any:
    """`_values`' array as NumPy holds `dtype`: its BFloat16 or float8 values (rounded float32,
    which torch.from_numpy takes) as an ml_dtypes array of that type, exactly."""
    if dtype is DataType.BFloat16 or dtype.is_float8:
        from kfuse.dtypes import to_numpy_dtype

        return values.astype(to_numpy_dtype(dtype))
    return values


def aligned_start(want_ptr: int, buffer_ptr: int, itemsize: int) -> int:
    """The first element of a buffer at `buffer_ptr` whose address is `want_ptr` modulo 16."""
    return ((want_ptr - buffer_ptr) % 16) // itemsize
