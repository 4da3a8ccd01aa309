"""The library calls that run topk, argsort, scatter, flash attention and grouped_mm for the
expr_eval scheduler, per framework: torch's own ops (torch.topk, torch.argsort,
torch.scatter, aten's attention kernels (kfuse.schedule.attention_calls), torch._grouped_mm),
and for NumPy and CuPy their argsort and put_along_axis (topk as a stable sort's first k).
Attention and grouped_mm have no NumPy or CuPy library: such inputs are an InputError that
says so.

Each function takes the expr, its tensor operands' arrays and its Scalars' values, and
returns one new array per output.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
from kfuse.schedule.attention_calls import torch_sdpfa_bwd, torch_sdpfa_fwd


def run_library_call(framework: str, expr: Expr, args: list[Any], scalars: list[Any]) -> list[Any]:
    """The outputs of `expr` (one of the library ops above) computed by `framework`."""
    if isinstance(expr, ScatterOp):
        x, index = args[0], args[1]
        check_scatter_positions(expr, index, int(x.shape[expr.dim]))
    elif isinstance(expr, GroupedMmOp):
        ends = check_group_offsets(expr, args[2], args)
        if framework == "torch" and args[0].device.type == "cuda":
            _check_cuda_group_sizes(expr, ends, args[0].element_size())
    if framework == "torch":
        return _TORCH[type(expr)](expr, args, scalars)
    if isinstance(expr, (SdpaFwdOp, SdpaBwdOp, GroupedMmOp)):
        name = {SdpaFwdOp: "sdpfa_fwd", SdpaBwdOp: "sdpfa_bwd", GroupedMmOp: "grouped_mm"}
        raise InputError(
            f"{name[type(expr)]} to {expr.outputs[0].name} runs through torch (flash "
            f"attention, torch._grouped_mm); the inputs are {framework} arrays, which no "
            "library kfuse uses can run it on: pass torch tensors"
        )
    import importlib

    return _numpy_like(importlib.import_module(framework), expr, args, scalars)


def _check_cuda_group_sizes(expr: Expr, ends: list[int], itemsize: int) -> None:
    """torch._grouped_mm's CUDA kernel asserts on the device (which ends the CUDA context)
    unless every group spans a multiple of 16 bytes along the axis the groups split: an
    InputError here instead."""
    starts = [0, *ends[:-1]]
    for i, (start, end) in enumerate(zip(starts, ends, strict=True)):
        if (end - start) * itemsize % 16:
            raise InputError(
                f"{expr.outputs[0].name} = grouped_mm(...): on CUDA every group must span a "
                f"multiple of 16 bytes along the axis the groups split ({16 // itemsize} "
                f"elements of {itemsize} bytes); group {i} spans {end - start} (offsets {ends})"
            )


# ---- torch ----
def _torch_topk(expr: TopKOp, args: list[Any], scalars: list[Any]) -> list[Any]:
    import torch

    (k,) = scalars
    # positive_nans: the selection orders every NaN as the largest value, but the sort of
    # the selected values (all of them where k is the whole axis) is the radix sort that
    # puts sign-bit NaNs before -inf (a GPU campaign's topk of k = 65 of 65).
    a = positive_nans(args[0])
    values, indices = torch.topk(a, int(k), expr.dim, expr.largest, expr.sorted)
    return [values, indices]


def _torch_argsort(expr: ArgsortOp, args: list[Any], scalars: list[Any]) -> list[Any]:
    import torch

    a = positive_nans(args[0])
    return [torch.argsort(a, dim=expr.dim, descending=expr.descending, stable=expr.stable)]


def _torch_scatter(expr: ScatterOp, args: list[Any], scalars: list[Any]) -> list[Any]:
    import torch

    x, index = args[0], args[1].long()
    if isinstance(expr.inputs[2], TensorView):
        return [torch.scatter(x, expr.dim, index, args[2])]
    return [torch.scatter(x, expr.dim, index, scalars[0])]


def _torch_grouped_mm(expr: GroupedMmOp, args: list[Any], scalars: list[Any]) -> list[Any]:
    import torch

    m1, m2, offsets = args
    return [torch._grouped_mm(m1, m2, offsets.to(torch.int32))]


_TORCH: dict[type, Callable[[Any, list[Any], list[Any]], list[Any]]] = {
    TopKOp: _torch_topk,
    ArgsortOp: _torch_argsort,
    ScatterOp: _torch_scatter,
    SdpaFwdOp: torch_sdpfa_fwd,
    SdpaBwdOp: torch_sdpfa_bwd,
    GroupedMmOp: _torch_grouped_mm,
}


# ---- NumPy and CuPy ----
def _numpy_like(xp: Any, expr: Expr, args: list[Any], scalars: list[Any]) -> list[Any]:
    x = args[0]
    if isinstance(expr, ScatterOp):
        out = xp.array(x, copy=True, order="C")
        index = args[1]
        value = source_window(args[2], index) if len(args) == 3 else scalars[0]
        out[scatter_positions(expr, index, xp.arange)] = value
        return [out]
    assert isinstance(expr, (TopKOp, ArgsortOp))
    descending = expr.largest if isinstance(expr, TopKOp) else expr.descending
    order = stable_order(xp, x, expr.dim, descending)
    if isinstance(expr, ArgsortOp):
        return [order]
    first = xp.take(order, xp.arange(int(scalars[0])), axis=expr.dim)
    return [xp.take_along_axis(x, first, axis=expr.dim), first]
