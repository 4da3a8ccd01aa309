"""Which values may be computed with fast approximations: those that only reach BFloat16
outputs through arithmetic.

bf16 keeps 8 bits of mantissa, so a value whose every use ends, through pointwise arithmetic,
casts and sum/max/min reductions, in a BFloat16 output is rounded far more coarsely than the
~2 float ulp of the hardware exp2/reciprocal approximations (a sum of values each off by
2 ulp is off by at most 2 ulp relative). Comparisons, logical ops, products and Welford
statistics stop the argument: a flipped comparison or a cancellation is not rounded away.
"""

from __future__ import annotations

from kfuse.dtypes import DataType
from kfuse.ir.exprs import (
    BinaryOp,
    CastOp,
    ReductionOp,
    TernaryOp,
    UnaryOp,
)
from kfuse.ir.fusion import Fusion
from kfuse.ir.ops import OPS
from kfuse.ir.structural import STRUCTURAL
from kfuse.ir.values import Val

FAST_OPS = frozenset(name for name, row in OPS.items() if row.precision == "approximable")
"""The ops with an approximate form (the op table's precision class 'approximable')."""
_MOVES = tuple(c for c, row in STRUCTURAL.items() if row.keeps_axes)
"""The structural ops a value reaches BFloat16 outputs through unchanged. A reshape is left
out, as it has been since fast forms were measured (fb96d48): taking it in would change
which kernels use them."""


def approximable(fusion: Fusion) -> frozenset[Val]:
    """The vals defined by a FAST_OPS op whose value only reaches BFloat16 outputs."""
    low = low_values(fusion)
    return frozenset(
        e.outputs[0]
        for e in fusion.exprs
        if isinstance(e, (UnaryOp, BinaryOp))
        and e.op in FAST_OPS
        and e.outputs[0].dtype is DataType.Float
        and id(e.outputs[0]) in low
    )


def low_values(fusion: Fusion) -> frozenset[int]:
    """The ids of the values computed by the fusion's exprs that only reach BFloat16 outputs
    (or the rounded_outputs) through arithmetic: the segmenter marks a segment's outputs
    with it (kfuse.schedule.sub_fusion.build_sub_fusion), so that a segment makes the
    choices the whole fusion would (the sum of exponentials of a softmax over axis 0, a
    segment of its own, then takes the fast exp its bf16 output allows)."""
    uses: dict[int, list] = {}
    for e in fusion.exprs:
        for v in e.inputs:
            uses.setdefault(id(v), []).append(e)
    outputs = {id(o) for o in fusion.outputs}
    rounded = {id(fusion.outputs[k]) for k in fusion.rounded_outputs}
    low: dict[int, bool] = {}
    for e in reversed(fusion.exprs):
        for v in e.outputs:
            low[id(v)] = _only_low(v, uses.get(id(v), []), outputs, rounded, low)
    return frozenset(k for k, is_low in low.items() if is_low)


def _only_low(
    v: Val, consumers: list, outputs: set[int], rounded: set[int], low: dict[int, bool]
) -> bool:
    if id(v) in outputs and v.dtype is not DataType.BFloat16 and id(v) not in rounded:
        return False
    if not consumers:
        return id(v) in outputs
    for e in consumers:
        if isinstance(e, (UnaryOp, BinaryOp, TernaryOp)):
            if (
                OPS[e.op].category not in ("arith", "float_math")
                or OPS[e.op].has_condition
                and e.inputs[0] is v
            ):
                return False
        elif isinstance(e, CastOp):
            if not e.dtype.is_floating:
                return False
        elif isinstance(e, ReductionOp):
            if e.op not in ("sum", "max", "min"):
                return False
        elif not isinstance(e, _MOVES):
            return False
        if not all(low.get(id(o), False) for o in e.outputs):
            return False
    return True
