"""The reference evaluation of the library ops beyond matmul and linear: topk, argsort,
scatter, flash attention and grouped_mm, written from their definitions rather than with
the library calls the expr_eval scheduler makes.

Orders come from a stable sort (topk's k its first k), so where equal values meet, the
reference's positions are the stable ones (a library's unstable topk or argsort may pick
others). Attention is kfuse.reference.attention's. grouped_mm is a loop of matmuls over the
groups.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
from kfuse.reference.attention import sdpfa_bwd_reference, sdpfa_fwd_reference


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
    SdpaFwdOp: sdpfa_fwd_reference,
    SdpaBwdOp: sdpfa_bwd_reference,
    GroupedMmOp: _grouped_mm,
}
