"""Kernel operands laid out over the (merged) reference domain, from the actual inputs.

Each tensor operand is described by strides over the reference axes (0 where it is broadcast).
Adjacent reference axes that every operand walks contiguously are merged, and size-1 axes are
dropped, so a contiguous tensor of any rank becomes one long axis: fewer index computations,
longer vectorizable rows. The merged rank, each operand's access kind and the index type are
part of a kernel's signature; the sizes themselves are run-time arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kfuse import switches
from kfuse.ir.layout_ops import allocation_order, ordered_strides

INT32_MAX = 2**31 - 1

# How a kernel reads an operand along the innermost merged axis.
VEC = "vec"  # unit stride and aligned: V elements in one (up to 16-byte) access
BCAST = "bcast"  # stride 0: one element serves the whole vector
STRIDED = "strided"  # anything else: V scalar accesses
SPLIT = "split"  # an operand read along the inner axis through sub-axes of its own (row_split)
# An indexed read (OperandLayout.indexed): a vector at a time where a vector's elements share one
# position (the index constant along the inner axis) and the tensor allows vectors, else
# element by element, each at its own position.
INDEXED_VEC = "indexed_vec"
INDEXED = "indexed"
# A padded read (OperandLayout.window): a vector at a time where no padded axis is the inner
# one (a row is inside the window or not, whole) and the tensor allows vectors, else element
# by element, each checked against the window.
WINDOWED_VEC = "windowed_vec"
WINDOWED = "windowed"
# A generated read (OperandLayout.generated): no memory; each element computed from its linear
# index in the generated tensor (kfuse.codegen.generated).
GENERATED = "generated"
# An outer reduction's operand whose reduced rows are adjacent within each column (stride 1
# along the reduced axis, `unroll` along the columns): a thread's V columns of all its rows are
# one block of V * unroll elements, loaded as one vector (kfuse.codegen.reduction).
INTERLEAVED = "interleaved"


@dataclass(frozen=True)
class OperandLayout:
    """One tensor operand over the reference domain (before or after merging)."""

    data_ptr: int
    itemsize: int
    strides: tuple[int, ...]
    # A pointwise kernel's SPLIT input (kfuse.schedule.short_rows.split_short_rows): the
    # (extent, stride) sub-axes, outermost first, it walks the innermost merged axis through
    # (its strides[-1] is then 0 and unused); () for every other operand.
    inner_split: tuple[tuple[int, int], ...] = ()
    # A pointwise kernel's indexed read (kfuse.codegen.domain.IndexedRead): the (extent,
    # stride) of its tensor's indexed axis, along which the index's elements give the
    # position (its `strides` are 0 there); None for every other operand.
    indexed: tuple[int, int] | None = None
    # A pointwise kernel's padded read (kfuse.codegen.domain.PaddedRead): per padded axis
    # (the axis it is, of the reference domain before merging and of the merged one after,
    # its low width, the tensor's extent), the element at coordinate c reading the tensor at
    # c - low where that is in [0, extent); () for every other operand.
    window: tuple[tuple[int, int, int], ...] = ()
    # A pointwise kernel's generated read (kfuse.codegen.domain.GeneratedRead): no data; its
    # strides are those of the generated tensor's contiguous layout, and the offset they
    # give is the element's linear index there.
    generated: bool = False

    def max_offset(self, sizes: tuple[int, ...]) -> int:
        """The largest element offset the kernel can touch (for the index type choice)."""
        along = 0 if self.indexed is None else max(0, self.indexed[0] - 1) * abs(self.indexed[1])
        if self.inner_split:
            rows = sum((n - 1) * abs(s) for n, s in zip(sizes[:-1], self.strides) if n > 0)
            return rows + sum((n - 1) * abs(s) for n, s in self.inner_split if n > 0) + along
        return sum((n - 1) * abs(s) for n, s in zip(sizes, self.strides) if n > 0) + along


def ref_strides(view: tuple, strides: tuple[int, ...], ref_rank: int) -> tuple[int, ...]:
    """Strides over the reference axes for a tensor read at `view` (None axes have size 1)."""
    out = [0] * ref_rank
    for axis_ref, stride in zip(view, strides):
        if axis_ref is not None:
            out[axis_ref] += stride
    return tuple(out)


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides in elements."""
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * max(shape[i + 1], 1)
    return tuple(strides)


