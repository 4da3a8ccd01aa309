"""From ReductionParams to the reduction scheduler's kernels and their launches: the params
checked and applied to a call's layout (kernel_spec: a ReductionKernelSpec), the kernels'
sources (kfuse.codegen.reduction), their operands in the order the kernels take them, and a
grid reduction's workspace and finalize launch.

Apart from the heuristics (kfuse.schedule.reduction_heuristics) because it takes any params a
user sets, not only those the heuristics choose; the persistent schedulers pass their
operands and workspaces the same way (operand_list, workspace_operands).
"""

from __future__ import annotations

from typing import Any

from kfuse import switches
from kfuse.codegen.layout import BCAST, INTERLEAVED, STRIDED, VEC
from kfuse.codegen.reduction import emit_reduction
from kfuse.codegen.reduction_finalize import finalize_threads_x, finalize_threads_y
from kfuse.codegen.reduction_loads import smem_bytes
from kfuse.codegen.reduction_plan import (
    Operand,
    PlanError,
    ReductionLayout,
    ReductionPlan,
    plan_reductions,
    reduction_layout,
    vector_ok,
)
from kfuse.codegen.reduction_spec import ReductionKernelSpec, accumulators
from kfuse.errors import SchedulerError
from kfuse.ir.fusion import Fusion
from kfuse.runtime.info import RuntimeInfo
from kfuse.schedule.reduction_heuristics import outer_welford_blocks_per_sm
from kfuse.schedule.reduction_params import MAX_GRID_X, STATIC_SMEM_LIMIT, _int, validate_common
from kfuse.schedule.types import SchedulerType

TAIL_BATCHES = 4
"""Outer threads with fewer batches of rows than this take their last rows in batches of
halving size (ReductionKernelSpec.tail_batches); threads with more keep the lighter loop."""


