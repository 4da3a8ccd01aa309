"""SchedulerType and the interface every scheduler implements."""

from __future__ import annotations

import enum
from typing import Any, Protocol

from kfuse.ir.fusion import Fusion
from kfuse.runtime_info import RuntimeInfo


class SchedulerType(enum.Enum):
    """The schedulers, by the names nvFuser users know. Registry order is priority order."""

    none = "none"
    no_op = "no_op"
    pointwise = "pointwise"
    reduction = "reduction"
    inner_persistent = "inner_persistent"
    outer_persistent = "outer_persistent"
    expr_eval = "expr_eval"

    def __str__(self) -> str:
        return self.value


class Rejection(Exception):
    """A scheduler declining a fusion; the message is the reason without the scheduler name."""


class CompiledProgram(Protocol):
    """What a scheduler hands the executor: run one call's launches."""

    def run(self, info: RuntimeInfo, outputs: list[Any], stream: int) -> None: ...


class Scheduler(Protocol):
    """One scheduler: decide, pick parameters, build a launchable program."""

    scheduler_type: SchedulerType

    def check(self, fusion: Fusion, info: RuntimeInfo) -> None:
        """Raise Rejection(reason) when this scheduler cannot take the fusion."""

    def heuristics(self, fusion: Fusion, info: RuntimeInfo) -> Any:
        """Parameters for these inputs on this device (a HeuristicParams subclass)."""

    def program(self, fusion: Fusion, info: RuntimeInfo, params: Any) -> Any:
        """A program (source, launch configuration, argument packing) for `params`."""
