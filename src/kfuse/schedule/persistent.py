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
"""

from __future__ import annotations

from typing import Any

from kfuse.codegen.layout import BCAST, SPLIT, STRIDED, VEC
from kfuse.codegen.persistent import emit_persistent
from kfuse.codegen.persistent_memory import smem_bytes_held, static_smem_bytes
from kfuse.codegen.reduction_functions import keepable, stage_value, streamed_inputs
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
from kfuse.codegen.row_split import lanes_read_one_element
from kfuse.errors import SchedulerError
from kfuse.ir.fusion import Fusion
from kfuse.runtime.info import RuntimeInfo
from kfuse.schedule.reduction import (
    MAX_GRID_X,
    STATIC_SMEM_LIMIT,
    _int,
    fill_launch_params,
    operand_list,
    pick_vector,
    pow2_ceil,
    validate_common,
)
from kfuse.schedule.types import Rejection, SchedulerType

MAX_HELD_WORDS = 64
MAX_BATCH = 64  # the most vectors one thread holds (validate_common's limit)
"""32-bit registers of held row values a thread may use (the rest of the 255 go to the math)."""

MAX_ROW_THREADS = 1024
VECTORS_PER_THREAD = 4


def held_bytes_per_element(plan: ReductionPlan, layout: ReductionLayout) -> int:
    """Bytes one row element costs to hold: every loop input a reduction reads that is not
    broadcast along the row (weights and biases are streamed, not held)."""
    streamed = streamed_inputs(plan)
    return (
        sum(
            u.val.dtype.itemsize
            for i, (u, op) in enumerate(zip(plan.loop_inputs, layout.loop))
            if op.red_stride != 0 and i not in streamed
        )
        or 1
    )


HELD_WORDS_TARGET = 24
"""Registers of held values a thread aims at, of the 64 that min_blocks_per_sm's
__launch_bounds__ leave it (REGISTER_TARGET); the rest go to the math. A dropout + RMS norm
forward holds x1, x2 (bf16) and the Bool mask: 4 vectors of 8 a thread are 40 words, and
the kernel spilled (154 local loads in its sm_90 SASS; 621 us against 66 us for the RMS norm
alone at 16384 x 4096 on an H200); 2 vectors a thread are 20, and do not spill. A softmax
backward (y and the gradient, bf16: 32 words) spilled 33 values at 32 and none at 24. At 16,
a dropout + layer norm forward (10 words a vector) would leave registers for shared memory
(one vector a thread needs 512 threads a row), so 24 it is. Measured and not taken for the
inner-outer rows alone (session 36, H200, bf16, us): 40 took the dropout + layer norm
backward [16384, 4096] 232.0 -> 221.7 but [32768, 1024] 102.1 -> 116.1; 32 moved none of 16
rows by more than 2%."""


WIDE_HELD_WORDS = 40
"""Registers of held values a thread may take after all (VECTORS_PER_THREAD vectors) where
HELD_WORDS_TARGET's fewer vectors would take a row of 512 threads or more, which goes to
shared memory: on an H200 (bf16, the mask as an input) a dropout + RMS norm forward of
[8192, 8192] took 148.4 us held in shared memory by 128 threads of 8 vectors, 110.7 us in
registers by 256 threads of 4 (40 words; torch.compile 117.2); a dropout + layer norm
forward of [2048, 16384] 120.2 us in shared memory, 83.0 us in registers by 512 threads of 4
(torch.compile 96.6). Longer rows keep the shared-memory layout, and so do rows whose
HELD_WORDS_TARGET already allowed VECTORS_PER_THREAD (a bf16 softmax of 16384 a row: 84% of
copy in registers, 91% in shared memory; _smem_layout)."""


def held_words(plan: ReductionPlan, layout: ReductionLayout, vector: int, batch: int) -> int:
    """32-bit registers that `batch` held vectors of `vector` elements take a thread."""
    return -(-batch * vector * held_bytes_per_element(plan, layout) // 4)


def vectors_per_thread(plan: ReductionPlan, layout: ReductionLayout, vector: int) -> int:
    """Vectors of a row one thread holds in registers: VECTORS_PER_THREAD, halved until the
    held values fit HELD_WORDS_TARGET registers (at least one)."""
    words_per_vector = held_words(plan, layout, vector, 1)
    batch = VECTORS_PER_THREAD
    while batch > 1 and batch * words_per_vector > HELD_WORDS_TARGET:
        batch //= 2
    return batch


def fewest_idle_threads(n: int, per_thread: int, max_batch: int, cap: int) -> int:
    """Threads to share n slots (vectors of a row, rows of a column): the power of two
    near n / per_thread, the one above or the one below, whichever leaves fewer idle slots
    (held slots past the end), the one above on a tie or where the one below would give a
    thread more than max_batch slots; at most `cap`."""
    above = min(cap, pow2_ceil(-(-n // per_thread)))
    below = max(1, above // 2)
    batch_below = -(-n // below)
    if batch_below > max_batch:
        return above
    return below if below * batch_below < above * -(-n // above) else above


SHORT_ROW_THREADS = 32
"""Rows that fewer threads than a warp hold take the thread count with the fewest idle
slots (fewest_idle_threads), up to twice the vectors a thread holds within HELD_WORDS_TARGET:
an H200 instance norm forward over NCHW [256, 2048, 7, 7] bf16 (rows of 49, one element a
load) took 94.6 us with 16 threads of 4 (64 slots) and 80.2 us with 8 of 7 (56 slots;
torch.compile 104.4). Measured and not taken (session 37, that row 56.9 us as is): 4 threads
of 13 94.4 us, 2 of 25 193.2 (a warp's loads then touch more rows); the block's 16 rows moved
as one run in 16-byte vectors through shared memory (benchmarks/results/2026-12-04g/
spans-experiment.patch) 75.3 us, its backward 77.9 -> 97.0: the same bytes in flight a
thread, and three barriers a block."""


def kept_stages(
    plan: ReductionPlan, layout: ReductionLayout, batch: int, held_batch: int, vector: int
) -> tuple[int, ...]:
    """The keepable stage values (softmax's exponentials) when they fit in registers next
    to the held part of the row: recomputing them costs the transcendental again for every
    element. They are kept for every slot, held or reloaded."""
    keep = keepable(plan)
    extra = sum(max(4, stage_value(plan, k).val.dtype.itemsize) for k in keep)
    held = held_batch * held_bytes_per_element(plan, layout)
    words = -(-vector * (held + batch * extra) // 4)
    return keep if keep and words <= MAX_HELD_WORDS else ()


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


DRIVER_SMEM_PER_BLOCK = 1024
"""Shared memory the driver reserves for each block (cudaDevAttrReservedSharedMemoryPerBlock,
1 KB from sm_80 on), next to the block's own. Counted exactly: an inner-outer layer norm
backward [8192, 8192] takes 114,816 bytes a block, two blocks an SM with 1 KB each and not
with SMEM_RESERVE's 4 KB."""


def blocks_by_shared_memory(smem: int, device: Any) -> int:
    """Blocks of `smem` bytes of their own shared memory (static and dynamic) that an SM
    holds, with the driver's DRIVER_SMEM_PER_BLOCK each; at least one."""
    return max(1, device.shared_mem_per_sm // (smem + DRIVER_SMEM_PER_BLOCK))


def held_row_params(
    scheduler: SchedulerType,
    layout: ReductionLayout,
    vector: int,
    block_x: int,
    batch: int,
    in_smem: bool,
) -> Any:
    """ReductionParams of a persistent kernel holding rows of `batch` vectors of `vector` a
    thread, `block_x` threads a row (in shared memory if `in_smem`); one row a block and one
    block until the caller says more."""
    from kfuse._C import ReductionParams

    params = ReductionParams(scheduler)
    params.fastest_dim_reduction = True
    params.persistent = True
    params.persistent_batch_size = batch
    params.smem_persistent = in_smem
    params.vectorize_reduction = vector
    params.unroll_reduction = 1
    params.block_x, params.block_y = block_x, 1
    params.grid_x = params.grid_y = 1
    params.cparams.index_type = "int64" if layout.needs_int64() else "int32"
    return params


def clusters_supported(info: RuntimeInfo) -> bool:
    """Whether this call's target runs thread-block clusters: a GPU of compute capability 9.0
    or later, or the host emulator emulating one (it runs a cluster's blocks together)."""
    return bool(info.device.major >= 9)


def choose_held_row(
    plan: ReductionPlan, layout: ReductionLayout, device: Any, clusters: bool
) -> tuple[int, int, int, bool, int, int]:
    """(vector, threads per row, batch, held in shared memory, reload, cluster size) for this
    row; Rejection when it can be held neither in registers nor in shared memory."""
    n_red = layout.red_size
    full_outs = tuple(layout.outputs[k] for k in plan.loop_outputs)
    vector = pick_vector(layout, layout.rank - 1, n_red, full_outs)
    vecs = max(1, -(-n_red // vector))
    per_thread = vectors_per_thread(plan, layout, vector)
    block_x = min(MAX_ROW_THREADS, pow2_ceil(-(-vecs // per_thread)))
    if block_x < SHORT_ROW_THREADS:
        most = 2 * per_thread
        while most > per_thread and held_words(plan, layout, vector, most) > HELD_WORDS_TARGET:
            most -= 1
        block_x = fewest_idle_threads(vecs, per_thread, most, MAX_ROW_THREADS)
    wide = pow2_ceil(-(-vecs // VECTORS_PER_THREAD))
    if (
        per_thread < VECTORS_PER_THREAD
        and block_x >= SMEM_FROM_ROW_THREADS >= wide
        and held_words(plan, layout, vector, VECTORS_PER_THREAD) <= WIDE_HELD_WORDS
    ):
        return vector, wide, -(-vecs // wide), False, 0, 1  # see WIDE_HELD_WORDS
    smem = _smem_layout(plan, layout, vector, block_x, device, clusters)
    if smem is not None:
        bx, batch, reload, cluster = smem
        return vector, bx, batch, True, reload, cluster
    batch = -(-vecs // block_x)
    words = held_words(plan, layout, vector, batch)
    if batch > MAX_BATCH or words > MAX_HELD_WORDS:
        raise Rejection(
            f"a row of {n_red} elements is too long to hold: with {block_x} threads "
            f"per row it needs {batch} loads of {vector} element(s) per thread (at "
            f"most {MAX_BATCH}) and {words} registers of held values (at most "
            f"{MAX_HELD_WORDS}), and in shared memory its reloaded part would take "
            f"more than 1/{L2_SPILL_SHARE} of L2"
            + (
                f", even split over a cluster of {CLUSTER_SIZE} blocks"
                if clusters
                else " (and this target has no thread-block clusters)"
            )
            + "; rows this long are not held persistently"
        )
    return vector, block_x, batch, False, 0, 1


SMEM_FROM_ROW_THREADS = 512
SMEM_BATCH = 8
MIN_ROWS_PER_SM = 2
SMEM_RESERVE = 4 * 1024
"""Shared memory per block kept out of the held row: the reductions' static buffer and the
1 KB the driver reserves per block."""
L2_SPILL_SHARE = 2
"""At most 1/L2_SPILL_SHARE of L2 goes to the reloaded parts of the rows in flight."""


def _smem_layout(
    plan: ReductionPlan,
    layout: ReductionLayout,
    vector: int,
    block_x: int,
    device: Any,
    clusters: bool,
) -> tuple[int, int, int, int] | None:
    """(threads per row, batch, reload, cluster size) holding the row in shared memory instead
    of registers, or None.

    A row that needs SMEM_FROM_ROW_THREADS or more threads per row in registers leaves one
    or two rows in flight per SM (such a block fills the register file), and memory idles while
    they reduce; rows of 65536 bf16 also spill. In shared memory a thread needs few registers,
    so SMEM_BATCH vectors per thread give small blocks and shared memory sets how many rows an
    SM holds. Measured on an H200 (bf16 softmax): rows of 16384 went from 84% to 91% of copy,
    32768 from 65% to 86%, 65536 from 39% to 67%.

    A row whose whole length would leave fewer than MIN_ROWS_PER_SM blocks per SM is held
    only in part: each of MIN_ROWS_PER_SM blocks takes its share of the SM's shared memory and
    reloads the row's tail on every pass (the first pass brings it into L2, the later ones hit
    there), so one block reduces while the other streams. When even that would spill more of
    the rows in flight than L2 keeps, one block per SM holds as much as it can, unless the
    target has thread-block clusters: then a row that one block cannot hold whole is split
    over a cluster (CLUSTER_SIZE); but not where the cluster's blocks would reload part of it
    for a Welford: a group norm of one group, bf16 [64, 256, 56, 56], took 216.6 us so
    (H200), and 88.6 us segmented into its statistics (33.4 + 2.0 us) and a pointwise
    normalization (53.2 us). A softmax keeps its clusters: [64, 1048576] bf16 took 126.8 us
    in clusters that reload, 141 us segmented. (The condition is on the reduction, not on
    the operands: refused for the group norm's per-channel weights alone, the segmenter
    found clusters again for the normalization without them, writing it out in fp32 for a
    pointwise segment to apply them.) When nothing holds it, the row is not held (None).
    Measured on an H200 (bf16 softmax, 65536 a row): one block an SM holding all of it 67% of
    copy, two holding 13/16 each 77% (82% with the held part copied in by cp.async; split over
    clusters of 2 to 8 blocks, 68 to 74%); two holding 10/16 were no slower, while smaller
    blocks, or lower register targets for more blocks an SM, were slower."""
    if block_x < SMEM_FROM_ROW_THREADS:
        return None
    vecs = -(-layout.red_size // vector)
    slot_bytes = held_bytes_per_element(plan, layout) * vector
    one = held_in_shared_memory(vecs, slot_bytes, device, MAX_ROW_THREADS)
    if one is not None and (one[3] == MIN_ROWS_PER_SM or one[2] == 0 or not clusters):
        return (*one[:3], 1)
    split = (
        held_in_shared_memory(-(-vecs // CLUSTER_SIZE), slot_bytes, device, CLUSTER_THREADS_PER_SM)
        if clusters
        else None
    )
    if split is not None and split[2] > 0 and any(a.welford for a in accumulators(plan)):
        split = None  # a Welford over reloaded parts: segmented (see the docstring)
    if split is not None:
        return (*split[:3], CLUSTER_SIZE)
    return None if one is None else (*one[:3], 1)


def held_in_shared_memory(
    vecs: int, slot_bytes: int, device: Any, threads_per_sm: int
) -> tuple[int, int, int, int] | None:
    """(threads, batch, reload, blocks per SM) of blocks that each hold `vecs` vectors of a row
    (all of it, or a cluster block's part) in shared memory, whole or in part (see
    _smem_layout), with at most threads_per_sm threads an SM; or None."""
    per_block = device.shared_mem_per_block_optin - STATIC_SMEM_LIMIT
    for rows_per_sm in (MIN_ROWS_PER_SM, 1):
        bx = min(threads_per_sm // rows_per_sm, pow2_ceil(-(-vecs // SMEM_BATCH)))
        batch = -(-vecs // bx)
        if batch > MAX_BATCH:
            continue
        budget = min(per_block, device.shared_mem_per_sm // rows_per_sm - SMEM_RESERVE)
        held = min(batch, budget // (slot_bytes * bx))
        spilled = device.sm_count * rows_per_sm * (batch - held) * bx * slot_bytes
        if spilled <= device.l2_cache_bytes // L2_SPILL_SHARE:
            return bx, batch, batch - held, rows_per_sm
    return None


CLUSTER_SIZE = 8
"""Blocks of a cluster that share a long row (_smem_layout): the most every sm_90 GPU
schedules. Each block holds its part of the row as one block would hold a whole row: whole
if it fits, else in part, the rest reloaded. Measured on an H200 (bf16 softmax, 131072 a
row): clusters of 8 blocks of 256 threads, 71% of copy; of 4 blocks of 512, 62%; of 2 blocks
of 1024, 57%; one block an SM holding 11/16 of the row, 65%. Rows of 262144 and 524288,
which no single block holds, ran segmented at 13%."""
CLUSTER_THREADS_PER_SM = 512
"""Threads of the cluster blocks an SM runs together. More, smaller batches per thread were
slower (H200, bf16 softmax): 262144 a row (two blocks an SM), 256 threads and 16 vectors each
69% of copy, 512 and 8 60%, 128 and 32 66%; 524288 (parts held whole, one block an SM), 512
threads 51%, 1024 48%, 256 47%, while two blocks of 256 an SM holding 27/32 of their parts
reached 65%."""


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
        full_slots=FULL_SLOTS
        and cluster == 1
        and (not in_smem or scheduler in FULL_SLOTS_IN_SHARED_MEMORY)
        and layout.red_size == bx * batch * vector,
        rows_whole=ROWS_WHOLE
        and bx >= SHORT_ROW_THREADS
        and layout.n_rows % _int(params, "block_y") == 0,
    )
    _check_shared_memory(plan, spec, device)
    return spec


FULL_SLOTS = True
"""Where a row held in registers is exactly the slots of its threads (block_x * batch *
vector elements, one block a row), the kernel tests no row end (ReductionKernelSpec.
full_slots), unless ptxas spills without the tests (kfuse.runtime.backends.spill_fallback).
Measured on an H200 (bf16, whole calls, us; tests kept -> dropped, torch.compile): dropout +
layer norm forward [8192, 8192] 124.6 -> 110.0 (127.2), [16384, 4096] 128.9 -> 109.2
(138.5), [2048, 16384] 71.2 -> 58.4 (96.7), [32768, 1024] 64.2 -> 56.3 (55.7); layer norm
backward [8192, 8192] 220.2 -> 199.8 (244.6); RMS norm forward [32768, 1024] 33.8 -> 33.5
(33.1). Rows held in shared memory keep the tests: the RMS norm forward [2048, 16384] went
36.0 -> 37.4 without them."""

FULL_SLOTS_IN_SHARED_MEMORY = (SchedulerType.inner_outer_persistent,)
"""The schedulers whose rows held in shared memory drop the row-end tests too (FULL_SLOTS).
On an H200 (bf16, us, with the tests -> without; probe 6 of session 36): the backward norms
(inner_outer_persistent) RMS norm [8192, 8192] 117.4 -> 111.6, [2048, 16384] 78.5 -> 70.7;
layer norm [8192, 8192] 215.2 -> 198.0, [2048, 16384] 104.5 -> 91.2; dropout + layer norm
[8192, 8192] 326.0 -> 300.6; the other ten rows within 1.5%. inner_persistent's keep them:
the RMS norm forward [2048, 16384] took 37.4 without and 36.0 with."""

ROWS_WHOLE = True
"""Where the rows are a multiple of block_y and a row takes a warp or more, row_ok is the
constant true (ReductionKernelSpec.rows_whole). Alone it changed little on an H200 (the same
rows as FULL_SLOTS': within 1%, dropout + RMS norm backward [32768, 1024] 114.2 -> 107.8
us); with FULL_SLOTS, the tests of both gone let ptxas drop the per-element branches (SASS
of the dropout + layer norm forward [8192, 8192]: 1648 instructions with the row test alone
dropped, 1744 with the row-end tests alone, 872 with both). Rows of fewer threads than a
warp keep the test: the NCHW instance norms over 7 x 7 (rows of 49, 8 threads a row, 16
rows a block) went from 56.0 to 67.1 us (forward's kernel) and 68.4 to 78.7 (backward's)
without it."""


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
