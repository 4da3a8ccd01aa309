"""Column partials: what the inner persistent kernel adds for inner_outer_persistent.

Each thread holds the same columns of every row it walks (slot b, lane j is column
(threadIdx.x + b * block_x) * V + j, shifted by the cluster rank in a cluster), so it sums a
column reduction's input over its rows in registers, col<m>[b][j], with no communication.
After the last row, a block's threads that share columns (threadIdx.y) are combined in shared
memory in a fixed order, and the block (a cluster's rank r block for its columns) writes one
partial per column: workspace cws<m>[p * n_red + column], p = the block's index among the
grid's blocks (clusters). kfuse.codegen.reduction.emit_finalize then combines the partials
of every column and runs the column outputs' epilogue, as for a grid reduction.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from kfuse.codegen.kernel import Code
from kfuse.codegen.reduction_spec import Accumulator, ReductionKernelSpec


@dataclass(frozen=True)
class ColumnPartial:
    """Main output `output` (full size) accumulated per column with `acc` (the column
    reduction's accumulator, whose k is its reduction index on the column side)."""

    output: int
    acc: Accumulator


def name_suffix(columns: tuple[ColumnPartial, ...]) -> str:
    """Kernel-name suffix naming the column partials (the spec's repr leaves them out)."""
    return "_cols" + hashlib.sha1(repr(columns).encode()).hexdigest()[:8] if columns else ""


def accumulated(spec: ReductionKernelSpec) -> dict[int, int]:
    """Main output index -> its column partial's index m."""
    return {c.output: m for m, c in enumerate(spec.columns)}


def workspace_params(spec: ReductionKernelSpec) -> list[str]:
    """The kernel parameters of the partials, after the outputs."""
    return [
        f"kf::Tensor<{c.acc.partial_type}, 1, {spec.index_type}> cws{m}"
        for m, c in enumerate(spec.columns)
    ]


def scratch_bytes(spec: ReductionKernelSpec) -> int:
    """Static shared memory for combining the rows of a block (0 with one row a block)."""
    if spec.block_y == 1 or not spec.columns:
        return 0
    width = spec.block_x * spec.unroll * spec.vector
    return spec.block_y * width * max(c.acc.size for c in spec.columns)


def declare(code: Code, spec: ReductionKernelSpec) -> None:
    """Before the row loop: each partial's registers at its identity (and the scratch)."""
    if scratch_bytes(spec):
        code(f"__shared__ __align__(16) unsigned char kf_cols[{scratch_bytes(spec)}];")
    batch, vec = spec.unroll, spec.vector
    for m, c in enumerate(spec.columns):
        code(f"{c.acc.ctype} col{m}[{batch}][{vec}];")
        with code.block(f"for (int b = 0; b < {batch}; ++b)", unroll=True):
            with code.block(f"for (int j = 0; j < {vec}; ++j)", unroll=True):
                code(f"col{m}[b][j] = {c.acc.identity()};")


def accumulate(spec: ReductionKernelSpec, output: int, value: str) -> str:
    """The statement adding `value` (slot b, lane j of main output `output`) to its partial."""
    m = accumulated(spec)[output]
    return spec.columns[m].acc.combine(f"col{m}[b][j]", value)


def store(code: Code, spec: ReductionKernelSpec, slot_start: str) -> None:
    """After the row loop: combine the block's rows and write this block's partials.
    slot_start: the column where this thread's slot b starts (slot_start(spec))."""
    batch, vec, by = spec.unroll, spec.vector, spec.block_y
    part = "(Index)blockIdx.x" if spec.cluster == 1 else f"(Index)(blockIdx.x / {spec.cluster})"
    if by == 1:
        with code.block(f"for (int b = 0; b < {batch}; ++b)", unroll=True):
            code(f"const Index i0 = {slot_start};")
            with code.block(f"for (int j = 0; j < {vec}; ++j)", unroll=True):
                with code.block("if (i0 + j < n_red)"):
                    for m in range(len(spec.columns)):
                        code(f"kf::store(cws{m}, {part} * n_red + i0 + j, col{m}[b][j]);")
        return
    width = spec.block_x * batch * vec
    threads = spec.block_x * by
    tid = f"(Index)threadIdx.y * {spec.block_x} + (Index)threadIdx.x"
    for m, c in enumerate(spec.columns):
        ctype, scratch = c.acc.ctype, f"scratch{m}"
        code(f"{ctype}* const {scratch} = reinterpret_cast<{ctype}*>(kf_cols);")
        with code.block(f"for (int b = 0; b < {batch}; ++b)", unroll=True):
            code(f"const Index i0 = {slot_start};")
            with code.block(f"for (int j = 0; j < {vec}; ++j)", unroll=True):
                code(f"{scratch}[(Index)threadIdx.y * {width} + i0 + j] = col{m}[b][j];")
        code("__syncthreads();")
        with code.block(f"for (Index c = {tid}; c < n_red; c += {threads})"):
            code(f"{ctype} total = {scratch}[c];")
            # The rows in a fixed order: the same partial on every run.
            with code.block(f"for (int y = 1; y < {by}; ++y)"):
                code(c.acc.combine("total", f"{scratch}[(Index)y * {width} + c]"))
            code(f"kf::store(cws{m}, {part} * n_red + c, total);")
        code("__syncthreads();")


__all__ = [
    "ColumnPartial",
    "accumulate",
    "accumulated",
    "declare",
    "name_suffix",
    "scratch_bytes",
    "store",
    "workspace_params",
]
