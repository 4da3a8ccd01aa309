"""Batch norm and instance norm in training mode, forward and backward, over a 4-D input in
NCHW or channels-last layout (nvFuser's normalization.py, shared by test_batchnorm_fwd/bwd.py
and test_instancenorm_fwd/bwd.py).

As in nvFuser, a channels-last case takes the input as a contiguous [N, H, W, C] tensor
(nvFuser permutes a channels-last NCHW tensor to that view before the call) and its channel
axis is the last. Batch norm reduces over every axis but the channel one; instance norm keeps
the batch axis too (statistics [N, C]). The definitions keep nvFuser's spelling, including
the running-statistics update that no output uses (nvFuser's fusions compute it and drop
it). API differences: fd.ops.size for T.size(i); no is_cpu.
"""

from __future__ import annotations

import functools
from typing import Any

from kfuse import DataType, FusionDefinition
from models.case import Case, Shape, demote, promote, randn
from models.sweeps import GPU_TEST_SPATIAL, SPATIAL, SPATIAL_QUICK, TEST_SPATIAL

EPS = 1e-5
MOMENTUM = 0.01
NDIM = 4


class Layout:
    """Which axes a norm reduces and keeps, for batch or instance norm in NCHW or NHWC."""

    def __init__(self, norm: str, channels_last: bool) -> None:
        self.norm = norm
        self.channels_last = channels_last
        self.channel = NDIM - 1 if channels_last else 1
        self.axes = [i for i in range(NDIM) if i != self.channel]
        if norm == "instance_norm":
            self.axes.remove(0)
        # nvFuser's bcast_mask (statistics) and channels_only_bcast_mask (weight, bias).
        self.stat_mask = [i in self.axes for i in range(NDIM)]
        self.channel_mask = [i != self.channel for i in range(NDIM)]

    def stat_view(self, t: Any, shape: Any) -> Any:
        """A statistic ([C] or [N, C]) viewed to broadcast against a tensor of `shape`."""
        return t.reshape([1 if reduced else shape[i] for i, reduced in enumerate(self.stat_mask)])

    def channel_view(self, t: Any) -> Any:
        return t.reshape([-1 if i == self.channel else 1 for i in range(NDIM)])

    def to_nchw(self, x: Any) -> Any:
        return x.permute(0, 3, 1, 2) if self.channels_last else x

    def from_nchw(self, x: Any) -> Any:
        return x.permute(0, 2, 3, 1) if self.channels_last else x

    def input_shape(self, nchw: Shape) -> Shape:
        n, c, h, w = nchw
        return (n, h, w, c) if self.channels_last else nchw


def norm_fwd_definition(lay: Layout) -> Any:
    def define(dtype: DataType) -> FusionDefinition:
        # from normalization.py::norm_fwd_fusion
        with FusionDefinition() as fd:
            x = fd.define_tensor(shape=[-1] * NDIM, contiguity=[True] * NDIM, dtype=dtype)
            w = fd.define_tensor(shape=[-1], contiguity=[True], dtype=dtype)
            b = fd.define_tensor(shape=[-1], contiguity=[True], dtype=dtype)
            running_mean = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
            running_var = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
            x, w, b = (promote(fd, t, dtype) for t in (x, w, b))
            var, mean = fd.ops.var_mean(x, dims=lay.axes, correction=0, keepdim=False)
            eps = fd.define_scalar(EPS, dtype=DataType.Double)
            invstd = fd.ops.rsqrt(fd.ops.add(var, eps))
            invstd_b = fd.ops.broadcast(invstd, lay.stat_mask)
            mean_b = fd.ops.broadcast(mean, lay.stat_mask)
            xhat = fd.ops.mul(fd.ops.sub(x, mean_b), invstd_b)
            y = fd.ops.mul(xhat, fd.ops.broadcast(w, lay.channel_mask))
            y = fd.ops.add(y, fd.ops.broadcast(b, lay.channel_mask))
            # The running statistics' update: computed, then unused, as in nvFuser.
            keep = fd.define_scalar(1 - MOMENTUM, dtype=DataType.Double)
            momentum = fd.define_scalar(MOMENTUM, dtype=DataType.Double)
            new_mean = fd.ops.add(fd.ops.mul(momentum, mean), fd.ops.mul(keep, running_mean))
            new_var = fd.ops.add(fd.ops.mul(momentum, var), fd.ops.mul(keep, running_var))
            if 0 not in lay.axes:
                inv_batch = fd.ops.reciprocal(fd.ops.size(x, 0))
                new_mean = fd.ops.mul(fd.ops.sum(new_mean, 0), inv_batch)
                new_var = fd.ops.mul(fd.ops.sum(new_var, 0), inv_batch)
            fd.add_output(demote(fd, y, dtype))
            fd.add_output(mean)
            fd.add_output(invstd)
        return fd

    return define


