"""The outer_persistent scheduler: normalizations over the outer (slow) axes in one kernel.

Takes the reduction fusions inner_persistent leaves to it: the un-reduced values are needed
again after a reduction (softmax over axis 0, a channels-last batch or instance norm), and
the reduced axis is not the innermost in memory while the innermost kept axis is (every loop
operand that walks the reduced axis does so with a stride). Each block holds whole columns
in registers (kfuse.codegen.outer_persistent). A column longer than one block holds is, with
switches.OUTER_CLUSTERS on a target that runs thread-block clusters, held by the blocks of a
cluster (each block its part of the column: _cluster_shape); otherwise it is rejected, and the
segmenter splits such a fusion (statistics by the reduction scheduler, its grid reduction
included, then a pointwise kernel). A one-kernel grid-wide combine would need a grid barrier,
which the kernel ABI has no cooperative launch for.

ReductionParams ("outer_persistent") as this scheduler reads them (persistent = True,
fastest_dim_reduction = False):
* vectorize_iter: V adjacent columns per thread (16-byte accesses along the contiguous axis);
* block_x: threads along the columns (groups of V); block_y: threads splitting a column;
* persistent_batch_size: B reduced rows each thread holds: block_y * B * cluster_size must
  cover a column;
* cluster_size: 1, or the C blocks of a cluster (2, 4, 8) that share each column group, block
  k holding rows k * block_y * B on (sm_90 and later, and the emulator);
* grid_x: blocks over the column groups (grid-strided), a multiple of cluster_size; grid_y
  must be 1;
* smem_persistent False, reload_batch_size 0, unroll_iter 1;
* cparams.index_type as for the reduction scheduler.
Heuristics: V from 16-byte accesses; block_y so that each thread holds about
VECTORS_PER_THREAD rows, B the rows left per thread; at most MAX_HELD_WORDS 32-bit registers
of held values a thread, and no more threads a block than the register file holds at
REGISTER_OVERHEAD registers a thread besides the held ones and each reduction's state
(STATE_WORDS_*); block_x up to a warp, halved
while the column groups give fewer blocks than the device has SMs, down to the threads that
read one 32-byte sector of a row. A column so long that its block has fewer threads along the
row than that is rejected too (half-sector accesses, one block an SM: 0.12 of copy on an
H200), and the segmenter splits the fusion.
"""

from __future__ import annotations

from typing import Any

