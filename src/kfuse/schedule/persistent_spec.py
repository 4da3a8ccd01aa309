"""From persistent ReductionParams to the kernel spec (persistent_spec): the params checked
against a call's layout (SchedulerError naming the field), the access kinds of every operand,
and the kernel's choices that follow from the layout (row-end tests dropped where every slot
lies in its row, rows whole, SPLIT operands' sub-axes), with the measurements behind them.

Apart from the heuristics (kfuse.schedule.persistent_heuristics) because it takes any params
a user sets; inner_persistent and inner_outer_persistent both build their kernels' specs
with it.
"""

from __future__ import annotations

from typing import Any

from kfuse import switches
from kfuse.codegen.layout import BCAST, SPLIT, STRIDED, VEC
from kfuse.codegen.persistent_memory import smem_bytes_held, static_smem_bytes
from kfuse.codegen.reduction_functions import regenerated_inputs
from kfuse.codegen.reduction_loads import smem_bytes
from kfuse.codegen.reduction_plan import ReductionLayout, ReductionPlan, vector_ok
from kfuse.codegen.reduction_spec import ReductionKernelSpec
from kfuse.codegen.row_split import lanes_read_one_element
from kfuse.errors import SchedulerError
from kfuse.schedule.persistent_heuristics import CLUSTER_SIZE, SHORT_ROW_THREADS, kept_stages
from kfuse.schedule.reduction_params import STATIC_SMEM_LIMIT, _int, validate_common
from kfuse.schedule.types import SchedulerType


def persistent_spec(
    plan: ReductionPlan,
    layout: ReductionLayout,
    params: Any,
    device: Any,
    clusters: bool = False,
    scheduler: SchedulerType = SchedulerType.inner_persistent,
) -> ReductionKernelSpec:
    """The compile-time description of persistent `params` for this call's layout; clusters:
    whether the target runs thread-block clusters (clusters_supported). SchedulerError naming
    the field when the params cannot run this fusion (`scheduler` names the scheduler)."""
    vector = _int(params, "vectorize_reduction")
    batch = _int(params, "persistent_batch_size")
    bx = _int(params, "block_x")
    reload = _int(params, "reload_batch_size")
    cluster = _int(params, "cluster_size")
    _check_persistent_params(params, layout, device, clusters, scheduler)
    axis = layout.rank - 1

    def kind(op: Any) -> str:
        if op.row_split:
            return SPLIT
        if op.strides[axis] == 0:
            return BCAST
        return VEC if vector_ok(op, axis, vector, layout.sizes) else STRIDED

    index = "long long" if (params.cparams.index_type == "int64" or layout.needs_int64()) else "int"
    out_kinds = tuple(
        STRIDED if kind(layout.outputs[k]) == BCAST else kind(layout.outputs[k])
        for k in plan.loop_outputs
    )
    in_smem = bool(params.smem_persistent)
    spec = ReductionKernelSpec(
        "persistent",
        layout.rank,
        vector,
        batch,
        bx,
        _int(params, "block_y"),
        1,
        index,
        tuple(kind(op) for op in layout.loop),
        out_kinds,
        exact=layout.red_size % vector == 0,
        kept=() if in_smem else kept_stages(plan, layout, batch, batch - reload, vector),
        smem_held=in_smem,
        reload=reload,
        cluster=cluster,
        launch_bounds=params.cparams.maxrregcount is None,
        row_splits=row_splits(layout),
        split_uniform=split_uniform(layout, vector),
        full_slots=switches.FULL_SLOTS
        and cluster == 1
        and (not in_smem or scheduler in FULL_SLOTS_IN_SHARED_MEMORY)
        and layout.red_size == bx * batch * vector,
        rows_whole=switches.ROWS_WHOLE
        and bx >= SHORT_ROW_THREADS
        and layout.n_rows % _int(params, "block_y") == 0,
        grouped_reads=grouped_reads(plan, layout, vector, [kind(op) for op in layout.loop]),
    )
    _check_shared_memory(plan, spec, device)
    return spec


def grouped_reads(
    plan: ReductionPlan, layout: ReductionLayout, vector: int, kinds: list[str]
) -> tuple[int, ...]:
    """The regenerated reads (regenerated_inputs) whose every vector starts at a multiple of
    four elements of the generated tensor (ReductionKernelSpec.grouped_reads): contiguous
    along the row (VEC), vectors of a multiple of four, rows of whole vectors, and every
    row's start a multiple of four (its strides along the kept axes)."""
    if vector % 4 or layout.red_size % vector:
        return ()
    return tuple(
        i
        for i in sorted(regenerated_inputs(plan))
        if kinds[i] == VEC and all(s % 4 == 0 for s in layout.loop[i].strides[:-1])
    )


