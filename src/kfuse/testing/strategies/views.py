"""The fusion generator's views in the middle of the work: a value of the full shape seen
through a permute or a reshape, worked on there, and seen back, and the rotary embedding's
halves (a reshape that splits the last axis, slices and a cat of them, a reshape back), as
Thunder writes attention's heads and RoPE. Before this, the generator drew permutes only on
outputs and reshapes only inside a group norm, so the canonical form's rules that move
slices, pads and cats through views, and the schedulers' handling of a view between
element-wise ops, met them only in the hand-written tests."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from kfuse.dtypes import DataType
from kfuse.frontend import FusionDefinition
from kfuse.testing.strategies.generator import Entry, Gen, one_in


def axis_order(draw: Any, rank: int) -> list[int]:
    """A permutation of `rank` axes other than the identity."""
    return list(draw(st.permutations(range(rank)).filter(lambda p: list(p) != sorted(p))))


def pad_fill(draw: Any, dtype: DataType) -> Any:
    """A pad's fill for a value of `dtype`: the default (None) or a constant of its kind."""
    kind = "bool" if dtype is DataType.Bool else "float" if dtype.is_floating else "int"
    return draw(st.sampled_from([None, {"bool": True, "int": 3, "float": -1.5}[kind]]))


def merged_sizes(fd: FusionDefinition, sizes: list[Any], i: int) -> list[Any]:
    """`sizes` (a value's, fd.ops.size of each axis) with those of axes i and i + 1 merged
    into their product (a mul)."""
    return [*sizes[:i], fd.ops.mul(sizes[i], sizes[i + 1]), *sizes[i + 2 :]]


def _rolled(fd: FusionDefinition, v: Any, k: int, n: int, sizes: list[Any]) -> Any:
    """v (of `sizes`) rolled back by n along axis k: a cat of its slice from n on and its
    first n (all of it, and nothing after, where the axis is shorter: slicing clamps)."""
    o = fd.ops
    starts = [0] * v.ndim
    head = o.slice(v, starts, [*sizes[:k], n, *sizes[k + 1 :]])
    tail = o.slice(v, [*starts[:k], n, *starts[k + 1 :]], sizes)
    return o.cat([tail, head], dim=k)


def viewed_step(draw: Any, fd: FusionDefinition, gen: Gen, moves: str | None) -> None:
    """One view round trip of a full value into the pool (a permute, a reshape merging two
    neighbouring axes, or a roll or a shift along an axis, of the same shape again), or in
    a resize fusion (`moves`) a rotary embedding of a new input into the results. The ops
    between the views are the fusion's own (gen.ops)."""
    # The rotary embedding adds inputs (only in resize fusions, whose slices and cats it
    # draws) and its math (where the fusion may use it).
    rotary = moves == "resize" and {"neg", "mul", "add"} <= set(gen.ops)
    # A merge's extent is a product of sizes (a mul, where the fusion may use it).
    merged = "mul" in gen.ops
    how = draw(
        st.sampled_from(
            ["permuted", "moved", *(["merged"] if merged else []), *(["rotary"] if rotary else [])]
        )
    )
    if how == "rotary":
        _rotary(draw, fd, gen)
        return
    e = gen.pick(full=True)
    if e.val.ndim < (1 if how == "moved" else 2):
        return
    if how == "moved":
        viewed = _moved(draw, fd, e, gen.ops)
    else:
        viewed = _permuted(draw, fd, gen, e) if how == "permuted" else _merged(draw, fd, gen, e)
    gen.pool.append(viewed)
    gen.results.append(viewed)


def _moved(draw: Any, fd: FusionDefinition, e: Entry, gen_ops: tuple[str, ...]) -> Entry:
    """e rolled along an axis by n (a cat of its two slices) or shifted by n (padded by n at
    one end, sliced back to its size at the other, as a causal convolution shifts a
    sequence), n up to 3: of e's shape, so that the work after it reads a cat or a pad of
    computed values in the middle of the fusion, not only at an output."""
    o = fd.ops
    x = e.val
    rank = x.ndim
    # A broadcast axis is sliced only by constant bounds (and has nothing to move).
    movable = [i for i, axis in enumerate(x.axes) if not axis.is_broadcast]
    if not movable:
        return e
    k = draw(st.sampled_from(movable))
    n = draw(st.sampled_from([1, 2, 3]))
    sizes = [o.size(x, i) for i in range(rank)]
    starts = [0] * rank
    if draw(st.booleans()):
        return Entry(_rolled(fd, x, k, n, sizes), e.exact, e.bound)
    widths = [0] * (2 * rank)
    # A shift toward the start slices up to size + n (an add, where the fusion may use it).
    at_start = "add" not in gen_ops or draw(st.booleans())
    # pad's widths run from the last axis: (before, after) of axis rank - 1 first
    widths[2 * (rank - 1 - k) + (0 if at_start else 1)] = n
    padded = o.pad(x, widths, pad_fill(draw, x.dtype))
    first = [*starts[:k], 0 if at_start else n, *starts[k + 1 :]]
    stops = [o.size(padded, i) for i in range(rank)]  # whole axes: a broadcast one stays one
    stops[k] = sizes[k] if at_start else o.add(sizes[k], n)
    shifted = o.slice(padded, first, stops)
    return Entry(shifted, e.exact, max(e.bound, 3.0))


