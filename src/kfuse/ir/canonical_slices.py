"""Slices moved onto the values they are taken of (the canonical form's slice rules,
kfuse.ir.canonical_rules): whether a slice of computed work can be taken of the leaves it is
computed from instead (`movable`), and the moved slice itself (`moved_slice`), through
element-wise ops, permutes, broadcasts, expands whose expanded axes the slice keeps whole,
and fulls and expands that an operand beside them gives the extents of."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kfuse.dtypes import DataType
from kfuse.ir.canonical_terms import ELEMENTWISE, is_full, is_leaf
from kfuse.ir.exprs import BroadcastOp, ExpandOp, GeneratedOp, PermuteOp, SliceOp
from kfuse.ir.values import Axis, Scalar, TensorView, Val


@dataclass(frozen=True)
class Bounds:
    """A slice of a value being moved onto its inputs: per axis of the value its start,
    stop and step, and the sliced value's axes."""

    starts: tuple[Any, ...]  # Int Scalars
    stops: tuple[Any, ...]
    steps: tuple[int, ...]
    manual: bool
    axes: tuple[Axis, ...]


def moved_slice(
    ctx: Any,
    value: TensorView,
    bounds: Bounds,
    like: Any,
    dropped: frozenset | set = frozenset(),
) -> Val:
    """`value` (movable) sliced by `bounds`, the slices taken of the fusion inputs it is
    computed from, the result defined as `like` (Vals to name it after). `dropped`: (id,
    axis_map) of the expands that _movable found cut and covered (_covered_expand): each is
    its input sliced, left broadcast along the axes it expanded."""
    zero, one = ctx.constant(0, DataType.Int), ctx.constant(1, DataType.Int)
    done: dict[tuple, Val] = {}

    def sliced(u: Val, axis_map: tuple[int, ...]) -> Val:
        """u with the slice taken; axis_map[j] is the sliced value's axis that u's axis j
        becomes (u's broadcast axes keep their one element)."""
        if not isinstance(u, TensorView):
            return u
        key = (id(u), axis_map)
        if key in done:
            return done[key]
        axes = tuple(ax if ax.is_broadcast else bounds.axes[m] for ax, m in zip(u.axes, axis_map))
        made = like if u is value else [ctx.new_val(u.dtype, axes)]
        e = u.definition
        if (id(u), axis_map) in dropped:  # an expand beside a value with its extents
            assert isinstance(e, ExpandOp)
            result = sliced(e.inputs[0], axis_map)
            done[key] = result
            return result
        if isinstance(e, GeneratedOp):  # a full beside a value with its extents (movable)
            one_element = [ctx.new_val(u.dtype, tuple(Axis(True, 1) for _ in u.axes))]
            (result,) = ctx.emit(GeneratedOp, *_one_element_of(ctx, e, u), one_element)
            done[key] = result
            return result
        if is_leaf(u):
            if all(ax.is_broadcast for ax in u.axes):
                return u  # one value, read as it is
            whole = [ax.is_broadcast for ax in u.axes]
            lo = tuple(zero if w else bounds.starts[m] for w, m in zip(whole, axis_map))
            hi = tuple(one if w else bounds.stops[m] for w, m in zip(whole, axis_map))
            steps = tuple(1 if w else bounds.steps[m] for w, m in zip(whole, axis_map))
            scalars = tuple(dict.fromkeys(v for v in (*lo, *hi) if not v.is_constant))
            attrs = {"starts": lo, "stops": hi, "steps": steps, "manual": bounds.manual}
            (result,) = ctx.emit(SliceOp, (u, *scalars), attrs, made)
        elif isinstance(e, PermuteOp):
            source_map = [0] * len(e.perm)
            for i, src in enumerate(e.perm):
                source_map[src] = axis_map[i]
            moved = sliced(e.inputs[0], tuple(source_map))
            (result,) = ctx.emit(PermuteOp, (moved,), e.attributes(), made)
        elif isinstance(e, BroadcastOp):
            kept = tuple(m for m, new in zip(axis_map, e.is_new_axis) if not new)
            (result,) = ctx.emit(BroadcastOp, (sliced(e.inputs[0], kept),), e.attributes(), made)
        elif isinstance(e, ExpandOp):  # the slice keeps its expanded axes whole (movable)
            moved = sliced(e.inputs[0], axis_map)
            (result,) = ctx.emit(ExpandOp, (moved, *e.inputs[1:]), e.attributes(), made)
        else:
            assert isinstance(e, ELEMENTWISE)
            operands = tuple(sliced(w, axis_map) for w in e.inputs)
            (result,) = ctx.emit(type(e), operands, e.attributes(), made)
        done[key] = result
        return result

    return sliced(value, tuple(range(value.ndim)))


def _one_element_of(ctx: Any, e: GeneratedOp, u: TensorView) -> tuple[tuple, dict[str, Any]]:
    """(operands, attributes) of `e` (a generated value that no element's index changes, a
    full) made with every axis a broadcast one: any slice of it holds its one value, which
    the element-wise ops reading it broadcast as they do any broadcast axis."""
    one = ctx.constant(1, DataType.Int)
    shape = (one,) * u.ndim
    attrs = {"op": e.op, "shape": shape, "params": e.params, "dtype": e.dtype}
    operands = tuple(v for v in e.params if not (isinstance(v, Scalar) and v.is_constant))
    return operands, attrs


