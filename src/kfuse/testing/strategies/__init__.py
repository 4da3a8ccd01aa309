"""fusions(): a Hypothesis strategy of random valid FusionDefinitions.

The pointwise ops are drawn from the op table (kfuse.ir.ops; generator.py reads each row's
domain, precision, discontinuity, bound and draw classes), the reductions and
normalizations in reductions.py, the outputs and data movement in outputs.py.

Generated fusions keep comparisons with the reference meaningful:
* ops with restricted domains get guarded operands (log(|x| + 0.5), atanh(0.9 tanh(x)), ...);
* values that could overflow are squashed with tanh before exp-like ops;
* discontinuous ops (floor, round, sign, comparisons, logical ops, float->int casts, fmod)
  only see *exact* operands (inputs, or values derived from inputs without rounding), so a
  kernel computing in float32 and the float64 reference take the same branch;
* Half/BFloat16 (and float8, when `dtypes` has them: DEFAULT_DTYPES has not) inputs are cast
  to Float before math, and narrow dtypes appear again only as final output casts (the usual
  mixed-precision pattern), which round as exactly in the kernel as in the reference.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from kfuse.dtypes import DataType
from kfuse.frontend import FusionDefinition
from kfuse.ir.ops import OPS
from kfuse.testing.strategies.generator import Entry, Gen, factory_step, one_in, random_step
from kfuse.testing.strategies.library import library_step
from kfuse.testing.strategies.model_ops import model_op_step
from kfuse.testing.strategies.outputs import (
    add_outputs,
    alias_output,
    expanded_input_step,
    indexing_step,
    resized_input_step,
    resized_intermediates,
)
from kfuse.testing.strategies.reductions import normalization_step, reduction_step
from kfuse.testing.strategies.scans import scan_step
from kfuse.testing.strategies.views import viewed_step

__all__ = ["DEFAULT_DTYPES", "KINDS", "fusions", "one_in"]

KINDS = frozenset(
    {
        "pointwise",
        "reduction",
        "normalization",
        "multi_reduction",
        "multi_segment",
        "resize",
        "indexing",
        "scan",
        "library",
    }
)
"""Fusion kinds: "resize" and "indexing" draw the data-movement ops (slices, pads and cats;
index_select, gather and take_along_axis) in every fusion, on top of one of the first four
kinds' work, so that a campaign over all kinds draws them as often as any other kind; "scan"
draws a cumsum (kfuse.testing.strategies.scans) the same way, "library" a topk, argsort or
scatter (kfuse.testing.strategies.library)."""
_BASE_KINDS = ("pointwise", "reduction", "normalization", "multi_reduction")
DEFAULT_DTYPES = (
    DataType.Float,
    DataType.Half,
    DataType.BFloat16,
    DataType.Double,
    DataType.Int32,
    DataType.Int,
    DataType.Bool,
)


@st.composite
def _fusions(
    draw: Any,
    max_inputs: int,
    max_ops: int,
    max_rank: int,
    dtypes: tuple,
    kinds: frozenset,
    ops: tuple,
    allow_scalars: bool,
    max_outputs: int,
    aliases: bool,
) -> FusionDefinition:
    kind = draw(st.sampled_from(sorted(kinds)))
    moves = kind if kind in ("resize", "indexing", "scan", "library") else None
    if moves is not None:
        kind = draw(st.sampled_from(_BASE_KINDS))
    rank = draw(st.integers(1, max_rank))
    with FusionDefinition() as fd:
        gen = Gen(draw, fd, rank, dtypes, ops, max_rank)
        gen.scalars = []
        n_inputs = draw(st.integers(1, max_inputs))
        for i in range(n_inputs):
            full = i == 0
            gen.add_input(
                rank if full else draw(st.integers(1, rank)), full, draw(st.sampled_from(dtypes))
            )
        if allow_scalars and draw(st.integers(0, 3)) == 0:
            gen.scalars.append(
                fd.define_scalar(dtype=draw(st.sampled_from([DataType.Double, DataType.Int])))
            )
        _made_operands(draw, fd, gen, ops, moves)
        n_ops = draw(st.integers(1, max_ops))
        if kind == "multi_segment":
            _multi_segment(draw, fd, gen, n_ops, max_outputs)
            if aliases:
                alias_output(draw, fd, gen)
            return fd
        _work(draw, fd, gen, kind, moves, n_ops)
        # Half the resize fusions add cats alone: a slice or pad of computed values runs
        # between kernels, and a fusion with one does not fold its cats (their parts'
        # kernels writing into the windows) at all.
        cats_only = moves == "resize" and draw(st.booleans())
        resized_one_in = 2 if moves == "resize" and not cats_only else 8
        add_outputs(draw, fd, gen, max_outputs, resized_one_in)
        if moves == "resize":
            resized_intermediates(draw, fd, gen, cats_only)
        if aliases:
            alias_output(draw, fd, gen)
    return fd


def _work(
    draw: Any, fd: FusionDefinition, gen: Gen, kind: str, moves: str | None, n_ops: int
) -> None:
    """A fusion's work, step by step: `n_ops` pointwise ops, with its kind's reductions or
    normalization, its data movement (`moves`) and sometimes a view round trip and one of
    Thunder's ops, each at a drawn step."""
    if kind == "reduction":
        n_red = 1
    elif kind == "multi_reduction":
        n_red = draw(st.integers(2, 3))
    else:
        n_red = 0
    special_at = sorted(draw(st.lists(st.integers(0, n_ops), min_size=n_red, max_size=n_red)))
    norm_at = draw(st.integers(0, n_ops)) if kind == "normalization" else -1
    moves_at = draw(st.integers(0, n_ops)) if moves is not None else -1
    # A view round trip (kfuse.testing.strategies.views): in half the resize fusions,
    # whose slices and cats it moves through, and one in six of the others.
    viewed_at = draw(st.integers(0, n_ops)) if one_in(draw, 2 if moves == "resize" else 6) else -1
    # triu or addcmul, or in indexing fusions embedding_fwd (strategies.model_ops): one in
    # six.
    modelled_at = draw(st.integers(0, n_ops)) if one_in(draw, 6) else -1
    for step in range(n_ops + 1):
        for _ in range(special_at.count(step)):
            reduction_step(gen)
        if step == norm_at:
            normalization_step(gen)
        if step == viewed_at:
            viewed_step(draw, fd, gen, moves)
        if step == modelled_at:
            model_op_step(draw, fd, gen, moves)
        if step == moves_at:
            if moves == "scan":
                scan_step(gen)
            elif moves == "library":
                library_step(gen)
            else:
                (resized_input_step if moves == "resize" else indexing_step)(draw, fd, gen)
        if step < n_ops:
            gen.pointwise_step()


