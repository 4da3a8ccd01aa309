"""The fusion generator's outputs and data movement: outputs (sometimes permuted, reshaped,
cast to a narrow dtype, sliced, padded or concatenated, stored in another memory order, or
copied by a segment of their own), resized inputs and intermediates, and indexing
(index_select, gather, take_along_axis) of the fusion's values."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from kfuse.dtypes import REDUCED_FLOATS, DataType
from kfuse.frontend import FusionDefinition
from kfuse.ir.values import Val
from kfuse.testing.strategies.generator import Entry, Gen, input_bound, one_in
from kfuse.testing.strategies.views import axis_order, merged_sizes, pad_fill


def add_outputs(
    draw: Any, fd: FusionDefinition, gen: Gen, max_outputs: int, resized_one_in: int = 8
) -> None:
    results = gen.results or gen.pool
    chosen = [results[-1]]
    extra = draw(st.integers(0, max_outputs - 1))
    for _ in range(extra):
        chosen.append(draw(st.sampled_from(results + gen.pool[:1])))
    reached = _cone_ids([e.val for e in chosen])
    chosen += [e for e in gen.required if id(e.val) not in reached]
    narrow = [d for d in gen.dtypes if d in REDUCED_FLOATS]
    # Sometimes the outputs of full rank come in another axis order than the values they are
    # made of, all in the same one (a fusion the transpose scheduler takes whole), and
    # sometimes a single output does (one that takes segments).
    moved = gen.rank > 1 and one_in(draw, 4)
    common = axis_order(draw, gen.rank) if moved else None
    for e in chosen:
        v: Any = e.val
        if narrow and v.dtype.is_floating and e.bound < 6e4 and draw(st.booleans()):
            v = fd.ops.cast(v, draw(st.sampled_from(narrow)))
        order = common if v.ndim == gen.rank else None
        if order is None and v.ndim > 1 and one_in(draw, 16):
            order = axis_order(draw, v.ndim)
        if order is not None:
            v = fd.ops.permute(v, dims=order)
        if v.ndim > 1 and "mul" in gen.ops and one_in(draw, 8):  # sizes' product: a mul
            v = _reshaped(draw, fd, v)
        fd.add_output(_laid_out(draw, fd, _maybe_resized(draw, fd, v, gen.ops, resized_one_in)))


def _reshaped(draw: Any, fd: FusionDefinition, v: Any) -> Any:
    """`v` reshaped with two neighbouring axes merged, or flattened whole, as models hand on
    attention's heads ([B, S, H, D] to [B, S, H * D]): folded into the kernel's output
    (kfuse.engine.boundary_views) where nothing else stands in the way, a copy otherwise."""
    o = fd.ops
    sizes = [o.size(v, k) for k in range(v.ndim)]
    if draw(st.booleans()):
        flat = sizes[0]
        for size in sizes[1:]:
            flat = o.mul(flat, size)
        return o.reshape(v, new_shape=[flat])
    return o.reshape(v, new_shape=merged_sizes(fd, sizes, draw(st.integers(0, v.ndim - 2))))


def _laid_out(draw: Any, fd: FusionDefinition, v: Any) -> Any:
    """One output in 8 of rank 2 or more is stored in another memory order
    (fd.ops.stride_order: the comparison checks its strides), and one in 16 is copied by a
    segment of its own (fd.ops.segment_set)."""
    if v.ndim > 1 and one_in(draw, 8):
        v = fd.ops.stride_order(v, axis_order(draw, v.ndim))
    if one_in(draw, 16):
        v = fd.ops.segment_set(v)
    return v


def _maybe_resized(
    draw: Any, fd: FusionDefinition, v: Any, ops: tuple[str, ...], one_in_n: int = 8
) -> Any:
    """One output in `one_in_n` is resized: mostly a slice of its value (_sliced), else a
    pad of it or a cat of it with itself or its negation (where `ops` has neg): a cat of
    computed parts is written part by part by the kernels, the others run between kernels."""
    if v.ndim == 0 or not one_in(draw, one_in_n):
        return v
    how = draw(st.sampled_from(["slice", "slice", "slice", "pad", "cat"]))
    if how == "slice":
        return _sliced(draw, fd, v, ops)
    if how == "pad":
        widths = [draw(st.integers(0, 2)) for _ in range(2 * draw(st.integers(1, v.ndim)))]
        return fd.ops.pad(v, widths, pad_fill(draw, v.dtype))
    negated = v.dtype is not DataType.Bool and "neg" in ops and draw(st.booleans())
    other = fd.ops.neg(v) if negated else v
    return fd.ops.cat([v, other], dim=draw(st.integers(-v.ndim, v.ndim - 1)))


def _sliced(draw: Any, fd: FusionDefinition, v: Any, ops: tuple[str, ...]) -> Any:
    """A slice of `v`: some of its axes start up to 2 elements in and end at their size, 1
    to 3 before it (where `ops` has sub) or far past it (clamped), every first, second or
    third element. The canonical form moves a slice of element-wise work onto the inputs
    (each then read in place), and a slice of anything else is indexing between segments."""
    starts: list[Any] = []
    stops: list[Any] = []
    steps: list[int] = []
    for i, axis in enumerate(v.axes):
        size = fd.ops.size(v, i)
        if axis.is_broadcast or draw(st.booleans()):
            starts.append(0)
            stops.append(size)  # the whole axis: a broadcast one stays one
            steps.append(1)
            continue
        starts.append(draw(st.integers(0, 2)))
        # An end before the size is computed with sub, where the fusion may use it.
        ends = ["size", "before", "past"] if "sub" in ops else ["size", "past"]
        end = draw(st.sampled_from(ends))
        if end == "before":
            stops.append(fd.ops.sub(size, draw(st.integers(1, 3))))
        else:
            stops.append(size if end == "size" else 1 << 20)
        steps.append(draw(st.sampled_from([1, 1, 2, 3])))
    return fd.ops.slice(v, starts, stops, steps)


def resized_intermediates(draw: Any, fd: FusionDefinition, gen: Gen, cats_only: bool) -> None:
    """One or two more outputs, each a cat (or, unless `cats_only`, sometimes a pad or a
    slice) of a value the fusion computes, or one time in four a partial rotary cat of the
    first input (_partial_rotary), sometimes with an element-wise op after it.

    A cat's parts are distinct computed values, which the kernels computing them write into
    their windows of the output, and the first part is often reduced as well, as another
    output: where that reduction is another kernel, it reads the part back from its window.
    An H100 campaign found two fusions whose reduction read it from elsewhere; they drew a
    cat at one output in 40, its parts rarely computed and read again, and the emulator
    campaigns before them had met none.

    One time in three the second output is made of the first's part again, and one in
    eight the part is an output of its own too: a value written into two windows, or into a
    window and an output. A GPU campaign met two cats with one part (two logical_not of one
    value, made one by canonicalization), whose windows were written through one's strides."""
    o = fd.ops
    earlier: Any = None  # the first output's part
    for _ in range(draw(st.integers(1, 2))):
        e = gen.pick(full=draw(st.booleans()))
        v: Any = e.val
        if earlier is not None and one_in(draw, 3):
            v = earlier
        elif v.ndim == 0:
            continue
        elif v.is_input or draw(st.booleans()):  # a part computed here, of any value
            v = o.abs(v) if v.dtype is not DataType.Bool else o.logical_not(v)
        earlier = v
        if not v.is_input and one_in(draw, 8):
            fd.add_output(v)
        how = "cat" if cats_only else draw(st.sampled_from(["cat", "cat", "cat", "pad", "slice"]))
        if one_in(draw, 4):
            out = _partial_rotary(draw, fd, gen)
        elif how != "cat":
            out = _maybe_resized(draw, fd, v, gen.ops, 1)
        else:
            other = o.neg(v) if v.dtype is not DataType.Bool else o.logical_not(v)
            parts = [v, other] if draw(st.integers(0, 3)) else [other, v]
            out = o.cat(parts, dim=draw(st.integers(-v.ndim, v.ndim - 1)))
            if draw(st.integers(0, 2)) and v.dtype is not DataType.Bool:
                dims = draw(
                    st.lists(st.integers(0, v.ndim - 1), min_size=1, max_size=2, unique=True)
                )
                red = o.sum(v, dims) if draw(st.booleans()) else o.max(v, dims)
                fd.add_output(red)
        if out.dtype.is_floating and draw(st.booleans()):
            out = o.mul(o.abs(out), 2.0)  # moves into the parts of a cat
        fd.add_output(out)