def norm_bwd_definition(lay: Layout) -> Any:
    def define(dtype: DataType) -> FusionDefinition:
        # from normalization.py::norm_bwd_fusion
        stat_ndim = NDIM - len(lay.axes)
        with FusionDefinition() as fd:
            x = fd.define_tensor(shape=[-1] * NDIM, contiguity=[True] * NDIM, dtype=dtype)
            g = fd.define_tensor(shape=[-1] * NDIM, contiguity=[True] * NDIM, dtype=dtype)
            w = fd.define_tensor(shape=[-1], contiguity=[True], dtype=dtype)
            for _ in ("running_mean", "running_var"):  # inputs nvFuser's fusion never reads
                fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
            mean, invstd = (
                fd.define_tensor(
                    shape=[-1] * stat_ndim, contiguity=[True] * stat_ndim, dtype=DataType.Float
                )
                for _ in range(2)
            )
            x, g, w = (promote(fd, t, dtype) for t in (x, g, w))
            count = functools.reduce(fd.ops.mul, [fd.ops.size(x, a) for a in lay.axes], 1)
            inv_count = fd.ops.reciprocal(count)
            mean = fd.ops.broadcast(mean, lay.stat_mask)
            grad_sum = fd.ops.sum(g, dims=lay.axes, keepdim=False)
            centered = fd.ops.sub(x, mean)
            dot = fd.ops.sum(fd.ops.mul(g, centered), dims=lay.axes, keepdim=False)
            grad_mean = fd.ops.broadcast(fd.ops.mul(grad_sum, inv_count), lay.stat_mask)
            proj_scale = fd.ops.mul(fd.ops.mul(dot, inv_count), fd.ops.mul(invstd, invstd))
            proj_scale = fd.ops.broadcast(proj_scale, lay.stat_mask)
            invstd_b = fd.ops.broadcast(invstd, lay.stat_mask)
            grad_scale = fd.ops.mul(fd.ops.broadcast(w, lay.channel_mask), invstd_b)
            proj = fd.ops.mul(proj_scale, centered)
            dx = fd.ops.mul(fd.ops.sub(fd.ops.sub(g, proj), grad_mean), grad_scale)
            dw = fd.ops.mul(dot, invstd)
            db = grad_sum
            if 0 not in lay.axes:  # instance norm: weight and bias are per channel only
                dw = fd.ops.sum(dw, 0, keepdim=False)
                db = fd.ops.sum(db, 0, keepdim=False)
            for out in (dx, dw, db):
                fd.add_output(demote(fd, out, dtype))
        return fd

    return define


# ---- torch: the same math, float32 compute (the running statistics are left out: nvFuser's
# fusion drops their update, and torch.compile would too) ----


def norm_fwd_torch(lay: Layout) -> Any:
    def fn(x: Any, w: Any, b: Any, running_mean: Any, running_var: Any) -> tuple[Any, ...]:
        import torch

        xf = x.float()
        var, mean = torch.var_mean(xf, dim=lay.axes, correction=0)
        invstd = torch.rsqrt(var + EPS)
        y = (xf - lay.stat_view(mean, x.shape)) * lay.stat_view(invstd, x.shape)
        y = y * lay.channel_view(w.float()) + lay.channel_view(b.float())
        return y.to(x.dtype), mean, invstd

    return fn


