"""kfuse under nvFuser's name: the module-level API of nvFuser's direct bindings
(`nvfuser_direct`), so that a program written for nvFuser runs on kfuse unchanged.

    import kfuse.nvfuser_direct as nvfuser_direct
    nvfuser_direct.install()        # now `import nvfuser_direct` (and `nvfuser`) give it

Lightning Thunder's nvFuser executor is such a program: it imports `nvfuser_direct` when that
reports a version of at least 0.2.34 (version()), and reads `compute_tensor_descriptor` from
`nvfuser` (install() registers both names). FusionDefinition is kfuse's, printed in nvFuser's
form. The multi-device names (multidevice, ParallelType's mesh axes, execute_with_dtensors)
exist so that the executor imports; using them is a kfuse error, as kfuse runs on one GPU.
"""

from __future__ import annotations

import enum
import sys
import types
from collections.abc import Sequence
from typing import Any

from kfuse.dtypes import DataType
from kfuse.engine.fusion_cache import LRUCache
from kfuse.errors import DefinitionError, InputError
from kfuse.frontend import FusionDefinition as _KfuseFusionDefinition
from kfuse.ir.printer import NVFUSER_STYLE, fusion_to_python
from kfuse.ir.values import Scalar, TensorView
from kfuse.nvfuser_direct.descriptor import compute_tensor_descriptor
from kfuse.nvfuser_direct.lru_cache import LruFusionCache
from kfuse.nvfuser_direct.philox_state import check_state_uses, is_uint64
from kfuse.nvfuser_direct.repro import fake_copies, repro_script
from kfuse.profiler import PythonProfiler

__all__ = [
    "DataType",
    "FusionDefinition",
    "LRUCache",
    "LruFusionCache",
    "ParallelType",
    "PythonProfiler",
    "compute_tensor_descriptor",
    "execute_with_dtensors",
    "install",
    "multidevice",
    "version",
]

NVFUSER_API_VERSION = "0.2.34"
"""The nvFuser release whose Python API this module follows (Thunder gates on >= 0.2.34)."""

_NAMES = ("nvfuser_direct", "nvfuser")


def version() -> str:
    """The nvFuser version whose API kfuse follows, as nvfuser_direct.version() reports one."""
    return NVFUSER_API_VERSION


class FusionDefinition(_KfuseFusionDefinition):
    """kfuse's FusionDefinition, printed as nvFuser prints its own (repr, str)."""

    def __repr__(self) -> str:
        return fusion_to_python(self.fusion, style=NVFUSER_STYLE)

    __str__ = __repr__

    fake_inputs: list[Any] | None = None
    _philox_state_inputs: list[TensorView] | None = None

    def define_tensor(
        self,
        shape: Sequence[int] | None = None,
        contiguity: Any = None,
        dtype: Any = DataType.Float,
        is_cpu: bool = False,
        stride_order: Sequence[int] | None = None,
        **kwargs: Any,
    ) -> Any:
        """kfuse's define_tensor, and nvFuser's UInt64 tensors as Thunder defines them:
        flash attention's philox state, an Int tensor of the same 64-bit words that only
        sdpfa_bwd may take (kfuse.nvfuser_direct.philox_state)."""
        if not is_uint64(dtype):
            return super().define_tensor(shape, contiguity, dtype, is_cpu, stride_order, **kwargs)
        if is_cpu:
            raise DefinitionError(
                "define_tensor: a UInt64 CPU scalar tensor: kfuse has no unsigned integers "
                "(it takes UInt64 only as flash attention's philox state, a GPU tensor)"
            )
        tv = super().define_tensor(shape, contiguity, DataType.Int, False, stride_order, **kwargs)
        assert isinstance(tv, TensorView)  # not a CPU scalar (is_cpu is False)
        if self._philox_state_inputs is None:
            self._philox_state_inputs = []
        self._philox_state_inputs.append(tv)
        return tv

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        super().__exit__(exc_type, exc, tb)
        if exc_type is None and self._philox_state_inputs:
            try:
                check_state_uses(self.fusion, self._philox_state_inputs)
            except DefinitionError as err:
                self._state = "broken"
                self._broken_by = f"DefinitionError: {err}"
                raise

    # nvFuser's execute unpacks every list or tuple input into scalars (not only those of a
    # define_vector): a printed definition defines a vector's scalars one by one.
    _vector_inputs = True

    def repro_script_for(self, inputs: Sequence[Any] | None = None) -> str:
        """A script that defines this fusion and, given `inputs` (torch tensors and numbers),
        runs it on inputs of their shapes, strides, dtypes and devices (random values)."""
        return repro_script(repr(self), inputs)

    def last_repro_script(self) -> str:
        """repro_script_for the inputs of the last execute(..., save_repro_inputs=True)."""
        if self.fake_inputs is None:
            raise InputError(
                "last_repro_script: no inputs were kept; run "
                "fd.execute(inputs, save_repro_inputs=True) first"
            )
        return self.repro_script_for(self.fake_inputs)

    def _keep_repro_inputs(self, inputs: Any) -> None:
        # As nvFuser: torch's fake tensors (shape, strides, dtype, device; no storage).
        self.fake_inputs = fake_copies(inputs)


