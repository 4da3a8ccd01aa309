"""kfuse: a Python-driven fusion compiler for NVIDIA GPUs.

Importing kfuse loads no CUDA library and creates no CUDA state: the driver and NVRTC are
loaded the first time something needs them.
"""

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
from kfuse.schedule import SchedulerType

__version__ = "0.1.0"
