"""The combine of every thread's accumulator over threadIdx.y, in a fixed tree (shuffles
within a warp, then shared memory): the outer reduction kernel, the finalize kernel and the
outer persistent kernel all end their block's work with it.

A module of its own because three kernels of three modules share it and its determinism
(the same tree, so the same bits, whatever the block shape) is their contract.
"""

from __future__ import annotations

from kfuse.codegen.kernel import Code
from kfuse.codegen.reduction_spec import Accumulator


def combine_over_y(code: Code, a: Accumulator, ny: int, nx: int, vec: int | None, acc: str) -> None:
    """Combine each thread's accumulator `acc` (an array of `vec`, or a scalar
    when vec is None) over threadIdx.y into thread y == 0's, through shared memory.

    Partners pair up in a fixed tree (y with y + 1, then y with y + 2, ...), so results are
    deterministic and there are log2(ny) steps. A loop in which thread y == 0 alone combined
    the other ny - 1 values in turn was one warp's chain of dependent combines: with ny = 32
    and Welford's division, it took most of a 32 us statistics kernel while the other warps
    waited at the barrier (Nsight Compute: 76% of their cycles). The steps whose partners
    share a warp go through shuffles (warp_rows_y), the rest through shared memory with a
    barrier each: the same tree, so the same bits, with log2(32 / nx) fewer barriers (an
    outer_persistent block of 512 rows had 9 per combine). Every thread of the block must
    call it. Ends with a barrier, so the shared memory is free for the next accumulator; the
    total is also in the scratch's first row (slot threadIdx.x).
    """
    item = acc if vec is None else f"{acc}[j]"
    at = "" if vec is None else " + j"
    width = vec or 1
    in_warp = warp_rows_y(ny, nx)

    def each(*body: str) -> None:
        if vec is None:
            code(*body)
            return
        with code.block(f"for (int j = 0; j < {vec}; ++j)", unroll=True):
            code(*body)

    with code.block():
        code(f"{a.ctype}* scratch = reinterpret_cast<{a.ctype}*>(kf_smem);")
        if in_warp > 1:
            with code.block(f"for (int s = 1; s < {in_warp}; s *= 2)", unroll=True):
                moved = f"kf::detail::shfl_down(0xffffffffu, {item}, s * {nx})"
                each(
                    f"const {a.ctype} other = {moved};",
                    f"if ((threadIdx.y & (2 * s - 1)) == 0) {a.combine(item, 'other')}",
                )
        # One slot per warp's row group: w = y / in_warp.
        code(
            f"const int w = threadIdx.y / {in_warp};",
            f"const int mine = (w * {nx} + threadIdx.x) * {width};",
        )
        with code.block(f"if (threadIdx.y % {in_warp} == 0)"):
            each(f"scratch[mine{at}] = {item};")
        code("__syncthreads();")
        groups = ny // in_warp
        if groups > 1:
            with code.block(f"for (int s = 1; s < {groups}; s *= 2)"):
                root = f"threadIdx.y % {in_warp} == 0"
                with code.block(f"if ({root} && (w & (2 * s - 1)) == 0 && w + s < {groups})"):
                    code(f"const int theirs = ((w + s) * {nx} + threadIdx.x) * {width};")
                    each(a.combine(item, f"scratch[theirs{at}]"), f"scratch[mine{at}] = {item};")
                code("__syncthreads();")


def warp_rows_y(ny: int, nx: int) -> int:
    """How many consecutive rows of threadIdx.y one warp holds whole, where every warp of the
    block is full and aligned to them (nx divides 32, nx * ny a multiple of 32); else 1."""
    if nx > 32 or 32 % nx or (nx * ny) % 32:
        return 1
    return min(ny, 32 // nx)
