"""EmulatedKernel: a kernel's CUDA source, compiled for the host, launched like a GPU kernel."""

from __future__ import annotations

import ctypes
import re
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kfuse.errors import EmulatorError
from kfuse.runtime.emulator import build
from kfuse.runtime.emulator.limits import EmulatedDeviceLimits, resolve_limits

DEFAULT_SPIN_LIMIT = 1 << 22
"""No-effect atomics a thread may repeat on one address before the launch is called a spin."""

DEFAULT_STACK_BYTES = 128 * 1024
"""Stack of each thread's fiber."""

MAX_CLUSTER = 8
"""Blocks of a cluster at most (CUDA's portable cluster size)."""

DEFAULT_WATCHDOG_SECONDS = 30.0
"""How long a thread may run without a barrier, warp operation or atomic making progress before
the launch is called a spin (catches spinning on volatile loads)."""

# The watchdog's signal handler is process-wide: one emulated launch at a time per process.
_launch_lock = threading.Lock()

_ERR_BYTES = 4096
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


@dataclass(frozen=True)
class _ArrayArg:
    """What packing needs of an array argument: the data pointer, and sizes and strides in
    elements."""

    data: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]


def _as_array(value: object) -> _ArrayArg | None:
    if isinstance(value, tuple) and hasattr(value, "strides") and hasattr(value, "data"):
        # kfuse.runtime.kernel_args.TensorArg(data, shape, strides): the executor's own views.
        return _ArrayArg(
            int(value.data),  # type: ignore[attr-defined]
            tuple(int(s) for s in value.shape),  # type: ignore[attr-defined]
            tuple(int(s) for s in value.strides),  # type: ignore[attr-defined]
        )
    if isinstance(value, np.ndarray):
        itemsize = value.itemsize
        if any(s % itemsize for s in value.strides):
            raise ValueError(f"strides {value.strides} are not multiples of the item size")
        return _ArrayArg(
            value.__array_interface__["data"][0],
            tuple(value.shape),
            tuple(s // itemsize for s in value.strides),
        )
    if type(value).__module__.startswith("torch") and hasattr(value, "data_ptr"):
        if value.device.type != "cpu":  # type: ignore[attr-defined]
            raise ValueError(f"a torch tensor on {value.device} (the emulator needs CPU memory)")  # type: ignore[attr-defined]
        return _ArrayArg(
            int(value.data_ptr()),  # type: ignore[attr-defined]
            tuple(int(s) for s in value.shape),  # type: ignore[attr-defined]
            tuple(int(s) for s in value.stride()),  # type: ignore[attr-defined]
        )
    return None


def _check_range(values: Sequence[int], bounds: tuple[int, int], what: str) -> None:
    for v in values:
        if not bounds[0] <= v <= bounds[1]:
            raise ValueError(f"{what} {v} does not fit the parameter's index type")


def _pack_array(arr: _ArrayArg, size: int) -> bytes:
    n = len(arr.shape)
    if size == 8:
        return struct.pack("<Q", arr.data)
    if size == 8 + 8 * n:
        _check_range(arr.shape + arr.strides, _INT32, "extent or stride")
        return struct.pack(f"<Q{n}i{n}i", arr.data, *arr.shape, *arr.strides)
    if size == 8 + 16 * n:
        return struct.pack(f"<Q{n}q{n}q", arr.data, *arr.shape, *arr.strides)
    raise ValueError(
        f"a rank-{n} array needs a parameter of 8 bytes (pointer), {8 + 8 * n} "
        f"(Tensor<T, {n}, int>) or {8 + 16 * n} (Tensor<T, {n}, long long>)"
    )


def _pack_scalar(value: object, size: int) -> bytes:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool):
        if size == 1:
            return struct.pack("<?", value)
        raise ValueError("a bool needs a 1-byte parameter")
    if isinstance(value, int):
        if size == 4:
            _check_range((value,), _INT32, "int")
            return struct.pack("<i", value)
        if size == 8:
            _check_range((value,), _INT64, "int")
            return struct.pack("<q", value)
        raise ValueError("an int needs a 4- or 8-byte parameter")
    if isinstance(value, float):
        if size == 4:
            return struct.pack("<f", value)
        if size == 8:
            return struct.pack("<d", value)
        raise ValueError("a float needs a 4- or 8-byte parameter")
    raise ValueError(f"cannot pass a {type(value).__name__}")