def kernel_spec(
    plan: ReductionPlan, layout: ReductionLayout, params: Any, device: Any
) -> ReductionKernelSpec:
    """The compile-time description of `params` applied to this call's layout."""
    if bool(params.persistent):
        raise SchedulerError(
            "ReductionParams.persistent is set: the reduction scheduler "
            "generates non-persistent kernels (use inner_persistent)"
        )
    if _int(params, "reload_batch_size") != 0:
        raise SchedulerError(
            "ReductionParams.reload_batch_size is set: only the persistent "
            "kernel holds (and reloads) rows (use 0)"
        )
    if _int(params, "cluster_size") != 1:
        raise SchedulerError(
            "ReductionParams.cluster_size is set: only the persistent kernel "
            "splits rows over thread-block clusters (use 1)"
        )
    inner = bool(params.fastest_dim_reduction)
    kind = "inner" if inner else "outer"
    vector = _int(params, "vectorize_reduction" if inner else "vectorize_iter")
    unroll = _int(params, "unroll_reduction")
    validate_common(params, kind, vector, unroll, device)
    axis = layout.rank - 1 if inner else layout.rank - 2
    kinds = tuple(_kind(op, axis, vector, layout) for op in layout.loop)
    if not inner and _int(params, "block_y") == 1 and _int(params, "grid_y") == 1:
        kinds = tuple(
            INTERLEAVED if _interleaved(op, layout, vector, unroll) else kind
            for op, kind in zip(layout.loop, kinds)
        )
    index = "long long" if (params.cparams.index_type == "int64" or layout.needs_int64()) else "int"
    by, parts = _int(params, "block_y"), _int(params, "grid_y")
    # a thread with fewer than TAIL_BATCHES batches of rows takes its last rows in batches
    rows_per_thread = -(-layout.red_size // max(1, by * parts))
    spec = ReductionKernelSpec(
        kind,
        layout.rank,
        vector,
        unroll,
        _int(params, "block_x"),
        by,
        parts,
        index,
        kinds,
        () if inner else tuple(_kind(op, axis, vector, layout) for op in layout.outputs),
        tail_batches=not inner and rows_per_thread < TAIL_BATCHES * unroll,
        launch_bounds=params.cparams.maxrregcount is None,
        min_blocks=None
        if inner
        else outer_welford_blocks_per_sm(
            plan, vector, unroll, _int(params, "block_x") * by, device.max_threads_per_sm
        ),
        finalize_x=finalize_threads_x(layout.n_rows, device.sm_count),
        red_constant=()
        if inner or not switches.OUTER_RED_CONSTANT
        else red_constant(layout, kinds),
    )
    if smem_bytes(plan, spec) > STATIC_SMEM_LIMIT:
        raise SchedulerError(
            f"ReductionParams need {smem_bytes(plan, spec)} bytes of shared "
            f"memory for the block combine (limit {STATIC_SMEM_LIMIT}); use "
            "fewer threads or a narrower vector"
        )
    return spec


def red_constant(layout: ReductionLayout, kinds: tuple[str, ...] = ()) -> tuple[bool, ...]:
    """Per loop input, whether it is the same for every reduced row (stride 0 along the
    reduced axis: an instance norm backward's per-(n, c) mean and inverse std): loaded once a
    thread, not once a row (ReductionKernelSpec.red_constant); () where none is. `kinds`:
    the outer kernel's access kinds, where only a VEC or STRIDED input counts (a BCAST one is
    one element already)."""
    found = tuple(
        op.red_stride == 0 and not op.row_split and (not kinds or kinds[i] in (VEC, STRIDED))
        for i, op in enumerate(layout.loop)
    )
    return found if any(found) else ()


INTERLEAVED_MAX_BYTES = 64
"""The largest block of an INTERLEAVED operand a thread loads at once (registers)."""


def _interleaved(op: Operand, layout: ReductionLayout, vector: int, unroll: int) -> bool:
    """Whether an outer kernel whose threads take every reduced row in one batch (block_y 1,
    one block along the rows, `unroll` = the rows) reads `op` as one block of its V columns'
    rows (kfuse.codegen.layout.INTERLEAVED): its rows adjacent in each column, the block a
    power of two of elements, aligned. RoPE's cos/sin table [S, 2, F/2, 2] summed over its
    last axis: 16 two-byte loads a thread for 8 columns, now two of 16 bytes."""
    block = vector * unroll
    axis = layout.rank - 2
    return (
        vector > 1
        and layout.red_size == unroll
        and op.red_stride == 1
        and op.strides[axis] == unroll
        and not op.row_split
        and block & (block - 1) == 0
        and block * op.itemsize <= INTERLEAVED_MAX_BYTES
        and op.data_ptr % min(16, block * op.itemsize) == 0
        and all(
            s % block == 0
            for i, (n, s) in enumerate(zip(layout.sizes, op.strides))
            if i < axis and n != 1
        )
    )


def _kind(op: Any, axis: int, vector: int, layout: ReductionLayout) -> str:
    if op.strides[axis] == 0:
        return BCAST
    return VEC if vector_ok(op, axis, vector, layout.sizes) else STRIDED


def operand_list(
    plan: ReductionPlan, layout: ReductionLayout, *, loop: bool, row: bool, workspace: list | None
) -> list[Any]:
    """Launch operands in the order of kfuse.codegen.reduction_functions.tensor_params. A
    generated read's has its sizes and strides and no data (kfuse.codegen.generated)."""
    from kfuse.codegen import generated
    from kfuse.runtime.launch import (
        GeneratedOperand,
        InputOperand,
        OutputOperand,
        RngStateOperand,
        ScalarOperand,
    )

    positions = {v: i for i, v in enumerate(plan.fusion.inputs)}
    ops: list[Any] = [
        GeneratedOperand(*_loop_view(layout, op))
        if plan.generated_read(u) is not None
        else InputOperand(positions[u.val], *_loop_view(layout, op))
        for i, (u, op) in enumerate(zip(plan.loop_inputs, layout.loop))
        if loop or i == 0
    ]
    if row:
        ops += [
            InputOperand(positions[u.val], _shape(layout, op), op.strides)
            for u, op in zip(plan.epilogue.input_uses, layout.row)
        ]
    ops += [ScalarOperand(s) for s in plan.scalars]
    if loop and (stateful := len(generated.loop_stateful_ops(plan))):
        ops += [RngStateOperand(stateful, "seed"), RngStateOperand(stateful, "offset")]
    ops += [
        OutputOperand(k, _output_shape(plan, layout, k, op), op.strides)
        for k, op in enumerate(layout.outputs)
    ]
    if workspace:
        ops += workspace
    return ops


def _loop_view(layout: ReductionLayout, op: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A loop input's extents and strides as passed: the canonical domain's, or for a SPLIT
    operand the kept axes followed by its own row sub-axes (kfuse.codegen.row_split)."""
    if not op.row_split:
        return layout.sizes, op.strides
    sizes, strides = zip(*op.row_split)
    return layout.kept_sizes + sizes, op.kept_strides + strides


def _shape(layout: ReductionLayout, op: Any) -> tuple[int, ...]:
    """An operand's extents as passed: 1 along the reduced axis when it does not walk it, so
    that an empty reduction does not make the outputs look empty (kernels read the reduced
    extent from the first loop input)."""
    return layout.sizes if op.red_stride != 0 else layout.sizes[:-1] + (1,)


def _output_shape(plan: ReductionPlan, layout: ReductionLayout, k: int, op: Any) -> tuple[int, ...]:
    """Output k's extents as passed: a full-size output's are the domain's (also where it
    does not walk the merged reduced axis: an output [1, 0, 1] of a sum over the axes 0 and 1
    of [0, 0, 1], which the merge stands for by axis 0, which the output broadcasts; as (1, 1)
    at strides (0, 0) its operand reached a byte of an array of none), a row output's
    _shape's."""
    return layout.sizes if k in plan.loop_outputs else _shape(layout, op)


def workspace_operands(plan: ReductionPlan, parts: int, n_rows: int) -> list[Any]:
    """The partial-result arrays of a grid reduction, packed into workspace buffer 0."""
    from kfuse.runtime.launch import WorkspaceOperand

    ops = []
    offset = 0
    count = parts * n_rows
    for acc in accumulators(plan):
        elem = acc.size // len(acc.partial_fields)
        for _ in acc.partial_fields:
            nbytes = count * elem
            ops.append(WorkspaceOperand(0, offset, nbytes, (count,), (1,)))
            offset += -(-nbytes // 16) * 16
    return ops


def reduction_kernels(fusion: Fusion, info: RuntimeInfo, params: Any) -> list[Any]:
    """The kernels for `params` and their launches (GeneratedKernels): one, or a grid
    reduction's partials kernel and its finalize kernel."""
    from kfuse.runtime.launch import GeneratedKernel

    try:
        plan = plan_reductions(fusion, fold_softmax=True)
        layout = reduction_layout(plan, info)
    except PlanError as exc:
        raise SchedulerError(f"reduction: {exc}") from None
    spec = kernel_spec(plan, layout, params, info.device)
    kernels = emit_reduction(plan, spec)
    block = (spec.block_x, spec.block_y, 1)
    grid = (_int(params, "grid_x"), spec.grid_parts, 1)
    if spec.grid_parts == 1:
        source, name = kernels[0]
        ops = operand_list(plan, layout, loop=True, row=True, workspace=None)
        return [GeneratedKernel(name, source, grid, block, 0, ops, SchedulerType.reduction, spec)]
    ws = workspace_operands(plan, spec.grid_parts, layout.n_rows)
    (src1, name1), (src2, name2) = kernels
    first = GeneratedKernel(
        name1,
        src1,
        grid,
        block,
        0,
        operand_list(plan, layout, loop=True, row=False, workspace=ws),
        SchedulerType.reduction,
        spec,
    )
    fin_grid = (max(1, min(MAX_GRID_X, -(-layout.n_rows // spec.finalize_x))), 1, 1)
    second = GeneratedKernel(
        name2,
        src2,
        fin_grid,
        (spec.finalize_x, finalize_threads_y(spec.grid_parts), 1),
        0,
        operand_list(plan, layout, loop=False, row=True, workspace=ws),
        SchedulerType.reduction,
        spec,
    )
    return [first, second]
