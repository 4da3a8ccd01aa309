"""Array frameworks kfuse exchanges data with: NumPy, PyTorch and CuPy.

One `ArrayFramework` per library says how to read an array's layout (shape, strides in
elements, data pointer, dtype, device) and how to allocate outputs. kfuse never imports torch
or cupy itself: an array's framework is recognised from its type's module, so `import kfuse`
stays free of both (and of CUDA).
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import sys
from dataclasses import dataclass
from typing import Any

from kfuse.dtypes import DataType, from_array_dtype, to_numpy_dtype, to_torch_dtype
from kfuse.errors import DefinitionError, InputError


@dataclass(frozen=True)
class ArrayLayout:
    """What kfuse needs to know about one input array, read once per call."""

    framework: str  # "numpy" | "torch" | "cupy"
    dtype: DataType
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements
    data_ptr: int
    device: int  # CUDA ordinal, or -1 for host memory

    @property
    def on_gpu(self) -> bool:
        """True when the data lives in GPU memory."""
        return self.device >= 0

    @property
    def alignment(self) -> int:
        """The largest power of two (up to 16 bytes) dividing the data pointer."""
        ptr = self.data_ptr
        if ptr == 0:
            return 16
        return min(16, ptr & -ptr)


def framework_of(array: Any) -> str | None:
    """ "numpy", "torch" or "cupy" for an array of that library, else None."""
    module = type(array).__module__
    # Arrays only: torch.Size, a CuPy stream or a NumPy scalar come from the same modules.
    if module.startswith("torch"):
        torch = sys.modules.get("torch")
        return "torch" if torch is not None and isinstance(array, torch.Tensor) else None
    if module.startswith("cupy"):
        cupy = sys.modules.get("cupy")
        return "cupy" if cupy is not None and isinstance(array, cupy.ndarray) else None
    if module == "numpy" and type(array).__name__ == "ndarray":
        return "numpy"
    return None


def numpy_data_ptr(array: Any) -> int:
    """The data pointer of a NumPy array. ndarray.ctypes builds a helper object on every read
    (about 3 us on a slow host, a third of a replayed segment's cost there); a ctypes view of
    the array's buffer gives the same address for the writable, contiguous, non-empty arrays
    kfuse allocates and a library call returns, and ctypes.data stays the answer for the
    others (read-only, strided or empty arrays, whose buffer ctypes refuses)."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(array))
    except (TypeError, ValueError, BufferError):
        return int(array.ctypes.data)


def layout_of(array: Any, what: str) -> ArrayLayout:
    """Read an array's layout; `what` names it in errors ("input 0 (T0)")."""
    framework = framework_of(array)
    if framework is None:
        raise InputError(f"{what} must be a NumPy, CuPy or torch array, got {type(array).__name__}")
    try:
        dtype = from_array_dtype(array.dtype)
    except DefinitionError as exc:
        raise InputError(f"{what}: {exc}") from None
    shape = tuple(int(s) for s in array.shape)
    if framework == "torch":
        strides = tuple(int(s) for s in array.stride())
        data_ptr = int(array.data_ptr())
        device = int(array.device.index or 0) if array.device.type == "cuda" else -1
        if array.device.type not in ("cuda", "cpu"):
            raise InputError(
                f"{what} is on torch device {array.device}; kfuse takes CUDA or CPU tensors"
            )
    else:
        itemsize = int(array.dtype.itemsize)
        strides = tuple(int(s) // itemsize for s in array.strides)
        if framework == "numpy":
            data_ptr = int(array.ctypes.data)
            device = -1
        else:
            data_ptr = int(array.data.ptr)
            device = int(array.device.id)
    layout = ArrayLayout(framework, dtype, shape, strides, data_ptr, device)
    if dtype.is_complex and layout.alignment < dtype.itemsize:
        # kf::complex<T> is aligned to its size, as torch's c10::complex is: its loads need it.
        raise InputError(
            f"{what}: a {dtype.value} array must be aligned to {dtype.itemsize} bytes (its "
            f"data pointer is {layout.alignment}-byte aligned); pass a copy"
        )
    return layout


def empty_like_framework(
    framework: str,
    shape: tuple[int, ...],
    dtype: DataType,
    device: int,
    what: str = "an output",
    order: tuple[int, ...] | None = None,
) -> Any:
    """A new dense array of the given framework, dtype and device, row major or stored in
    the stride `order` given (order[i] the rank of axis i's stride, 0 the fastest: the
    strides `.contiguous(memory_format=...)` gives); OutOfMemoryError, naming `what` and its
    size, when the framework cannot allocate it."""
    try:
        if order is not None:
            return _empty_ordered(framework, shape, dtype, device, order)
        return _empty(framework, shape, dtype, device)
    except (MemoryError, RuntimeError) as exc:
        if isinstance(exc, RuntimeError) and not is_out_of_memory(exc):
            raise
        from kfuse.errors import OutOfMemoryError

        nbytes = dtype.itemsize * math.prod(shape)
        where = "host memory" if device < 0 else f"cuda:{device}"
        raise OutOfMemoryError(
            f"cannot allocate {what}: {dtype.value} {tuple(shape)}, "
            f"{nbytes} bytes, in {where} ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''})"
        ) from None


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether a framework's exception says it ran out of memory (torch raises a
    RuntimeError subclass, CuPy and NumPy a MemoryError)."""
    if isinstance(exc, MemoryError):
        return True
    text = str(exc).lower()
    return (
        "out of memory" in text
        or "can't allocate memory" in text
        or type(exc).__name__ == "OutOfMemoryError"
    )


def _empty_ordered(
    framework: str, shape: tuple[int, ...], dtype: DataType, device: int, order: tuple[int, ...]
) -> Any:
    """A row-major array of the axes from the slowest to the fastest, viewed back in the
    logical axis order: the framework's own strided array, no copy."""
    slowest_first = sorted(range(len(shape)), key=lambda i: -order[i])
    stored = _empty(framework, tuple(shape[i] for i in slowest_first), dtype, device)
    back = tuple(slowest_first.index(i) for i in range(len(shape)))
    return stored.permute(back) if framework == "torch" else stored.transpose(back)


def _empty(framework: str, shape: tuple[int, ...], dtype: DataType, device: int) -> Any:
    if framework == "torch":
        import torch

        dev = torch.device("cuda", device) if device >= 0 else torch.device("cpu")
        return torch.empty(shape, dtype=to_torch_dtype(dtype), device=dev)
    if framework == "cupy":
        import cupy

        if dtype is DataType.BFloat16 or dtype.is_float8:
            raise InputError(
                f"CuPy has no {dtype.value} dtype; use torch tensors for {dtype.value} outputs"
            )
        with cupy.cuda.Device(device):
            return cupy.empty(shape, dtype=to_numpy_dtype(dtype))
    import numpy as np

    # The dtype functions are imported with the module: a from-import inside a function
    # runs the import machinery on every call (2 us of each allocation on a slow host).
    return np.empty(shape, dtype=to_numpy_dtype(dtype))  # BFloat16, float8: ml_dtypes'


POISON_BYTE = 0x7B
"""Every byte of a poisoned buffer. Each dtype reads it as a finite value no fusion of the
tests computes (float 1.3e36, half 61280, int32 2071690107) and as a Bool byte that is
neither 0 nor 1, so an element that no kernel wrote fails any comparison, NaN and infinity
expected included (a NaN or zero fill would hide behind those)."""


def poison(array: Any) -> None:
    """Fill every byte of `array` with POISON_BYTE, on the framework's current stream.

    `array` must be dense: its elements fill one span of memory in some order. That is any
    array kfuse allocates, including a torch.empty_like of a contiguous input, which keeps the
    input's strides: torch calls a size-1 axis of any stride contiguous. Such an array is
    neither reshaped nor viewed as bytes by the frameworks (they refuse a view, or copy), so
    the span is addressed directly as one flat run of elements."""
    n = math.prod(array.shape)
    if n == 0:
        return
    framework = framework_of(array)
    if framework == "torch":
        import torch

        torch.as_strided(array, (n,), (1,)).view(torch.uint8).fill_(POISON_BYTE)
    elif framework == "cupy":
        import cupy

        cupy.ndarray((n * array.itemsize,), cupy.uint8, array.data).fill(POISON_BYTE)
    else:
        import numpy as np

        numpy_strided(array, (n,), (array.itemsize,)).view(np.uint8).fill(POISON_BYTE)


def numpy_strided(array: Any, shape: Any, byte_strides: Any, writeable: bool = True) -> Any:
    """np.lib.stride_tricks.as_strided for every dtype kfuse has: as_strided goes through the
    array interface, which cannot describe ml_dtypes' float8 types, so the view is made of
    same-sized raw elements and then read as the array's dtype again."""
    import numpy as np

    raw = array.view(np.dtype((np.void, array.itemsize)))
    view = np.lib.stride_tricks.as_strided(raw, shape, byte_strides, writeable=writeable)
    return view.view(array.dtype)


def strided_view(
    array: Any, shape: tuple[int, ...], strides: tuple[int, ...], offset: int = 0
) -> Any:
    """A view of `array`'s memory (from its first element, or `offset` elements past it) as
    `shape` with `strides` in elements, never a copy: the caller's strides describe memory a
    kernel reads, so a framework reshape, which copies where its own rules find no view,
    would not do."""
    framework = framework_of(array)
    if framework == "torch":
        import torch

        # as_strided's storage offset is from the storage's start, not the tensor's.
        return torch.as_strided(array, shape, strides, array.storage_offset() + offset)
    itemsize = array.itemsize
    if framework == "cupy":
        from cupy.lib.stride_tricks import as_strided
    else:
        as_strided = numpy_strided
    if offset:
        # The element `offset` past the first, as the first of a 1-D view of the memory.
        array = as_strided(array, (offset + 1,), (itemsize,))[offset:]
    return as_strided(array, shape, [s * itemsize for s in strides])


def stream_context(framework: str, device: int, stream: int | None) -> Any:
    """A context in which CUDA stream handle `stream` is the framework's current stream on
    `device`, so that what the framework allocates and runs there (output copies, library
    calls, the arrays a call allocates) is ordered with kfuse's launches on that stream. A
    null context for None, for host arrays, and when `stream` is current already.

    Handle 0 is the legacy default stream. It is not torch.cuda.ExternalStream(0): torch
    makes that a new stream from its pool, which does not wait for the default stream's work
    (a copy made there raced with the kernel that wrote what it copied)."""
    if stream is None or device < 0 or framework not in ("torch", "cupy"):
        return contextlib.nullcontext()
    if framework == "torch":
        import torch

        dev = torch.device("cuda", device)
        if torch.cuda.current_stream(dev).cuda_stream == stream:
            return contextlib.nullcontext()
        if stream == 0:
            return torch.cuda.stream(torch.cuda.default_stream(dev))
        return torch.cuda.stream(torch.cuda.ExternalStream(stream, device=dev))
    import cupy

    with cupy.cuda.Device(device):
        if cupy.cuda.get_current_stream().ptr == stream:
            return contextlib.nullcontext()
    return _cupy_stream(device, stream)


@contextlib.contextmanager
def _cupy_stream(device: int, stream: int) -> Any:
    import cupy

    with cupy.cuda.Device(device):
        with cupy.cuda.Stream.null if stream == 0 else cupy.cuda.ExternalStream(stream, device):
            yield


def current_stream(framework: str, device: int) -> int:
    """The framework's current CUDA stream on `device`, as an integer handle."""
    if framework == "torch":
        import torch

        return int(torch.cuda.current_stream(device).cuda_stream)
    if framework == "cupy":
        import cupy

        with cupy.cuda.Device(device):
            return int(cupy.cuda.get_current_stream().ptr)
    return 0