def allocated_strides(v: Any, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides in elements of the dense array kfuse allocates for value `v` of `shape`:
    row major, or in the memory order fd.ops.stride_order asked for (its kernels write it
    so; a later segment reads it so)."""
    order = allocation_order(v)
    return contiguous_strides(shape) if order is None else ordered_strides(shape, order)


def output_layout(info: Any, out: Any) -> tuple[tuple[int, ...], int]:
    """(strides, byte offset) of output `out` of the call `info` describes: contiguous in an
    allocation of its own, unless the call writes it into part of a larger array
    (RuntimeInfo.output_views), or stored in the memory order fd.ops.stride_order asked
    for."""
    view = info.output_views.get(out)
    if view is not None:
        return view
    return allocated_strides(out, tuple(info.shape(out))), 0


def in_memory_order(
    sizes: tuple[int, ...], operands: list[OperandLayout]
) -> tuple[tuple[int, ...], list[OperandLayout]]:
    """The reference axes reordered slowest to fastest as the operands store them, where
    every operand agrees with the last dense one (an output, when outputs come last): a
    channels-last or stride_order output of inputs in the same order then merges as a
    row-major one would, into one long unit-stride axis, instead of looking like a
    transpose along the logical innermost axis. Unchanged where the order is already the
    logical one, where an operand disagrees (a transpose, for the tiled kernel), and where
    an operand names reference axes or linear indices (windows, indexed and generated
    reads, split rows): those stay in the logical order they were built in."""
    if not switches.MEMORY_ORDER_LAYOUTS or any(
        op.window or op.indexed or op.generated or op.inner_split for op in operands
    ):
        return sizes, operands
    axes = [r for r, n in enumerate(sizes) if n != 1]
    dense = [op for op in operands if all(op.strides[r] != 0 for r in axes)]
    if not dense:
        return sizes, operands
    lead = dense[-1].strides
    order = sorted(axes, key=lambda r: -lead[r])  # stable: ties keep the logical order
    if order == axes:
        return sizes, operands

    def agrees(strides: tuple[int, ...]) -> bool:
        walked = [strides[r] for r in order if strides[r] != 0]
        return all(a >= b for a, b in zip(walked, walked[1:]))

    if not all(agrees(op.strides) for op in operands):
        return sizes, operands
    moved = [r for r, n in enumerate(sizes) if n == 1] + order  # size-1 axes: dropped later
    return tuple(sizes[r] for r in moved), [
        OperandLayout(op.data_ptr, op.itemsize, tuple(op.strides[r] for r in moved))
        for op in operands
    ]


def merge_axes(
    sizes: tuple[int, ...], operands: list[OperandLayout]
) -> tuple[tuple[int, ...], list[OperandLayout]]:
    """Drop size-1 axes and merge adjacent axes every operand walks contiguously. A padded
    read's padded axes (OperandLayout.window) are kept whatever their size and merge with
    none: the kernel checks each one's coordinate against the window; their entries name the
    merged axis they become.

    Returns at least one axis (a 0-d domain becomes one axis of size 1).
    """
    apart = {r for op in operands for r, _, _ in op.window}
    keep = [r for r, n in enumerate(sizes) if n != 1 or r in apart]
    if any(n == 0 for n in sizes):
        keep = list(range(len(sizes)))  # nothing runs; keep the shape simple to read
    new_sizes: list[int] = []
    new_strides: list[list[int]] = [[] for _ in operands]
    merged_as: dict[int, int] = {}
    last = -1
    for r in keep:
        merges = new_sizes and r not in apart and last not in apart
        last = r
        if merges and all(
            st[-1] == op.strides[r] * sizes[r] for st, op in zip(new_strides, operands)
        ):
            new_sizes[-1] *= sizes[r]
            for st, op in zip(new_strides, operands):
                st[-1] = op.strides[r]
            continue
        merged_as[r] = len(new_sizes)
        new_sizes.append(sizes[r])
        for st, op in zip(new_strides, operands):
            st.append(op.strides[r])
    if not new_sizes:
        new_sizes = [1]
        new_strides = [[0] for _ in operands]
    merged = [
        OperandLayout(
            op.data_ptr,
            op.itemsize,
            tuple(st),
            indexed=op.indexed,
            window=tuple((merged_as[r], low, extent) for r, low, extent in op.window),
            generated=op.generated,
        )
        for op, st in zip(operands, new_strides)
    ]
    return tuple(new_sizes), merged


def access_kind(op: OperandLayout, vector: int) -> str:
    """How `op` can be read along the innermost axis with vectors of `vector` elements."""
    if op.inner_split:
        return SPLIT
    inner = op.strides[-1]
    if inner == 0:
        return BCAST
    if inner != 1:
        return STRIDED
    if vector == 1:
        return VEC
    # Vec accesses are at most 16 bytes wide (wider vectors are several 16-byte accesses).
    aligned = op.data_ptr % min(16, vector * op.itemsize) == 0
    rows_aligned = all(s % vector == 0 for s in op.strides[:-1])
    return VEC if aligned and rows_aligned else STRIDED


def needs_int64(sizes: tuple[int, ...], operands: list[OperandLayout]) -> bool:
    """True when an element count or offset does not fit int32 indexing."""
    numel = 1
    for n in sizes:
        numel *= n
    return numel > INT32_MAX or any(op.max_offset(sizes) > INT32_MAX for op in operands)
