"""The fusion generator's ops that Thunder emits and no other step draws: triu (a causal
mask's upper triangle of a value), addcmul (an optimizer's x + t1 * t2 * value) and
embedding_fwd (a table's rows at integer ids, sometimes with max_norm's renormalization),
each built from ops kfuse generates (kfuse.ir.generated, the pointwise ops, index_select).
The library ops Thunder also emits (sdpfa_fwd, sdpfa_bwd, grouped_mm) run as framework calls
and are left to their own tests."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st

from kfuse.dtypes import DataType
from kfuse.frontend import FusionDefinition
from kfuse.testing.strategies.generator import Entry, Gen, one_in


def model_op_step(draw: Any, fd: FusionDefinition, gen: Gen, moves: str | None) -> None:
    """One of triu or addcmul of the pool's values into the pool, where the fusion may use
    their ops (gen.ops), or in an indexing fusion (`moves`) an embedding lookup of new inputs
    into the results."""
    ops = set(gen.ops)
    choices = [
        *(["triu"] if {"le", "where"} <= ops else []),
        *(["addcmul"] if {"add", "mul"} <= ops else []),
        *(["embedding"] if moves == "indexing" else []),
    ]
    if not choices:
        return
    how = draw(st.sampled_from(choices))
    if how == "embedding":
        _embedding(draw, fd, gen)
        return
    made = _triu(draw, fd, gen) if how == "triu" else _addcmul(draw, fd, gen)
    if made is not None:
        gen.pool.append(made)
        gen.results.append(made)


def _triu(draw: Any, fd: FusionDefinition, gen: Gen) -> Entry | None:
    """triu of a full value of 2 or more axes, the diagonal from -1 to 2: its last two
    axes' upper triangle, the rest 0 (exact where the value is)."""
    e = gen.pick(full=True)
    if e.val.ndim < 2:
        return None
    diagonal = draw(st.sampled_from([0, 0, 1, -1, 2]))
    return Entry(fd.ops.triu(e.val, diagonal), e.exact, e.bound)


def _addcmul(draw: Any, fd: FusionDefinition, gen: Gen) -> Entry | None:
    """addcmul(x, t1, t2, value) of floating values of the pool (value a constant or, where
    the fusion has one, its symbolic scalar), as Adam's second moment takes it."""
    x, t1, t2 = (gen.pick(floating=True) for _ in range(3))
    value: Any = draw(st.sampled_from([0.5, -2.0, 1.0]))
    bound_of_value = abs(value)
    floating_scalars = [s for s in gen.scalars if s.dtype.is_floating]
    if floating_scalars and one_in(draw, 3):
        value, bound_of_value = floating_scalars[0], 2.0
    bound = x.bound + t1.bound * t2.bound * bound_of_value
    if not math.isfinite(bound) or bound > 1e4:
        return None
    made: Any = fd.ops.addcmul(x.val, t1.val, t2.val, value)
    return Entry(made, False, bound)


def _embedding(draw: Any, fd: FusionDefinition, gen: Gen) -> None:
    """embedding_fwd of a new floating table [V, D] at new integer ids of one or two axes
    (inputs_for draws them inside the table), sometimes with max_norm (each returned row
    scaled to that norm where it is larger), sometimes with an element-wise op after it, as
    an output (its shape is its own)."""
    o = fd.ops
    dtype = draw(st.sampled_from(gen.real_floating_dtypes()))
    weight: Any = fd.define_tensor(shape=[-1, -1], dtype=dtype)
    ids_rank = draw(st.integers(1, 2))
    ids: Any = fd.define_tensor(
        shape=[-1] * ids_rank, dtype=draw(st.sampled_from([DataType.Int, DataType.Int32]))
    )
    max_norm = draw(st.sampled_from([None, None, 1.0, 0.5]))
    rows: Any = o.embedding_fwd(ids, weight, None, max_norm, None, None, None)
    bound = 2.0 if max_norm is None else max_norm
    if one_in(draw, 2):
        rows = o.mul(o.cast(rows, DataType.Float), 2.0)
        bound *= 2.0
    entry = Entry(rows, max_norm is None, bound)
    gen.results.append(entry)
    gen.required.append(entry)
