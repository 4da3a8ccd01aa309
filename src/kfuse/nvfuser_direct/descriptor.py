"""compute_tensor_descriptor: an array's layout in nvFuser's terms, from its sizes and strides.

Thunder asks for it on every call (its fusion cache is keyed on the result) and passes what
it returns to define_tensor as `contiguity` and `stride_order`. kfuse reads the layout of
every input from the array itself when it runs, so the two are only a description here; they
follow nvFuser's rules so that keys and printed definitions are the ones nvFuser gives.
"""

from __future__ import annotations

from collections.abc import Sequence

from kfuse.errors import InputError


def compute_tensor_descriptor(
    sizes: Sequence[int], strides: Sequence[int]
) -> tuple[list[bool | None], list[int]]:
    """(contiguity, stride_order) of an array of `sizes` and `strides` (in elements).

    stride_order[i] is the rank of axis i's stride, 0 the fastest; axes of stride 0 keep
    their place and the others are ordered by decreasing stride (ties in axis order).
    contiguity lists the axes in that order, outermost first: None for a broadcast axis
    (size 1 or stride 0), else whether the stride is the size times stride of the next
    non-broadcast axis inward (1 for the innermost).
    """
    sizes, strides = [int(s) for s in sizes], [int(s) for s in strides]
    if len(sizes) != len(strides):
        raise InputError(
            f"compute_tensor_descriptor: {len(sizes)} sizes but {len(strides)} strides"
        )
    for k, stride in enumerate(strides):
        if stride < 0:
            raise InputError(f"compute_tensor_descriptor: stride {k} is negative ({stride})")
    moving = sorted((k for k in range(len(sizes)) if strides[k] != 0), key=lambda k: -strides[k])
    order = list(moving)
    for k in range(len(sizes)):  # a stride-0 axis is put back at its own position
        if strides[k] == 0:
            order.insert(k, k)
    n = len(order)
    stride_order = [0] * n
    contiguity: list[bool | None] = []
    for place, axis in enumerate(order):
        stride_order[axis] = n - 1 - place
        if _is_broadcast(sizes, strides, axis):
            contiguity.append(None)
            continue
        inner = next((a for a in order[place + 1 :] if not _is_broadcast(sizes, strides, a)), None)
        expected = 1 if inner is None else strides[inner] * sizes[inner]
        contiguity.append(strides[axis] == expected)
    return contiguity, stride_order


def _is_broadcast(sizes: list[int], strides: list[int], axis: int) -> bool:
    return strides[axis] == 0 or sizes[axis] == 1
