"""kfuse's exceptions: one hierarchy rooted at :class:`KfuseError`.

``CudaError``, ``CompileError``, ``ParamsError`` and ``ProfilerError`` are defined by the C++
extension (it raises them) and are re-exported here; ``kfuse.errors.CudaError is
kfuse._C.CudaError``.
"""

from kfuse import _C
from kfuse._errors_base import KfuseError

CudaError = _C.CudaError
CompileError = _C.CompileError
ProfilerError = _C.ProfilerError
ParamsError = _C.ParamsError  # also a ValueError and a TypeError


class DefinitionError(KfuseError):
    """An invalid fusion definition, raised where it is defined (names the op and operand)."""


class InputError(KfuseError):
    """Inputs that do not match the definition (dtype, rank, device, framework mix)."""


class SchedulerError(KfuseError):
    """No scheduler accepts a fusion segment; carries each scheduler's rejection reason."""


class OutOfMemoryError(KfuseError):
    """An output or scratch buffer could not be allocated; names the buffer and its size."""


class EmulatorError(KfuseError):
    """The host emulator could not build or run generated CUDA source."""


class KfuseWarning(UserWarning):
    """The base class of kfuse's warnings (filter them with warnings.filterwarnings)."""


class NoAutogradWarning(KfuseWarning):
    """A torch input requires grad: kfuse has no autograd, so no gradient flows through a
    fusion and its outputs do not require grad. Shown once per process."""


class ComplexCastWarning(KfuseWarning):
    """A complex value is cast to a real dtype: its imaginary part is discarded (torch and
    nvFuser warn the same). Shown where the cast is defined."""


__all__ = [
    "KfuseError",
    "KfuseWarning",
    "NoAutogradWarning",
    "ComplexCastWarning",
    "DefinitionError",
    "InputError",
    "SchedulerError",
    "CompileError",
    "CudaError",
    "ProfilerError",
    "ParamsError",
    "EmulatorError",
    "OutOfMemoryError",
]
