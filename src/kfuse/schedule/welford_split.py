"""A Welford over separate runs of axes (a batch norm over N, H and W of an NCHW tensor: dims
(0, 2, 3)) as two stages, so that no kernel has to read a permuted copy of its input.

Stage 1 is a Welford over one run alone, which the reduction scheduler reads once: the
innermost (H and W: one contiguous block per (n, c)), or where that run is short the leading
one (N: an outer reduction over contiguous C x H x W; kfuse.schedule.axis_runs says when).
Stage 2 merges its partial statistics over the other runs with sums (Chan's parallel
formula), on tensors of the size stage 1 leaves (below, n indexes those partials):

    shift = max_n avg_n where finite, else 0
    mean  = shift + sum_n cnt_n (avg_n - shift) / sum_n cnt_n
    m2    = sum_n m2_n + sum_n cnt_n (avg_n - mean)^2
    count = sum_n cnt_n

The shift keeps a channel of equal values exact: every avg_n is that value (stage 1 measures
from each row's first value), so every avg_n - shift is 0 and the mean is the value itself, as
the float64 reference's (a mean off by an ulp there, times 1 / sqrt(eps), was a campaign
mismatch once). Infinities and NaN come out as the reference's: a +-inf among the values makes
its avg_n +-inf, the shift 0, and the mean and m2 what sums of them give.

Before this, the segmenter wrote a permuted float copy of the input (kept axes first) for one
Welford over trailing axes: on an H200 a bf16 batch norm forward of [64, 256, 56, 56] spent
214 us of its 392 us writing that copy (torch.compile: 105 us in all).

Only for shapes with no empty extent (an empty run's statistics need the reference's NaN,
which sums over an empty axis do not give): the caller falls back to the permuted copy.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import cast

from kfuse.dtypes import DataType
from kfuse.ir.exprs import (
    BinaryOp,
    BroadcastOp,
    CastOp,
    Expr,
    ReductionOp,
    TernaryOp,
    UnaryOp,
    WelfordOp,
)
from kfuse.ir.values import Axis, Scalar, TensorView
from kfuse.runtime.info import RuntimeInfo
from kfuse.schedule.axis_runs import reduction_order

_ids = itertools.count()


def welford_in_two_stages(
    e: WelfordOp, runs: list[tuple[int, ...]], info: RuntimeInfo
) -> list[Expr] | None:
    """The exprs computing `e`'s three outputs in two stages (the module docstring), their new
    tensors' extents added to `info`; None where the shape has an empty extent or `runs` (the
    Welford's dims as runs of adjacent axes) has fewer than two."""
    x = e.inputs[0]
    assert isinstance(x, TensorView)
    shape = tuple(info.shape(x))
    if len(runs) < 2 or 0 in shape:
        return None
    avg_out, m2_out, count_out = (cast(TensorView, v) for v in e.outputs)
    dt = avg_out.dtype
    first = reduction_order(runs, shape)[0]
    kept1 = [i for i in range(len(shape)) if i not in first]  # x's axes that stage 1 keeps
    rest = tuple(kept1.index(d) for r in runs if r != first for d in r)  # in stage 1's axes
    tag = f"{avg_out.name}_s{next(_ids)}"

    axes1 = tuple(x.axes[i] for i in kept1)
    shape1 = tuple(shape[i] for i in kept1)
    axes2 = tuple(ax for i, ax in enumerate(axes1) if i not in rest)
    shape2 = tuple(n for i, n in enumerate(shape1) if i not in rest)
    spread = tuple(i in rest for i in range(len(axes1)))  # stage 2's results broadcast back
    axes_b = tuple(Axis(is_broadcast=True, extent=1) if b else ax for ax, b in zip(axes1, spread))
    shape_b = tuple(1 if b else n for n, b in zip(shape1, spread))

    exprs: list[Expr] = []

    def tensor(name: str, dtype: DataType, axes: tuple[Axis, ...], ext: tuple) -> TensorView:
        tv = TensorView(f"{tag}_{name}", dtype, axes)
        info.extents[tv] = ext
        return tv

    def per_channel(name: str, dtype: DataType = dt) -> TensorView:
        return tensor(name, dtype, axes2, shape2)

    def per_part(name: str, dtype: DataType = dt) -> TensorView:
        return tensor(name, dtype, axes1, shape1)

    def binary(op: str, a: object, b: object, out: TensorView) -> TensorView:
        exprs.append(BinaryOp(inputs=(a, b), outputs=(out,), op=op))  # type: ignore[arg-type]
        return out

    def reduced(op: str, a: TensorView, out: TensorView) -> TensorView:
        exprs.append(ReductionOp(inputs=(a,), outputs=(out,), op=op, dims=rest, dtype=out.dtype))
        return out

    def spread_back(a: TensorView, name: str) -> TensorView:
        out = tensor(name, dt, axes_b, shape_b)
        exprs.append(BroadcastOp(inputs=(a,), outputs=(out,), is_new_axis=spread))
        return out

    avg1, m2_1, cnt1 = per_part("avg"), per_part("m2"), per_part("n", DataType.Int)
    exprs.append(dataclasses.replace(e, inputs=(x,), outputs=(avg1, m2_1, cnt1), dims=first))
    weight = per_part("w")
    exprs.append(CastOp(inputs=(cnt1,), outputs=(weight,), dtype=dt))

    top = reduced("max", avg1, per_channel("top"))
    finite = per_channel("finite", DataType.Bool)
    exprs.append(UnaryOp(inputs=(top,), outputs=(finite,), op="isfinite"))
    shift = per_channel("shift")
    zero = Scalar(f"{tag}_zero", dt, 0.0)
    exprs.append(TernaryOp(inputs=(finite, top, zero), outputs=(shift,), op="where"))

    dev = binary("sub", avg1, spread_back(shift, "shift_b"), per_part("dev"))
    moved = reduced("sum", binary("mul", dev, weight, per_part("wdev")), per_channel("moved"))
    total = reduced("sum", weight, per_channel("total"))
    mean = binary("add", shift, binary("div", moved, total, per_channel("q")), avg_out)

    d = binary("sub", avg1, spread_back(mean, "mean_b"), per_part("d"))
    spread_sq = binary("mul", binary("mul", d, d, per_part("dd")), weight, per_part("wdd"))
    between = reduced("sum", spread_sq, per_channel("between"))
    within = reduced("sum", m2_1, per_channel("within"))
    binary("add", within, between, m2_out)
    reduced("sum", cnt1, count_out)
    return exprs
