"""The inner_persistent scheduler: normalizations whose rows fit on chip (registers, or
shared memory for long rows).

Takes reduction fusions (same reduced axes everywhere, reduced axes innermost in memory) that
need the un-reduced row again after a reduction: softmax and log_softmax (a sum of values
computed from the max), layer/RMS norm (outputs on the whole row computed from the mean and
variance), several outputs (normalized row plus mean and rstd). Fusions that need no
persistence belong to the reduction scheduler, so the two never both accept a fusion.

ReductionParams, as this scheduler reads them (persistent = True):
* block_x: threads per row; block_y: rows per block; grid_x: blocks over rows (grid-strided);
* vectorize_reduction: V elements per vector access along the row;
* persistent_batch_size: B vectors held per thread: block_x * B * V * C must cover the row;
* smem_persistent: the held vectors live in dynamic shared memory instead of registers;
* reload_batch_size: the last R of the B vectors are not held; each pass reads them again
  from global memory (L2 serves all passes but the first);
* cluster_size: C blocks of a thread-block cluster (sm_90+, the emulator too) share each row,
  thread x of block r holding vectors x + r * block_x + b * C * block_x; their reductions
  are combined through distributed shared memory (block_y 1, grid_x a multiple of C);
* cparams.index_type as for the reduction scheduler.
Heuristics: V from 16-byte accesses, block_x so that each thread holds about 4 vectors
(up to 1024 threads per row), B = the vectors left per thread. Rows that need 512 or more
threads that way are held in shared memory instead (_smem_layout); rows too long for two
blocks of an SM to hold there are held in part by each and the rest reloaded. Rows that one
block an SM could still not hold whole are split over a cluster of 8 blocks where the device
runs clusters (CLUSTER_SIZE), else held in part by one block an SM. A row that fits none
of these (more than MAX_HELD_WORDS 32-bit registers of held values per thread, a reloaded
part that L2 would not keep, a part too large for a cluster's blocks) is rejected.
The heuristics and their constants are kfuse.schedule.persistent_heuristics; the params'
checks and the kernel spec, kfuse.schedule.persistent_spec.
"""

from __future__ import annotations

from typing import Any

from kfuse.codegen.persistent import emit_persistent
from kfuse.codegen.persistent_memory import smem_bytes_held
from kfuse.codegen.reduction_plan import PlanError, plan_reductions, reduction_layout
from kfuse.errors import SchedulerError
from kfuse.ir.fusion import Fusion
from kfuse.runtime.info import RuntimeInfo
from kfuse.schedule.persistent_heuristics import choose_held_row, held_row_params
from kfuse.schedule.persistent_spec import persistent_spec
from kfuse.schedule.reduction_heuristics import pow2_ceil
from kfuse.schedule.reduction_launch import operand_list
from kfuse.schedule.reduction_params import MAX_GRID_X, _int, fill_launch_params
from kfuse.schedule.types import Rejection, SchedulerType


class InnerPersistentScheduler:
    """Schedules normalization-like fusions into one persistent kernel per call."""

    scheduler_type = SchedulerType.inner_persistent
    generates_kernels = True

    def check(self, fusion: Fusion, info: RuntimeInfo | None) -> None:
        try:
            plan = plan_reductions(fusion)
        except PlanError as exc:
            raise Rejection(str(exc)) from None
        if not plan.needs_persistence:
            raise Rejection(
                "no value needs the un-reduced input after a reduction; the "
                "reduction scheduler takes this fusion"
            )
        if info is None:
            return
        try:
            layout = reduction_layout(plan, info, split_rows=True)
        except PlanError as exc:
            raise Rejection(str(exc)) from None
        if (
            layout.n_rows > 1
            and layout.red_size > 1
            and layout.loop
            and not any(op.red_stride == 1 for op in layout.loop)
            and any(op.strides[-2] == 1 for op in layout.loop)
        ):
            raise Rejection(
                "the reduced axis is not the innermost in memory (an outer "
                "normalization: outer_persistent's job)"
            )
        choose_held_row(plan, layout, info.device, clusters_supported(info))  # Rejection: not held

    def kernels(self, fusion: Fusion, info: RuntimeInfo, params: Any) -> list[Any]:
        """The kernel `params` generate for this call (GeneratedKernel; not compiled)."""
        return [persistent_kernel(fusion, info, params)]

    def heuristics(self, fusion: Fusion, info: RuntimeInfo) -> Any:

        plan = plan_reductions(fusion)
        layout = reduction_layout(plan, info, split_rows=True)
        vector, block_x, batch, in_smem, reload, cluster = choose_held_row(
            plan, layout, info.device, clusters_supported(info)
        )
        n_rows = layout.n_rows
        block_y = max(1, min(128 // block_x if block_x < 128 else 1, pow2_ceil(n_rows)))
        if cluster > 1:  # the blocks of a cluster share one row (_check_persistent_params)
            block_y = 1
        params = held_row_params(self.scheduler_type, layout, vector, block_x, batch, in_smem)
        params.reload_batch_size = reload
        params.cluster_size = cluster
        params.block_y = block_y
        params.grid_x = max(1, min(MAX_GRID_X // cluster, -(-n_rows // block_y))) * cluster
        fill_launch_params(params, plan)
        return params


def clusters_supported(info: RuntimeInfo) -> bool:
    """Whether this call's target runs thread-block clusters: a GPU of compute capability 9.0
    or later, or the host emulator emulating one (it runs a cluster's blocks together)."""
    return bool(info.device.major >= 9)


def persistent_kernel(fusion: Fusion, info: RuntimeInfo, params: Any) -> Any:
    """The persistent kernel for `params` and its launch (a GeneratedKernel)."""
    from kfuse.runtime.launch import GeneratedKernel

    try:
        plan = plan_reductions(fusion)
        layout = reduction_layout(plan, info, split_rows=True)
    except PlanError as exc:
        raise SchedulerError(f"inner_persistent: {exc}") from None
    spec = persistent_spec(plan, layout, params, info.device, clusters_supported(info))
    source, name = emit_persistent(plan, spec)
    ops = operand_list(plan, layout, loop=True, row=True, workspace=None)
    grid = (_int(params, "grid_x"), 1, 1)
    return GeneratedKernel(
        name,
        source,
        grid,
        (spec.block_x, spec.block_y, 1),
        smem_bytes_held(plan, spec),
        ops,
        SchedulerType.inner_persistent,
        spec,
    )
