"""Row operands that do not walk a persistent kernel's row in one stride (SPLIT: a group
norm's per-channel weight over the row [C/G, H, W]): the element offset of row index e is
decomposed over the operand's own row sub-axes, which it is passed with after its kept axes
(kf::Tensor of rank kept + sub-axes; reduction_plan.Operand.row_split).

Sub-axes whose stride is 0 in this layout (the weight's [H * W]) add nothing: they are only
divisors of the walked ones, so the weight costs one division an element."""

from __future__ import annotations


def split_offset(tensor: str, first: int, walked: tuple[bool, ...], index: str) -> str:
    """The element offset of row index `index` in `tensor`, whose row sub-axes are dims
    first .. first + len(walked) - 1 (outermost first); walked[j]: sub-axis j has a non-zero
    stride. The outermost needs no modulo: the index lies inside the row."""
    dims = range(first, first + len(walked))
    terms = []
    for j, d in enumerate(dims):
        if not walked[j]:
            continue
        inner = [f"{tensor}.size[{e}]" for e in dims[j + 1 :]]
        coord = f"({index})" if not inner else f"({index}) / ({' * '.join(inner)})"
        if j > 0:
            coord = f"({coord} % {tensor}.size[{d}])"
        terms.append(f"{coord} * {tensor}.stride[{d}]")
    return " + ".join(terms) if terms else "0"


def row_extent(tensor: str, first: int, count: int) -> str:
    """The row's length from `tensor`'s sizes: its one row axis, or its sub-axes' product."""
    return " * ".join(f"{tensor}.size[{d}]" for d in range(first, first + count))
