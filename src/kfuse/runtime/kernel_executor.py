"""Run hand-written CUDA kernels: :class:`KernelExecutor` compiles once, launches on the caller's
stream.

It wraps ``kfuse._C.KernelExecutor``; the wrapper's only job is the stream: with
``stream=None`` the kernel runs on the current stream of the framework whose arrays are in
``args`` (``torch.cuda.current_stream(device)`` or ``cupy.cuda.get_current_stream()``), and on
the legacy default stream (0) when there is none.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from kfuse import _C
from kfuse.errors import InputError, KfuseError
from kfuse.runtime import profiling_hooks


@contextlib.contextmanager
def _input_errors(what: str) -> Iterator[None]:
    """The extension's argument errors (TypeError, ValueError, and RuntimeError for a call out
    of order) as kfuse InputErrors: bad use of KernelExecutor is the caller's input."""
    try:
        yield
    except (TypeError, ValueError, RuntimeError) as exc:
        if isinstance(exc, KfuseError):  # ParamsError is a kfuse error already
            raise
        raise InputError(f"KernelExecutor.{what}: {exc}") from None


def _check_type(value: Any, kind: type, what: str, optional: bool = True) -> None:
    if (value is None and optional) or isinstance(value, kind):
        return
    raise InputError(
        f"KernelExecutor: {what} must be a {kind.__name__}"
        f"{' or None' if optional else ''}, got {type(value).__name__}"
    )


def stream_handle(stream: Any) -> int:
    """A stream as the integer handle ``_C`` takes: an int, a torch.cuda.Stream
    (``.cuda_stream``), a cupy.cuda.Stream (``.ptr``), or anything with ``__cuda_stream__``."""
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        return int(protocol()[1])
    for attribute in ("cuda_stream", "ptr"):
        handle = getattr(stream, attribute, None)
        if isinstance(handle, int):
            return handle
    raise InputError(f"cannot use {type(stream).__name__} as a CUDA stream")


def current_stream_for(args: Sequence[Any]) -> int:
    """The current stream of the framework owning the first CUDA array in ``args`` (0: none)."""
    for arg in args:
        module = type(arg).__module__
        if module.startswith("torch"):
            torch = sys.modules.get("torch")
            if torch is not None and isinstance(arg, torch.Tensor) and arg.is_cuda:
                return int(torch.cuda.current_stream(arg.device).cuda_stream)
        elif module.startswith("cupy"):
            cupy = sys.modules.get("cupy")
            if cupy is not None and isinstance(arg, cupy.ndarray):
                with arg.device:
                    return int(cupy.cuda.get_current_stream().ptr)
    return 0


class KernelExecutor:
    """Compiles one raw CUDA kernel (``extern "C" __global__``) and runs it.

    ``compile(source, kernel_name, launch_constraints=None, compile_params=None)`` compiles with
    NVRTC for ``compile_params.arch`` (default: the current device). ``run(args,
    launch_constraints=None, stream=None)`` launches with the compile-time launch constraints,
    overridden field by field by the run-time ones; arguments are packed by each parameter's
    size (docs/INTERFACES.md, "Kernel ABI"). The size is all the driver tells about a
    parameter, so pass a Python float for a float parameter: an int there is packed as int32.
    """

    def __init__(self) -> None:
        self._impl = _C.KernelExecutor()
        self._unreported_compile_s = 0.0

    def compile(
        self,
        source: str,
        kernel_name: str,
        launch_constraints: _C.LaunchParams | None = None,
        compile_params: _C.CompileParams | None = None,
    ) -> None:
        """Compile ``kernel_name`` from ``source``; raises CompileError with the NVRTC log."""
        _check_type(source, str, "source", optional=False)
        _check_type(kernel_name, str, "kernel_name", optional=False)
        _check_type(launch_constraints, _C.LaunchParams, "launch_constraints")
        _check_type(compile_params, _C.CompileParams, "compile_params")
        started = profiling_hooks.clock()
        with _input_errors("compile"):
            self._impl.compile(source, kernel_name, launch_constraints, compile_params)
        # A PythonProfiler reports a compile done in its block with the next run.
        self._unreported_compile_s = (
            profiling_hooks.clock() - started if profiling_hooks.active is not None else 0.0
        )

    def run(
        self,
        args: Sequence[Any],
        launch_constraints: _C.LaunchParams | None = None,
        stream: Any = None,
    ) -> None:
        """Launch on ``stream`` (None: the args' framework's current stream)."""
        if not isinstance(args, (list, tuple)):
            raise InputError(f"KernelExecutor.run: args must be a list, got {type(args).__name__}")
        _check_type(launch_constraints, _C.LaunchParams, "launch_constraints")
        handle = current_stream_for(args) if stream is None else stream_handle(stream)
        with profiling_hooks.user_kernel(args, self._unreported_compile_s), _input_errors("run"):
            self._impl.run(list(args), launch_constraints, handle)
        self._unreported_compile_s = 0.0

    def kernel(self, device: int) -> _C.Kernel:
        """The compiled kernel as loaded on ``device`` (registers, shared memory, params)."""
        return self._impl.kernel(device)

    @property
    def is_compiled(self) -> bool:
        """Whether compile() has succeeded."""
        return self._impl.is_compiled

    @property
    def kernel_name(self) -> str:
        """Name of the compiled kernel."""
        return self._impl.kernel_name

    @property
    def arch(self) -> str:
        """The architecture compiled for, e.g. 'sm_90'."""
        return self._impl.arch

    @property
    def cubin(self) -> bytes:
        """The compiled cubin."""
        return self._impl.cubin

    @property
    def source(self) -> str:
        """The CUDA source compiled."""
        return self._impl.source

    @property
    def launch_constraints(self) -> _C.LaunchParams:
        """The launch constraints given to compile()."""
        return self._impl.launch_constraints

    @property
    def compile_params(self) -> _C.CompileParams:
        """The compile parameters used."""
        return self._impl.compile_params
