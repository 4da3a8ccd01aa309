"""The inner_persistent scheduler's heuristics (kfuse.schedule.persistent): how a row is
held, in registers (vectors a thread, threads a row), in shared memory (whole, or in part
with the rest reloaded every pass), or split over the blocks of a cluster; and the
measurements behind each constant. inner_outer_persistent and outer_persistent size their
rows with the same functions and limits.

Apart from the params' checks and kernel spec (kfuse.schedule.persistent_spec), which take
any params a user sets, not only those chosen here.
"""

from __future__ import annotations

from typing import Any

from kfuse.codegen.reduction_functions import (
    keepable,
    regenerated_inputs,
    stage_value,
    streamed_inputs,
)
from kfuse.codegen.reduction_plan import ReductionLayout, ReductionPlan
from kfuse.codegen.reduction_spec import accumulators
from kfuse.schedule.reduction_heuristics import pick_vector, pow2_ceil
from kfuse.schedule.reduction_params import STATIC_SMEM_LIMIT
from kfuse.schedule.types import Rejection, SchedulerType

MAX_HELD_WORDS = 64
MAX_BATCH = 64  # the most vectors one thread holds (validate_common's limit)
"""32-bit registers of held row values a thread may use (the rest of the 255 go to the math)."""


MAX_ROW_THREADS = 1024
VECTORS_PER_THREAD = 4


def held_bytes_per_element(plan: ReductionPlan, layout: ReductionLayout) -> int:
    """Bytes one row element costs to hold: every loop input a reduction reads that is not
    broadcast along the row (weights and biases are streamed, not held), but generated reads
    (random numbers: computed again by every pass, regenerated_inputs)."""
    unheld = streamed_inputs(plan) | regenerated_inputs(plan)
    return (
        sum(
            u.val.dtype.itemsize
            for i, (u, op) in enumerate(zip(plan.loop_inputs, layout.loop))
            if op.red_stride != 0 and i not in unheld
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
inner-outer rows alone (2026-12-04, at 270f2c1, H200, bf16, us): 40 took the dropout + layer norm
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
slots (fewest_idle_threads), up to twice the vectors a thread holds within HELD_WORDS_TARGET: an
H200 instance norm forward over NCHW [256, 2048, 7, 7] bf16 (rows of 49, one element a load) took
94.6 us with 16 threads of 4 (64 slots) and 80.2 us with 8 of 7 (56 slots; torch.compile 104.4).
Measured and not taken (2026-12-04, at 6194d43, that row 56.9 us as is): 4 threads of 13 94.4 us, 2
of 25 193.2 (a warp's loads then touch more rows); the block's 16 rows moved as one run in 16-byte
vectors through shared memory (benchmarks/results/ 2026-12-04-6194d43-h200/spans-experiment.patch)
75.3 us, its backward 77.9 -> 97.0: the same bytes in flight a thread, and three barriers a
block."""


WARP_ROWS = True
"""A row of at least a warp's worth of vectors of several elements is held by a warp
(SHORT_ROW_THREADS threads of fewer vectors) where VECTORS_PER_THREAD would give it fewer
threads (rows read an element a load keep the fewest idle slots: SHORT_ROW_THREADS' instance
norm over 7 x 7 took 8 threads of 7). On an H100 (bf16, us, 2026-12-06 at 55f8ce5) the causal
softmax forward [16, 16, 512, 512] (64 vectors of 8 a row) took 104.5 with 16 threads of 4,
87.8 with 32 of 2 and 89.0 with 64 of 1 (torch.compile 89.6); rows of 1024 moved by less than
1% (the dropout + layer norm forward [32768, 1024]: 82.4 as is, 82.2 with two vectors a
thread); at 09ea98e the attention forwards and backward over 512 keys moved by less than
0.4%."""


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
    if WARP_ROWS and vector > 1 and block_x < SHORT_ROW_THREADS <= vecs:
        block_x = SHORT_ROW_THREADS
    elif block_x < SHORT_ROW_THREADS:
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