WHOLE = 1 << 62
"""The end of an axis a moved slice keeps whole: clamped to the axis' size."""


def movable(
    u: Val,
    cut: Callable[[int], bool],
    axis_map: tuple[int, ...] | None = None,
    dropped: set[tuple[int, tuple[int, ...]]] | None = None,
) -> bool:
    """Whether a slice of u can be taken of the leaves (is_leaf) it is computed from:
    through element-wise ops, permutes, broadcasts, and expands whose expanded axes the
    slice keeps whole. `cut(m)`: whether the slice keeps less than all of the sliced value's
    axis m; axis_map[j]: the sliced value's axis that u's axis j is (as in moved_slice).
    `dropped` (where given): an expand whose expanded axes the slice cuts is taken too where
    an operand beside it has those axes (_covered_expand), added to `dropped` (its id and
    axis_map: the same expand elsewhere is judged there)."""
    if not isinstance(u, TensorView) or is_leaf(u):
        return True
    if axis_map is None:
        axis_map = tuple(range(u.ndim))
    e = u.definition
    if isinstance(e, PermuteOp):
        source_map = [0] * len(e.perm)
        for i, src in enumerate(e.perm):
            source_map[src] = axis_map[i]
        return movable(e.inputs[0], cut, tuple(source_map), dropped)
    if isinstance(e, BroadcastOp):
        kept = tuple(m for m, new in zip(axis_map, e.is_new_axis) if not new)
        return movable(e.inputs[0], cut, kept, dropped)
    if isinstance(e, ExpandOp):
        source = e.inputs[0]
        assert isinstance(source, TensorView)
        expanded = [
            m
            for m, a, b in zip(axis_map, source.axes, u.axes)
            if a.is_broadcast and not b.is_broadcast
        ]
        checked = [axis_map[j] for j in _checked_axes(e)]
        if any(cut(m) for m in (*expanded, *checked)):
            return False
        return movable(source, cut, axis_map, dropped)
    if not isinstance(e, ELEMENTWISE):
        return False
    for w in e.inputs:
        if _broadcast_full(w, e.inputs) or movable(w, cut, axis_map, dropped):
            continue
        if dropped is None or not _covered_expand(w, e.inputs):
            return False
        source = w.definition.inputs[0]  # type: ignore[union-attr]
        if not movable(source, cut, axis_map, dropped):
            return False
        dropped.add((id(w), axis_map))
    return True


def _covered_expand(w: Val, operands: tuple[Val, ...]) -> bool:
    """Whether operand `w` of an element-wise op is an expand whose expanded axes another
    operand (not a generated value, not an expand) has unbroadcast: taken without the
    expand, w's input is broadcast along them by the op, which takes their extents from that
    operand. A CUDA loss's gradient reaches Thunder's RoPE backward so, a 0-d tensor
    expanded to the gradient's shape, where on the host it is a scalar filling a full."""
    if not isinstance(w, TensorView) or not isinstance(w.definition, ExpandOp):
        return False
    if _checked_axes(w.definition):  # dropped, the expand would no longer check them
        return False
    source = w.definition.inputs[0]
    assert isinstance(source, TensorView)
    expanded = [
        j
        for j, (a, b) in enumerate(zip(source.axes, w.axes))
        if a.is_broadcast and not b.is_broadcast
    ]
    return _extents_beside(w, expanded, operands, (GeneratedOp, ExpandOp))


def _checked_axes(e: ExpandOp) -> list[int]:
    """The axes of `e` that it does not expand but asks a size of (an expand of an axis its
    input has already: shape inference checks per call that the input's size is that one).
    A slice cutting one cannot move past the expand, whose input would then be of the cut
    size and fail the check (a campaign met it: an Int input expanded to another input's
    size, sliced short of its end), and an expand with one cannot be dropped (the check
    would go with it)."""
    source = e.inputs[0]
    assert isinstance(source, TensorView)
    return [
        j
        for j, (ext, a) in enumerate(zip(e.extents, source.axes))
        if ext is not None and not a.is_broadcast
    ]


def _broadcast_full(w: Val, operands: tuple[Val, ...]) -> bool:
    """Whether operand `w` of an element-wise op is a full (a generated value no element's
    index changes) that moved_slice may make with broadcast axes: another operand, not a
    generated value, is non-broadcast on every axis `w` is, so that the sliced op still
    takes its extents from that one (a campaign met slice(abs(full)) made (1, 1) where the
    slice is (2, 3))."""
    if not isinstance(w, TensorView) or not is_full(w):
        return False
    axes = [j for j, ax in enumerate(w.axes) if not ax.is_broadcast]
    return _extents_beside(w, axes, operands, (GeneratedOp,))


def _extents_beside(
    w: TensorView, axes: list[int], operands: tuple[Val, ...], not_made_by: tuple[type, ...]
) -> bool:
    """Whether another of `operands`, of w's rank and not made by an expr of the types
    `not_made_by`, is unbroadcast on every one of w's `axes`: an element-wise op then takes
    their extents from it when w is made broadcast along them."""
    return any(
        isinstance(o, TensorView)
        and o is not w
        and not isinstance(o.definition, not_made_by)
        and o.ndim == w.ndim
        and all(not o.axes[j].is_broadcast for j in axes)
        for o in operands
    )


__all__ = ["WHOLE", "Bounds", "movable", "moved_slice"]
