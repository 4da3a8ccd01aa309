"""SchedulerType and the contract every scheduler implements (Scheduler, SchedulerParams)."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Protocol

from kfuse.ir.fusion import Fusion
from kfuse.runtime.info import RuntimeInfo

if TYPE_CHECKING:
    from kfuse._C import CompileParams, LaunchParams
    from kfuse.runtime.launch import GeneratedKernel


class SchedulerType(enum.Enum):
    """The schedulers, by the names nvFuser users know: a scheduler's one identity in Python
    (its name, the value, is for what must be a string: dumps, JSON, the C++ params' field).
    Registry order is priority order."""

    none = "none"
    no_op = "no_op"
    transpose = "transpose"
    pointwise = "pointwise"
    reduction = "reduction"
    inner_persistent = "inner_persistent"
    inner_outer_persistent = "inner_outer_persistent"
    outer_persistent = "outer_persistent"
    scan = "scan"
    expr_eval = "expr_eval"

    def __str__(self) -> str:
        return self.value


class Rejection(Exception):
    """A scheduler declining a fusion; the message is the reason without the scheduler name."""


class SchedulerParams(Protocol):
    """What a scheduler decided for one input signature, as the compiler reads it:
    kfuse._C.HeuristicParams and its subclasses (PointwiseParams, ReductionParams), and
    kfuse.schedule.transpose_params.TransposeParams. Only the scheduler that made them reads
    their other fields; the program cache keys pinned params by their hash."""

    @property
    def scheduler_type(self) -> SchedulerType:
        """The scheduler they are for."""
        ...

    @property
    def cparams(self) -> CompileParams:
        """How its kernels compile (NVRTC options, architecture, index type)."""
        ...

    @property
    def lparams(self) -> LaunchParams:
        """Launch dimensions the caller pinned, if any."""
        ...


class Scheduler(Protocol):
    """One scheduler. Schedulers are pure: they decide, pick parameters and generate kernel
    sources; the compiler (kfuse.engine.compiler) compiles what they generate and builds the
    Program the executor runs.

    generates_kernels: True for the schedulers whose work is generated kernels (the compiler
    calls `kernels`); False for expr_eval, whose ops run as library calls of the inputs'
    framework (kfuse.engine.program.LibraryProgram)."""

    scheduler_type: SchedulerType
    generates_kernels: bool

    def check(self, fusion: Fusion, info: RuntimeInfo | None) -> None:
        """Raise Rejection(reason) when this scheduler cannot take the fusion (info None:
        whether it could for some inputs)."""
        ...

    def heuristics(self, fusion: Fusion, info: RuntimeInfo) -> SchedulerParams:
        """Parameters for these inputs on this device."""
        ...

    def kernels(
        self, fusion: Fusion, info: RuntimeInfo, params: SchedulerParams
    ) -> list[GeneratedKernel]:
        """The kernels `params` generate for these inputs (source, name, launch
        configuration, operands), compiled by no one yet."""
        ...
