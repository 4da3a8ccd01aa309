"""Where the inner persistent kernel keeps a row (kfuse.codegen.persistent): each thread's
vector slots and their loops, the held inputs' regions of shared memory and the bytes they
and the static arrays take, which inputs are copied asynchronously or prefetched, and how a
Welford row's shift reaches every thread. The schedulers size blocks from these; the
emitter lays the kernel out by them.
"""

from __future__ import annotations

from kfuse.codegen.layout import BCAST, VEC
from kfuse.codegen.reduction_functions import regenerated_inputs, streamed_inputs
from kfuse.codegen.reduction_loads import DYNAMIC_SMEM_ALIGN, smem_bytes
from kfuse.codegen.reduction_plan import ReductionPlan
from kfuse.codegen.reduction_spec import ReductionKernelSpec, accumulators


def smem_slot(spec: ReductionKernelSpec, i: int, b: str) -> str:
    """Input i's held vector of batch slot b for this thread in shared memory. Slots are laid
    out [row of the block][b][threadIdx.x], so a warp's accesses are consecutive vectors."""
    return (
        f"h{i}[((Index)threadIdx.y * {spec.held_batch} + (Index)({b})) * {spec.block_x} + "
        f"(Index)threadIdx.x]"
    )


RELOAD_GROUP = 8
"""Reloaded slots are loaded in groups of this many before any of them is used, so that a
thread has that many loads in flight. Loaded slot by slot, the output pass of a group norm's
row split over a cluster (22 reloaded slots) had ptxas issue its reloads two ahead of their
use; grouped, 8 to 16 (sm_90 SASS). Its squared-deviation pass still loads each slot right
before its use: ptxas merges a guarded load into the block its use is guarded by."""


def slot_loops(spec: ReductionKernelSpec) -> list[tuple[int, int, bool]]:
    """(first, end, reloaded) of the loops over a thread's vector slots: the held ones, then
    the reloaded ones in groups of at most RELOAD_GROUP; a loop with no slots is left out."""
    held = spec.held_batch
    loops = [(0, held, False)] if held else []
    if spec.reload:
        loops += [
            (first, min(first + RELOAD_GROUP, spec.unroll), True)
            for first in range(held, spec.unroll, RELOAD_GROUP)
        ]
    return loops


def held_inputs(plan: ReductionPlan, spec: ReductionKernelSpec) -> list[int]:
    """Loop inputs held across the reductions (not broadcast along the row, not streamed, not
    regenerated)."""
    unheld = streamed_inputs(plan) | regenerated_inputs(plan)
    return [i for i, kind in enumerate(spec.loop_kinds) if kind != BCAST and i not in unheld]


def regenerated_slots(plan: ReductionPlan, spec: ReductionKernelSpec) -> list[int]:
    """Generated reads not broadcast along the row that a reduction reads: computed into a
    vector of their own at each slot of every pass (regenerated_inputs), never held. One
    broadcast along the row is held as one element, as a loaded one is."""
    regenerated = regenerated_inputs(plan)
    return [i for i, kind in enumerate(spec.loop_kinds) if kind != BCAST and i in regenerated]