def _split_top_level(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


_CALL_PAREN = re.compile(r"\s*\(")
_PARAMETER_NAME = re.compile(r"([A-Za-z_]\w*)\s*$")
_CLUSTER_DIMS = re.compile(r"__cluster_dims__\s*\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)")


def _declared_after(source: str, name: str, attribute: str, stops: str) -> tuple[int, int] | None:
    """Where the first whole-word `name(` in `source` that `attribute` comes before, with
    none of the characters `stops` between them, is declared: (the start of that stretch,
    the end past its `(`); None where there is none. Each kernel has its own name, so a
    regex made of the name would be compiled for every kernel loaded (about 0.5 ms each):
    the name is found as a literal instead."""
    at = source.find(name)
    while at >= 0:
        before = source[at - 1] if at else " "
        paren = _CALL_PAREN.match(source, at + len(name))
        if paren is not None and not (before.isalnum() or before == "_"):
            start = max(source.rfind(c, 0, at) for c in stops) + 1
            if attribute in source[start:at]:
                return start, paren.end()
        at = source.find(name, at + 1)
    return None


def parameter_names(source: str, kernel_name: str, count: int) -> tuple[str | None, ...]:
    """The kernel's parameter names read from its signature (best effort, for messages)."""
    declared = _declared_after(source, kernel_name, "__global__", ";{")
    if declared is None:
        return (None,) * count
    depth, i = 1, declared[1]
    while i < len(source) and depth:
        depth += {"(": 1, ")": -1}.get(source[i], 0)
        i += 1
    params = _split_top_level(source[declared[1] : i - 1])
    if params == ["void"]:
        params = []
    names = [_PARAMETER_NAME.search(p) for p in params]
    if len(names) != count:
        return (None,) * count
    return tuple(n.group(1) if n else None for n in names)


def cluster_dims(source: str, kernel_name: str) -> tuple[int, int, int]:
    """The kernel's thread-block cluster shape, from its `__cluster_dims__(x, y, z)`
    attribute; (1, 1, 1) without one."""
    declared = _declared_after(source, kernel_name, "__cluster_dims__", ";{}")
    if declared is None:
        return (1, 1, 1)
    m = _CLUSTER_DIMS.search(source, *declared)
    return (int(m[1]), int(m[2]), int(m[3])) if m else (1, 1, 1)


def _dims(value: object, what: str) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, int) else tuple(value)  # type: ignore[arg-type]
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, int) for d in dims):
        raise EmulatorError(f"{what} must be an int or a tuple of 1 to 3 ints, not {value!r}")
    return (dims + (1, 1))[:3]  # type: ignore[return-value]