from kfuse import switches
from kfuse.codegen.layout import BCAST, STRIDED, VEC
from kfuse.codegen.outer_persistent import (
    KIND,
    cluster_total_bytes,
    emit_outer_persistent,
    held_inputs,
)
from kfuse.codegen.reduction_loads import smem_bytes
from kfuse.codegen.reduction_plan import (
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
from kfuse.schedule.persistent import clusters_supported
from kfuse.schedule.persistent_heuristics import (
    MAX_BATCH,
    MAX_HELD_WORDS,
    VECTORS_PER_THREAD,
    fewest_idle_threads,
)
from kfuse.schedule.reduction_heuristics import pick_vector, pow2_ceil
from kfuse.schedule.reduction_launch import operand_list, red_constant
from kfuse.schedule.reduction_params import (
    MAX_GRID_X,
    STATIC_SMEM_LIMIT,
    _int,
    fill_launch_params,
    validate_common,
)
from kfuse.schedule.types import Rejection, SchedulerType

MAX_BLOCK_THREADS = 1024
REGISTER_OVERHEAD = 68
"""Registers a thread needs besides its held values (indices, bases, the math): a block has
at most 65536 / (held + REGISTER_OVERHEAD) threads, so launch bounds never force spills. From
sm_90 SASS of a channels-last instance norm (bf16, a Welford of 8 columns a thread, 2 x 256
threads, 128 registers each): 7 held rows (28 words) did not spill, 8 (32 words) spilled 16
values; 48 let the second through."""
STATE_WORDS_WELFORD = 4
STATE_WORDS_OTHER = 2
"""Registers per column a reduction's state takes in each thread, beyond REGISTER_OVERHEAD: a
Welford keeps shift, sum, mean and m2 for each of its V columns, another reduction its value
and its partner's. Without them (V = 8, a Welford: 32 registers) a channels-last instance norm
of 3136 rows got 1024 threads a block, 64 registers each, and its sm_90 SASS spilled 67 values;
at 512 threads it spills none."""
WARP = 32
SECTOR_BYTES = 32
SHORT_COLUMN_ROWS = 64
"""Columns shorter than this, in a grid of more than one wave of blocks, are split instead (a
statistics reduction, then a normalizing pointwise kernel): each block's fixed costs (the
combines through shared memory, the column's statistics) are spread over few rows while
its loads wait, and the split kernels stream. On an H200, channels-last instance norms of
[256, 2048, 7, 7] bf16 (columns of 49): the forward took 87.5 us in this kernel and 82.7 us
split; the backward 148 us here (214 registers), 136.9 us with only its dx part here, and
101.6 us split (torch.compile 123.7 and 145.8). Longer columns keep this kernel: a norm over
dim 0 of [64, 65536] bf16 ran at 0.3 of copy here and 0.1 to 0.2 split (2026-11-30, at
0a97006, 2026-11-30-h200-outer-norms.json)."""


def _plan_and_layout(fusion: Fusion, info: RuntimeInfo) -> tuple[ReductionPlan, ReductionLayout]:
    try:
        plan = plan_reductions(fusion)
        return plan, reduction_layout(plan, info)
    except PlanError as exc:
        raise Rejection(str(exc)) from None


def is_outer_normalization(layout: ReductionLayout) -> bool:
    """The layouts inner_persistent leaves to this scheduler (its check's complement): more
    than one column and row, no loop operand contiguous along the reduced axis, one
    contiguous along the innermost kept axis."""
    return (
        layout.n_rows > 1
        and layout.red_size > 1
        and bool(layout.loop)
        and not any(op.red_stride == 1 for op in layout.loop)
        and any(op.strides[-2] == 1 for op in layout.loop)
    )


def _input_words(plan: ReductionPlan, layout: ReductionLayout, vector: int, constant: bool) -> int:
    """32-bit registers of the held inputs that vary along the reduced axis (one slot's), or
    of those constant along it (`constant`)."""
    const = red_constant(layout)
    nbytes = sum(
        plan.loop_inputs[i].val.dtype.itemsize * (1 if layout.loop[i].strides[-2] == 0 else vector)
        for i in held_inputs(plan, const)
        if bool(const and const[i]) == constant
    )
    return -(-nbytes // 4)


def slot_words(plan: ReductionPlan, layout: ReductionLayout, vector: int) -> int:
    """32-bit registers one held slot (one reduced row of a thread's V columns) takes; the
    inputs constant along the reduced axis are held once, outside the slots."""
    return max(1, _input_words(plan, layout, vector, constant=False))


def _pow2_floor(n: int) -> int:
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


CLUSTER_SIZES = (2, 4, 8)
"""The cluster sizes ReductionParams.cluster_size may name (switches.OUTER_CLUSTERS): up to
the portable cluster size, which every sm_90 GPU runs and the emulator emulates. The
heuristics split a column too long for one block over the largest (_cluster_shape)."""


def choose_held_columns(
    plan: ReductionPlan, layout: ReductionLayout, device: Any, clusters: bool = False
) -> tuple[int, int, int, int, int]:
    """(vector, block_x, block_y, batch, cluster) holding whole columns in registers: each in
    one block, or, where one block cannot hold a column (or only in threads too few along the
    row to read whole sectors) and the target runs clusters (`clusters`), split over the
    blocks of a cluster; Rejection when neither holds it."""
    try:
        return (*_held_shape(plan, layout, device), 1)
    except Rejection as alone:
        if not (clusters and switches.OUTER_CLUSTERS):
            raise
        try:
            return _cluster_shape(plan, layout)
        except Rejection as split:
            raise Rejection(f"{alone}; {split}") from None


CLUSTER_BLOCK_Y = 64
CLUSTER_ROW_BYTES = 64
CLUSTER_MAX_BATCH = 8
"""The launch of a column split over a cluster: CLUSTER_SIZES' largest, CLUSTER_BLOCK_Y
threads along the column in each block and CLUSTER_ROW_BYTES of each row across a block's
threads along x (blocks of 256 threads for 16-byte vectors of bf16, where the single-block
rule gave 512 holding twice the rows); a column that leaves a thread more than
CLUSTER_MAX_BATCH rows is split by the segmenter instead. The shape is the sweep's best, not
a model of why it is. On an H100 (2026-12-07, at 627ecbe, bf16, L2 flushed, tools/params_sweep.py)
the softmax backward over dim 0 of [4096, 16384] took 198-200 us so (cluster 8, block (4, 64),
8 rows a thread) against 218.6 segmented and 223.8 for torch.compile; the shape the
single-block rule gave (cluster 4, block (2, 256), one block an SM) 250 us; 16 rows a thread
(block_y 32) 213, 32 (block_y 16) 420-440 (spilled). A channels-last batch norm of [256, 2048,
7, 7] (12544 rows: 25 a thread so) was 110 us at its best cluster shape against 60.8
segmented."""


def _cluster_shape(plan: ReductionPlan, layout: ReductionLayout) -> tuple[int, int, int, int, int]:
    """(vector, block_x, block_y, batch, cluster) of a column split over a cluster
    (CLUSTER_BLOCK_Y); Rejection where the column is no longer than one such block holds, a
    thread would hold more than CLUSTER_MAX_BATCH rows or the block more registers than an SM
    has."""
    cluster, by = CLUSTER_SIZES[-1], CLUSTER_BLOCK_Y
    if layout.red_size <= by * CLUSTER_MAX_BATCH:
        # Short columns that one block could hold but for the rules above (sectors, waves of
        # short columns): a cluster's blocks would each get a few rows and a barrier.
        raise Rejection(
            f"nor split over a cluster: columns of {layout.red_size} rows are not longer "
            f"than one block of the cluster's shape holds ({by * CLUSTER_MAX_BATCH})"
        )
    batch = -(-layout.red_size // (cluster * by))
    if batch > CLUSTER_MAX_BATCH:
        raise Rejection(
            f"nor split over a cluster of {cluster} blocks of {by} threads along it: each "
            f"thread would hold {batch} rows (at most {CLUSTER_MAX_BATCH})"
        )
    vector = _vector(plan, layout)
    cols = column_groups(layout, vector)
    bx = max(1, min(pow2_ceil(cols), CLUSTER_ROW_BYTES // (vector * _row_unit(layout))))
    thread = batch * slot_words(plan, layout, vector) + _overhead(plan, layout, vector)
    while bx > 1 and bx * by * thread > 65536:  # narrow vectors: fewer bytes of a row
        bx //= 2
    registers = bx * by * thread
    if registers > 65536:
        raise Rejection(
            f"nor split over a cluster of {cluster} blocks: a block of {bx} x {by} threads "
            f"holding {batch} rows each needs {registers} registers (65536 an SM)"
        )
    return vector, bx, by, batch, cluster


def _vector(plan: ReductionPlan, layout: ReductionLayout) -> int:
    """Adjacent columns a thread takes: 16-byte accesses along the contiguous kept axis."""
    full_outs = tuple(layout.outputs[k] for k in plan.loop_outputs)
    return pick_vector(layout, layout.rank - 2, layout.kept_sizes[-1], full_outs)


def column_groups(layout: ReductionLayout, vector: int) -> int:
    """The groups of `vector` adjacent columns the grid walks (the innermost kept axis in
    groups, times the other kept axes)."""
    n_in = layout.kept_sizes[-1]
    return (layout.n_rows // max(1, n_in)) * -(-n_in // vector)


def _row_unit(layout: ReductionLayout) -> int:
    """Bytes of the narrowest operand contiguous along the columns (4 where none is)."""
    return min((op.itemsize for op in layout.loop if op.strides[-2] == 1), default=4)


def _overhead(plan: ReductionPlan, layout: ReductionLayout, vector: int) -> int:
    """32-bit registers a thread takes besides its held rows: REGISTER_OVERHEAD, the held
    inputs constant along the column and each reduction's state."""
    return (
        REGISTER_OVERHEAD
        + _input_words(plan, layout, vector, constant=True)
        + vector
        * sum(STATE_WORDS_WELFORD if a.welford else STATE_WORDS_OTHER for a in accumulators(plan))
    )


def _held_shape(
    plan: ReductionPlan, layout: ReductionLayout, device: Any
) -> tuple[int, int, int, int]:
    """(vector, block_x, block_y, batch) of blocks that each hold their columns whole;
    Rejection where they cannot."""
    n_red = layout.red_size
    vector = _vector(plan, layout)
    words = slot_words(plan, layout, vector)
    overhead = _overhead(plan, layout, vector)
    max_batch = min(MAX_BATCH, MAX_HELD_WORDS // words)
    cols = column_groups(layout, vector)
    # The threads along x that read one 32-byte sector of a row between them.
    sector = max(1, SECTOR_BYTES // (vector * _row_unit(layout)))
    wanted_x = min(sector, pow2_ceil(cols))

    def threads_for(batch: int) -> int:
        return min(MAX_BLOCK_THREADS, _pow2_floor(65536 // (batch * words + overhead)))

    by = _threads_along_column(n_red, max_batch)
    batch = -(-n_red // by)
    threads = threads_for(batch)
    if by > threads:
        by = threads
        batch = -(-n_red // by)
    # Fewer threads along the column, each holding more of it, until a block is a sector wide.
    while threads // by < wanted_x and by > 1 and -(-n_red // (by // 2)) <= max_batch:
        by //= 2
        batch = -(-n_red // by)
        threads = threads_for(batch)
    held = batch * words
    if batch > max_batch or by * (held + overhead) > 65536:
        raise Rejection(
            f"a column of {n_red} elements is too long to hold in one block: with {by} "
            f"threads along it each holds {batch} rows of {vector} column(s), {held} "
            f"registers of held values (at most {MAX_HELD_WORDS}, and {65536} a block); "
            "columns this long are not held persistently (the segmenter splits the fusion)"
        )
    if threads // by < wanted_x:
        # Every warp would read and write half sectors, one block an SM at a time: on an
        # H200 the channels-last instance norm forward of [64, 256, 56, 56] bf16 (1 x 512
        # threads, columns of 3136) ran at 0.12 of copy (413 us; torch.compile 96 us), where
        # a statistics reduction and a normalizing kernel move every byte in whole sectors.
        raise Rejection(
            f"a column of {n_red} elements takes {by} threads along it, leaving "
            f"{threads // by} along the columns: fewer than the {wanted_x} that read whole "
            "32-byte sectors (the segmenter splits the fusion)"
        )
    bx = max(1, min(WARP, pow2_ceil(cols), threads // by))
    # More, narrower blocks rather than idle SMs, but a block's threads along x still read
    # whole 32-byte sectors of each row (narrower, every sector is fetched for a part).
    while bx > sector and -(-cols // bx) < device.sm_count:
        bx //= 2
    blocks = -(-cols // bx)
    per_sm = max(1, 65536 // (bx * by * (held + overhead)))
    if layout.red_size < SHORT_COLUMN_ROWS and blocks > device.sm_count * per_sm:
        raise Rejection(
            f"columns of {n_red} rows (fewer than {SHORT_COLUMN_ROWS}) in {blocks} blocks, "
            f"more than the {device.sm_count * per_sm} that run at once: a statistics "
            "reduction and a normalizing kernel stream instead (the segmenter splits the "
            "fusion)"
        )
    return vector, bx, by, batch


def _threads_along_column(n_red: int, max_batch: int) -> int:
    """Threads along a column of n_red rows: the fewest idle slots near n_red /
    VECTORS_PER_THREAD, at most twice that many rows a thread. An H200 instance norm forward
    over channels-last [256, 2048, 7, 7] bf16 (columns of 49) took 173.7 us with 16 threads
    of 4 rows (64 slots) and 122.0 us with 8 of 7 (56 slots; torch.compile 117.6)."""
    most = min(max_batch, 2 * VECTORS_PER_THREAD)
    return fewest_idle_threads(n_red, VECTORS_PER_THREAD, most, MAX_BLOCK_THREADS)


class OuterPersistentScheduler:
    """Schedules outer normalizations into one persistent kernel (see the module docstring)."""

    scheduler_type = SchedulerType.outer_persistent
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
        plan, layout = _plan_and_layout(fusion, info)
        if not is_outer_normalization(layout):
            raise Rejection(
                "the reduced axis is the innermost in memory, or there is one row or "
                "column: an inner normalization (inner_persistent's job)"
            )
        choose_held_columns(plan, layout, info.device, clusters_supported(info))  # Rejection

    def kernels(self, fusion: Fusion, info: RuntimeInfo, params: Any) -> list[Any]:
        """The kernel `params` generate for this call (GeneratedKernel; not compiled)."""
        return [outer_persistent_kernel(fusion, info, params)]

    def heuristics(self, fusion: Fusion, info: RuntimeInfo) -> Any:
        from kfuse._C import ReductionParams

        plan, layout = _plan_and_layout(fusion, info)
        vector, bx, by, batch, cluster = choose_held_columns(
            plan, layout, info.device, clusters_supported(info)
        )
        cols = column_groups(layout, vector)
        params = ReductionParams(KIND)
        params.fastest_dim_reduction = False
        params.persistent = True
        params.persistent_batch_size = batch
        params.vectorize_iter = vector
        params.unroll_reduction = 1
        params.block_x, params.block_y = bx, by
        params.cluster_size = cluster  # the blocks of a cluster share each column group
        params.grid_x = max(1, min(MAX_GRID_X // cluster, -(-cols // bx))) * cluster
        params.grid_y = 1
        params.cparams.index_type = "int64" if layout.needs_int64() else "int32"
        fill_launch_params(params, plan)
        return params


def outer_persistent_spec(
    plan: ReductionPlan,
    layout: ReductionLayout,
    params: Any,
    device: Any,
    clusters: bool = False,
) -> ReductionKernelSpec:
    """The compile-time description of `params` for this call's layout; clusters: whether the
    target runs thread-block clusters (clusters_supported). SchedulerError naming the field
    when they cannot run it."""
    if not bool(params.persistent):
        raise SchedulerError(f"{KIND} needs ReductionParams.persistent = True")
    if bool(params.fastest_dim_reduction):
        raise SchedulerError(f"{KIND} needs fastest_dim_reduction = False")
    for field, want in (("reload_batch_size", 0), ("grid_y", 1)):
        if _int(params, field) != want:
            raise SchedulerError(
                f"ReductionParams.{field} = {getattr(params, field)}: {KIND} holds whole "
                f"columns in registers, a block's or a cluster's (use {want})"
            )
    cluster = _cluster_size(params, clusters)
    if bool(params.smem_persistent):
        raise SchedulerError(f"{KIND} holds columns in registers: smem_persistent must be False")
    vector = _int(params, "vectorize_iter")
    batch = _int(params, "persistent_batch_size")
    validate_common(params, KIND, vector, batch, device)
    by = _int(params, "block_y")
    if by * batch * cluster < layout.red_size:
        raise SchedulerError(
            f"ReductionParams hold block_y * persistent_batch_size * cluster_size = {by} * "
            f"{batch} * {cluster} rows per column, fewer than the column's {layout.red_size}"
        )
    axis = layout.rank - 2

    def kind(op: Any) -> str:
        if op.strides[axis] == 0:
            return BCAST
        return VEC if vector_ok(op, axis, vector, layout.sizes) else STRIDED

    index = "long long" if (params.cparams.index_type == "int64" or layout.needs_int64()) else "int"
    spec = ReductionKernelSpec(
        KIND,
        layout.rank,
        vector,
        batch,
        _int(params, "block_x"),
        by,
        1,
        index,
        tuple(kind(op) for op in layout.loop),
        tuple(
            STRIDED if kind(layout.outputs[k]) == BCAST else kind(layout.outputs[k])
            for k in plan.loop_outputs
        ),
        launch_bounds=params.cparams.maxrregcount is None,
        red_constant=red_constant(layout),
        cluster=cluster,
    )
    smem = smem_bytes(plan, spec) + cluster_total_bytes(plan, spec)
    if smem > STATIC_SMEM_LIMIT:
        raise SchedulerError(
            f"ReductionParams need {smem} bytes of shared memory for the block combine "
            f"(limit {STATIC_SMEM_LIMIT}); use fewer threads or a narrower vector"
        )
    return spec


def _cluster_size(params: Any, clusters: bool) -> int:
    """params.cluster_size where the target can run it (`clusters`: clusters_supported) and
    the grid is whole clusters; SchedulerError naming the field otherwise."""
    cluster = _int(params, "cluster_size")
    if cluster == 1:
        return 1
    if cluster not in CLUSTER_SIZES:
        raise SchedulerError(
            f"ReductionParams.cluster_size = {cluster}: {KIND} splits a column over 1, "
            f"{', '.join(map(str, CLUSTER_SIZES))} blocks"
        )
    if not clusters:
        raise SchedulerError(
            f"ReductionParams.cluster_size = {cluster}: thread-block clusters need a GPU "
            "of compute capability 9.0 or later (or the emulator emulating one)"
        )
    if _int(params, "grid_x") % cluster:
        raise SchedulerError(
            f"ReductionParams.grid_x = {params.grid_x} must be a multiple of cluster_size "
            f"= {cluster} (the blocks of a cluster share each column group)"
        )
    return cluster


def outer_persistent_kernel(fusion: Fusion, info: RuntimeInfo, params: Any) -> Any:
    """The outer persistent kernel for `params` and its launch (a GeneratedKernel)."""
    from kfuse.runtime.launch import GeneratedKernel

    try:
        plan = plan_reductions(fusion)
        layout = reduction_layout(plan, info)
    except PlanError as exc:
        raise SchedulerError(f"{KIND}: {exc}") from None
    spec = outer_persistent_spec(plan, layout, params, info.device, clusters_supported(info))
    source, name = emit_outer_persistent(plan, spec)
    ops = operand_list(plan, layout, loop=True, row=True, workspace=None)
    return GeneratedKernel(
        name,
        source,
        (_int(params, "grid_x"), 1, 1),
        (spec.block_x, spec.block_y, 1),
        0,
        ops,
        SchedulerType.outer_persistent,
        spec,
    )
