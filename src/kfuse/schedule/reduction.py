"""The reduction scheduler: reductions with a pointwise prologue and epilogue, no persistence.

Takes fusions whose reductions (sum, prod, max, min, Welford) all reduce the same axes of
same-shaped inputs, computed from the fusion inputs by pointwise ops and broadcasts, and whose
outputs live on the kept axes (keepdim included). Fusions that need the un-reduced input again
after a reduction belong to inner_persistent.

ReductionParams, as this scheduler reads them:
* fastest_dim_reduction: True for the inner kernel (the reduced axis is the innermost in
  memory: block_x threads reduce a row, block_y rows per block), False for the outer kernel
  (threads along the innermost kept axis, block_y threads splitting the reduced axis);
* vectorize_reduction (inner) / vectorize_iter (outer): elements per vector access V
  (a power of two <= 16; operands that are not aligned for it are read element by element);
* unroll_reduction: vectors (inner) or reduced rows (outer) each thread loads before it
  accumulates them;
* grid_x: blocks over the kept elements (grid-strided); grid_y: blocks splitting the reduced
  axis. grid_y > 1 is a grid reduction: partial results go to a workspace and a second kernel
  combines them in a fixed order (cross_grid_count = grid_y, cross_block set);
* cparams.index_type: int32 unless sizes need int64 (int64 is used whenever needed).
Heuristics choose them from the device (SM count, threads per SM) and the sizes
(kfuse.schedule.reduction_heuristics); kfuse.schedule.reduction_launch turns any params into
the kernels and their launches; kfuse.schedule.reduction_params holds what the reduction-family
schedulers share about their params.
"""

from __future__ import annotations

from typing import Any

from kfuse.codegen.reduction_plan import (
    PlanError,
    ReductionLayout,
    ReductionPlan,
    plan_reductions,
    reduction_layout,
)
from kfuse.ir.fusion import Fusion
from kfuse.runtime.info import RuntimeInfo
from kfuse.schedule.reduction_heuristics import inner_heuristics, is_inner, outer_heuristics
from kfuse.schedule.reduction_launch import reduction_kernels
from kfuse.schedule.reduction_params import fill_launch_params
from kfuse.schedule.types import Rejection, SchedulerType


def _plan(fusion: Fusion) -> ReductionPlan:
    try:
        return plan_reductions(fusion, fold_softmax=True)
    except PlanError as exc:
        raise Rejection(str(exc)) from None


def _layout(plan: ReductionPlan, info: RuntimeInfo) -> ReductionLayout:
    try:
        return reduction_layout(plan, info)
    except PlanError as exc:
        raise Rejection(str(exc)) from None


class ReductionScheduler:
    """Schedules non-persistent reduction fusions (see the module docstring)."""

    scheduler_type = SchedulerType.reduction
    generates_kernels = True

    def check(self, fusion: Fusion, info: RuntimeInfo | None) -> None:
        plan = _plan(fusion)
        if plan.dependent_inputs:
            red = next(
                r
                for r in plan.reductions[1:]
                if any(
                    u.val in plan.reduction_outputs()
                    for u in plan.stages[plan.reductions.index(r)].uses
                )
            )
            raise Rejection(
                f"the input of {red.outputs[0].name} ({getattr(red, 'op', 'welford')}) "
                "needs an earlier reduction result, so the un-reduced input is "
                "needed again after a reduction (inner_persistent's job)"
            )
        if plan.loop_outputs:
            out = fusion.outputs[plan.loop_outputs[0]]
            raise Rejection(
                f"output {out.name} has the reduced axes: it needs the un-reduced "
                "input again after the reduction (inner_persistent's job)"
            )
        if info is not None:
            _layout(plan, info)

    def kernels(self, fusion: Fusion, info: RuntimeInfo, params: Any) -> list[Any]:
        """The kernels `params` generate for this call (GeneratedKernels; not compiled)."""
        return reduction_kernels(fusion, info, params)

    def heuristics(self, fusion: Fusion, info: RuntimeInfo) -> Any:
        from kfuse._C import ReductionParams

        plan = _plan(fusion)
        layout = _layout(plan, info)
        params = ReductionParams(SchedulerType.reduction)
        if is_inner(layout):
            inner_heuristics(params, layout, info.device)
        else:
            outer_heuristics(params, layout, info.device, plan)
        params.cparams.index_type = "int64" if layout.needs_int64() else "int32"
        fill_launch_params(params, plan)
        return params
