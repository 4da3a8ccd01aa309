"""Online softmax statistics: a reduction kernel computes max(x) and sum(exp(x - max)) over
the same axes in one pass instead of two.

A softmax's statistics are two reductions, the second reading the first's result (a
broadcast max subtracted from every value), which a non-persistent kernel cannot do: the
max must be known before the first exponential. A segmented softmax over axis 0 therefore
read its input three times (max, sum of exponentials, normalization). Folded, the pair is one
accumulator (kf::SoftmaxState in the runtime) holding the running max and the sum of
exponentials relative to it, rescaled when the max grows; the two results come out of it
exactly as the two reductions would give them, infinities and NaN included (see the runtime's
comment).

The reduction scheduler asks for the fold (kfuse.codegen.reduction_plan.plan_reductions,
fold_softmax): the pair becomes one SoftmaxStatsOp in the plan's reductions (the fusion is
unchanged), read from the max's input. A pair folds when the sum's input is exp(x -
broadcast(max(x))) (an expand after the broadcast allowed) over the same axes in float, and
the difference and the exponentials have no other use (another use would need the max
inside the loop, which no fold gives).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, cast

from kfuse.codegen.precision import approximable
from kfuse.dtypes import DataType
from kfuse.ir.exprs import BinaryOp, BroadcastOp, ExpandOp, Expr, ReductionOp, UnaryOp
from kfuse.ir.fusion import Fusion
from kfuse.ir.values import Val


@dataclass(frozen=True, eq=False, kw_only=True)
class SoftmaxStatsOp(Expr):
    """outputs (max, sum of exp(x - max)) of the input over `dims`: a folded pair of a plan's
    reductions (never in a Fusion). fast: the sum's exp was approximable (exp_fast)."""

    dims: tuple[int, ...]
    fast: bool
    ATTRS: ClassVar[tuple[str, ...]] = ("dims", "fast")


def softmax_pairs(fusion: Fusion, reductions: tuple[Expr, ...]) -> dict[int, int]:
    """index of a sum among `reductions` -> index of the max it folds with (the docstring)."""
    index = {id(r): k for k, r in enumerate(reductions)}
    uses: dict[int, int] = {}
    for e in fusion.exprs:
        for v in e.inputs:
            uses[id(v)] = uses.get(id(v), 0) + 1
    for o in fusion.outputs:
        uses[id(o)] = uses.get(id(o), 0) + 1

    def only_use(v: Val) -> bool:
        return uses.get(id(v), 0) == 1

    pairs: dict[int, int] = {}
    for k, r in enumerate(reductions):
        if not (isinstance(r, ReductionOp) and r.op == "sum" and r.dtype is DataType.Float):
            continue
        exp = r.inputs[0].definition
        if not (isinstance(exp, UnaryOp) and exp.op == "exp" and only_use(exp.outputs[0])):
            continue
        diff = exp.inputs[0].definition
        if not (isinstance(diff, BinaryOp) and diff.op == "sub" and only_use(diff.outputs[0])):
            continue
        x, spread = diff.inputs
        source = spread.definition
        if isinstance(source, ExpandOp):
            source = source.inputs[0].definition
        if not isinstance(source, BroadcastOp):
            continue
        top = source.inputs[0].definition
        if (
            isinstance(top, ReductionOp)
            and top.op == "max"
            and top.inputs[0] is x
            and top.dims == r.dims
            and top.dtype is DataType.Float
            and id(top) in index
        ):
            pairs[k] = index[id(top)]
    return pairs


def fold_pairs(
    fusion: Fusion, reductions: tuple[Expr, ...], pairs: dict[int, int]
) -> tuple[Expr, ...]:
    """The reductions with each folded pair (softmax_pairs) replaced by one SoftmaxStatsOp at
    the max's place."""
    fast = approximable(fusion)
    folded_max = {m: s for s, m in pairs.items()}
    out: list[Expr] = []
    for k, r in enumerate(reductions):
        if k in pairs:
            continue
        if k in folded_max:
            total = reductions[folded_max[k]]
            exp = total.inputs[0].definition
            assert exp is not None
            r = SoftmaxStatsOp(
                inputs=r.inputs,
                outputs=(r.outputs[0], total.outputs[0]),
                dims=cast(ReductionOp, total).dims,
                fast=any(v is exp.outputs[0] for v in fast),
            )
        out.append(r)
    return tuple(out)
