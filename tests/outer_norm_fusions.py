"""Outer normalizations (reduced axes outer in memory, the kept innermost axis contiguous),
shared by the outer_persistent tests on the emulator, on the GPU and in the heuristics
sweep: softmax over axis 0, its backward, channels-last batch norm (reduce N, H, W per
channel) forward and backward, channels-last instance norm (reduce H·W per (n, c))."""

from __future__ import annotations

from collections.abc import Callable

from kfuse.dtypes import DataType
from kfuse.frontend import FusionDefinition

EPS = 1e-5


def _float(fd: FusionDefinition, t: object, dtype: DataType) -> object:
    return t if dtype in (DataType.Float, DataType.Double) else fd.ops.cast(t, DataType.Float)


def _back(fd: FusionDefinition, t: object, dtype: DataType) -> object:
    return t if dtype in (DataType.Float, DataType.Double) else fd.ops.cast(t, dtype)


def softmax0(dtype: DataType = DataType.Float, log: bool = False) -> FusionDefinition:
    """Input [R, C]; softmax (or log_softmax) over axis 0."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=dtype)
        fd.add_output((fd.ops.log_softmax if log else fd.ops.softmax)(x, 0))
    return fd


def softmax0_backward(dtype: DataType = DataType.Float) -> FusionDefinition:
    """Inputs grad [R, C], y [R, C] (softmax's output); dx = y * (grad - sum(grad * y, 0))."""
    with FusionDefinition() as fd:
        g = fd.define_tensor(shape=[-1, -1], dtype=dtype)
        y = fd.define_tensor(shape=[-1, -1], dtype=dtype)
        gf, yf = _float(fd, g, dtype), _float(fd, y, dtype)
        dot = fd.ops.sum(fd.ops.mul(gf, yf), [0], keepdim=True)
        fd.add_output(_back(fd, fd.ops.mul(yf, fd.ops.sub(gf, dot)), dtype))
    return fd


def batch_norm_nhwc(dtype: DataType = DataType.Float, axes: tuple = (0, 1, 2)) -> FusionDefinition:
    """Inputs x [N, H, W, C] (or [N, HW, C] with axes (1,)), weight [C], bias [C]; outputs
    y, mean, invstd (statistics over `axes`: batch norm over N, H, W; instance norm keeps
    N)."""
    rank = 4 if len(axes) == 3 else 3
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1] * rank, dtype=dtype)
        w = fd.define_tensor(shape=[-1], dtype=dtype)
        b = fd.define_tensor(shape=[-1], dtype=dtype)
        xf, wf, bf = (_float(fd, t, dtype) for t in (x, w, b))
        var, mean = fd.ops.var_mean(xf, list(axes), correction=0)
        invstd = fd.ops.rsqrt(fd.ops.add(var, fd.define_scalar(EPS, dtype=DataType.Double)))
        stat = [i in axes for i in range(rank)]
        xhat = fd.ops.mul(
            fd.ops.sub(xf, fd.ops.broadcast(mean, stat)), fd.ops.broadcast(invstd, stat)
        )
        channel = [i != rank - 1 for i in range(rank)]
        y = fd.ops.add(
            fd.ops.mul(xhat, fd.ops.broadcast(wf, channel)), fd.ops.broadcast(bf, channel)
        )
        fd.add_output(_back(fd, y, dtype))
        fd.add_output(mean)
        fd.add_output(invstd)
    return fd


def batch_norm_nhwc_backward(dtype: DataType = DataType.Float) -> FusionDefinition:
    """Inputs x, grad [N, H, W, C], weight [C], mean [C], invstd [C]; outputs dx and the
    per-channel grad_sum and dot (dbias, dweight before the invstd scaling)."""
    axes = [0, 1, 2]
    stat = [True, True, True, False]
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1] * 4, dtype=dtype)
        g = fd.define_tensor(shape=[-1] * 4, dtype=dtype)
        w = fd.define_tensor(shape=[-1], dtype=dtype)
        mean = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        invstd = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        xf, gf, wf = (_float(fd, t, dtype) for t in (x, g, w))
        count = fd.ops.mul(fd.ops.mul(fd.ops.size(x, 0), fd.ops.size(x, 1)), fd.ops.size(x, 2))
        inv_count = fd.ops.reciprocal(count)
        centered = fd.ops.sub(xf, fd.ops.broadcast(mean, stat))
        grad_sum = fd.ops.sum(gf, axes)
        dot = fd.ops.sum(fd.ops.mul(gf, centered), axes)
        grad_mean = fd.ops.broadcast(fd.ops.mul(grad_sum, inv_count), stat)
        proj = fd.ops.mul(fd.ops.mul(dot, inv_count), fd.ops.mul(invstd, invstd))
        scale = fd.ops.broadcast(fd.ops.mul(invstd, wf), stat)
        dx = fd.ops.mul(
            fd.ops.sub(
                fd.ops.sub(gf, fd.ops.mul(centered, fd.ops.broadcast(proj, stat))), grad_mean
            ),
            scale,
        )
        fd.add_output(_back(fd, dx, dtype))
        fd.add_output(grad_sum)
        fd.add_output(dot)
    return fd


Shapes = Callable[[int, int], list[tuple[int, ...]]]
"""(reduced extent, channels) -> the input shapes."""

FUSIONS: dict[str, tuple[Callable[[DataType], FusionDefinition], Shapes]] = {
    "softmax0": (softmax0, lambda r, c: [(r, c)]),
    "log_softmax0": (lambda d: softmax0(d, log=True), lambda r, c: [(r, c)]),
    "softmax0_backward": (softmax0_backward, lambda r, c: [(r, c), (r, c)]),
    "batch_norm_nhwc": (batch_norm_nhwc, lambda r, c: [(r, 1, 1, c), (c,), (c,)]),
    "instance_norm_nhwc": (
        lambda d: batch_norm_nhwc(d, axes=(1,)),
        lambda r, c: [(2, r, c), (c,), (c,)],
    ),
    "batch_norm_nhwc_backward": (
        batch_norm_nhwc_backward,
        lambda r, c: [(r, 1, 1, c), (r, 1, 1, c), (c,), (c,), (c,)],
    ),
}
