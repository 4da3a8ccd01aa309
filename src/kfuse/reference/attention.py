"""The reference evaluation of attention (sdpfa_fwd and its backward), written from the
definition rather than with the kernels the expr_eval scheduler calls: a float64 softmax of
the scaled scores with the bias added and -inf where the mask is false or the causal mask
hides a key, and that softmax's gradient. Leading batch axes are the matmuls' batch axes.
A query row whose every score is -inf gives 0 (torch's math attention's safe softmax) and a
log-sum-exp of -inf, log of an empty sum. With dropout (numbers drawn by torch's
generator) there is no reference: an InputError.
"""

from __future__ import annotations

import math
from typing import Any

from kfuse.dtypes import DataType
from kfuse.errors import InputError
from kfuse.ir.exprs import Expr, SdpaBwdOp, SdpaFwdOp


def _no_dropout(expr: Expr, dropout_p: float) -> None:
    if dropout_p != 0.0:
        raise InputError(
            f"{expr.outputs[0].name}: attention with dropout_p = {dropout_p} has no reference "
            "(its mask is drawn by torch's generator)"
        )


def _swapped(ndim: int) -> tuple[int, ...]:
    """The permutation that swaps the last two axes."""
    return (*range(ndim - 2), ndim - 1, ndim - 2)


def _scale(expr: Any, q: Any, scalars: list[Any]) -> float:
    return float(scalars[2]) if expr.has_scale else 1.0 / math.sqrt(int(q.shape[-1]))


def _scores(be: Any, expr: Any, q: Any, k: Any, scalars: list[Any], extra: list[Any]) -> Any:
    """The scaled scores [batch..., H, L, S] with the bias added, and -inf where the mask is
    false or the causal mask hides the key (query i sees keys j <= i, torch's top-left
    aligned mask)."""
    _no_dropout(expr, float(scalars[0]))
    scores = be.matmul(q, be.permute(k, _swapped(q.ndim))) * _scale(expr, q, scalars)
    if getattr(expr, "has_bias", False):
        scores = scores + extra[0]
    hidden = be.full(tuple(scores.shape), -math.inf, scores.dtype, q)
    if getattr(expr, "has_mask", False):
        scores = be.where(extra[-1], scores, hidden)
    if bool(scalars[1]):
        n_q, n_k = int(q.shape[-2]), int(k.shape[-2])
        rows = be.reshape(be.arange(q)(n_q), (n_q, 1))
        cols = be.reshape(be.arange(q)(n_k), (1, n_k))
        scores = be.where(cols <= rows, scores, hidden)
    return scores


def _probabilities(
    be: Any, expr: Any, q: Any, k: Any, scalars: list[Any], extra: list[Any]
) -> tuple[Any, Any]:
    """(softmax of the scores, their log-sum-exp per query row)."""
    scores = _scores(be, expr, q, k, scalars, extra)
    last = scores.ndim - 1
    top = be.reduce("max", scores, (last,), scores.dtype)
    top = be.where(be.fn("isfinite")(top), top, be.full(tuple(top.shape), 0.0, top.dtype, q))
    exps = be.fn("exp")(scores - be.expand_dims(top, (last,)))
    total = be.reduce("sum", exps, (last,), scores.dtype)
    lse = be.fn("log")(total) + top
    # A row without keys has exps and total 0: divided by 1 its probabilities stay 0.
    kept = be.where(total > 0, total, be.full(tuple(total.shape), 1.0, total.dtype, q))
    return exps / be.expand_dims(kept, (last,)), lse


def sdpfa_fwd_reference(be: Any, expr: SdpaFwdOp, args: list[Any], scalars: list[Any]) -> list[Any]:
    q, k, v = args[:3]
    probs, lse = _probabilities(be, expr, q, k, scalars, args[3:])
    # The philox state is torch's generator's: with no dropout nothing reads it.
    seed = be.full((2,), 0, be.storage_dtype(DataType.Int, False), q)
    return [be.matmul(probs, v), lse, seed, be.full((), 0, seed.dtype, q)]


def sdpfa_bwd_reference(be: Any, expr: SdpaBwdOp, args: list[Any], scalars: list[Any]) -> list[Any]:
    grad, q, k, v = args[:4]
    probs, _ = _probabilities(be, expr, q, k, scalars, [])
    swap = _swapped(q.ndim)
    grad_v = be.matmul(be.permute(probs, swap), grad)
    grad_p = be.matmul(grad, be.permute(v, swap))
    # softmax's gradient: dS = P * (dP - rowsum(dP * P))
    last = probs.ndim - 1
    row = be.reduce("sum", grad_p * probs, (last,), probs.dtype)
    grad_s = probs * (grad_p - be.expand_dims(row, (last,))) * _scale(expr, q, scalars)
    return [be.matmul(grad_s, k), be.matmul(be.permute(grad_s, swap), q), grad_v]
