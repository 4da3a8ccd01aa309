"""The schedulers in priority order, and the placeholders for those not built yet."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kfuse.ir.exprs import ReductionOp, WelfordOp
from kfuse.ir.fusion import Fusion
from kfuse.runtime.info import RuntimeInfo
from kfuse.schedule.expr_eval import ExprEvalScheduler
from kfuse.schedule.inner_outer import InnerOuterPersistentScheduler
from kfuse.schedule.outer_persistent import OuterPersistentScheduler
from kfuse.schedule.persistent import InnerPersistentScheduler
from kfuse.schedule.pointwise import PointwiseScheduler
from kfuse.schedule.reduction import ReductionScheduler
from kfuse.schedule.scan import ScanScheduler
from kfuse.schedule.transpose import TransposeScheduler
from kfuse.schedule.types import Rejection, Scheduler, SchedulerParams, SchedulerType

if TYPE_CHECKING:
    from kfuse._C import HeuristicParams
    from kfuse.runtime.launch import GeneratedKernel


class NoOpScheduler:
    """Fusions whose outputs are all empty: nothing to launch, outputs are only allocated."""

    scheduler_type = SchedulerType.no_op
    generates_kernels = True  # none: no launches

    def check(self, fusion: Fusion, info: RuntimeInfo | None) -> None:
        if info is None:
            raise Rejection("whether outputs are empty depends on the inputs")
        for out in fusion.outputs:
            shape = info.shape(out)
            if all(n != 0 for n in shape):
                raise Rejection(
                    f"output {out.name} has {_numel(shape)} elements; no_op takes "
                    "fusions whose outputs are all empty"
                )

    def kernels(
        self, fusion: Fusion, info: RuntimeInfo, params: SchedulerParams
    ) -> list[GeneratedKernel]:
        """Nothing to launch: the outputs are only allocated."""
        return []

    def heuristics(self, fusion: Fusion, info: RuntimeInfo) -> HeuristicParams:
        from kfuse._C import HeuristicParams

        return HeuristicParams(SchedulerType.no_op)


class PendingScheduler:
    """A scheduler of a later issue: rejects with its reason, so queries never raise."""

    def __init__(self, scheduler_type: SchedulerType, needs_reduction: bool) -> None:
        self.scheduler_type = scheduler_type
        self.needs_reduction = needs_reduction
        self.generates_kernels = False  # never reached: check() always rejects

    def check(self, fusion: Fusion, info: RuntimeInfo | None) -> None:
        has_reduction = any(isinstance(e, (ReductionOp, WelfordOp)) for e in fusion.exprs)
        if self.needs_reduction and not has_reduction:
            raise Rejection("fusion has no reduction")
        raise Rejection(
            f"the {self.scheduler_type.value} scheduler is not implemented in this version of kfuse"
        )

    def heuristics(self, fusion: Fusion, info: RuntimeInfo) -> SchedulerParams:
        raise Rejection(f"the {self.scheduler_type.value} scheduler is not implemented")

    def kernels(
        self, fusion: Fusion, info: RuntimeInfo, params: SchedulerParams
    ) -> list[GeneratedKernel]:
        raise Rejection(f"the {self.scheduler_type.value} scheduler is not implemented")


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


SCHEDULERS: tuple[Scheduler, ...] = (
    NoOpScheduler(),
    # Before pointwise, which takes every fusion it does: it declines all but those whose
    # operands disagree on the innermost axis.
    TransposeScheduler(),
    PointwiseScheduler(),
    ReductionScheduler(),
    InnerPersistentScheduler(),
    InnerOuterPersistentScheduler(),
    OuterPersistentScheduler(),
    ScanScheduler(),
    ExprEvalScheduler(),
)
"""Every scheduler, in the order find_compatible_schedulers reports and execute tries them."""


def scheduler_for(scheduler_type: SchedulerType) -> Scheduler:
    """The registered scheduler of a type."""
    for s in SCHEDULERS:
        if s.scheduler_type is scheduler_type:
            return s
    raise KeyError(scheduler_type)