def _made_operands(
    draw: Any, fd: FusionDefinition, gen: Gen, ops: tuple, moves: str | None
) -> None:
    """Operands made in the fusion, into gen's pool, one fusion in three each: a full or an
    iota mask, where every op may be drawn (a mask compares; a fusion drawn for a few ops
    keeps to them); random numbers (a dropout mask compares and selects), stateless; and in
    a resize fusion an input expanded to the full shape, whose work the resize slices. New,
    they are drawn more than any one op."""
    if {"lt", "ge"} <= set(ops) and one_in(draw, 3):
        factory_step(draw, fd, gen)
    if {"lt", "where"} <= set(ops) and one_in(draw, 3):
        random_step(draw, fd, gen)
    if moves == "resize" and one_in(draw, 3):
        expanded_input_step(draw, fd, gen)


def _multi_segment(draw: Any, fd: FusionDefinition, gen: Gen, n_ops: int, max_outputs: int) -> None:
    """A fusion no single scheduler takes (for most inputs): two reductions over different
    axes, outputs of unrelated shapes, or a matmul with pointwise work around it."""
    patterns = ["unrelated_outputs", "matmul"]
    if gen.rank >= 2:
        patterns.append("two_reductions")
    pattern = draw(st.sampled_from(patterns))
    o = fd.ops
    if pattern == "two_reductions":
        for _ in range(draw(st.integers(0, n_ops))):
            gen.pointwise_step()
        e = gen.pick(full=True, floating=True)
        op1, op2 = (
            draw(st.sampled_from(["sum", "max", "mean"])),
            draw(st.sampled_from(["sum", "max", "min", "mean"])),
        )
        r1 = getattr(o, op1)(e.val, [draw(st.integers(0, e.val.ndim - 1))])
        r2 = getattr(o, op2)(r1, [draw(st.integers(0, r1.ndim - 1))])
        grow = 1100.0 if op1 == "sum" else 1.0
        grow *= 1100.0 if op2 == "sum" else 1.0
        last = Entry(r2, False, e.bound * grow + 3.0)
        gen.results.append(last)
        gen.required.append(last)
        if draw(st.booleans()):
            gen.results.append(Entry(r1, False, e.bound * 1100.0 + 3.0))
        add_outputs(draw, fd, gen, max_outputs)
        return
    # Library results are not exact: keep them away from discontinuous ops.
    ops = (
        gen.ops
        if pattern != "matmul"
        else tuple(op for op in gen.ops if not OPS[op].discontinuous and not OPS[op].has_condition)
        or ("add",)
    )
    other = Gen(draw, fd, draw(st.integers(1, gen.rank)), gen.dtypes, ops, gen.max_rank)
    other.scalars = gen.scalars
    if pattern == "matmul":
        dt = draw(st.sampled_from([DataType.Float, DataType.Double]))
        x = fd.define_tensor(shape=[-1] * draw(st.integers(2, 3)), dtype=dt)
        w = fd.define_tensor(shape=[-1, -1], dtype=dt)
        if draw(st.booleans()):
            y = o.matmul(x, w)
        else:
            y = o.linear(
                x, w, fd.define_tensor(shape=[-1], dtype=dt) if draw(st.booleans()) else None
            )
        other.rank = y.ndim
        other.pool.append(Entry(y, False, 4.0 * 1100.0))
    else:
        other.add_input(other.rank, True, draw(st.sampled_from(gen.dtypes)))
    for _ in range(n_ops):
        (gen if draw(st.booleans()) else other).pointwise_step()
    add_outputs(draw, fd, gen, max(1, max_outputs - 1))
    add_outputs(draw, fd, other, 1)