def _partial_rotary(draw: Any, fd: FusionDefinition, gen: Gen) -> Any:
    """A cat along the last axis of an input: computed parts of its first n elements there
    (one part, or half the time two of n each, as a rotary embedding's rotated halves) and
    the rest of it as it is (a view of the input, of another size): Llama's partial rotary
    embedding, which one pointwise kernel computes over the cat's output. n up to 32, so that
    parts' windows are often whole vectors (of 4 floats, 8 bf16 values, 16 bytes: the kernel
    then picks a vector's part once, codegen.windowed.vector_part_selector); each part reads
    its own slice, so an axis shorter than the parts leaves some empty rather than
    mismatched."""
    o = fd.ops
    x: Any = gen.pool[0].val  # the first input, of the fusion's full rank
    rank = x.ndim
    n = draw(st.sampled_from([1, 2, 4, 8, 16, 16, 32]))
    widths = [n, n] if draw(st.booleans()) else [n]
    size = o.size(x, rank - 1)
    starts, stops = [0] * rank, [o.size(x, i) for i in range(rank)]
    parts, at = [], 0
    for k, width in enumerate(widths):
        part = o.slice(x, [*starts[:-1], at], [*stops[:-1], at + width])
        at += width
        if part.dtype is DataType.Bool:
            part = o.logical_not(part)
        elif k == 0:
            part = o.neg(o.abs(part)) if part.dtype.is_floating else o.mul(part, 3)
        else:
            part = o.mul(part, 3)
        parts.append(part)
    rest = o.slice(x, [*starts[:-1], at], [*stops[:-1], size])
    return o.cat([*parts, rest], dim=rank - 1)


