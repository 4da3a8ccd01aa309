"""The reference evaluation of the library ops beyond matmul and linear: topk, argsort,
scatter, flash attention and grouped_mm, written from their definitions rather than with
the library calls the expr_eval scheduler makes.

Orders come from a stable sort (topk's k its first k), so where equal values meet, the
reference's positions are the stable ones (a library's unstable topk or argsort may pick
others). Attention is a float64 softmax of the scaled scores, its backward the same
softmax's gradient; with dropout (numbers drawn by torch's generator) it has no reference
(an InputError). grouped_mm is a loop of matmuls over the groups.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from kfuse.dtypes import DataType
from kfuse.errors import InputError
from kfuse.ir.exprs import ArgsortOp, Expr, GroupedMmOp, ScatterOp, SdpaBwdOp, SdpaFwdOp, TopKOp
from kfuse.ir.library_ops import check_group_offsets
from kfuse.ir.sort_ops import (
    check_scatter_positions,
    positive_nans,
    scatter_positions,
    source_window,
    stable_order,
)
from kfuse.ir.values import TensorView


def library_reference(be: Any, expr: Expr, args: list[Any], scalars: list[Any]) -> list[Any]:
    """Each output of `expr`: `args` its tensor operands (floating ones in the compute
    storage, float64 for the golden reference), `scalars` its Scalars' values."""
    return _REFERENCE[type(expr)](be, expr, args, scalars)


def _order(be: Any, a: Any, dim: int, descending: bool) -> Any:
    if be.name == "torch":
        return be.xp.argsort(positive_nans(a), dim=dim, descending=descending, stable=True)
    return stable_order(be.xp, a, dim, descending)


def _take(be: Any, a: Any, positions: Any, dim: int) -> Any:
    if be.name == "torch":
        return be.xp.take_along_dim(a, positions, dim=dim)
    return be.xp.take_along_axis(a, positions, axis=dim)


def _topk(be: Any, expr: TopKOp, args: list[Any], scalars: list[Any]) -> list[Any]:
    a = args[0]
    order = _order(be, a, expr.dim, expr.largest)
    first = order[
        tuple(slice(0, int(scalars[0])) if d == expr.dim else slice(None) for d in range(a.ndim))
    ]
    return [_take(be, a, first, expr.dim), first]


def _argsort(be: Any, expr: ArgsortOp, args: list[Any], scalars: list[Any]) -> list[Any]:
    return [_order(be, args[0], expr.dim, expr.descending)]


def _scatter(be: Any, expr: ScatterOp, args: list[Any], scalars: list[Any]) -> list[Any]:
    x, index = args[0], args[1]
    check_scatter_positions(expr, index, int(x.shape[expr.dim]))
    out = be.to_output(x)
    if isinstance(expr.inputs[2], TensorView):
        value = source_window(args[2], index)
    else:
        value = scalars[0]
    if be.name == "torch":
        index = index.long()
    out[scatter_positions(expr, index, be.arange(x))] = value
    return [out]


def _no_dropout(expr: Expr, dropout_p: float) -> None:
    if dropout_p != 0.0:
        raise InputError(
            f"{expr.outputs[0].name}: attention with dropout_p = {dropout_p} has no reference "
            "(its mask is drawn by torch's generator)"
        )


def _probabilities(be: Any, expr: Any, q: Any, k: Any, scalars: list[Any]) -> tuple[Any, Any]:
    """(softmax of the scaled, masked scores, their log-sum-exp per query row)."""
    dropout_p, is_causal = float(scalars[0]), bool(scalars[1])
    _no_dropout(expr, dropout_p)
    scale = float(scalars[2]) if expr.has_scale else 1.0 / math.sqrt(int(q.shape[-1]))
    scores = be.matmul(q, be.permute(k, (0, 1, 3, 2))) * scale
    n_q, n_k = int(q.shape[2]), int(k.shape[2])
    if is_causal:  # query i sees keys j <= i (torch's top-left aligned mask)
        rows = be.reshape(be.arange(q)(n_q), (n_q, 1))
        cols = be.reshape(be.arange(q)(n_k), (1, n_k))
        hidden = be.full(tuple(scores.shape), -math.inf, scores.dtype, q)
        scores = be.where(cols <= rows, scores, hidden)
    top = be.reduce("max", scores, (3,), scores.dtype)
    top = be.where(be.fn("isfinite")(top), top, be.full(tuple(top.shape), 0.0, top.dtype, q))
    exps = be.fn("exp")(scores - be.expand_dims(top, (3,)))
    total = be.reduce("sum", exps, (3,), scores.dtype)
    lse = be.fn("log")(total) + top
    return exps / be.expand_dims(total, (3,)), lse


def _sdpfa_fwd(be: Any, expr: SdpaFwdOp, args: list[Any], scalars: list[Any]) -> list[Any]:
    q, k, v = args
    probs, lse = _probabilities(be, expr, q, k, scalars)
    # The philox state is torch's generator's: with no dropout nothing reads it.
    seed = be.full((2,), 0, be.storage_dtype(DataType.Int, False), q)
    return [be.matmul(probs, v), lse, seed, be.full((), 0, seed.dtype, q)]


def _sdpfa_bwd(be: Any, expr: SdpaBwdOp, args: list[Any], scalars: list[Any]) -> list[Any]:
    grad, q, k, v = args[:4]
    probs, _ = _probabilities(be, expr, q, k, scalars)
    scale = float(scalars[2]) if expr.has_scale else 1.0 / math.sqrt(int(q.shape[-1]))
    swap = (0, 1, 3, 2)
    grad_v = be.matmul(be.permute(probs, swap), grad)
    grad_p = be.matmul(grad, be.permute(v, swap))
    # softmax's gradient: dS = P * (dP - rowsum(dP * P))
    row = be.reduce("sum", grad_p * probs, (3,), probs.dtype)
    grad_s = probs * (grad_p - be.expand_dims(row, (3,))) * scale
    return [be.matmul(grad_s, k), be.matmul(be.permute(grad_s, swap), q), grad_v]


def _grouped_mm(be: Any, expr: GroupedMmOp, args: list[Any], scalars: list[Any]) -> list[Any]:
    m1, m2, offsets = args
    ends = check_group_offsets(expr, offsets, args)
    starts = [0, *ends[:-1]]
    if m1.ndim == 2 and m2.ndim == 2:
        parts = [be.matmul(m1[:, s:e], m2[s:e, :]) for s, e in zip(starts, ends, strict=True)]
        if not parts:
            return [be.full((0, int(m1.shape[0]), int(m2.shape[1])), 0, m1.dtype, m1)]
        return [be.xp.stack(parts)]
    out = be.full((int(m1.shape[-2]), int(m2.shape[-1])), 0, m1.dtype, m1)
    for g, (s, e) in enumerate(zip(starts, ends, strict=True)):
        if m1.ndim == 2:
            out[s:e, :] = be.matmul(m1[s:e, :], m2[g])
        else:
            out[:, s:e] = be.matmul(m1[g], m2[:, s:e])
    return [out]


_REFERENCE: dict[type, Callable[[Any, Any, list[Any], list[Any]], list[Any]]] = {
    TopKOp: _topk,
    ArgsortOp: _argsort,
    ScatterOp: _scatter,
    SdpaFwdOp: _sdpfa_fwd,
    SdpaBwdOp: _sdpfa_bwd,
    GroupedMmOp: _grouped_mm,
}