class ParallelType(enum.Enum):
    """nvFuser's parallel types, by name. kfuse schedules every fusion itself, so none is
    ever applied; Thunder names mesh_x only for multi-device fusions."""

    mesh_x = "mesh_x"
    mesh_y = "mesh_y"
    mesh_z = "mesh_z"
    grid_x = "grid_x"
    grid_y = "grid_y"
    grid_z = "grid_z"
    block_x = "block_x"
    block_y = "block_y"
    block_z = "block_z"
    mma = "mma"
    serial = "serial"
    tma = "tma"
    unroll = "unroll"
    unswitch = "unswitch"
    vectorize = "vectorize"
    stream = "stream"


_ONE_DEVICE = (
    "kfuse runs a fusion on one GPU; multi-device fusions (DTensor inputs) are not supported"
)


class _MultiDeviceName:
    """A class of nvFuser's multidevice module: present, and a kfuse error when made."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise DefinitionError(f"nvfuser_direct.multidevice.{type(self).__name__}: {_ONE_DEVICE}")


multidevice = types.ModuleType(
    "nvfuser_direct.multidevice", "nvFuser's multi-device names; making any is a kfuse error."
)
for _name in (
    "DeviceMesh",
    "Sharding",
    "Communicator",
    "MultiDeviceExecutor",
    "MultiDeviceExecutorParams",
):
    setattr(
        multidevice, _name, type(_name, (_MultiDeviceName,), {"__module__": multidevice.__name__})
    )
del _name


def execute_with_dtensors(fd: Any, in_dtensors: Any) -> list[Any]:
    """nvFuser's run of a fusion on DTensors: a kfuse InputError (one GPU only)."""
    raise InputError(f"execute_with_dtensors: {_ONE_DEVICE}")


# nvFuser's compiled module: Thunder tests `isinstance(v, nvfuser._C.Scalar)`.
_C = types.SimpleNamespace(Scalar=Scalar, TensorView=TensorView)


def install() -> None:
    """Make `import nvfuser_direct` and `import nvfuser` give this module (and
    `nvfuser_direct.pytorch_utils` its pytorch_utils; Thunder 0.2.6 reads
    compute_tensor_descriptor from `nvfuser`). Never done on import; a DefinitionError where
    another module of either name is imported already (a real nvFuser: the two cannot share
    a process under one name). Calling it again is harmless."""
    this = sys.modules[__name__]
    for name in _NAMES:
        present = sys.modules.get(name)
        if present is not None and present is not this:
            raise DefinitionError(
                f"kfuse.nvfuser_direct.install(): a module named {name!r} is imported already "
                f"({getattr(present, '__file__', present)!r}); install kfuse before importing "
                "nvFuser, or run without nvFuser"
            )
    for name in _NAMES:
        sys.modules[name] = this
    # nvFuser's submodule, under its name too (imported here, so that the name is this one
    # module, not a second copy made from the package's path).
    from kfuse.nvfuser_direct import pytorch_utils

    sys.modules["nvfuser_direct.pytorch_utils"] = pytorch_utils


def uninstall() -> None:
    """Undo install(): the two names no longer give this module."""
    this = sys.modules[__name__]
    for name in _NAMES:
        if sys.modules.get(name) is this:
            del sys.modules[name]
    if sys.modules.get("nvfuser_direct.pytorch_utils") is getattr(this, "pytorch_utils", None):
        del sys.modules["nvfuser_direct.pytorch_utils"]
