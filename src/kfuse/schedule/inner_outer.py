"""The inner_outer_persistent scheduler: a normalization's backward in one pass over the data.

Takes fusions whose reductions are over two complementary sets of axes: over each row (the
row side, which may need the row again: an inner persistent kernel) and over the rows (the
column side: dweight, dbias, whose results only feed outputs through pointwise ops). See
kfuse.schedule.inner_outer_split for the split and kfuse.codegen.column_partials for the
kernel: the inner persistent kernel of the row side, whose threads also sum each column
reduction's input over the rows they walk, one partial per block; then the reduction
scheduler's finalize kernel combines the partials of each column and writes the column
outputs.

ReductionParams ("inner_outer_persistent") are read as inner_persistent reads them, with whole
rows in one block (reload_batch_size 0, cluster_size 1); grid_x is also the number of
partials per column. Heuristics: the row held as inner_persistent holds it (registers, or
shared memory for long rows or many inputs: then spread over up to SMEM_BLOCK_THREADS
threads, SMEM_ROW_VECTORS vectors each, under a 64-register bound; but in registers by those
threads where shared memory would run one block an SM and they fit ROW_REGISTER_WORDS), rows
per block to make BLOCK_THREADS threads (fewer where the block's shared memory would not fit),
and as many blocks as run at once (as the launch bound's registers and the shared memory allow),
grid-strided over the rows: each block's rows share one partial, so more blocks mean more
partials to write and combine.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kfuse import switches
from kfuse.codegen import column_partials
from kfuse.codegen.persistent import emit_persistent
from kfuse.codegen.persistent_memory import smem_bytes_held, static_smem_bytes
from kfuse.codegen.reduction_finalize import emit_finalize, finalize_threads_y, finalize_y
from kfuse.codegen.reduction_plan import (
    PlanError,
    ReductionPlan,
    plan_reductions,
    reduction_layout,
)
from kfuse.codegen.reduction_spec import FINALIZE_X, ReductionKernelSpec, accumulators
from kfuse.errors import SchedulerError
from kfuse.ir.fusion import Fusion
from kfuse.runtime.info import RuntimeInfo
from kfuse.schedule.inner_outer_split import InnerOuterSplit, split_inner_outer
from kfuse.schedule.persistent_heuristics import (
    DRIVER_SMEM_PER_BLOCK,
    blocks_by_shared_memory,
    choose_held_row,
    held_bytes_per_element,
    held_row_params,
    held_words,
)
from kfuse.schedule.persistent_spec import persistent_spec
from kfuse.schedule.reduction_heuristics import pick_vector, pow2_ceil
from kfuse.schedule.reduction_launch import operand_list, workspace_operands
from kfuse.schedule.reduction_params import MAX_GRID_X, _int, fill_launch_params
from kfuse.schedule.sub_fusion import synthetic_info
from kfuse.schedule.types import Rejection, SchedulerType

NAME = SchedulerType.inner_outer_persistent
BLOCK_THREADS = 256
SMEM_ROW_VECTORS = 2
"""Vectors of a row each thread holds where the row is held in shared memory."""
SMEM_BLOCK_THREADS = 512
"""The most threads a row held in shared memory is spread over (_spread_over_more_threads):
such blocks are one or two an SM. Measured on an H200 (bf16, us, 256 -> 512 threads):
dropout + layer norm backward [8192, 8192] 412.2 -> 329.1, layer norm backward 231.2 ->
215.2 and [2048, 16384] 114.8 -> 102.0, RMS norm backward [2048, 16384] 91.1 -> 79.9 and
[8192, 8192] 126.5 -> 122.5, dropout + RMS norm backward [8192, 8192] 233.6 -> 212.3. At
1024 threads some went further (277.7 us for the first) and others back (177.5 us for the
RMS norm of 8192). Rows held in registers keep BLOCK_THREADS: 512 made the RMS norm
backward of [32768, 1024] 62.4 -> 83.5 us."""

ROW_REGISTER_WORDS = 48
"""A row held in shared memory whose blocks run one an SM (its column sums take the rest of
the SM's shared memory) is held in registers instead, by the same threads, where a thread's slots
take at most this many 32-bit registers: copied through shared memory, each row costs that one
block's SM as many shared memory accesses again as the column sums. Measured on an H200 (2026-12-04,
at ddde816, bf16, whole calls, us, in shared memory -> in registers): one block an SM: layer norm
backward [2048, 16384] (512 threads of 4 vectors, 48 words) 90.1 -> 77.4, RMS norm backward 74.5 ->
69.1, dropout + layer norm backward [8192, 8192] (512 of 2, 36 words) 277.6 -> 207.9; and where
shared memory ran more blocks an SM, which registers do not: RMS norm backward [8192, 8192] (2
blocks) 110.5 -> 134.1, dropout + RMS norm backward 194.6 -> 199.1, layer norm backward 153.1 ->
148.5, dropout + RMS norm backward [16384, 4096] (4 blocks of 256 -> 3) 193.9 -> 187.9, dropout +
layer norm backward (3 blocks, 36 words, 32 bytes a thread spilled) 214.2 -> 222.7."""


class Parts:
    """The split of one fusion and its plans, with this call's layouts."""

    def __init__(self, fusion: Fusion, info: RuntimeInfo | None) -> None:
        self.split: InnerOuterSplit = split_inner_outer(fusion)  # Rejection
        try:
            self.main: ReductionPlan = plan_reductions(self.split.main)
            self.columns: ReductionPlan = plan_reductions(self.split.columns)
        except PlanError as exc:
            raise Rejection(str(exc)) from None
        if not self.split.main_outputs:
            raise Rejection("every output is a column reduction's; no row kernel to run")
        if self.columns.epilogue.input_uses or self.columns.loop_outputs:
            raise Rejection("the column outputs read more than the column reductions")
        if info is None:
            return
        try:
            # The column side's inputs exist only as the kernel's accumulated values:
            # synthetic_info describes them as contiguous arrays of their shapes.
            split = self.split
            # The parent's outputs carry their views (a folded cat's parts) to either side.
            outs = split.fusion.outputs
            main_outs = [outs[k] for k in split.main_outputs]
            column_outs = [outs[k] for k in split.column_outputs]
            main_call = synthetic_info(split.main, split.fusion.inputs, info, main_outs)
            column_call = synthetic_info(
                split.columns,
                _parents(split, split.columns),
                info,
                column_outs,
                read_windows=False,
            )
            self.main_layout = reduction_layout(self.main, main_call)
            self.column_layout = reduction_layout(self.columns, column_call)
        except PlanError as exc:
            raise Rejection(str(exc)) from None
        main, cols = self.main_layout, self.column_layout
        if main.loop and not any(op.red_stride == 1 for op in main.loop) and main.n_rows > 1:
            raise Rejection("the rows are not the innermost axes in memory")
        if cols.rank != 2 or cols.n_rows != main.red_size or cols.red_size != main.n_rows:
            raise Rejection(
                f"the column reductions' domain {cols.sizes} does not number the columns "
                f"as the rows' domain {main.sizes} does"
            )