class EmulatedKernel:
    """A CUDA kernel run on the CPU: threads of a block as fibers, blocks one after another
    (the blocks of a thread-block cluster together, each with its own shared memory, which
    the others read through kf::cluster_load).

    `source` is the complete CUDA C++ source (as given to NVRTC) and `kernel_name` the
    `extern "C" __global__` function to run. Compiled libraries are cached on disk and per
    process, so constructing the same kernel twice compiles once.

    device: a profile name ("h100", "h200", "a100"), EmulatedDeviceLimits, or an object with
    max_threads_per_block and shared_mem_per_block_optin; launches beyond its limits fail.
    force_fibers: run threads as fibers even if the kernel has no barrier or warp operation.
    spin_limit: no-effect atomics a block may repeat, with nothing else happening, before the
    launch is reported as spinning; watchdog_seconds: how long one thread may run without a
    barrier, warp operation or progress before it is (0 disables the watchdog).
    extra_flags: more host-compiler flags (e.g. "-O0 -g" for debugging, "-DKF_EMU_UCONTEXT").
    """

    def __init__(
        self,
        source: str,
        kernel_name: str,
        *,
        device: object = None,
        force_fibers: bool = False,
        spin_limit: int = DEFAULT_SPIN_LIMIT,
        stack_bytes: int = DEFAULT_STACK_BYTES,
        watchdog_seconds: float = DEFAULT_WATCHDOG_SECONDS,
        extra_flags: Sequence[str] = (),
    ) -> None:
        self.source = source
        self.kernel_name = kernel_name
        self.limits: EmulatedDeviceLimits = resolve_limits(device)
        self._compiled = build.load_kernel(source, kernel_name, tuple(extra_flags))
        self.param_sizes: tuple[int, ...] = self._compiled.param_sizes
        self.param_names = parameter_names(source, kernel_name, len(self.param_sizes))
        self.cluster = cluster_dims(source, kernel_name)
        if self.cluster[1:] != (1, 1) or not 1 <= self.cluster[0] <= MAX_CLUSTER:
            raise EmulatorError(
                f"kernel {kernel_name!r}: __cluster_dims__{self.cluster}: the emulator runs "
                f"clusters along x of at most {MAX_CLUSTER} blocks"
            )
        self.uses_fibers: bool = force_fibers or self._compiled.uses_fibers
        self.spin_limit = spin_limit
        self.stack_bytes = stack_bytes
        self.watchdog_seconds = watchdog_seconds

    def __repr__(self) -> str:
        return f"EmulatedKernel({self.kernel_name!r}, params={self.param_sizes})"

    def _param(self, i: int) -> str:
        name = self.param_names[i]
        return f"parameter {i}" + (f" {name!r}" if name else "")

    def _validate(
        self, grid: tuple[int, int, int], block: tuple[int, int, int], shared_mem: int
    ) -> None:
        lim = self.limits
        where = f"kernel {self.kernel_name!r}: launch with grid {grid}, block {block}"
        if min(grid) < 1 or min(block) < 1:
            raise EmulatorError(f"{where}: every grid and block dimension must be at least 1")
        if block[0] * block[1] * block[2] > lim.max_threads_per_block:
            raise EmulatorError(
                f"{where}: {block[0] * block[1] * block[2]} threads per block exceed "
                f"{lim.name}'s {lim.max_threads_per_block}"
            )
        if any(b > m for b, m in zip(block, lim.max_block_dim, strict=True)):
            raise EmulatorError(f"{where}: block exceeds the maximum {lim.max_block_dim}")
        if any(g > m for g, m in zip(grid, lim.max_grid_dim, strict=True)):
            raise EmulatorError(f"{where}: grid exceeds the maximum {lim.max_grid_dim}")
        if grid[0] % self.cluster[0]:
            raise EmulatorError(
                f"{where}: the grid's x is not a multiple of the cluster's {self.cluster[0]} blocks"
            )
        if not isinstance(shared_mem, int) or shared_mem < 0:
            raise EmulatorError(f"{where}: shared_mem must be a non-negative int")
        if shared_mem > lim.shared_mem_per_block_optin:
            raise EmulatorError(
                f"{where}: {shared_mem} bytes of dynamic shared memory exceed {lim.name}'s "
                f"{lim.shared_mem_per_block_optin} per block"
            )

    def _pack(self, args: Sequence[object]) -> tuple[ctypes.Array, list[_ArrayArg | None]]:
        if len(args) != len(self.param_sizes):
            raise EmulatorError(
                f"kernel {self.kernel_name!r} takes {len(self.param_sizes)} arguments, "
                f"got {len(args)}"
            )
        blobs, arrays = [], []
        for i, (arg, size) in enumerate(zip(args, self.param_sizes, strict=True)):
            try:
                arr = _as_array(arg)
                blob = _pack_array(arr, size) if arr is not None else _pack_scalar(arg, size)
            except ValueError as e:
                raise EmulatorError(
                    f"kernel {self.kernel_name!r}, {self._param(i)} ({size} bytes): {e}"
                ) from None
            blobs.append(blob)
            arrays.append(arr)
        offsets, total = [], 0
        for blob in blobs:
            offsets.append(total)
            total += (len(blob) + 15) & ~15
        buffer = (ctypes.c_char * max(total, 16))()  # malloc'd: 16-byte aligned
        base = ctypes.addressof(buffer)
        for blob, off in zip(blobs, offsets, strict=True):
            ctypes.memmove(base + off, blob, len(blob))
        argv = (ctypes.c_void_p * max(len(blobs), 1))(*(base + off for off in offsets))
        argv._kf_buffer = buffer  # type: ignore[attr-defined]  # keeps the bytes alive
        return argv, arrays

    def launch(self, grid: object, block: object, shared_mem: int, *rest: object) -> None:
        """Run the kernel: `launch(grid, block, shared_mem, args)`, or `launch(grid, block,
        shared_mem, stream, args)` as _C.Kernel takes it (the stream is ignored).

        grid and block are ints or tuples of up to 3 ints; args are NumPy arrays or CPU torch
        tensors, or kfuse.runtime.kernel_args.TensorArg (data pointer, sizes, strides in elements),
        passed as pointer or kf::Tensor by the parameter's size; and Python scalars.
        Raises EmulatorError for a launch a GPU would reject, arguments that do not fit the
        parameters, an out-of-bounds tensor access, a deadlock or a spin across blocks.
        """
        if len(rest) not in (1, 2):
            raise TypeError("launch(grid, block, shared_mem, [stream,] args)")
        args = rest[-1]
        g3, b3 = _dims(grid, "grid"), _dims(block, "block")
        self._validate(g3, b3, shared_mem)
        argv, arrays = self._pack(list(args))  # type: ignore[call-overload]
        err = ctypes.create_string_buffer(_ERR_BYTES)
        bad_ptr = ctypes.c_ulonglong(0)
        with _launch_lock:
            rc = self._compiled.library.kf_emu_launch(
                (ctypes.c_uint * 3)(*g3),
                (ctypes.c_uint * 3)(*b3),
                shared_mem,
                self.cluster[0],
                argv,
                int(self.uses_fibers or self.cluster[0] > 1),
                self.spin_limit,
                self.stack_bytes,
                float(self.watchdog_seconds),
                err,
                _ERR_BYTES,
                ctypes.byref(bad_ptr),
            )
        if rc != 0:
            raise EmulatorError(
                self._launch_error(err.value.decode(errors="replace"), bad_ptr.value, arrays)
            )

    def _launch_error(self, message: str, bad_ptr: int, arrays: list[_ArrayArg | None]) -> str:
        text = f"kernel {self.kernel_name!r}: {message}"
        if bad_ptr:
            params = [self._param(i) for i, a in enumerate(arrays) if a and a.data == bad_ptr]
            if params:
                text += f" [the tensor is {' / '.join(params)}]"
        return text