def norm_bwd_torch(lay: Layout) -> Any:
    def fn(
        x: Any, g: Any, w: Any, running_mean: Any, running_var: Any, mean: Any, invstd: Any
    ) -> tuple[Any, ...]:
        xf, gf = x.float(), g.float()
        count = 1
        for a in lay.axes:
            count *= x.shape[a]
        centered = xf - lay.stat_view(mean, x.shape)
        grad_sum = gf.sum(lay.axes)
        dot = (gf * centered).sum(lay.axes)
        proj = lay.stat_view(dot / count * invstd * invstd, x.shape) * centered
        scale = lay.channel_view(w.float()) * lay.stat_view(invstd, x.shape)
        dx = (gf - proj - lay.stat_view(grad_sum / count, x.shape)) * scale
        dw, db = dot * invstd, grad_sum
        if 0 not in lay.axes:
            dw, db = dw.sum(0), db.sum(0)
        return dx.to(x.dtype), dw.to(w.dtype), db.to(w.dtype)

    return fn


# ---- float64 references: torch's batch_norm / instance_norm, autograd for the backward ----


def _norm64(lay: Layout, x: Any, w: Any, b: Any) -> Any:
    import torch

    f = torch.nn.functional
    xn = lay.to_nchw(x)
    if lay.norm == "batch_norm":
        y = f.batch_norm(xn, None, None, w, b, training=True, eps=EPS)
    else:
        y = f.instance_norm(xn, None, None, w, b, use_input_stats=True, eps=EPS)
    return lay.from_nchw(y)


def norm_fwd_reference(lay: Layout) -> Any:
    def fn(x: Any, w: Any, b: Any, running_mean: Any, running_var: Any) -> tuple[Any, ...]:
        import torch

        x64 = x.double()
        var, mean = torch.var_mean(x64, dim=lay.axes, correction=0)
        return _norm64(lay, x64, w.double(), b.double()), mean, 1 / torch.sqrt(var + EPS)

    return fn


def norm_bwd_reference(lay: Layout) -> Any:
    def fn(
        x: Any, g: Any, w: Any, running_mean: Any, running_var: Any, mean: Any, invstd: Any
    ) -> tuple[Any, ...]:
        import torch

        with torch.enable_grad():
            leaves = [t.detach().double().requires_grad_() for t in (x, w, torch.zeros_like(w))]
            _norm64(lay, *leaves).backward(g.double())
        return tuple(t.grad for t in leaves)

    return fn


def fwd_inputs(lay: Layout) -> Any:
    def make(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
        c = shape[1]
        return [
            randn(torch, lay.input_shape(shape), dtype, device),
            randn(torch, (c,), dtype, device),
            randn(torch, (c,), dtype, device),
            randn(torch, (c,), torch.float32, device),  # running mean
            torch.rand((c,), device=device) + 0.5,  # running variance
        ]

    return make


def bwd_inputs(lay: Layout) -> Any:
    def make(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
        x, w, b, running_mean, running_var = fwd_inputs(lay)(torch, shape, dtype, device)
        _, mean, invstd = norm_fwd_torch(lay)(x, w, b, running_mean, running_var)
        g = randn(torch, lay.input_shape(shape), dtype, device)
        return [x, g, w, running_mean, running_var, mean, invstd]

    return make


def _cases() -> list[Case]:
    out = []
    for norm, family in (("batch_norm", "batchnorm"), ("instance_norm", "instancenorm")):
        for direction in ("fwd", "bwd"):
            for channels_last in (False, True):
                lay = Layout(norm, channels_last)
                fwd = direction == "fwd"
                out.append(
                    Case(
                        family,
                        f"{family}_{direction}_{'nhwc' if channels_last else 'nchw'}",
                        f"normalization.py::norm_{direction}_fusion",
                        (norm_fwd_definition if fwd else norm_bwd_definition)(lay),
                        (norm_fwd_torch if fwd else norm_bwd_torch)(lay),
                        (norm_fwd_reference if fwd else norm_bwd_reference)(lay),
                        (fwd_inputs if fwd else bwd_inputs)(lay),
                        SPATIAL,
                        SPATIAL_QUICK,
                        TEST_SPATIAL,
                        GPU_TEST_SPATIAL,
                    )
                )
    return out


CASES = _cases()
