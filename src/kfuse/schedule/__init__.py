"""Public scheduling API, modelled on nvFuser's: ask which schedulers take a fusion for given
inputs, compute a scheduler's parameters, and (through FusionDefinition.manual_execute) run
exactly those parameters.

    ok, why = schedule.can_schedule(fd.fusion, SchedulerType.reduction, inputs)
    schedule.find_compatible_schedulers(fd.fusion, inputs)   # [SchedulerType.pointwise]
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.pointwise, inputs)
"""

from __future__ import annotations

from typing import Any

from kfuse.errors import KfuseError, SchedulerError
from kfuse.ir.fusion import Fusion
from kfuse.ir.layout_ops import boundary_inputs
from kfuse.runtime.info import RuntimeInfo, build_runtime_info
from kfuse.schedule.registry import SCHEDULERS, scheduler_for
from kfuse.schedule.types import Rejection, Scheduler, SchedulerParams, SchedulerType

__all__ = [
    "SchedulerType",
    "can_schedule",
    "find_compatible_schedulers",
    "compute_heuristics",
    "rejection_reason",
]


def _fusion_of(fusion_or_fd: Any) -> Fusion:
    """The canonical form of the fusion (kfuse.ir.canonicalize): what fd.execute schedules,
    so that these answers and the params they give hold for it.

    Inside the `with FusionDefinition() as fd:` block (where nvFuser's tutorials ask, after
    fd.add_output) that is the canonical form of the fusion as defined so far."""
    from kfuse.ir.canonicalize import canonical_fusion

    fusion = getattr(fusion_or_fd, "fusion", fusion_or_fd)
    if not isinstance(fusion, Fusion):
        raise SchedulerError(
            f"expected a Fusion or FusionDefinition, got {type(fusion_or_fd).__name__}"
        )
    if fusion.in_definition:
        if not fusion.outputs:
            raise SchedulerError(
                "the fusion has no outputs yet: call fd.add_output(t) before asking "
                "which schedulers take it"
            )
        fusion = fusion.as_defined_so_far()
    return canonical_fusion(fusion)


def resolve_scheduler(scheduler_type: object) -> Scheduler:
    """The registered scheduler of a SchedulerType (or its name, parsed here into the enum:
    the one place a user's string names a scheduler); SchedulerError for anything else, and
    for SchedulerType.none, which names no scheduler."""
    try:
        kind = SchedulerType(getattr(scheduler_type, "value", scheduler_type))
    except (ValueError, TypeError):
        raise SchedulerError(
            f"unknown scheduler type {scheduler_type!r}; the types are "
            f"{', '.join(t.value for t in SchedulerType)}"
        ) from None
    if kind is SchedulerType.none:
        raise SchedulerError("Scheduler none rejected: 'none' is not a scheduler")
    return scheduler_for(kind)


def rejection_reason(scheduler: Scheduler, fusion: Fusion, info: RuntimeInfo | None) -> str | None:
    """None when `scheduler` accepts, else "Scheduler <name> rejected: <cause>".

    Library ops (matmul, linear) are rejected here for every kernel-generating scheduler, so
    no kernel planner ever has to walk them.
    """
    from kfuse.codegen.domain import UnsupportedExpr
    from kfuse.schedule.expr_eval import describe_library_expr, library_expr

    name = scheduler.scheduler_type.value
    bounds = boundary_inputs(fusion)
    if bounds:
        return (
            f"Scheduler {name} rejected: fd.ops.segment_set asks for a segment boundary after "
            f"{', '.join(v.name for v in bounds)}, which this fusion also computes"
        )
    if scheduler.scheduler_type not in (SchedulerType.expr_eval, SchedulerType.no_op):
        lib = library_expr(fusion)
        if lib is not None:
            return (
                f"Scheduler {name} rejected: fusion has {describe_library_expr(lib)}, "
                "which runs through a library (expr_eval), not generated code"
            )
    try:
        scheduler.check(fusion, info)
    except (Rejection, UnsupportedExpr) as exc:
        return f"Scheduler {name} rejected: {exc}"
    return None


def can_schedule(fusion: Any, scheduler_type: SchedulerType, inputs: list[Any]) -> tuple[bool, str]:
    """(True, "") when the scheduler takes the fusion for these inputs, else (False, reason).

    Never raises for a valid fusion: bad inputs and unknown schedulers come back as reasons.
    """
    try:
        scheduler = resolve_scheduler(scheduler_type)
    except SchedulerError as exc:
        return False, str(exc)
    name = scheduler.scheduler_type.value
    try:
        fusion = _fusion_of(fusion)
        info = build_runtime_info(fusion, inputs)
    except KfuseError as exc:
        return False, f"Scheduler {name} rejected: {exc}"
    reason = rejection_reason(scheduler, fusion, info)
    return (True, "") if reason is None else (False, reason)


def find_compatible_schedulers(fusion: Any, inputs: list[Any]) -> list[SchedulerType]:
    """Every scheduler that takes the whole fusion for these inputs, in priority order."""
    fusion = _fusion_of(fusion)
    info = build_runtime_info(fusion, inputs)
    return [s.scheduler_type for s in SCHEDULERS if rejection_reason(s, fusion, info) is None]


def compute_heuristics(
    fusion: Any, scheduler_type: SchedulerType, inputs: list[Any]
) -> SchedulerParams:
    """The parameters `scheduler_type` picks for these inputs (the fusion is not changed).

    Raises SchedulerError with the rejection reason when the scheduler cannot take it.
    """
    fusion = _fusion_of(fusion)
    scheduler = resolve_scheduler(scheduler_type)
    info = build_runtime_info(fusion, inputs)
    reason = rejection_reason(scheduler, fusion, info)
    if reason is not None:
        raise SchedulerError(reason)
    return scheduler.heuristics(fusion, info)