def _worked(
    draw: Any, fd: FusionDefinition, v: Any, bound: float, gen_ops: tuple[str, ...]
) -> tuple[Any, bool, float]:
    """An element-wise op of `v` where the view has it (exact ones mostly: the pool then
    keeps the value exact), or none; its value, exactness and bound."""
    o = fd.ops
    allowed = {"neg": "neg", "abs": "abs", "scale": "mul"}
    how = draw(st.sampled_from(["none", *(k for k, op in allowed.items() if op in gen_ops)]))
    if how == "none" or v.dtype is DataType.Bool:
        return v, True, bound
    if how == "neg":
        return o.neg(v), True, bound
    if how == "abs":
        return o.abs(v), True, bound
    return o.mul(v, 2.0 if v.dtype.is_floating else 3), True, bound * 3.0


def _permuted(draw: Any, fd: FusionDefinition, gen: Gen, e: Entry) -> Entry:
    """permute(e), an op there (sometimes of another full value permuted the same way, as
    attention adds a bias to its transposed scores), then the inverse permute."""
    o = fd.ops
    rank = e.val.ndim
    order = axis_order(draw, rank)
    v, exact, bound = _worked(draw, fd, o.permute(e.val, dims=order), e.bound, gen.ops)
    exact = exact and e.exact
    if "add" in gen.ops and one_in(draw, 2):
        other = gen.pick(full=True)
        if other.val.ndim == rank and DataType.Bool not in (v.dtype, other.val.dtype):
            v = o.add(v, o.permute(other.val, dims=order))
            exact, bound = False, bound + other.bound
    inverse = [order.index(i) for i in range(rank)]
    return Entry(o.permute(v, dims=inverse), exact, bound)


def _merged(draw: Any, fd: FusionDefinition, gen: Gen, e: Entry) -> Entry:
    """reshape(e) with axes i and i + 1 merged, an op there, sometimes a roll along the
    merged axis (a cat of its two slices, whose seam falls inside a row of the axes it
    merged), then the reshape back to e's sizes."""
    o = fd.ops
    x = e.val
    rank = x.ndim
    i = draw(st.integers(0, rank - 2))
    sizes = [o.size(x, k) for k in range(rank)]
    merged = merged_sizes(fd, sizes, i)
    v, exact, bound = _worked(draw, fd, o.reshape(x, new_shape=merged), e.bound, gen.ops)
    if not v.axes[i].is_broadcast and one_in(draw, 3):
        v = _rolled(fd, v, i, draw(st.sampled_from([1, 2, 3])), merged)
    return Entry(o.reshape(v, new_shape=sizes), exact and e.exact, bound)


def _rotary(draw: Any, fd: FusionDefinition, gen: Gen) -> None:
    """A rotary embedding of a new floating input [..., D] (D even, a fixed extent, so that
    the split is exact): rotate_half as Llama writes it (the halves as [2, D/2]) or as GPT-J
    interleaves them ([D/2, 2]) by a reshape, slices and a cat of the halves negated, the
    reshape back, x * cos + rotate_half(x) * sin with cos and sin inputs of the same shape
    (or of the last axis alone, broadcast), sometimes with the first two axes swapped
    before it, as attention lays out [batch, sequence, heads, dim]."""
    o = fd.ops
    rank = max(2, min(gen.rank, 4))
    d = draw(st.sampled_from([2, 4, 8, 16, 64]))
    dt = draw(st.sampled_from(gen.real_floating_dtypes()))
    x: Any = fd.define_tensor(shape=[-1] * (rank - 1) + [d], dtype=dt)
    if dt not in (DataType.Float, DataType.Double):  # Half, BFloat16, float8: in float
        x = o.cast(x, DataType.Float)
    if rank >= 3 and one_in(draw, 2):
        x = o.permute(x, dims=[1, 0, *range(2, rank)])
    lead = [o.size(x, k) for k in range(rank - 1)]
    interleaved = draw(st.booleans())
    pairs = [*lead, d // 2, 2] if interleaved else [*lead, 2, d // 2]
    split = o.reshape(x, new_shape=pairs)
    half = rank if interleaved else rank - 1  # the axis of the two halves
    starts, stops = [0] * (rank + 1), list(pairs)
    first = o.slice(split, starts, [*stops[:half], 1, *stops[half + 1 :]])
    second = o.slice(split, [*starts[:half], 1, *starts[half + 1 :]], stops)
    rotated = o.reshape(o.cat([o.neg(second), first], dim=half), new_shape=[*lead, d])
    # cos and sin: of x's shape, or of its last axis alone (broadcast over the rest)
    angle_shape = [d] if one_in(draw, 2) else [-1] * (rank - 1) + [d]
    shape = o.shape(x)
    angles = []
    for _ in ("cos", "sin"):
        a: Any = fd.define_tensor(shape=angle_shape, dtype=dt)
        if a.dtype is not x.dtype:
            a = o.cast(a, x.dtype)
        angles.append(o.broadcast_in_dim(a, shape, [rank - 1]) if a.ndim == 1 else a)
    c, s = angles
    out = o.add(o.mul(x, c), o.mul(rotated, s))
    entry = Entry(out, False, 8.0)
    gen.results.append(entry)
    gen.required.append(entry)