def resized_input_step(draw: Any, fd: FusionDefinition, gen: Gen) -> None:
    """A slice or a pad (widths from -1 to 2, negative ones cropping) of an input, read by
    the kernel that uses it (a slice in place, a pad inside its window): an element-wise op
    of it, sometimes reduced over an axis, as an output (its shape is its own)."""
    o = fd.ops
    inputs = [e.val for e in gen.pool if e.val.is_input and e.val.ndim > 0]
    if not inputs:
        return
    x: Any = draw(st.sampled_from(inputs))
    padded = draw(st.booleans())
    if padded:
        widths = [draw(st.integers(-1, 2)) for _ in range(2 * draw(st.integers(1, x.ndim)))]
        x = o.pad(x, widths, pad_fill(draw, x.dtype))
    if x.dtype in REDUCED_FLOATS:
        x = o.cast(x, DataType.Float)
    v = x if padded and draw(st.booleans()) else _sliced(draw, fd, x, gen.ops)
    if v.dtype.is_floating:
        v = o.add(o.mul(v, draw(st.sampled_from([2.0, -0.5]))), 1.5)
    elif v.dtype is not DataType.Bool:
        v = o.mul(v, 3)
    if v.dtype.is_floating and draw(st.booleans()):
        v = o.sum(v, [draw(st.integers(0, v.ndim - 1))])
    entry = Entry(v, False, 4096.0)
    gen.results.append(entry)
    gen.required.append(entry)


def expanded_input_step(draw: Any, fd: FusionDefinition, gen: Gen) -> None:
    """A new input of fewer axes (0-d half the time) written out to the first input's shape
    by broadcast_in_dim (a broadcast and an expand) into the pool, as Thunder hands a loss's
    gradient (a 0-d tensor expanded) to a backward region: a slice of the element-wise work
    reading it then cuts an expanded axis, which the canonical form moves onto the expand's
    input where another operand gives the extents (kfuse.ir.canonical_slices)."""
    o = fd.ops
    first: Any = gen.pool[0].val
    if first.ndim == 0:
        return
    rank = 0 if draw(st.booleans()) else draw(st.integers(1, first.ndim))
    dtype = draw(st.sampled_from([d for d in gen.dtypes if not d.is_complex] or [DataType.Float]))
    shape = [1 if one_in(draw, 3) else -1 for _ in range(rank)]
    t: Any = fd.define_tensor(shape=shape, dtype=dtype)
    # Right-aligned, as numpy broadcasting pairs the axes.
    wide = o.broadcast_in_dim(
        t, shape=o.shape(first), broadcast_dims=list(range(first.ndim - rank, first.ndim))
    )
    gen.pool.append(Entry(wide, True, input_bound(dtype)))