def smem_regions(plan: ReductionPlan, spec: ReductionKernelSpec) -> list[tuple[int, int]]:
    """(held input, byte offset) of each region of the held rows in dynamic shared memory.
    A region holds one kf::Vec (itemsize * V bytes, a power of two) per slot; each starts
    on a 16-byte boundary, whatever the sizes of the regions before it."""
    slots = spec.block_x * spec.block_y * spec.held_batch
    regions, offset = [], 0
    for i in held_inputs(plan, spec):
        regions.append((i, offset))
        offset += -(-slots * plan.loop_inputs[i].val.dtype.itemsize * spec.vector // 16) * 16
    return regions


def smem_bytes_held(plan: ReductionPlan, spec: ReductionKernelSpec) -> int:
    """Dynamic shared memory the held rows of one block take (0 when held in registers)."""
    if not spec.smem_held:
        return 0
    slots = spec.block_x * spec.block_y * spec.held_batch
    regions = smem_regions(plan, spec)
    if not regions or not slots:
        return 0
    last, offset = regions[-1]
    return offset + slots * plan.loop_inputs[last].val.dtype.itemsize * spec.vector


CLUSTER_SLOTS_BYTES = 64
"""A cluster's blocks' slots for kf::cluster_reduce (kf_cluster_slots)."""


def static_smem_bytes(plan: ReductionPlan, spec: ReductionKernelSpec) -> int:
    """All the static shared memory the kernel declares, as the compiler lays it out before
    the dynamic shared memory: the reductions' scratch (smem_bytes), a cluster's slots, the
    rows' first values of each Welford shared through shared memory (persistent._row_shift), each
    array from a 16-byte boundary, and the whole up to a multiple of DYNAMIC_SMEM_ALIGN where
    dynamic shared memory follows (kf_held is declared so aligned, and the cubin's
    .nv.shared section, which the driver allocates, includes that padding). What the
    schedulers add to the dynamic part to size a block."""
    arrays = [smem_bytes(plan, spec)]
    if spec.cluster > 1:
        arrays.append(CLUSTER_SLOTS_BYTES)
    if shift_source(spec) == "shared":  # kf_first<k>: block_y values of its value type
        arrays += [
            spec.block_y * (a.size // len(a.partial_fields))
            for a in accumulators(plan)
            if a.welford
        ]
    total = sum(-(-n // 16) * 16 for n in arrays)
    if spec.smem_held or spec.columns:
        total = -(-total // DYNAMIC_SMEM_ALIGN) * DYNAMIC_SMEM_ALIGN
    return total


def prefetched_inputs(plan: ReductionPlan, spec: ReductionKernelSpec) -> list[int]:
    """Held inputs whose slots of the block's next row are copied during this row's output
    pass (spec.prefetch_next): those copied asynchronously (async_copied), where every slot is
    held in shared memory (no reloads, no cluster) and an output pass exists. A thread reads
    only the slots it wrote, and the output pass is the last to read them: once it has read
    a slot, the slot is free for the next row without a barrier. The others are loaded when
    their row starts, as without the prefetch."""
    if not (spec.prefetch_next and spec.smem_held and plan.loop_outputs):
        return []
    if spec.reload or spec.cluster != 1 or not spec.exact:
        return []
    return [i for i in held_inputs(plan, spec) if _prefetch_ok(plan, spec, i)]


def _prefetch_ok(plan: ReductionPlan, spec: ReductionKernelSpec, i: int) -> bool:
    """Whether input i's slots of the next row can be copied asynchronously: vectors
    contiguous along the row of 16 bytes (as async_copied), or of 8 or 4 (a dropout's bool
    mask: loaded when its row starts, its loads were the row's wait)."""
    return _copied_vector_bytes(plan, spec, i) in (4, 8, 16)


WARP = 32


def slot_start(spec: ReductionKernelSpec) -> str:
    """The row element where this thread's vector of slot b starts. In a cluster, block r's
    threads take vectors r * block_x .. of every cluster-wide stretch of cluster * block_x."""
    bx, vec, cluster = spec.block_x, spec.vector, spec.cluster
    if cluster == 1:
        return f"((Index)threadIdx.x + (Index)b * {bx}) * {vec}"
    return f"((Index)threadIdx.x + kf_rank * {bx} + (Index)b * {bx * cluster}) * {vec}"


def async_copied(plan: ReductionPlan, spec: ReductionKernelSpec, i: int) -> bool:
    """Whether input i's held vectors go to shared memory by cp.async (16-byte vectors,
    contiguous along the row). Copies that bypass registers leave the loads of the whole
    held row in flight at once; measured on an H200 (bf16 softmax), they took rows of 16384
    from 91% to 94% of copy, 32768 from 86% to 91% and 65536 from 77% to 82%."""
    return _copied_vector_bytes(plan, spec, i) == 16


def _copied_vector_bytes(plan: ReductionPlan, spec: ReductionKernelSpec, i: int) -> int:
    """The bytes of input i's vectors where they are contiguous along the row (VEC), else 0."""
    if spec.loop_kinds[i] != VEC:
        return 0
    return plan.loop_inputs[i].val.dtype.itemsize * spec.vector


def shift_source(spec: ReductionKernelSpec) -> str:
    """How a Welford row's shift (its first value) reaches every thread of the row: see
    kfuse.codegen.persistent._row_shift."""
    if spec.cluster != 1 or not spec.held_batch or spec.smem_held:
        return "loaded"
    bx, by = spec.block_x, spec.block_y
    return "lane" if WARP % bx == 0 and (bx * by) % WARP == 0 else "shared"
