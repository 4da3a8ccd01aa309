"""The fusion generator's library step: a topk, argsort or scatter (kfuse.ir.sort_ops, run by
the inputs' framework in a segment of its own) of a value of its pool, along any axis
(negative dims too); its results join the pool, so that the pointwise steps before and after
it make generated segments on both sides of the library segment.

What a comparison with the float64 reference can check, whatever the ties:
* Equal values (and values a float32 kernel rounds together that the reference keeps
  apart) may sort in either order, so positions never leave the fusion as they are: a topk's
  or argsort's positions are checked through the values they select (take_along_axis of the
  sorted operand, the sorted values, continuous in the operand), and an argsort's through
  their sum along the axis (0 + 1 + ... + n-1 for any order).
* An unsorted topk's order is unspecified: its values (and the ones its positions select)
  are summed along the axis.
* Which of several writes to one position wins is unspecified (nvFuser, torch): a scatter
  of a number writes the same value at every position (any positions, duplicates too); a
  scatter of a tensor writes one element a row (an index of size 1 along the axis).
Positions are inside the axis: inputs_for draws them so (kfuse.testing.inputs).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from kfuse.dtypes import DataType
from kfuse.testing.strategies.generator import Entry, Gen, one_in

SUM_GROWTH = 1100.0
"""How much a sum along an axis can grow its terms' bound: the longest axis the inputs draw
(as kfuse.testing.strategies.reductions')."""
MAX_K = 3
"""The largest constant k a topk draws (inputs_for draws its axis at least that long)."""


def library_step(gen: Gen) -> None:
    e = gen.pick(full=True)
    v: Any = e.val
    if v.ndim == 0:
        return
    if v.dtype is DataType.Bool:
        v = gen.fd.ops.cast(v, DataType.Int)  # torch sorts no Bool tensor
    dim = gen.draw(st.integers(-v.ndim, v.ndim - 1))
    op = gen.draw(st.sampled_from(["topk", "argsort", "scatter"]))
    entries = {"topk": _topk, "argsort": _argsort, "scatter": _scatter}[op](gen, e, v, dim)
    for entry in entries:
        gen.results.append(entry)
        gen.required.append(entry)
        gen.pool.append(entry)


def _topk(gen: Gen, e: Entry, v: Any, dim: int) -> list[Entry]:
    o = gen.fd.ops
    if one_in(gen.draw, 4):
        k: Any = o.size(v, dim)  # every element, as a sort
    else:
        # k = 0 (empty results, a no-op segment) now and then, not as often as Hypothesis
        # draws an integer range's lower end.
        k = 0 if one_in(gen.draw, 8) else gen.draw(st.integers(1, MAX_K))
        extent = v.axes[dim].extent
        if extent is not None:
            k = min(k, extent)
    largest, ordered = gen.draw(st.booleans()), gen.draw(st.booleans())
    values, indices = o.topk(v, k, dim=dim, largest=largest, sorted=ordered)
    picked = o.take_along_axis(v, indices, dim)
    if ordered:
        return [Entry(values, e.exact, e.bound), Entry(picked, e.exact, e.bound)]
    bound = e.bound * SUM_GROWTH + 3.0
    exact = e.exact and not values.dtype.is_floating
    return [Entry(o.sum(values, [dim]), exact, bound), Entry(o.sum(picked, [dim]), exact, bound)]


def _argsort(gen: Gen, e: Entry, v: Any, dim: int) -> list[Entry]:
    o = gen.fd.ops
    descending, stable = gen.draw(st.booleans()), gen.draw(st.booleans())
    order = o.argsort(v, dim=dim, descending=descending, stable=stable)
    entries = [Entry(o.take_along_axis(v, order, dim), e.exact, e.bound)]
    if gen.draw(st.booleans()):
        entries.append(Entry(o.sum(order, [dim]), True, SUM_GROWTH * SUM_GROWTH))
    return entries


def _scatter(gen: Gen, e: Entry, x: Any, dim: int) -> list[Entry]:
    o, draw = gen.fd.ops, gen.draw
    d = dim % x.ndim
    int_type = draw(st.sampled_from([DataType.Int, DataType.Int32]))
    if draw(st.booleans()):
        # A number: every write the same value, so any positions do, duplicates too.
        value = draw(st.sampled_from([-1.5, 0.0, 0.5, 2.0]))
        src: Any = int(value) if not x.dtype.is_floating else value
        shape = [-1 if i == d else _off_axis(draw, x.axes[i]) for i in range(x.ndim)]
        index = gen.fd.define_tensor(shape=shape, dtype=int_type)
        out = o.scatter(x, index, src, d)
        return [Entry(out, e.exact, max(e.bound, 2.0))]
    s = gen.pick(full=True)
    if x.dtype.is_integral and s.val.dtype.is_floating and not s.exact:
        s = Entry(x, e.exact, e.bound)  # a rounded value cast to an integer is discontinuous
    src = s.val if s.val.dtype is x.dtype else o.cast(s.val, x.dtype)
    # One write a row along the axis (size 1 there); off it, no larger than x or src.
    shape = [
        1 if i == d or src.axes[i].is_broadcast else _off_axis(draw, x.axes[i])
        for i in range(x.ndim)
    ]
    index = gen.fd.define_tensor(shape=shape, dtype=int_type)
    out = o.scatter(x, index, src, d)
    exact = e.exact and s.exact and (s.val.dtype is x.dtype or not s.val.dtype.is_floating)
    return [Entry(out, exact, max(e.bound, s.bound))]


def _off_axis(draw: Any, axis: Any) -> int:
    """An index axis off the scattered one: x's size (-1), or 1 where x's is a broadcast axis
    and now and then elsewhere (positions for part of x)."""
    return 1 if axis.is_broadcast or one_in(draw, 4) else -1
