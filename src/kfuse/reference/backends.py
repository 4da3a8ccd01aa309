"""Array backends of the reference evaluator: NumPy/CuPy (one class, module-parametrized) and
torch. Each maps kfuse's op names onto the framework's functions (spelled in the op table,
kfuse.ir.ops: OpInfo.numpy, OpInfo.torch). The table's reference functions are written apart
from its CUDA templates on purpose: an independent implementation of the same semantics.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from kfuse.dtypes import DataType, round_to_float8
from kfuse.ir.ops import OPS


class NumpyLikeBackend:
    """NumPy or CuPy (`xp` is the module). BFloat16 and float8 are stored as float32 holding
    values of those types."""

    def __init__(self, xp: Any) -> None:
        self.xp = xp
        self.name = xp.__name__

    # ---- storage ----
    def storage_dtype(self, dtype: DataType, wide: bool) -> Any:
        """The array dtype holding values of `dtype` (float64 for floats when `wide`,
        complex128 for complex values then)."""
        if dtype.is_floating and wide:
            return self.xp.float64
        if dtype.is_complex:
            wide = wide or dtype is DataType.ComplexDouble
            return self.xp.complex128 if wide else self.xp.complex64
        return {
            DataType.Bool: self.xp.bool_,
            DataType.Int32: self.xp.int32,
            DataType.Int: self.xp.int64,
            DataType.Half: self.xp.float16,
            DataType.BFloat16: self.xp.float32,
            DataType.Float: self.xp.float32,
            DataType.Double: self.xp.float64,
            DataType.Float8_e4m3fn: self.xp.float32,
            DataType.Float8_e5m2: self.xp.float32,
        }[dtype]

    def round_bf16(self, a: Any) -> Any:
        """Round float values to bf16 precision (RNE), returned as float32."""
        xp = self.xp
        f = a.astype(xp.float32)
        bits = f.view(xp.uint32).astype(xp.uint64)
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(xp.uint32)
        return xp.where(xp.isnan(f), f, rounded.view(xp.float32))

    def astype(self, a: Any, storage: Any) -> Any:
        return self.xp.asarray(a).astype(storage, copy=False)

    def is_floating(self, a: Any) -> bool:
        return bool(self.xp.asarray(a).dtype.kind == "f")

    def is_complex(self, a: Any) -> bool:
        return bool(self.xp.asarray(a).dtype.kind == "c")

    def to_int_saturating(self, a: Any, dtype: DataType) -> Any:
        """Floating values converted to the integer `dtype` as kfuse's kernels convert them
        (CUDA's cvt.rzi, torch on the GPU): toward zero, out-of-range values saturated, NaN
        to 0. A plain conversion gives the lowest integer for all three on x86."""
        xp, bits = self.xp, 8 * dtype.itemsize
        limit = float(2 ** (bits - 1))
        high, low, nan = a >= limit, a <= -limit, xp.isnan(a)
        inside = self.astype(xp.where(high | low | nan, 0.0, a), self.storage_dtype(dtype, False))
        inside = xp.where(high, 2 ** (bits - 1) - 1, inside)
        return xp.where(low, -(2 ** (bits - 1)), inside)

    def round_to(self, a: Any, dtype: DataType) -> Any:
        """Round floating values to `dtype`'s precision, keeping a's storage dtype."""
        xp = self.xp
        if dtype is DataType.BFloat16:
            return self.round_bf16(a).astype(a.dtype)
        if dtype is DataType.Half:
            return a.astype(xp.float16).astype(a.dtype)
        if dtype is DataType.Float:
            return a.astype(xp.float32).astype(a.dtype)
        if dtype.is_float8:
            return round_to_float8(a, dtype, xp).astype(a.dtype)
        if dtype is DataType.ComplexFloat:
            return a.astype(xp.complex64).astype(a.dtype)
        return a

    def constant(self, value: Any, storage: Any, like: Any) -> Any:
        return self.xp.asarray(value, dtype=storage)

    def to_output(self, a: Any) -> Any:
        return self.xp.array(a, copy=True, order="C")

    def errstate(self) -> Any:
        return self.xp.errstate(all="ignore") if hasattr(self.xp, "errstate") else _Null()

    # ---- math ----
    def erf(self, a: Any, complement: bool = False) -> Any:
        """erf, or with `complement` erfc computed as such (1 - erf(x) cancels to 0 for
        x >= 6, where erfc(6) = 2.2e-17 is well within float32's range)."""
        xp = self.xp
        if xp.__name__ == "cupy":
            import cupyx.scipy.special as sp  # only reached with CuPy inputs

            return sp.erfc(a) if complement else sp.erf(a)
        fn = math.erfc if complement else math.erf
        return xp.asarray(xp.vectorize(fn, otypes=[a.dtype])(a)) if a.size else a.copy()

    def per_element(self, fn: Callable[[float], float], a: Any) -> Any:
        """fn (a function of one Python float) of each element of the floating array a,
        computed in float64 and returned in a's dtype: for the special functions no
        framework has (erfinv, ...), NumPy's element loop on the host."""
        import numpy as np

        host = a.get() if self.xp.__name__ == "cupy" else a
        wide = np.asarray(host, dtype=np.float64)
        out = np.vectorize(fn, otypes=[np.float64])(wide) if wide.size else wide.copy()
        return self.xp.asarray(out.astype(a.dtype))

    def fn(self, name: str) -> Callable[..., Any]:
        """The framework's function for op `name` (its spelling in the op table)."""
        row = OPS.get(name)
        return getattr(self.xp, row.numpy if row is not None and row.numpy else name)

    def where(self, c: Any, a: Any, b: Any) -> Any:
        return self.xp.where(c, a, b)

    def reduce(self, op: str, a: Any, dims: tuple[int, ...], storage: Any) -> Any:
        xp = self.xp
        if op == "sum":
            return xp.sum(a, axis=dims, dtype=storage)
        if op == "prod":
            return xp.prod(a, axis=dims, dtype=storage)
        fn = xp.max if op == "max" else xp.min
        if any(a.shape[d] == 0 for d in dims):
            # An empty reduction gives the identity; CuPy's max/min take no `initial`, so the
            # identity is built here for every array module alike.
            kept = tuple(n for i, n in enumerate(a.shape) if i not in dims)
            return xp.full(kept, _identity(op, a, xp), dtype=a.dtype)
        return fn(a, axis=dims)

    def scan(self, op: str, a: Any, dim: int, storage: Any) -> Any:
        """The inclusive prefix sums, products, maxima or minima along `dim`, in `storage`
        (integers wrap; max and min propagate NaN)."""
        xp = self.xp
        a = a.astype(storage, copy=False)
        if op == "sum":
            return xp.cumsum(a, axis=dim, dtype=storage)
        if op == "prod":
            return xp.cumprod(a, axis=dim, dtype=storage)
        return (xp.maximum if op == "max" else xp.minimum).accumulate(a, axis=dim)

    def cumsum(self, a: Any, dim: int, storage: Any) -> Any:
        """The inclusive prefix sums along `dim`, accumulated in `storage` (integers wrap)."""
        return self.scan("sum", a, dim, storage)

    def expand_dims(self, a: Any, axes: tuple[int, ...]) -> Any:
        return self.xp.expand_dims(a, axes) if axes else a

    def matmul(self, a: Any, b: Any) -> Any:
        """xp.matmul (torch.matmul for torch): batch axes broadcast."""
        return self.xp.matmul(a, b)

    def broadcast_to(self, a: Any, shape: tuple[int, ...]) -> Any:
        return self.xp.broadcast_to(a, shape)

    def squeeze(self, a: Any, dims: tuple[int, ...]) -> Any:
        return self.xp.squeeze(a, axis=dims)

    def permute(self, a: Any, perm: tuple[int, ...]) -> Any:
        return self.xp.transpose(a, perm)

    def reshape(self, a: Any, shape: tuple[int, ...]) -> Any:
        return self.xp.reshape(a, shape)

    def full(self, shape: tuple[int, ...], value: Any, storage: Any, like: Any) -> Any:
        return self.xp.full(shape, value, dtype=storage)

    def arange(self, like: Any) -> Any:
        """n -> the 1-D range of n integer positions, where `like` lives."""
        return self.xp.arange

    def from_numpy(self, a: Any, storage: Any, like: Any) -> Any:
        """NumPy array `a` (values `storage` holds exactly) as an array of this backend, where
        `like` lives."""
        return self.xp.asarray(a).astype(storage)


class TorchBackend(NumpyLikeBackend):
    """torch tensors (any device); BFloat16, Half and float8 are torch's own dtypes."""

    def __init__(self, torch: Any) -> None:
        self.xp = torch
        self.name = "torch"
        self.float8 = {
            torch.float8_e4m3fn: DataType.Float8_e4m3fn,
            torch.float8_e5m2: DataType.Float8_e5m2,
        }

    def storage_dtype(self, dtype: DataType, wide: bool) -> Any:
        t = self.xp
        if dtype.is_floating and wide:
            return t.float64
        if dtype.is_complex:
            wide = wide or dtype is DataType.ComplexDouble
            return t.complex128 if wide else t.complex64
        return {
            DataType.Bool: t.bool,
            DataType.Int32: t.int32,
            DataType.Int: t.int64,
            DataType.Half: t.float16,
            DataType.BFloat16: t.bfloat16,
            DataType.Float: t.float32,
            DataType.Double: t.float64,
            DataType.Float8_e4m3fn: t.float8_e4m3fn,
            DataType.Float8_e5m2: t.float8_e5m2,
        }[dtype]

    def astype(self, a: Any, storage: Any) -> Any:
        float8 = self.float8.get(storage)
        if float8 is not None and a.dtype != storage:
            # Round as kfuse does first: torch's own conversion of float8 overflow changed
            # between versions (NaN before 2.12, saturation after for e4m3fn); converting a
            # value that is already a float8 value is exact in every version.
            a = round_to_float8(a, float8, self.xp)
        return a.to(storage)

    def is_floating(self, a: Any) -> bool:
        return bool(a.is_floating_point())

    def is_complex(self, a: Any) -> bool:
        return bool(a.is_complex())

    def round_to(self, a: Any, dtype: DataType) -> Any:
        if dtype.is_float8:
            return round_to_float8(a, dtype, self.xp).to(a.dtype)
        if dtype is DataType.ComplexFloat:
            return a.to(self.xp.complex64).to(a.dtype)
        if dtype.is_floating and dtype is not DataType.Double:
            return a.to(self.storage_dtype(dtype, False)).to(a.dtype)
        return a

    def constant(self, value: Any, storage: Any, like: Any) -> Any:
        return self.xp.tensor(value, dtype=storage, device=like.device)

    def to_output(self, a: Any) -> Any:
        return a.clone(memory_format=self.xp.contiguous_format)

    def errstate(self) -> Any:
        return _Null()

    def erf(self, a: Any, complement: bool = False) -> Any:
        return self.xp.erfc(a) if complement else self.xp.erf(a)

    def per_element(self, fn: Callable[[float], float], a: Any) -> Any:
        import numpy as np

        wide = a.detach().to(device="cpu", dtype=self.xp.float64).numpy()
        out = np.vectorize(fn, otypes=[np.float64])(wide) if wide.size else wide.copy()
        return self.xp.from_numpy(out).to(device=a.device, dtype=a.dtype)

    def fn(self, name: str) -> Callable[..., Any]:
        row = OPS.get(name)
        return getattr(self.xp, row.torch if row is not None and row.torch else name)

    def where(self, c: Any, a: Any, b: Any) -> Any:
        return self.xp.where(c, a, b)

    def reduce(self, op: str, a: Any, dims: tuple[int, ...], storage: Any) -> Any:
        t = self.xp
        if op == "sum":
            return t.sum(a, dim=dims, dtype=storage)
        if op == "prod":
            out = a.to(storage)
            for d in sorted(dims, reverse=True):
                out = t.prod(out, dim=d)
            return out
        if a.numel() == 0:
            shape = tuple(n for i, n in enumerate(a.shape) if i not in dims)
            return t.full(shape, _identity(op, a, None), dtype=a.dtype, device=a.device)
        return (t.amax if op == "max" else t.amin)(a, dim=dims)

    def scan(self, op: str, a: Any, dim: int, storage: Any) -> Any:
        t = self.xp
        a = a.to(storage)
        if op == "sum":
            return t.cumsum(a, dim=dim)
        if op == "prod":
            return t.cumprod(a, dim=dim)
        if a.numel() == 0:
            return a.clone()
        return (t.cummax if op == "max" else t.cummin)(a, dim=dim).values

    def expand_dims(self, a: Any, axes: tuple[int, ...]) -> Any:
        for ax in sorted(axes):
            a = a.unsqueeze(ax)
        return a

    def broadcast_to(self, a: Any, shape: tuple[int, ...]) -> Any:
        return a.expand(shape)

    def squeeze(self, a: Any, dims: tuple[int, ...]) -> Any:
        return a.reshape(tuple(n for i, n in enumerate(a.shape) if i not in dims))

    def permute(self, a: Any, perm: tuple[int, ...]) -> Any:
        return a.permute(perm)

    def reshape(self, a: Any, shape: tuple[int, ...]) -> Any:
        return a.reshape(shape)

    def full(self, shape: tuple[int, ...], value: Any, storage: Any, like: Any) -> Any:
        return self.xp.full(shape, value, dtype=storage, device=like.device)

    def arange(self, like: Any) -> Any:
        return lambda n: self.xp.arange(n, device=like.device)

    def from_numpy(self, a: Any, storage: Any, like: Any) -> Any:
        return self.xp.from_numpy(a).to(device=like.device, dtype=storage)


def _identity(op: str, a: Any, xp: Any) -> Any:
    """Identity of max/min for a's dtype (used for empty reductions)."""
    kind = str(a.dtype)
    if "bool" in kind:
        return op == "min"
    if "int" in kind:
        import numpy as np

        info = np.iinfo(kind.replace("torch.", ""))
        return info.min if op == "max" else info.max
    return -math.inf if op == "max" else math.inf


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def backend_for(arrays: list[Any]) -> NumpyLikeBackend:
    """The backend of the inputs' framework; InputError when frameworks are mixed."""
    from kfuse.errors import InputError

    kinds = set()
    for a in arrays:
        module = type(a).__module__.split(".")[0]
        kinds.add({"numpy": "numpy", "torch": "torch", "cupy": "cupy"}.get(module, module))
    if len(kinds) > 1:
        raise InputError(f"inputs mix array frameworks: {sorted(kinds)}")
    kind = kinds.pop() if kinds else "numpy"
    if kind == "torch":
        import torch

        return TorchBackend(torch)
    if kind == "cupy":
        import cupy

        return NumpyLikeBackend(cupy)
    if kind != "numpy":
        raise InputError(f"unsupported input array type from module {kind!r}")
    import numpy

    return NumpyLikeBackend(numpy)
