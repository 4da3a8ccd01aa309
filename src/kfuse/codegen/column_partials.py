"""Column partials: what the inner persistent kernel adds for inner_outer_persistent.

Each thread holds the same columns of every row it walks (slot b, lane j is column
(threadIdx.x + b * block_x) * V + j), so it sums a column reduction's input over its rows
with no communication, into its own slots of the block's column accumulators: dynamic
shared memory after the held rows, one slot per (row of the block, column) per column
reduction, so no two threads touch one slot. The slots are laid out lane-major,
[threadIdx.y][b][j][threadIdx.x]: the 32 threads of a warp adding lane j of slot b touch 32
consecutive words (no bank conflict). Laid out by column ([threadIdx.y][column]) they were V
words apart, a V-way conflict on every add: 8-way for bf16 rows, which made the adds cost more
than the row's global memory traffic.

Where a thread's slots take at most REGISTER_WORDS registers (short rows: 16 columns a
thread of one column reduction at [32768, 1024]) they are registers instead
(spec.columns_in_registers), written to their shared-memory slots once, after the last row:
a load and a store of shared memory for every element of every row is otherwise what the
kernel spends most on beside its global loads. Longer rows keep them in shared memory: in
registers they cost more than the bytes they hold (the compiler also keeps the held row
converted to float): RMS norm backward spilled at 4 vectors a thread, and 1 vector a thread
left too few loads in flight.

After the last row the block's rows are combined per column in a fixed order, and the block
writes one partial per column: workspace cws<m>[p * n_red + column], p = blockIdx.x.
kfuse.codegen.reduction_finalize.emit_finalize then combines the partials of every column and
runs the column outputs' epilogue, as for a grid reduction.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

from kfuse.codegen.kernel import Code
from kfuse.codegen.reduction_loads import DYNAMIC_SMEM_ALIGN
from kfuse.codegen.reduction_spec import Accumulator, ReductionKernelSpec


@dataclass(frozen=True)
class ColumnPartial:
    """Main output `output` (full size) accumulated per column with `acc` (the column
    reduction's accumulator, whose k is its reduction index on the column side)."""

    output: int
    acc: Accumulator


def name_suffix(spec: ReductionKernelSpec) -> str:
    """Kernel-name suffix naming the column partials and where they are held (the spec's
    repr leaves them out)."""
    if not spec.columns:
        return ""
    held = "_reg" if spec.columns_in_registers else ""
    return "_cols" + hashlib.sha1(repr(spec.columns).encode()).hexdigest()[:8] + held


def accumulated(spec: ReductionKernelSpec) -> dict[int, list[int]]:
    """Main output index -> the indices m of the column partials it is accumulated into
    (several when column reductions share their input: a column sum and a column max of
    one value, or the same sum written twice)."""
    found: dict[int, list[int]] = {}
    for m, c in enumerate(spec.columns):
        found.setdefault(c.output, []).append(m)
    return found


REGISTER_TARGET = 80
"""Registers a thread of the kernel may use (__launch_bounds__; for 256 threads the bound
is 3 blocks an SM, 85 registers): with two inputs held and their values kept as float
across the reductions, 64 (the inner persistent kernel's target) spilled at 4 vectors a
thread. At 128 (2 blocks) the RMS and layer norm backwards took 76 and 80 registers, ran 3
blocks an SM, and the grid, sized for the blocks the bound guarantees, now counts on 3
(kfuse.schedule.inner_outer)."""


SMEM_HELD_REGISTER_TARGET = 64
"""The same where the row is held in shared memory (no row values in registers): 1024
threads an SM, as many blocks as the grid counts on (kfuse.schedule.inner_outer)."""


REGISTER_WORDS = 32
"""32-bit registers a thread's column accumulators may take to be held in registers
(spec.columns_in_registers)."""


def fit_in_registers(spec: ReductionKernelSpec) -> bool:
    """Whether this thread's column accumulators go in registers: the row itself is in
    registers (held in shared memory, its slots are walked in loops that are not unrolled)
    and the accumulators take at most REGISTER_WORDS."""
    words = spec.unroll * spec.vector * sum(-(-c.acc.size // 4) for c in spec.columns)
    return bool(spec.columns) and not spec.smem_held and not spec.reload and words <= REGISTER_WORDS


def min_blocks_per_sm(spec: ReductionKernelSpec) -> int:
    """__launch_bounds__' second argument for REGISTER_TARGET (SMEM_HELD_REGISTER_TARGET)
    registers a thread."""
    target = SMEM_HELD_REGISTER_TARGET if spec.smem_held else REGISTER_TARGET
    return max(1, 65536 // (target * spec.block_x * spec.block_y))


def workspace_params(spec: ReductionKernelSpec) -> list[str]:
    """The kernel parameters of the partials, after the outputs."""
    return [
        f"kf::Tensor<{c.acc.partial_type}, 1, {spec.index_type}> cws{m}"
        for m, c in enumerate(spec.columns)
    ]


def width(spec: ReductionKernelSpec) -> int:
    """Columns one row of the block's accumulators spans (block_x * batch * vector)."""
    return spec.block_x * spec.unroll * spec.vector


def smem_bytes(spec: ReductionKernelSpec) -> int:
    """Dynamic shared memory of the column accumulators (after the held rows')."""
    return sum(_region(spec, c) for c in spec.columns)


def _region(spec: ReductionKernelSpec, c: ColumnPartial) -> int:
    return -(-spec.block_y * width(spec) * c.acc.size // 16) * 16


def declare(code: Code, spec: ReductionKernelSpec, offset: int) -> None:
    """Before the row loop: each column accumulator's region of dynamic shared memory
    (starting `offset` bytes in, a multiple of 16), this thread's slots at the identity.
    kf_held (the dynamic shared memory) is declared here unless the held rows declared it."""
    if not spec.columns:
        return
    if not spec.smem_held:
        code(f"extern __shared__ __align__({DYNAMIC_SMEM_ALIGN}) unsigned char kf_held[];")
    for m, c in enumerate(spec.columns):
        code(f"{c.acc.ctype}* const cs{m} = reinterpret_cast<{c.acc.ctype}*>(kf_held + {offset});")
        offset += _region(spec, c)
    if spec.columns_in_registers:
        code(
            *[
                f"{c.acc.ctype} cr{m}[{spec.unroll}][{spec.vector}];"
                for m, c in enumerate(spec.columns)
            ]
        )
    with _each_slot(code, spec):
        for m, c in enumerate(spec.columns):
            code(f"{_slot(spec, m)} = {c.acc.identity()};")


@contextlib.contextmanager
def _each_slot(code: Code, spec: ReductionKernelSpec) -> Iterator[None]:
    """Within: the unrolled loops over this thread's slots b and lanes j."""
    with code.block(f"for (int b = 0; b < {spec.unroll}; ++b)", unroll=True):
        with code.block(f"for (int j = 0; j < {spec.vector}; ++j)", unroll=True):
            yield


def _slot(spec: ReductionKernelSpec, m: int) -> str:
    """This thread's accumulator of column i0 + j (slot b, lane j) for column reduction m."""
    return f"cr{m}[b][j]" if spec.columns_in_registers else _shared_slot(spec, m)


def _shared_slot(spec: ReductionKernelSpec, m: int) -> str:
    """The shared-memory slot of this thread's accumulator (slot b, lane j)."""
    return f"cs{m}[{_lane_major('(Index)threadIdx.y', 'b', 'j', 'threadIdx.x', spec)}]"


def _lane_major(y: str, b: str, j: str, x: str, spec: ReductionKernelSpec) -> str:
    """The offset of (row y of the block, slot b, lane j, thread x) in an accumulator."""
    return f"((({y} * {spec.unroll} + {b}) * {spec.vector} + {j}) * {spec.block_x} + {x})"


def accumulate(spec: ReductionKernelSpec, output: int, value: str) -> list[str]:
    """The statements adding `value` (slot b, lane j of main output `output`) to each of its
    accumulators."""
    return [spec.columns[m].acc.combine(_slot(spec, m), value) for m in accumulated(spec)[output]]


def store(code: Code, spec: ReductionKernelSpec) -> None:
    """After the row loop: combine the block's rows per column (in a fixed order: the same
    partial on every run) and write this block's partials."""
    by, threads = spec.block_y, spec.block_x * spec.block_y
    if spec.columns_in_registers:
        with _each_slot(code, spec):
            code(*[f"{_shared_slot(spec, m)} = cr{m}[b][j];" for m in range(len(spec.columns))])
    code("__syncthreads();")
    tid = f"(Index)threadIdx.y * {spec.block_x} + (Index)threadIdx.x"
    vec, bx = spec.vector, spec.block_x
    with code.block(f"for (Index c = {tid}; c < n_red; c += {threads})"):
        # Column c is lane j of slot b of thread x (c = (x + b * block_x) * V + j).
        code(f"const Index cj = c % {vec}, cx = (c / {vec}) % {bx}, cb = c / ({vec} * {bx});")
        for m, col in enumerate(spec.columns):
            code(f"{col.acc.ctype} total{m} = cs{m}[{_lane_major('0', 'cb', 'cj', 'cx', spec)}];")
            if by > 1:
                with code.block(f"for (int y = 1; y < {by}; ++y)"):
                    slot = _lane_major("(Index)y", "cb", "cj", "cx", spec)
                    code(col.acc.combine(f"total{m}", f"cs{m}[{slot}]"))
            code(f"kf::store(cws{m}, (Index)blockIdx.x * n_red + c, total{m});")


__all__ = [
    "ColumnPartial",
    "accumulate",
    "accumulated",
    "declare",
    "fit_in_registers",
    "name_suffix",
    "smem_bytes",
    "store",
    "workspace_params",
]