FULL_SLOTS_IN_SHARED_MEMORY = (SchedulerType.inner_outer_persistent,)
"""The schedulers whose rows held in shared memory drop the row-end tests too (switches.FULL_SLOTS).
On an H200 (bf16, us, with the tests -> without; 2026-12-04, at 270f2c1): the backward norms
(inner_outer_persistent) RMS norm [8192, 8192] 117.4 -> 111.6, [2048, 16384] 78.5 -> 70.7;
layer norm [8192, 8192] 215.2 -> 198.0, [2048, 16384] 104.5 -> 91.2; dropout + layer norm
[8192, 8192] 326.0 -> 300.6; the other ten rows within 1.5%. inner_persistent's keep them:
the RMS norm forward [2048, 16384] took 37.4 without and 36.0 with."""


def row_splits(layout: ReductionLayout) -> tuple[tuple[bool, ...], ...]:
    """ReductionKernelSpec.row_splits of this layout: () when no loop input is SPLIT."""
    if not any(op.row_split for op in layout.loop):
        return ()
    return tuple(tuple(s != 0 for _, s in op.row_split) for op in layout.loop)


def split_uniform(layout: ReductionLayout, vector: int) -> tuple[bool, ...]:
    """ReductionKernelSpec.split_uniform: for each SPLIT loop input, whether the unwalked
    sub-axes at the inner end of its row span a multiple of `vector` elements, so that each
    vector (starting at a multiple of `vector` in the row) reads one element; () when no
    loop input is SPLIT."""
    if not any(op.row_split for op in layout.loop):
        return ()
    return tuple(
        bool(op.row_split) and lanes_read_one_element(op.row_split, vector) for op in layout.loop
    )


def _check_persistent_params(
    params: Any, layout: ReductionLayout, device: Any, clusters: bool, scheduler: SchedulerType
) -> None:
    """SchedulerError unless `params` describe a persistent kernel that holds this layout's
    rows (and clusters only where the target has them)."""
    if not bool(params.persistent):
        raise SchedulerError(f"{scheduler} needs ReductionParams.persistent = True")
    if not bool(params.fastest_dim_reduction):
        raise SchedulerError(f"{scheduler} needs fastest_dim_reduction = True")
    vector = _int(params, "vectorize_reduction")
    batch = _int(params, "persistent_batch_size")
    validate_common(params, scheduler.value, vector, batch, device)
    if _int(params, "grid_y") != 1:
        raise SchedulerError(f"{scheduler} keeps a row in one block: grid_y must be 1")
    bx = _int(params, "block_x")
    reload = _int(params, "reload_batch_size")
    if not 0 <= reload <= batch:
        raise SchedulerError(
            f"ReductionParams.reload_batch_size = {reload} must be between 0 "
            f"and persistent_batch_size ({batch})"
        )
    cluster = _int(params, "cluster_size")
    if not 1 <= cluster <= CLUSTER_SIZE:
        raise SchedulerError(
            f"ReductionParams.cluster_size = {cluster} must be between 1 and {CLUSTER_SIZE}"
        )
    if cluster != 1:
        if not clusters:
            raise SchedulerError(
                f"ReductionParams.cluster_size = {cluster}: thread-block "
                "clusters need a GPU of compute capability 9.0 or later (the "
                "host emulator has none); use 1"
            )
        if _int(params, "block_y") != 1 or _int(params, "grid_x") % cluster:
            raise SchedulerError(
                f"ReductionParams.cluster_size = {cluster} needs block_y = 1 "
                f"and grid_x a multiple of it (got {params.block_y} and "
                f"{params.grid_x})"
            )
    if bx * batch * vector * cluster < layout.red_size:
        raise SchedulerError(
            f"ReductionParams hold block_x * persistent_batch_size * "
            f"vectorize_reduction * cluster_size = {bx} * {batch} * {vector} * "
            f"{cluster} elements per row, fewer than the row's "
            f"{layout.red_size}"
        )


def _check_shared_memory(plan: ReductionPlan, spec: ReductionKernelSpec, device: Any) -> None:
    """SchedulerError when the block reductions' scratch and the rows held in shared memory
    do not fit a block."""
    if smem_bytes(plan, spec) > STATIC_SMEM_LIMIT:
        raise SchedulerError(
            f"ReductionParams need {smem_bytes(plan, spec)} bytes of shared "
            f"memory (limit {STATIC_SMEM_LIMIT})"
        )
    total = static_smem_bytes(plan, spec) + smem_bytes_held(plan, spec)
    if total > device.shared_mem_per_block_optin:
        raise SchedulerError(
            f"ReductionParams hold {smem_bytes_held(plan, spec)} bytes of rows "
            f"in shared memory per block; with the kernel's static "
            f"{static_smem_bytes(plan, spec)} that exceeds the device's "
            f"{device.shared_mem_per_block_optin} bytes per block"
        )
