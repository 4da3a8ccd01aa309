"""kfuse: a Python-driven fusion compiler for NVIDIA GPUs.

Importing kfuse loads no CUDA library and creates no CUDA state: the driver and NVRTC are
loaded the first time something needs them. `kfuse.reference` and `kfuse.testing` (which the
README uses as such) are imported the first time they are used.
"""

from typing import TYPE_CHECKING, Any

from kfuse import _C, schedule
from kfuse._C import CompileParams, HeuristicParams, LaunchParams, PointwiseParams, ReductionParams
from kfuse.dtypes import DataType
from kfuse.errors import (
    CompileError,
    CudaError,
    DefinitionError,
    EmulatorError,
    InputError,
    KfuseError,
    OutOfMemoryError,
    ParamsError,
    ProfilerError,
    SchedulerError,
)
from kfuse.frontend import FusionDefinition
from kfuse.profiler import FusionProfile, KernelProfile, PythonProfiler
from kfuse.runtime.kernel_executor import KernelExecutor
from kfuse.runtime.rng_state import manual_seed
from kfuse.schedule import SchedulerType

# The one place kfuse's version is written: the build reads this line (pyproject.toml's
# regex provider), `kfuse info` and `kfuse --version` print it, CHANGELOG.md has its entry.
__version__ = "0.1.0"

# The public names, for `from kfuse import *` and for type checkers: under mypy --strict a
# name a package imports is not exported unless listed here. (The lazy submodules reference
# and testing stay out: `import *` would load them, and testing needs Hypothesis.)
__all__ = [
    "CompileError",
    "CompileParams",
    "CudaError",
    "DataType",
    "DefinitionError",
    "EmulatorError",
    "FusionDefinition",
    "FusionProfile",
    "HeuristicParams",
    "InputError",
    "KernelExecutor",
    "KernelProfile",
    "KfuseError",
    "LaunchParams",
    "OutOfMemoryError",
    "ParamsError",
    "PointwiseParams",
    "ProfilerError",
    "PythonProfiler",
    "ReductionParams",
    "SchedulerError",
    "SchedulerType",
    "manual_seed",
    "schedule",
]

# Submodules that are attributes of kfuse without `import kfuse.<name>`, imported on first
# use: the eager reference and the testing helpers are not part of defining and running
# fusions, so `import kfuse` does not load them.
_LAZY_SUBMODULES = ("reference", "testing")

if TYPE_CHECKING:
    from kfuse import reference, testing


def __getattr__(name: str) -> Any:
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f"kfuse.{name}")  # also binds kfuse.<name>
    raise AttributeError(f"module 'kfuse' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY_SUBMODULES})