def _parents(split: InnerOuterSplit, sub: Fusion) -> list[Any]:
    """The parent Vals a sub-fusion's inputs stand for."""
    return [split.parent_vals[id(v)] for v in sub.inputs]


class InnerOuterPersistentScheduler:
    """Schedules normalization backward fusions: one pass for the rows and the columns."""

    scheduler_type = SchedulerType.inner_outer_persistent
    generates_kernels = True

    def check(self, fusion: Fusion, info: RuntimeInfo | None) -> None:
        parts = Parts(fusion, info)
        if info is None:
            return
        # _heuristics raises Rejection where the row is not held; a row held whole whose
        # block does not fit the device's shared memory even with one row a block (bf16 rows
        # of 16384 with three held inputs on an A100) is declined too, never given params
        # that kernels() would reject.
        try:
            _main_spec(parts, _heuristics(parts, info), info)
        except SchedulerError as exc:
            raise Rejection(str(exc)) from None

    def heuristics(self, fusion: Fusion, info: RuntimeInfo) -> Any:
        return _heuristics(Parts(fusion, info), info)

    def kernels(self, fusion: Fusion, info: RuntimeInfo, params: Any) -> list[Any]:
        """The row kernel (with the column partials) and the columns' finalize kernel."""
        try:
            parts = Parts(fusion, info)
        except Rejection as exc:
            raise SchedulerError(f"{NAME}: {exc}") from None
        _check_params(params)
        spec = _main_spec(parts, params, info)
        ws = workspace_operands(parts.columns, _int(params, "grid_x"), parts.column_layout.n_rows)
        return [
            _main_kernel(parts, spec, params, ws),
            _finalize_kernel(parts, spec, params, ws, info.device),
        ]


