"""Short rows made longer: the pointwise kernel's rows (its merged innermost axis) lengthened
by merging the axes outside them where every output walks them contiguously, the inputs that
do not then read through sub-axes of their own (SPLIT reads, kfuse.codegen.row_split)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kfuse import switches
from kfuse.codegen.layout import OperandLayout

if TYPE_CHECKING:
    from kfuse.schedule.pointwise import PointwiseLayout

SHORT_ROW = 256
"""Merged rows shorter than this many elements are lengthened where inputs allow
(split_short_rows)."""
LONG_ROW = 4096
"""...up to at least this many: 128 threads of two 8-element vectors each take 2048."""


def wants_longer_rows(n_inner: int) -> bool:
    """Whether split_short_rows lengthens rows of `n_inner` elements: shorter than SHORT_ROW,
    or (switches.SPLIT_RAGGED_ROWS) shorter than LONG_ROW and not a power of two."""
    if n_inner < SHORT_ROW:
        return True
    return switches.SPLIT_RAGGED_ROWS and n_inner < LONG_ROW and n_inner & (n_inner - 1) != 0


def split_short_rows(layout: PointwiseLayout) -> PointwiseLayout:
    """Lengthen a short innermost axis by merging the axes outside it wherever every output
    walks them contiguously, the inputs that do not becoming SPLIT: they read the longer axis
    through sub-axes of their own (kfuse.codegen.row_split). Only inputs constant along the
    short rows (per-row values: stride 0 there) are split; a bias along the rows, which
    the 2-D schedule reads in vectors, stops the merge.

    A batch norm's normalization of an NCHW bf16 [256, 2048, 7, 7] has per-channel statistics
    broadcast over H and W, so no merge crosses C and its rows are 49 elements: 98 bytes, no
    vector access, a block's lanes mostly idle; it ran at 1.0 TB/s on an H200. Merged with C
    (the statistics walking [C, H x W] with strides [1, 0]), x and y take rows of 100352
    elements in 16-byte vectors. With switches.SPLIT_RAGGED_ROWS, rows up to LONG_ROW that blocks of
    a power of two of threads cannot cover without idle lanes are lengthened too
    (wants_longer_rows)."""
    if layout.rank < 2 or not wants_longer_rows(layout.n_inner):
        return layout
    if any(op.indexed or op.window or op.generated for op in layout.inputs):
        # an indexed, padded or generated read's row_split would need its own sub-axes
        return layout
    sizes = list(layout.sizes)
    ins = [list(op.strides) for op in layout.inputs]
    outs = [list(op.strides) for op in layout.outputs]
    subs: list[list[tuple[int, int]]] = [[] for _ in ins]  # sub-axes of the SPLIT inputs

    def merges(st: list[int]) -> bool:  # axis rank - 2 into the inner one
        return st[-2] == st[-1] * sizes[-1]

    while len(sizes) >= 2 and sizes[-1] < LONG_ROW and all(merges(st) for st in outs):
        newly = [k for k, st in enumerate(ins) if not subs[k] and not merges(st)]
        if any(ins[k][-1] != 0 for k in newly):
            break  # only inputs constant along the short rows are split (the docstring)
        for k, st in enumerate(ins):
            if not subs[k] and not merges(st):
                subs[k] = [(sizes[-1], st[-1])]
            if subs[k]:
                subs[k].insert(0, (sizes[-2], st[-2]))
        sizes[-1] *= sizes[-2]
        del sizes[-2]
        for st in ins + outs:
            del st[-2]
    if not any(subs):
        return layout  # merge_axes merged every axis that merges for all operands already

    def operand(op: OperandLayout, st: list[int], sub: list[tuple[int, int]]) -> OperandLayout:
        if not sub:
            return OperandLayout(op.data_ptr, op.itemsize, tuple(st))
        return OperandLayout(op.data_ptr, op.itemsize, (*st[:-1], 0), tuple(sub))

    return type(layout)(
        tuple(sizes),
        [operand(op, st, sub) for op, st, sub in zip(layout.inputs, ins, subs)],
        [operand(op, st, []) for op, st in zip(layout.outputs, outs)],
    )
