"""SchedulerType and the interface every scheduler implements."""

from __future__ import annotations

import enum
from typing import Any, Protocol

from kfuse.ir.fusion import Fusion
from kfuse.runtime.info import RuntimeInfo


class SchedulerType(enum.Enum):
    """The schedulers, by the names nvFuser users know. Registry order is priority order."""

    none = "none"
    no_op = "no_op"
    transpose = "transpose"
    pointwise = "pointwise"
    reduction = "reduction"
    inner_persistent = "inner_persistent"
    inner_outer_persistent = "inner_outer_persistent"
    outer_persistent = "outer_persistent"
    expr_eval = "expr_eval"

    def __str__(self) -> str:
        return self.value


class Rejection(Exception):
    """A scheduler declining a fusion; the message is the reason without the scheduler name."""


class Scheduler(Protocol):
    """One scheduler. Schedulers are pure: they decide, pick parameters and generate kernel
    sources; the compiler (kfuse.engine.compiler) compiles what they generate and builds the
    Program the executor runs.

    generates_kernels: True for the schedulers whose work is generated kernels (they
    implement `kernels`); False for expr_eval, whose ops run as library calls of the
    inputs' framework (kfuse.engine.program.LibraryProgram)."""

    scheduler_type: SchedulerType
    generates_kernels: bool

    def check(self, fusion: Fusion, info: RuntimeInfo | None) -> None:
        """Raise Rejection(reason) when this scheduler cannot take the fusion (info None:
        whether it could for some inputs)."""

    def heuristics(self, fusion: Fusion, info: RuntimeInfo) -> Any:
        """Parameters for these inputs on this device (a HeuristicParams subclass)."""

    def kernels(self, fusion: Fusion, info: RuntimeInfo, params: Any) -> list[Any]:
        """The kernels `params` generate for these inputs (kfuse.runtime.launch.GeneratedKernel:
        source, name, launch configuration, operands), compiled by no one yet."""
        ...