def _heuristics(parts: Parts, info: RuntimeInfo) -> Any:
    vector, block_x, batch, in_smem = _choose(parts, info.device)
    params, per_sm = _held_row_launch(parts, info, vector, block_x, batch, in_smem)
    words = held_words(parts.main, parts.main_layout, vector, batch)
    if in_smem and per_sm == 1 and words <= ROW_REGISTER_WORDS:  # see ROW_REGISTER_WORDS
        params, per_sm = _held_row_launch(parts, info, vector, block_x, batch, False)
    return params


def _held_row_launch(
    parts: Parts, info: RuntimeInfo, vector: int, block_x: int, batch: int, in_smem: bool
) -> tuple[Any, int]:
    """(params, blocks an SM) for rows held so."""
    device = info.device
    params = held_row_params(NAME, parts.main_layout, vector, block_x, batch, in_smem)
    params.block_y = max(1, min(BLOCK_THREADS // block_x, pow2_ceil(parts.main_layout.n_rows)))
    # Fewer rows a block until two blocks an SM fit in shared memory (one block reduces
    # while the other loads), then as many blocks as run at once. block_smem counts all the
    # block's own shared memory; the driver adds DRIVER_SMEM_PER_BLOCK to each.
    fits = min(
        device.shared_mem_per_block_optin,
        device.shared_mem_per_sm // 2 - DRIVER_SMEM_PER_BLOCK,
    )
    while True:
        spec = _main_spec(parts, params, info, check=False)
        smem = block_smem(parts.main, spec)
        if smem <= fits or params.block_y == 1:
            break
        params.block_y = int(params.block_y) // 2
    if in_smem and smem > device.shared_mem_per_block_optin:
        spec, smem = _reload_until_it_fits(parts, params, info)
    # The blocks an SM that the launch bound's registers guarantee, no more: the blocks past
    # what runs at once start only when a first block has done all its rows. The RMS norm
    # backward (76 registers, 3 blocks of 256 an SM) had 528 blocks, 396 at once, and its
    # last 132 ran alone, a third of the kernel's time.
    per_sm = column_partials.min_blocks_per_sm(spec)
    if smem:
        per_sm = min(per_sm, blocks_by_shared_memory(smem, device))
    rows = -(-parts.main_layout.n_rows // int(params.block_y))
    params.grid_x = max(1, min(MAX_GRID_X, rows, device.sm_count * per_sm))
    fill_launch_params(params, parts.main)
    return params, per_sm


RELOAD_L2_SHARE = 2
"""At most 1/RELOAD_L2_SHARE of L2 goes to the reloaded slots of the rows in flight (one
row a block), so that the later passes find them there."""


def _reload_until_it_fits(parts: Parts, params: Any, info: RuntimeInfo) -> tuple[Any, int]:
    """(spec, block shared memory) with the fewest of the row's last slots left unheld
    (reload_batch_size: every pass after the first reads them again, from L2) that make the
    held row and the column accumulators fit one block: a dropout + layer norm backward of
    16384 columns holds five inputs (147 KB a row) next to 128 KB of column accumulators.
    Rejection where none does, or where the reloaded parts of the rows in flight would not
    stay in L2."""
    device = info.device
    batch = int(params.persistent_batch_size)
    for reload in range(1, batch):
        params.reload_batch_size = reload
        spec = _main_spec(parts, params, info, check=False)
        smem = block_smem(parts.main, spec)
        if smem <= device.shared_mem_per_block_optin:
            break
    else:
        raise Rejection("the column accumulators leave no room for a held part of the row")
    slot_bytes = held_bytes_per_element(parts.main, parts.main_layout) * spec.vector
    per_sm = blocks_by_shared_memory(smem, device)
    reloaded = device.sm_count * per_sm * reload * spec.block_x * slot_bytes
    if reloaded > device.l2_cache_bytes // RELOAD_L2_SHARE:
        raise Rejection(
            f"the reloaded parts of the rows in flight ({reloaded} bytes) would not stay in L2"
        )
    return spec, smem


def _choose(parts: Parts, device: Any) -> tuple[int, int, int, bool]:
    """(vector, threads per row, batch, held in shared memory): as inner_persistent holds
    the row where it holds it whole in one block; else in shared memory (a dropout's backward
    holds five inputs, too many for registers), its batch the whole row's, of which
    _heuristics leaves the last slots unheld where the block's shared memory runs out
    (_reload_until_it_fits; a row split over a cluster is never taken)."""
    try:
        vector, block_x, batch, in_smem, reload, cluster = choose_held_row(
            parts.main, parts.main_layout, device, False
        )
        whole = not reload and cluster == 1
    except Rejection:
        whole = False
    if not whole:
        vector, block_x, batch, in_smem = _in_shared_memory(parts)
    if in_smem:
        block_x, batch = _spread_over_more_threads(block_x, batch)
    return vector, block_x, batch, in_smem


def _in_shared_memory(parts: Parts) -> tuple[int, int, int, bool]:
    """(vector, threads per row, batch, True): the whole row in shared memory, one vector a
    thread until _spread_over_more_threads spreads it."""
    layout = parts.main_layout
    vector = pick_vector(layout, layout.rank - 1, layout.red_size)
    vecs = max(1, -(-layout.red_size // vector))
    return vector, 1, vecs, True


def _spread_over_more_threads(block_x: int, batch: int) -> tuple[int, int]:
    """(threads, batch) for a row held in shared memory, SMEM_ROW_VECTORS vectors a thread
    (up to SMEM_BLOCK_THREADS threads) instead of held_in_shared_memory's SMEM_BATCH (made for
    long softmax rows, a block or two an SM). Here each block also keeps its column
    accumulators in shared memory, so few rows fit an SM: a dropout + RMS norm backward of
    4096 had 64 threads a row, two rows a block of 105 KB, and its SMs ran 8 warps through a
    long per-element computation (0.50 of copy on an H200). The row's bytes do not change
    with the split; the warps an SM runs do."""
    vecs = block_x * batch
    threads = max(block_x, min(SMEM_BLOCK_THREADS, pow2_ceil(-(-vecs // SMEM_ROW_VECTORS))))
    return threads, -(-vecs // threads)


def _stored_outputs(parts: Parts) -> list[int]:
    """Main outputs the row kernel stores (its loop outputs but the accumulated ones)."""
    summed = set(parts.split.accumulated)
    return [k for k in parts.main.loop_outputs if k not in summed]


def _check_params(params: Any) -> None:
    if int(params.cluster_size) != 1:
        raise SchedulerError(
            f"{NAME} holds whole rows in one block: ReductionParams.cluster_size must be 1 "
            f"(got {params.cluster_size!r})"
        )
    if int(params.reload_batch_size) and not params.smem_persistent:
        raise SchedulerError(
            f"{NAME} reloads part of a row only where the rest is held in shared memory: "
            f"ReductionParams.reload_batch_size must be 0 with smem_persistent False "
            f"(got {params.reload_batch_size!r})"
        )


def _main_spec(
    parts: Parts, params: Any, info: RuntimeInfo, check: bool = True
) -> ReductionKernelSpec:
    spec = persistent_spec(parts.main, parts.main_layout, params, info.device, scheduler=NAME)
    accs = accumulators(parts.columns)
    # Column reduction k reads column input position j; main output of that input:
    positions = {id(v): j for j, v in enumerate(parts.columns.fusion.inputs)}
    columns = tuple(
        column_partials.ColumnPartial(parts.split.accumulated[positions[id(r.inputs[0])]], accs[k])
        for k, r in enumerate(parts.columns.reductions)
    )
    spec = dataclasses.replace(spec, columns=columns, prefetch_next=switches.PREFETCH_NEXT_ROW)
    spec = dataclasses.replace(spec, columns_in_registers=column_partials.fit_in_registers(spec))
    total = block_smem(parts.main, spec)
    if check and total > info.device.shared_mem_per_block_optin:
        raise SchedulerError(
            f"ReductionParams need {total} bytes of shared memory a block for the held rows, "
            f"the column accumulators and the reductions (the device gives at most "
            f"{info.device.shared_mem_per_block_optin}); use fewer rows a block"
        )
    return spec


def dynamic_smem(plan: ReductionPlan, spec: ReductionKernelSpec) -> int:
    """The row kernel's dynamic shared memory: the held rows, then the column accumulators."""
    return -(-smem_bytes_held(plan, spec) // 16) * 16 + column_partials.smem_bytes(spec)


def block_smem(plan: ReductionPlan, spec: ReductionKernelSpec) -> int:
    """All the shared memory a block of the row kernel takes: the dynamic part and the
    static (static_smem_bytes)."""
    return dynamic_smem(plan, spec) + static_smem_bytes(plan, spec)


def _main_kernel(parts: Parts, spec: ReductionKernelSpec, params: Any, ws: list[Any]) -> Any:
    from kfuse.runtime.launch import GeneratedKernel

    source, name = emit_persistent(parts.main, spec)
    ops = operand_list(parts.main, parts.main_layout, loop=True, row=True, workspace=None)
    ops = _to_parent(parts, ops, outputs=parts.split.main_outputs) + ws
    grid = (_int(params, "grid_x"), 1, 1)
    block = (spec.block_x, spec.block_y, 1)
    smem = dynamic_smem(parts.main, spec)
    return GeneratedKernel(name, source, grid, block, smem, ops, NAME, spec)


def _finalize_kernel(
    parts: Parts, main: ReductionKernelSpec, params: Any, ws: list[Any], device: Any
) -> Any:
    """The reduction scheduler's finalize kernel over the column side: `grid_x` partials a
    column."""
    from kfuse.runtime.launch import (
        GeneratedKernel,
        GeneratedOperand,
        InputOperand,
        WorkspaceOperand,
    )

    layout = parts.column_layout
    spec = ReductionKernelSpec(
        "inner",
        layout.rank,
        1,
        1,
        FINALIZE_X,
        1,
        _int(params, "grid_x"),
        main.index_type,
        (),
        (),
        launch_bounds=main.launch_bounds,
        finalize_y=_finalize_y(_int(params, "grid_x"), layout.n_rows, device),
    )
    source, name = emit_finalize(parts.columns, spec)
    ops = operand_list(parts.columns, layout, loop=False, row=True, workspace=ws)
    # Its first operand only carries the domain's sizes (the column inputs exist only as
    # the partials): a view of no memory.
    assert isinstance(ops[0], (InputOperand, GeneratedOperand))
    ops[0] = WorkspaceOperand(0, 0, 0, layout.sizes, (0,) * layout.rank)
    ops = _to_parent(parts, ops, outputs=parts.split.column_outputs)
    grid = (max(1, min(MAX_GRID_X, -(-layout.n_rows // FINALIZE_X))), 1, 1)
    block = (FINALIZE_X, finalize_y(spec), 1)
    return GeneratedKernel(name, source, grid, block, 0, ops, NAME, spec)


FINALIZE_THREADS_PER_SM = 1024
"""Threads an SM the finalize kernel's grid may count on (its blocks of 1024 threads ran one an
SM, by their registers)."""


def _finalize_y(parts: int, columns: int, device: Any) -> int:
    """Threads sharing a column's partials in the finalize kernel: finalize_threads_y's, fewer
    (down to 4) while its blocks would not run in one wave. A layer norm backward [8192, 8192]
    had 264 partials of 8192 columns, 2 x 8192 floats each: 256 blocks of 32 x 32 threads ran
    one an SM (47 registers) in two waves, 7.7 us."""
    fy = finalize_threads_y(parts)
    blocks = -(-columns // FINALIZE_X)
    while fy > 4 and blocks * FINALIZE_X * fy > device.sm_count * FINALIZE_THREADS_PER_SM:
        fy //= 2
    return 0 if fy == finalize_threads_y(parts) else fy


def _to_parent(parts: Parts, ops: list[Any], outputs: tuple[int, ...]) -> list[Any]:
    """A sub-fusion's launch operands in the parent's terms: its scalars are the parent's,
    its outputs the parent outputs `outputs` (accumulated ones have no operand); inputs of
    the row side keep their positions (the same inputs, in the same order)."""
    from kfuse.runtime.launch import OutputOperand, ScalarOperand

    out: list[Any] = []
    for op in ops:
        if isinstance(op, ScalarOperand):
            out.append(ScalarOperand(parts.split.parent_vals[id(op.val)]))  # type: ignore[arg-type]
        elif isinstance(op, OutputOperand):
            if op.index < len(outputs):
                out.append(dataclasses.replace(op, index=outputs[op.index]))
        else:
            out.append(op)
    return out


__all__ = ["InnerOuterPersistentScheduler"]
