"""The layout ops: fd.ops.stride_order (an output's memory order) and fd.ops.segment_set (a
segment boundary the user asks for). Both are identities on values (exprs.StrideOrderOp and
exprs.SegmentSetOp, casts to the input's own dtype); what they change is where a value is
stored and which kernel computes it.

The order convention is nvFuser's: order[i] is the rank of axis i's stride, 0 the fastest
axis, n - 1 the slowest; [n - 1, ..., 1, 0] is row major, and a [N, C, H, W] tensor stored
channels-last has the order [3, 0, 2, 1].
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from kfuse.errors import DefinitionError
from kfuse.ir.exprs import SegmentSetOp, StrideOrderOp
from kfuse.ir.values import Scalar, TensorView, Val


def build_stride_order(b: Any, x: Any, stride_order: Sequence[int]) -> TensorView:
    """x as a new tensor stored in `stride_order` where it is a fusion output. An empty
    order keeps row major (nvFuser's set)."""
    v = b.tensor(x, "stride_order")
    if not isinstance(stride_order, (list, tuple)) or not all(type(k) is int for k in stride_order):
        raise DefinitionError(
            f"stride_order: stride_order must be a list of ints, got {stride_order!r}"
        )
    order = tuple(stride_order) if stride_order else tuple(range(v.ndim - 1, -1, -1))
    if len(order) != v.ndim:
        raise DefinitionError(
            f"stride_order: {list(order)} has {len(order)} entries but {v.name} has "
            f"{v.ndim} axes; give one rank an axis"
        )
    if sorted(order) != list(range(v.ndim)):
        raise DefinitionError(
            f"stride_order: {list(order)} is not a permutation of 0..{v.ndim - 1} "
            "(order[i] is the rank of axis i's stride, 0 the fastest)"
        )
    out = b.new_tensor(v.dtype, v.axes)
    b.add(StrideOrderOp(inputs=(v,), outputs=(out,), dtype=v.dtype, order=order))
    return out


def build_segment_set(b: Any, x: Any) -> Val:
    """x, computed in a segment of its own from a materialized x (a scalar is itself)."""
    v = b.operand(x, "segment_set", 0)
    if isinstance(v, Scalar):
        return v
    out = b.new_tensor(v.dtype, v.axes)
    b.add(SegmentSetOp(inputs=(v,), outputs=(out,), dtype=v.dtype))
    return out


def allocation_order(out: Any) -> tuple[int, ...] | None:
    """The stride order output `out` is allocated in: its stride_order op's, else None
    (row major)."""
    definition = getattr(out, "definition", None)
    if isinstance(definition, StrideOrderOp):
        order = definition.order
        if order != tuple(range(len(order) - 1, -1, -1)):
            return order
    return None


def ordered_strides(shape: Sequence[int], order: Sequence[int]) -> tuple[int, ...]:
    """Strides in elements of a dense tensor of `shape` stored in `order`: the fastest axis
    has stride 1, each slower one the stride and extent (1 at least, as torch counts an
    empty axis) of the one before it, size-1 axes included (torch's channels-last strides)."""
    strides = [0] * len(shape)
    running = 1
    for axis in sorted(range(len(shape)), key=lambda i: order[i]):
        strides[axis] = running
        running *= max(int(shape[axis]), 1)
    return tuple(strides)


def boundary_inputs(fusion: Any) -> list[TensorView]:
    """The values of `fusion` a segment_set reads that an expr of the same fusion computes:
    no one kernel may compute such a value and its segment_set."""
    produced = {id(o) for e in fusion.exprs for o in e.outputs}
    return [
        cast(TensorView, e.inputs[0])
        for e in fusion.exprs
        if isinstance(e, SegmentSetOp) and id(e.inputs[0]) in produced
    ]