def fusions(
    *,
    max_inputs: int = 3,
    max_ops: int = 8,
    max_rank: int = 3,
    dtypes: tuple[DataType, ...] = DEFAULT_DTYPES,
    kinds: frozenset[str] | set[str] = frozenset({"pointwise"}),
    ops: tuple[str, ...] | None = None,
    allow_scalars: bool = True,
    max_outputs: int = 3,
    aliases: bool = False,
) -> st.SearchStrategy[FusionDefinition]:
    """A strategy of finished FusionDefinitions.

    max_inputs: tensor inputs (>= 1; layer/rms norm may add weight and bias inputs).
    max_ops: pointwise ops per fusion (composites count as one). max_rank: rank of the
    largest input. dtypes: input dtypes to draw from (narrow dtypes also used for output
    casts). kinds: subset of KINDS ("resize", "indexing", "scan" and "library" add their ops
    to one of the first four's fusions); "pointwise" fusions contain no ReductionOp/WelfordOp;
    "multi_segment" fusions need several segments for most inputs (two reductions over
    different axes, outputs of unrelated shapes, or a matmul/linear with pointwise work
    after it).
    ops: pointwise op names from kfuse.ir.ops.OPS to use (default all). allow_scalars:
    sometimes add a symbolic scalar input. max_outputs: outputs chosen per fusion (a
    reduction or normalization result that no chosen output uses is added as an output too,
    so it is never pruned). aliases: sometimes write an output into a tensor input
    (fd.add_output(..., alias_input=)); whoever checks such a fusion compares the inputs'
    storage after the call and evaluates the reference on them as they were before
    (kfuse.testing.aliases), as the campaign does.
    """
    kinds = frozenset(kinds)
    if not kinds or not kinds <= KINDS:
        raise ValueError(f"kinds must be a non-empty subset of {sorted(KINDS)}, got {kinds}")
    if max_inputs < 1 or max_ops < 1 or max_rank < 1 or max_outputs < 1:
        raise ValueError("max_inputs, max_ops, max_rank and max_outputs must be >= 1")
    ops = tuple(ops) if ops is not None else tuple(OPS)
    unknown = [op for op in ops if op not in OPS]
    if unknown:
        raise ValueError(f"unknown ops {unknown}")
    return _fusions(
        max_inputs,
        max_ops,
        max_rank,
        tuple(dtypes),
        kinds,
        ops,
        allow_scalars,
        max_outputs,
        aliases,
    )
