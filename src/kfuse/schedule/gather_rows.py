"""The launch of a pointwise kernel that reads rows through an index (an embedding's rows,
index_select, gather), where switches.WHOLE_GATHER_ROWS is on: a tile of threads and vectors
a thread that covers each row exactly (gather_row_tile), and whether the kernel may then walk
its rows without the ragged-end path (whole_gather_rows; kfuse.codegen.whole_rows)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kfuse import switches

if TYPE_CHECKING:
    from kfuse.schedule.pointwise import PointwiseLayout

GATHER_MAX_UNROLL = 4
"""The most vectors gather_row_tile gives a thread."""
WARP = 32


def gather_row_tile(vecs_per_row: int, threads: int, block_x: int, unroll: int) -> tuple[int, int]:
    """(block_x, unroll) for rows of `vecs_per_row` vectors read through an index
    (switches.WHOLE_GATHER_ROWS): the given tile where its blocks cover a row exactly, else
    the first, in order of vectors a thread from `unroll` up to GATHER_MAX_UNROLL and then
    down to 1, of: a row over one block's threads, whole warps or a divisor of one (a warp
    never holds part of a row and idle lanes); a row over whole blocks of `threads`; else
    the given tile, whose last block of a row is left partly idle."""
    if vecs_per_row % (block_x * unroll) == 0:
        return block_x, unroll
    order = [*range(unroll, GATHER_MAX_UNROLL + 1), *range(unroll - 1, 0, -1)]
    for u in order:
        across = vecs_per_row // u
        if (
            vecs_per_row % u == 0
            and across <= threads
            and (across % WARP == 0 or WARP % across == 0)
        ):
            return across, u
    for u in order:
        if vecs_per_row % (threads * u) == 0:
            return threads, u
    return block_x, unroll


def whole_gather_rows(layout: PointwiseLayout, params: Any) -> bool:
    """PointwiseKernelSpec.whole_rows: where switches.WHOLE_GATHER_ROWS is on, whether the
    launch's vectors are exactly a row's of a kernel with indexed reads and no input that
    reads its own window or sub-axes or generates its values (the loads kfuse.codegen.
    whole_rows leaves to the generic loop)."""
    covered = int(params.grid_x) * int(params.block_x) * int(params.unroll_factor)
    return (
        switches.WHOLE_GATHER_ROWS
        and has_indexed_rows(layout)
        and covered * int(params.vectorization_factor) == layout.n_inner
        and not any(op.inner_split or op.window or op.generated for op in layout.inputs)
    )


def has_indexed_rows(layout: PointwiseLayout) -> bool:
    """Whether the kernel walks rows (the 2-D schedule) and reads an input through an index."""
    return layout.rank > 1 and any(op.indexed is not None for op in layout.inputs)