def indexing_step(draw: Any, fd: FusionDefinition, gen: Gen) -> None:
    """index_select, gather or take_along_axis of a value of the fusion at positions an
    integer input holds (inputs_for draws them inside the axis), sometimes with an
    element-wise op or a reduction after it, as an output. take_along_axis with a [..., 1]
    index, then a sum over that axis, is how cross-entropy picks each row's target."""
    o = fd.ops
    e = gen.pick(full=True)
    x: Any = e.val
    if x.ndim == 0:
        return
    d = draw(st.integers(0, x.ndim - 1))
    int_type = draw(st.sampled_from([DataType.Int, DataType.Int32]))
    op = draw(st.sampled_from(["index_select", "gather", "take_along_axis"]))
    if op == "index_select":
        index = fd.define_tensor(shape=[-1], dtype=int_type)
        out: Any = o.index_select(x, index, d)
    elif op == "gather":
        index = fd.define_tensor(shape=[-1] * x.ndim, dtype=int_type)
        out = o.gather(x, index, d)
    else:
        # Each other axis of the index either matches x's or is 1 (broadcast); the
        # indexed one is free, sometimes 1 (one position a row).
        shape = [
            (1 if draw(st.booleans()) else -1)
            if i == d
            else (1 if a.is_broadcast or one_in(draw, 4) else -1)
            for i, a in enumerate(x.axes)
        ]
        index = fd.define_tensor(shape=shape, dtype=int_type)
        out = o.take_along_axis(x, index, d)
    if out.dtype.is_floating and draw(st.booleans()):
        out = o.mul(out, 2.0)
    if draw(st.booleans()):
        if out.dtype is DataType.Bool:
            out = o.cast(out, DataType.Float)
        out = o.sum(out, [d])
    entry = Entry(out, e.exact, e.bound * 1100.0 + 3.0)
    gen.results.append(entry)
    gen.required.append(entry)


def _cone_ids(vals: list[Val]) -> set[int]:
    seen: set[int] = set()
    stack = list(vals)
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if v.definition is not None:
            stack.extend(v.definition.inputs)
    return seen


ALIAS_ONE_IN = 3
"""One fusion in this many also writes a value into one of its inputs (add_output with
alias_input), in place or staged as kfuse.engine.aliasing decides."""


def alias_output(draw: Any, fd: FusionDefinition, gen: Gen) -> None:
    """Sometimes write a value of the input's full shape into a tensor input of `gen` (which
    kfuse.testing.inputs then never draws as a stride-0 view), as an in-place update does
    (the input itself, copied, now and then)."""
    if not one_in(draw, ALIAS_ONE_IN):
        return
    written = {in_pos for _, in_pos in fd.fusion.output_aliases}
    targets = [
        e.val
        for e in gen.pool
        if e.val.is_input
        and e.val.ndim == gen.rank
        and not any(a.is_broadcast for a in e.val.axes)
        and not any(v is e.val and k in written for k, v in enumerate(fd.fusion.inputs))
    ]
    if not targets:
        return
    target = draw(st.sampled_from(targets))
    value = gen.pick(full=True).val
    if value.ndim != target.ndim or any(a.is_broadcast for a in value.axes):
        return
    if not _elementwise_of(value, target):
        return  # its extents are not bound to the target's (inputs never combined)
    stored: Val = value
    if value.dtype is not target.dtype:
        if not (value.dtype.is_floating and target.dtype.is_floating):
            return
        stored = fd.ops.cast(value, target.dtype)
    fd.add_output(stored, alias_input=target)


def _elementwise_of(value: Val, target: Val) -> bool:
    """Whether `value` is computed from `target` through element-wise ops alone (so shares
    its extents), or is `target`."""
    from kfuse.ir.exprs import BinaryOp, CastOp, TernaryOp, UnaryOp

    stack, seen = [value], set()
    while stack:
        v = stack.pop()
        if v is target:
            return True
        if id(v) in seen or v.definition is None:
            continue
        seen.add(id(v))
        if isinstance(v.definition, (UnaryOp, BinaryOp, TernaryOp, CastOp)):
            stack.extend(v.definition.inputs)
    return False
