"""The reduction scheduler's heuristics (kfuse.schedule.reduction): whether the inner or
the outer kernel takes a layout, its vector width, its block shape, its batch of loads a
thread and how far the reduced axis is split over the grid, from the device (SM count,
threads per SM) and the sizes; and the measurements behind each constant.

Apart from the kernels' building (kfuse.schedule.reduction_launch), which takes any
params, so that what is chosen and how the chosen params become kernels read on their own;
the persistent schedulers reuse pick_vector and pow2_ceil.
"""

from __future__ import annotations

import math
from typing import Any

from kfuse.codegen.reduction_plan import Operand, ReductionLayout, ReductionPlan, vector_ok
from kfuse.codegen.reduction_spec import accumulators
from kfuse.schedule.reduction_params import MAX_GRID_X, MAX_GRID_Y, STATIC_SMEM_LIMIT


def pow2_ceil(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    p = 1
    while p < n:
        p *= 2
    return p


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def is_inner(layout: ReductionLayout) -> bool:
    """Whether the reduced axis, rather than a kept one, is the one walked contiguously: the
    one along which more of the loop inputs' bytes lie (an operand broadcast over axes
    counts only the elements it has). RoPE's table [S, 2, F/2, 2], contiguous along its
    reduced pairs and read for every batch and head, tied with q [B, S, H, F], 128 times
    its size and contiguous along a kept axis, when each counted its element size: the
    inner kernel then read q two elements 128 bytes apart per output."""
    if layout.n_rows <= 1 or not layout.loop:
        return True

    def moved(op: Operand) -> int:
        # (an empty axis counts as 1, so that an empty reduction still weighs its operands)
        return op.itemsize * math.prod(max(n, 1) for n, s in zip(layout.sizes, op.strides) if s)

    inner = sum(moved(op) for op in layout.loop if op.red_stride == 1)
    outer = sum(moved(op) for op in layout.loop if op.strides[-2] == 1)
    return inner >= outer


def pick_vector(
    layout: ReductionLayout, axis: int, extent: int, extra: tuple = (), max_bytes: int = 16
) -> int:
    """`max_bytes` (16, or 32 for short outer reductions) of the narrowest unit-stride
    operand along `axis`, but at most max_bytes / 2 elements (a 1-byte operand gets 8 of 16),
    halved until every such operand is aligned for it (and the vector is not longer than the
    axis)."""
    # SPLIT operands are read element by element (kfuse.codegen.row_split): no constraint.
    unit = [
        op
        for op in layout.loop + tuple(extra)
        if op.strides[axis] == 1 and not (op.row_split and axis == layout.rank - 1)
    ]
    if not unit:
        return 1
    vector = min(max_bytes // 2, max_bytes // min(op.itemsize for op in unit))
    while vector > 1 and (
        vector > extent or not all(vector_ok(op, axis, vector, layout.sizes) for op in unit)
    ):
        vector //= 2
    return vector


def _target_blocks(device: Any, threads: int) -> int:
    return device.sm_count * max(1, device.max_threads_per_sm // threads)


INNER_VECTORS_PER_THREAD = 16
"""Vectors of a row a thread of an inner kernel takes before the row gets more threads. With
4, rows of a few thousand elements got a block each and paid a block combine (for Welford,
shuffles of a 4-word state with divisions, then a shared-memory round) for little loading.
H200, bf16: var_mean of [16384, 3136] over the last axis (a batch norm's per-(n, c)
statistics) 64.4 us with 128 threads a row, 45 with 64, 35.5 with a warp; its sum 29.6 us
with 128, 27.1 with a warp; GELU backward's sum of [16384, 8192] over the last axis 210.8 us
with 256 threads a row, 194.4 with 64."""


def inner_heuristics(params: Any, layout: ReductionLayout, device: Any) -> None:
    n_red, n_rows = layout.red_size, layout.n_rows
    vector = pick_vector(layout, layout.rank - 1, n_red)
    vecs = max(1, _cdiv(n_red, vector))
    block_x = 1
    while block_x < 512 and block_x * INNER_VECTORS_PER_THREAD < vecs:
        block_x *= 2
    # Too few rows to fill the device at that: more threads a row (down to 4 vectors each)
    # before the grid split below, whose partials and finalize kernel cost more.
    full = device.sm_count * device.max_threads_per_sm
    while block_x < 512 and block_x * 4 < vecs and n_rows * block_x < full:
        block_x *= 2
    block_x = max(block_x, min(32, pow2_ceil(vecs)))
    block_y = max(1, min(128 // block_x, pow2_ceil(n_rows)))
    # Whole batches for every thread: the batched loop runs while a thread's last vector of
    # the batch is in the row, so a batch of ceil(vecs / block_x) left most threads to the
    # one-vector loop (a bf16 batch norm's rows of 56 x 56, 392 vectors over 128 threads:
    # batches of 4 for 8 threads, one load in flight for the other 120; batches of 3 now).
    unroll = max(1, min(4, vecs // block_x))
    grid_x = max(1, min(MAX_GRID_X, _cdiv(n_rows, block_y)))
    parts = 1
    target = _target_blocks(device, block_x * block_y)
    if grid_x * 2 < target and vecs >= block_x * unroll * 2:
        parts = min(max(1, target // grid_x), _cdiv(vecs, block_x * unroll), MAX_GRID_Y)
    params.fastest_dim_reduction = True
    params.vectorize_reduction = vector
    params.unroll_reduction = unroll
    params.block_x, params.block_y = block_x, block_y
    params.grid_x, params.grid_y = grid_x, parts


SHORT_OUTER_ROWS = 8
"""Outer reductions of at most this many rows take them all in one batch of one thread
(block_y 1, 256 threads along the columns): RoPE's sum over a pair, [B, H, S, 2, F/2, 2]
over the last axis, gave 2 threads a column, a combine through shared memory and half the
threads idle while the others stored."""


SHORT_OUTER_LOAD_WORDS = 32
"""Short outer reductions (SHORT_OUTER_ROWS) read 32 bytes of each operand a thread where
their loaded rows (rows x vector x loaded operands' bytes) fit in this many 4-byte registers.
Such a thread does little but find its column group's bases, an integer division and
remainder by each kept extent, so that RoPE's sum over pairs (16 bytes of output a thread)
was issue-bound at 40% of copy on an H200 (Nsight Compute: 68% SM throughput, 42% DRAM);
with 32 bytes a thread, and the epilogue sharing the loads' decomposition, it went from
312.5 to 220.5 us."""


OUTER_ROWS_ONE_THREAD = 64
"""Outer Welford reductions of at most this many rows whose column groups alone make a block
of 256 for every SM take each column's rows in one thread (block_y 1), with no combine through
shared memory: an NHWC instance norm's statistics over [256, 7, 7, 2048] (49 rows, 131072
column groups) spent its time in three rounds of Welford combines over 8 threads a column;
the whole forward went from 80.3 to 50.6 us on an H200 (bf16; torch.compile 117.5)."""


OUTER_WAVES = 2
"""Waves of blocks an outer reduction's split aims for (one wave left SMs idle at its end)."""
OUTER_MIN_BLOCKS_PER_SM = 2
"""Blocks an SM below which an outer reduction's split keeps fewer batches of loads a thread
(4 instead of 8; outer_heuristics)."""


OUTER_BASE_REGISTERS = 28
"""Registers an outer kernel uses besides its accumulators and its loaded batch (indices,
bases, strides, the batch's statistics): calibrated on sm_90 SASS of Welford kernels (a bf16
batch norm's statistics, 8 lanes of 4 words and 8 loads of 4 words: 92 registers; 4 lanes and
8 loads of 2 words: 60)."""


def outer_welford_blocks_per_sm(
    plan: ReductionPlan, vector: int, unroll: int, threads: int, max_threads_per_sm: int
) -> int | None:
    """Blocks an SM of an outer kernel with a Welford accumulator, from an estimate of its
    registers: the second argument of its __launch_bounds__, which makes ptxas keep to the
    estimate, and what outer_heuristics sizes its grid for. A Welford state
    is 4 words a lane, so these kernels are the ones whose registers, not their threads,
    bound how many blocks an SM runs: a batch norm's statistics kernel took 92 registers, an
    H200 ran 2 of its 256-thread blocks an SM, and a grid sized for 8 ran as a full wave and
    a half-empty one. None for the other outer kernels (a few registers; no bound)."""
    accs = accumulators(plan)
    if not any(a.welford for a in accs):
        return None
    words = sum(vector * a.size // 4 for a in accs)
    words += sum(unroll * vector * u.val.dtype.itemsize // 4 for u in plan.loop_inputs)
    registers = -(-(words + OUTER_BASE_REGISTERS) // 8) * 8
    return max(1, min(max_threads_per_sm // threads, 65536 // (threads * registers)))


WELFORD_OUTER_VECTOR = 4
"""The widest vector of an outer Welford kernel: each lane holds a 4-word state, and 8 lanes
(a bf16 vector of 16 bytes) with a batch of 8 loads took 92 registers, 2 blocks of 256
threads an SM; 4 lanes take 60, 4 blocks."""


def outer_heuristics(
    params: Any, layout: ReductionLayout, device: Any, plan: ReductionPlan
) -> None:
    n_red, n_rows = layout.red_size, layout.n_rows
    n_in = layout.kept_sizes[-1]
    accs = accumulators(plan)
    welford = any(a.welford for a in accs)
    vector = _outer_vector(layout, plan, welford)

    def columns(vector: int) -> int:
        """Column groups of `vector` kept elements a thread each."""
        return (n_rows // max(1, n_in)) * _cdiv(n_in, vector)

    block_x, block_y, vector = _outer_block(
        columns, vector, n_red, welford, max(a.size for a in accs), device
    )
    unroll = max(1, min(8, _cdiv(n_red, block_y)))
    grid_x = max(1, min(MAX_GRID_X, _cdiv(columns(vector), block_x)))
    threads = block_x * block_y
    per_sm = outer_welford_blocks_per_sm(plan, vector, unroll, threads, device.max_threads_per_sm)
    target = _target_blocks(device, threads) if per_sm is None else device.sm_count * per_sm
    parts = 1
    if grid_x * 2 < target:
        plain = all(not a.struct for a in accs)
        parts = _outer_grid_split(grid_x, target, per_sm, n_red, block_y * unroll, plain, device)
    params.fastest_dim_reduction = False
    params.vectorize_iter = vector
    params.unroll_reduction = unroll
    params.block_x, params.block_y = block_x, block_y
    params.grid_x, params.grid_y = grid_x, parts


def _outer_vector(layout: ReductionLayout, plan: ReductionPlan, welford: bool) -> int:
    """Kept elements a thread takes as one vector: 16-byte accesses (Welford's capped at
    WELFORD_OUTER_VECTOR), 32 bytes for short reduced axes whose loads stay few."""
    n_in = layout.kept_sizes[-1]
    vector = pick_vector(layout, layout.rank - 2, n_in)
    if welford:
        return min(vector, WELFORD_OUTER_VECTOR)
    if layout.red_size <= SHORT_OUTER_ROWS:
        wide = pick_vector(layout, layout.rank - 2, n_in, max_bytes=32)
        loaded = sum(u.val.dtype.itemsize for u in plan.loop_inputs)
        if layout.red_size * wide * loaded <= 4 * SHORT_OUTER_LOAD_WORDS:
            vector = max(vector, wide)
    return vector


def _outer_block(
    columns: Any, vector: int, n_red: int, welford: bool, combine_bytes: int, device: Any
) -> tuple[int, int, int]:
    """(block_x, block_y, vector): threads along the column groups and along the reduced
    axis, and the vector narrowed where the block combine would not fit."""
    cols = columns(vector)
    # 256-thread blocks, each thread loading 8 reduced rows before it adds them, and the
    # reduced axis split over about two waves of blocks: on an H200, W3 (fp32 [16384, 16384],
    # sum over dim 0) went from 99.4% of copy (512 threads, 4 rows, one wave) to 104.6%.
    if n_red <= SHORT_OUTER_ROWS or (
        welford and n_red <= OUTER_ROWS_ONE_THREAD and cols >= device.sm_count * 256
    ):
        block_x, block_y = min(256, pow2_ceil(cols)), 1
    else:
        block_x = min(32, pow2_ceil(cols))
        block_y = max(1, min(256 // block_x, 32, pow2_ceil(n_red)))
    # The block combine holds an accumulator per vector lane of every thread: fewer rows of
    # threads, then a narrower vector, where that passes the static limit (a Welford of
    # doubles, 32 bytes a lane, read through bf16 vectors of 8 wanted 64 KiB).
    while block_x * block_y * vector * combine_bytes > STATIC_SMEM_LIMIT:
        if block_y > 1:
            block_y //= 2
        elif vector > 1:
            vector //= 2
        else:
            block_x //= 2
    return block_x, block_y, vector


def _outer_grid_split(
    grid_x: int,
    target: int,
    per_sm: int | None,
    n_red: int,
    rows_a_batch: int,
    plain: bool,
    device: Any,
) -> int:
    """Blocks along the reduced axis (grid_y) where the column groups give fewer than half
    of `target` blocks: each thread keeps >= 8 batches of `rows_a_batch` rows of loads in
    its loop, but every SM gets a block where the axis allows, down to one batch (`plain`
    reductions, no struct accumulator: down to 4 batches below OUTER_MIN_BLOCKS_PER_SM
    blocks an SM). A norm over dim 0 of bf16 [8000, 64] got 4 blocks (its statistics kernel
    took 47.7 us on an H200; 30.4 us in 32 blocks). Splitting finer everywhere was slower
    for larger reductions (89a6506)."""

    def split(batches: int) -> int:
        """Blocks along the reduced axis leaving each thread `batches` batches of loads."""
        waves = max(1, OUTER_WAVES * target // grid_x)
        return max(1, min(waves, _cdiv(n_red, rows_a_batch * batches), MAX_GRID_Y))

    parts = split(8)
    if plain and grid_x * parts < OUTER_MIN_BLOCKS_PER_SM * device.sm_count:
        # Fewer than two blocks an SM: down to 4 batches of loads a thread. On an H200 a
        # channels-last batch norm backward's statistics over [256, 7, 7, 2048] bf16 (8 x
        # 25 blocks) took 37.2 us, 27.9 in 8 x 49; a softmax backward's over dim 0 of
        # [32768, 1024] 39.6 us in 4 x 64, 34.0 in 4 x 128. With 392 blocks (a batch norm
        # backward over [64, 56, 56, 256]) twice the blocks were slower (51.1 -> 53.9 us),
        # and so was the online softmax statistics of [32768, 1024] (23.6 -> 27.5 us in 4
        # x 128: more arithmetic a load), so only plain sums, products, max and min.
        parts = split(4)
    parts = max(parts, min(_cdiv(device.sm_count, grid_x), _cdiv(n_red, rows_a_batch), MAX_GRID_Y))
    if per_sm is not None and grid_x * parts > target:
        # Whole waves of the blocks the launch bound guarantees: 392 blocks of a batch
        # norm's statistics over 264 places ran as a wave and a second, half-empty one
        # (every block has the same rows to take, so the second took as long).
        parts = max(1, grid_x * parts // target * target // grid_x)
    return parts
