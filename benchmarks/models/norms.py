"""RMSNorm and LayerNorm over the last axis of [rows, hidden], forward and backward, plain and
after dropout + residual add (nvFuser's test_{,dropout_}{rmsnorm,layernorm}_{fwd,bwd}.py).

The definitions keep nvFuser's spelling op for op (pow(x, 2), sqrt and reciprocal in RMSNorm,
the rms or the mean and inverse std as extra outputs, the backward's sums over size-1 axes).
Differences, all forced by kfuse's API or by the brief:
* kfuse's TensorView has no .size(i)/.shape() methods: fd.ops.size(t, i) / fd.ops.shape(t);
  define_tensor has no is_cpu; sum's dtype=DataType.Null is the default (left out);
* dropout's random mask (fd.ops.uniform, then lt) is an input here, so that these fusions
  measure the norm with no RNG. The forward fusions therefore do not output the mask (it is
  their input): the bytes are the same, a Bool mask read instead of written. The forms that
  draw the mask are models/dropout_rng.py's, the suite's rows beside these.
"""

from __future__ import annotations

import functools
from typing import Any

from kfuse import DataType, FusionDefinition
from models.case import Shape, demote, dropout_mask, matrix, promote, randn, sweep_case, vector
from models.sweeps import GPU_TEST_2D, NORM_2D, NORM_2D_QUICK, TEST_2D

EPS = 1e-5
DROPOUT_P = 0.2  # nvFuser's dropout tests


# ---- kfuse definitions ----


def _rms_fwd(fd: FusionDefinition, x: Any, w: Any) -> tuple[Any, Any]:
    """y and rms as nvFuser's rmsnorm forward computes them (x, w already promoted)."""
    two = fd.define_scalar(2.0, dtype=DataType.Double)
    squares = fd.ops.pow(x, two)
    total = fd.ops.sum(squares, dims=[1], keepdim=False)
    total_b = fd.ops.broadcast_in_dim(total, shape=[fd.ops.size(x, 0), 1], broadcast_dims=[0])
    inv_n = fd.ops.reciprocal(fd.ops.size(x, 1))
    mean_sq = fd.ops.mul(total_b, inv_n)
    eps = fd.define_scalar(EPS, dtype=DataType.Double)
    rms = fd.ops.sqrt(fd.ops.add(mean_sq, eps))
    rms_full = fd.ops.broadcast_in_dim(rms, shape=fd.ops.shape(x), broadcast_dims=[0, 1])
    normed = fd.ops.mul(x, fd.ops.reciprocal(rms_full))
    w_full = fd.ops.broadcast_in_dim(w, shape=fd.ops.shape(x), broadcast_dims=[1])
    return fd.ops.mul(w_full, normed), rms


def _rms_bwd(fd: FusionDefinition, x: Any, rms: Any, g: Any, w: Any) -> tuple[Any, Any]:
    """dx and dw as nvFuser's rmsnorm backward computes them (x, g, w promoted)."""
    two = fd.define_scalar(2.0, dtype=DataType.Double)
    shape = fd.ops.shape(x)
    rows = [fd.ops.size(x, 0), 1]
    rms_full = fd.ops.broadcast_in_dim(rms, shape=shape, broadcast_dims=[0, 1])
    inv_rms = fd.ops.reciprocal(rms_full)
    xhat = fd.ops.mul(x, inv_rms)
    w_full = fd.ops.broadcast_in_dim(w, shape=shape, broadcast_dims=[1])
    g_xhat = fd.ops.mul(g, xhat)
    g_w = fd.ops.mul(g, w_full)
    dw = fd.ops.sum(g_xhat, dims=[0], keepdim=False)
    direct = fd.ops.mul(g_w, inv_rms)
    neg_gwx = fd.ops.mul(fd.ops.neg(g_w), x)
    scaled = fd.ops.mul(neg_gwx, fd.ops.reciprocal(fd.ops.pow(rms_full, two)))
    row_sum = fd.ops.sum(scaled, dims=[1], keepdim=False)
    row_sum_b = fd.ops.broadcast_in_dim(row_sum, shape=rows, broadcast_dims=[0])
    d_rms = fd.ops.mul(row_sum_b, fd.ops.reciprocal(fd.ops.mul(two, rms)))
    d_mean_sq = fd.ops.mul(d_rms, fd.ops.reciprocal(fd.ops.size(x, 1)))
    # nvFuser sums over the size-1 axis here, then broadcasts back.
    d_sq = fd.ops.sum(d_mean_sq, dims=[1], keepdim=False)
    d_sq_b = fd.ops.broadcast_in_dim(d_sq, shape=rows, broadcast_dims=[0])
    d_sq_full = fd.ops.broadcast_in_dim(d_sq_b, shape=shape, broadcast_dims=[0, 1])
    through_rms = fd.ops.mul(fd.ops.mul(d_sq_full, two), x)
    return fd.ops.add(direct, through_rms), dw


def _ln_fwd(fd: FusionDefinition, x: Any, w: Any, b: Any) -> tuple[Any, Any, Any]:
    """y, mean and invstd as nvFuser's layernorm forward computes them (promoted operands)."""
    var, mean = fd.ops.var_mean(x, dims=[1], correction=0, keepdim=False)
    rows = [fd.ops.size(x, 0), 1]
    var_b = fd.ops.broadcast_in_dim(var, shape=rows, broadcast_dims=[0])
    mean_b = fd.ops.broadcast_in_dim(mean, shape=rows, broadcast_dims=[0])
    eps = fd.define_scalar(EPS, dtype=DataType.Double)
    invstd = fd.ops.rsqrt(fd.ops.add(var_b, eps))
    shape = fd.ops.shape(x)
    centered = fd.ops.sub(x, fd.ops.broadcast_in_dim(mean_b, shape=shape, broadcast_dims=[0, 1]))
    xhat = fd.ops.mul(centered, fd.ops.broadcast_in_dim(invstd, shape=shape, broadcast_dims=[0, 1]))
    scaled = fd.ops.mul(xhat, fd.ops.broadcast_in_dim(w, shape=shape, broadcast_dims=[1]))
    y = fd.ops.add(scaled, fd.ops.broadcast_in_dim(b, shape=shape, broadcast_dims=[1]))
    return y, mean, invstd


def _ln_bwd(
    fd: FusionDefinition, x: Any, g: Any, mean: Any, invstd: Any, w: Any
) -> tuple[Any, Any, Any]:
    """dx, dw and db as nvFuser's layernorm backward computes them (promoted operands)."""
    rows = [fd.ops.size(x, 0), 1]
    shape = fd.ops.shape(x)
    mean_b = fd.ops.broadcast_in_dim(mean, shape=rows, broadcast_dims=[0])
    centered = fd.ops.sub(x, fd.ops.broadcast_in_dim(mean_b, shape=shape, broadcast_dims=[0, 1]))
    invstd_full = fd.ops.broadcast_in_dim(invstd, shape=shape, broadcast_dims=[0, 1])
    xhat = fd.ops.mul(centered, invstd_full)
    w_full = fd.ops.broadcast_in_dim(w, shape=shape, broadcast_dims=[1])
    db = fd.ops.sum(g, dims=[0], keepdim=False)
    g_w = fd.ops.mul(g, w_full)
    dw = fd.ops.sum(fd.ops.mul(g, xhat), dims=[0], keepdim=False)
    direct = fd.ops.mul(g_w, invstd_full)
    gw_centered = fd.ops.sum(fd.ops.mul(g_w, centered), dims=[1], keepdim=False)
    gw_centered_b = fd.ops.broadcast_in_dim(gw_centered, shape=rows, broadcast_dims=[0])
    neg_direct = fd.ops.sum(fd.ops.neg(direct), dims=[1], keepdim=False)
    neg_direct_b = fd.ops.broadcast_in_dim(neg_direct, shape=rows, broadcast_dims=[0])
    half = fd.define_scalar(-0.5, dtype=DataType.Double)
    three = fd.define_scalar(3.0, dtype=DataType.Double)
    d_var = fd.ops.mul(fd.ops.mul(half, gw_centered_b), fd.ops.pow(invstd, three))
    # nvFuser sums both over the size-1 axis, then broadcasts back.
    d_mean = fd.ops.sum(neg_direct_b, dims=[1], keepdim=False)
    d_var_r = fd.ops.sum(d_var, dims=[1], keepdim=False)
    d_var_full = fd.ops.broadcast_in_dim(
        fd.ops.broadcast_in_dim(d_var_r, shape=rows, broadcast_dims=[0]),
        shape=shape,
        broadcast_dims=[0, 1],
    )
    mean_full = fd.ops.broadcast_in_dim(
        fd.ops.broadcast_in_dim(mean, shape=rows, broadcast_dims=[0]),
        shape=shape,
        broadcast_dims=[0, 1],
    )
    two = fd.define_scalar(2.0, dtype=DataType.Double)
    via_var = fd.ops.mul(fd.ops.mul(two, d_var_full), fd.ops.sub(x, mean_full))
    inv_n = fd.ops.reciprocal(fd.ops.size(x, 1))
    via_var = fd.ops.mul(via_var, inv_n)
    d_mean_full = fd.ops.broadcast_in_dim(
        fd.ops.broadcast_in_dim(d_mean, shape=rows, broadcast_dims=[0]),
        shape=shape,
        broadcast_dims=[0, 1],
    )
    via_mean = fd.ops.mul(inv_n, d_mean_full)
    dx = fd.ops.add(direct, fd.ops.add(via_var, via_mean))
    return dx, dw, db


def _column(fd: FusionDefinition) -> Any:
    """A saved per-row statistic, [rows, 1] Float."""
    return fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=DataType.Float)


def _dropout_add(fd: FusionDefinition, x1: Any, x2: Any, keep: Any) -> Any:
    """x2 + dropout(x1) with the keep mask `keep` (Float or Bool), scaled by 1 / (1 - p)."""
    scale = fd.define_scalar(1 / (1 - DROPOUT_P), dtype=DataType.Double)
    return fd.ops.add(x2, fd.ops.mul(fd.ops.mul(x1, keep), scale))


def rmsnorm_fwd_definition(dtype: DataType) -> FusionDefinition:
    # from test_rmsnorm_fwd.py::rmsnorm_fwd_fusion
    with FusionDefinition() as fd:
        x = promote(fd, matrix(fd, dtype), dtype)
        w = promote(fd, vector(fd, dtype), dtype)
        y, rms = _rms_fwd(fd, x, w)
        fd.add_output(demote(fd, y, dtype))
        fd.add_output(rms)
    return fd


def rmsnorm_bwd_definition(dtype: DataType) -> FusionDefinition:
    # from test_rmsnorm_bwd.py::rmsnorm_bwd_fusion
    with FusionDefinition() as fd:
        x, rms, g, w = matrix(fd, dtype), _column(fd), matrix(fd, dtype), vector(fd, dtype)
        x, g, w = (promote(fd, t, dtype) for t in (x, g, w))
        dx, dw = _rms_bwd(fd, x, rms, g, w)
        fd.add_output(demote(fd, dx, dtype))
        fd.add_output(demote(fd, dw, dtype))
    return fd


def layernorm_fwd_definition(dtype: DataType) -> FusionDefinition:
    # from test_layernorm_fwd.py::layernorm_fwd_fusion
    with FusionDefinition() as fd:
        x, w, b = matrix(fd, dtype), vector(fd, dtype), vector(fd, dtype)
        x, w, b = (promote(fd, t, dtype) for t in (x, w, b))
        y, mean, invstd = _ln_fwd(fd, x, w, b)
        fd.add_output(demote(fd, y, dtype))
        fd.add_output(mean)
        fd.add_output(invstd)
    return fd


def layernorm_bwd_definition(dtype: DataType) -> FusionDefinition:
    # from test_layernorm_bwd.py::layernorm_bwd_fusion
    with FusionDefinition() as fd:
        x, g = matrix(fd, dtype), matrix(fd, dtype)
        mean = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        invstd = _column(fd)
        w = vector(fd, dtype)
        x, g, w = (promote(fd, t, dtype) for t in (x, g, w))
        dx, dw, db = _ln_bwd(fd, x, g, mean, invstd, w)
        for out in (dx, dw, db):
            fd.add_output(demote(fd, out, dtype))
    return fd


def dropout_rmsnorm_fwd_definition(dtype: DataType) -> FusionDefinition:
    # from test_dropout_rmsnorm_fwd.py::dropout_rmsnorm_fwd_fusion (mask as an input)
    with FusionDefinition() as fd:
        x1, x2 = matrix(fd, dtype), matrix(fd, dtype)
        mask = matrix(fd, DataType.Bool)
        w = vector(fd, dtype)
        keep = fd.ops.cast(mask, dtype=DataType.Float)
        x1, w, x2 = (promote(fd, t, dtype) for t in (x1, w, x2))
        y, rms = _rms_fwd(fd, _dropout_add(fd, x1, x2, keep), w)
        fd.add_output(demote(fd, y, dtype))
        fd.add_output(rms)
    return fd


def dropout_rmsnorm_bwd_definition(dtype: DataType) -> FusionDefinition:
    # from test_dropout_rmsnorm_bwd.py::dropout_rmsnorm_bwd_fusion
    with FusionDefinition() as fd:
        x1, x2 = matrix(fd, dtype), matrix(fd, dtype)
        mask = matrix(fd, DataType.Bool)
        rms, g, w = _column(fd), matrix(fd, dtype), vector(fd, dtype)
        x2, x1, mask, g, w = (promote(fd, t, dtype) for t in (x2, x1, mask, g, w))
        x = _dropout_add(fd, x1, x2, mask)
        dx2, dw = _rms_bwd(fd, x, rms, g, w)
        scale = fd.define_scalar(1 / (1 - DROPOUT_P), dtype=DataType.Double)
        dx1 = fd.ops.mul(fd.ops.mul(dx2, scale), mask)
        for out in (dx1, dx2, dw):
            fd.add_output(demote(fd, out, dtype))
    return fd


def dropout_layernorm_fwd_definition(dtype: DataType) -> FusionDefinition:
    # from test_dropout_layernorm_fwd.py::dropout_layernorm_fwd_fusion (mask as an input)
    with FusionDefinition() as fd:
        x1, x2 = matrix(fd, dtype), matrix(fd, dtype)
        mask = matrix(fd, DataType.Bool)
        w, b = vector(fd, dtype), vector(fd, dtype)
        keep = fd.ops.cast(mask, dtype=DataType.Float)
        b, w, x1, x2 = (promote(fd, t, dtype) for t in (b, w, x1, x2))
        y, mean, invstd = _ln_fwd(fd, _dropout_add(fd, x1, x2, keep), w, b)
        fd.add_output(demote(fd, y, dtype))
        fd.add_output(mean)
        fd.add_output(invstd)
    return fd


def dropout_layernorm_bwd_definition(dtype: DataType) -> FusionDefinition:
    # from test_dropout_layernorm_bwd.py::dropout_layernorm_bwd_fusion
    with FusionDefinition() as fd:
        mask = matrix(fd, DataType.Bool)
        mean = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        invstd = _column(fd)
        g, w = matrix(fd, dtype), vector(fd, dtype)
        x1, x2 = matrix(fd, dtype), matrix(fd, dtype)
        mask, g, w, x1, x2 = (promote(fd, t, dtype) for t in (mask, g, w, x1, x2))
        x = _dropout_add(fd, x1, x2, mask)
        dx2, dw, db = _ln_bwd(fd, x, g, mean, invstd, w)
        scale = fd.define_scalar(1 / (1 - DROPOUT_P), dtype=DataType.Double)
        dx1 = fd.ops.mul(fd.ops.mul(dx2, scale), mask)
        for out in (dx1, dx2, dw, db):
            fd.add_output(demote(fd, out, dtype))
    return fd


# ---- torch: the same math, float32 compute ----


def rmsnorm_fwd_torch(x: Any, w: Any) -> tuple[Any, Any]:
    import torch

    xf = x.float()
    rms = torch.sqrt(xf.pow(2).mean(1, keepdim=True) + EPS)
    return (w.float() * (xf / rms)).to(x.dtype), rms


def rmsnorm_bwd_torch(x: Any, rms: Any, g: Any, w: Any) -> tuple[Any, Any]:
    xf, gf = x.float(), g.float()
    xhat = xf / rms
    gw = gf * w.float()
    dx = (gw - xhat * (gw * xhat).mean(1, keepdim=True)) / rms
    return dx.to(x.dtype), (gf * xhat).sum(0).to(w.dtype)


def layernorm_fwd_torch(x: Any, w: Any, b: Any) -> tuple[Any, Any, Any]:
    import torch

    xf = x.float()
    var, mean = torch.var_mean(xf, dim=1, correction=0)
    invstd = torch.rsqrt(var + EPS).unsqueeze(1)
    y = (xf - mean.unsqueeze(1)) * invstd * w.float() + b.float()
    return y.to(x.dtype), mean, invstd


def layernorm_bwd_torch(x: Any, g: Any, mean: Any, invstd: Any, w: Any) -> tuple[Any, Any, Any]:
    xf, gf = x.float(), g.float()
    xhat = (xf - mean.unsqueeze(1)) * invstd
    gw = gf * w.float()
    dx = invstd * (gw - gw.mean(1, keepdim=True) - xhat * (gw * xhat).mean(1, keepdim=True))
    return dx.to(x.dtype), (gf * xhat).sum(0).to(w.dtype), gf.sum(0).to(w.dtype)


def _dropout_add_torch(x1: Any, x2: Any, mask: Any) -> Any:
    return x2.float() + x1.float() * mask * (1 / (1 - DROPOUT_P))


def dropout_rmsnorm_fwd_torch(x1: Any, x2: Any, mask: Any, w: Any) -> tuple[Any, Any]:
    import torch

    x = _dropout_add_torch(x1, x2, mask)
    rms = torch.sqrt(x.pow(2).mean(1, keepdim=True) + EPS)
    return (w.float() * (x / rms)).to(x1.dtype), rms


def dropout_rmsnorm_bwd_torch(
    x1: Any, x2: Any, mask: Any, rms: Any, g: Any, w: Any
) -> tuple[Any, Any, Any]:
    x = _dropout_add_torch(x1, x2, mask)
    gf = g.float()
    xhat = x / rms
    gw = gf * w.float()
    dx2 = (gw - xhat * (gw * xhat).mean(1, keepdim=True)) / rms
    dx1 = dx2 * (1 / (1 - DROPOUT_P)) * mask
    return dx1.to(x1.dtype), dx2.to(x1.dtype), (gf * xhat).sum(0).to(w.dtype)


def dropout_layernorm_fwd_torch(
    x1: Any, x2: Any, mask: Any, w: Any, b: Any
) -> tuple[Any, Any, Any]:
    import torch

    x = _dropout_add_torch(x1, x2, mask)
    var, mean = torch.var_mean(x, dim=1, correction=0)
    invstd = torch.rsqrt(var + EPS).unsqueeze(1)
    y = (x - mean.unsqueeze(1)) * invstd * w.float() + b.float()
    return y.to(x1.dtype), mean, invstd


def dropout_layernorm_bwd_torch(
    mask: Any, mean: Any, invstd: Any, g: Any, w: Any, x1: Any, x2: Any
) -> tuple[Any, Any, Any, Any]:
    x = _dropout_add_torch(x1, x2, mask)
    gf = g.float()
    xhat = (x - mean.unsqueeze(1)) * invstd
    gw = gf * w.float()
    dx2 = invstd * (gw - gw.mean(1, keepdim=True) - xhat * (gw * xhat).mean(1, keepdim=True))
    dx1 = dx2 * (1 / (1 - DROPOUT_P)) * mask
    dt = w.dtype
    return dx1.to(dt), dx2.to(dt), (gf * xhat).sum(0).to(dt), gf.sum(0).to(dt)


# ---- float64 references: the forward written out, the backward by autograd ----


def _rmsnorm64(x: Any, w: Any) -> tuple[Any, Any]:
    import torch

    rms = torch.sqrt(x.pow(2).mean(1, keepdim=True) + EPS)
    return w * (x / rms), rms


def _layernorm64(x: Any, w: Any, b: Any) -> tuple[Any, Any, Any]:
    import torch

    y = torch.nn.functional.layer_norm(x, (x.shape[1],), w, b, EPS)
    var, mean = torch.var_mean(x, dim=1, correction=0)
    return y, mean, (1 / torch.sqrt(var + EPS)).unsqueeze(1)


def _grads(fn: Any, g: Any, *leaves: Any) -> tuple[Any, ...]:
    """d(sum(fn(*leaves) * g)) / d(leaves) in float64, the leaves made from the inputs."""
    import torch

    with torch.enable_grad():
        xs = [t.detach().double().requires_grad_() for t in leaves]
        fn(*xs).backward(g.double())
    return tuple(t.grad for t in xs)


def _dropout_add64(x1: Any, x2: Any, mask: Any) -> Any:
    return x2 + x1 * mask.double() / (1 - DROPOUT_P)


def rmsnorm_fwd_reference(x: Any, w: Any) -> tuple[Any, Any]:
    return _rmsnorm64(x.double(), w.double())


def rmsnorm_bwd_reference(x: Any, rms: Any, g: Any, w: Any) -> tuple[Any, Any]:
    return _grads(lambda x, w: _rmsnorm64(x, w)[0], g, x, w)


def layernorm_fwd_reference(x: Any, w: Any, b: Any) -> tuple[Any, Any, Any]:
    return _layernorm64(x.double(), w.double(), b.double())


def layernorm_bwd_reference(x: Any, g: Any, mean: Any, invstd: Any, w: Any) -> tuple[Any, ...]:
    import torch

    b = torch.zeros_like(w)  # the bias's value does not change any gradient
    return _grads(lambda x, w, b: _layernorm64(x, w, b)[0], g, x, w, b)


def dropout_rmsnorm_fwd_reference(x1: Any, x2: Any, mask: Any, w: Any) -> tuple[Any, Any]:
    return _rmsnorm64(_dropout_add64(x1.double(), x2.double(), mask), w.double())


def dropout_rmsnorm_bwd_reference(
    x1: Any, x2: Any, mask: Any, rms: Any, g: Any, w: Any
) -> tuple[Any, ...]:
    return _grads(lambda x1, x2, w: _rmsnorm64(_dropout_add64(x1, x2, mask), w)[0], g, x1, x2, w)


def dropout_layernorm_fwd_reference(
    x1: Any, x2: Any, mask: Any, w: Any, b: Any
) -> tuple[Any, Any, Any]:
    return _layernorm64(_dropout_add64(x1.double(), x2.double(), mask), w.double(), b.double())


def dropout_layernorm_bwd_reference(
    mask: Any, mean: Any, invstd: Any, g: Any, w: Any, x1: Any, x2: Any
) -> tuple[Any, ...]:
    import torch

    b = torch.zeros_like(w)
    return _grads(
        lambda x1, x2, w, b: _layernorm64(_dropout_add64(x1, x2, mask), w, b)[0],
        g,
        x1,
        x2,
        w,
        b,
    )


# ---- inputs: random, in the fusions' order; saved statistics from the torch forward ----


def _rmsnorm_fwd_inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    return [randn(torch, shape, dtype, device), randn(torch, shape[1:], dtype, device)]


def _rmsnorm_bwd_inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    x, w = _rmsnorm_fwd_inputs(torch, shape, dtype, device)
    rms = rmsnorm_fwd_torch(x, w)[1]
    return [x, rms, randn(torch, shape, dtype, device), w]


def _layernorm_fwd_inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    vec = shape[1:]
    return [
        randn(torch, shape, dtype, device),
        randn(torch, vec, dtype, device),
        randn(torch, vec, dtype, device),
    ]


def _layernorm_bwd_inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    x, w, b = _layernorm_fwd_inputs(torch, shape, dtype, device)
    _, mean, invstd = layernorm_fwd_torch(x, w, b)
    return [x, randn(torch, shape, dtype, device), mean, invstd, w]


def _dropout_inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    """x1, x2 and the keep mask."""
    return [
        randn(torch, shape, dtype, device),
        randn(torch, shape, dtype, device),
        dropout_mask(torch, shape, DROPOUT_P, device),
    ]


def _dropout_rmsnorm_fwd_inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    return _dropout_inputs(torch, shape, dtype, device) + [randn(torch, shape[1:], dtype, device)]


def _dropout_rmsnorm_bwd_inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    x1, x2, mask, w = _dropout_rmsnorm_fwd_inputs(torch, shape, dtype, device)
    rms = dropout_rmsnorm_fwd_torch(x1, x2, mask, w)[1]
    return [x1, x2, mask, rms, randn(torch, shape, dtype, device), w]


def _dropout_layernorm_fwd_inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    vec = shape[1:]
    return _dropout_inputs(torch, shape, dtype, device) + [
        randn(torch, vec, dtype, device),
        randn(torch, vec, dtype, device),
    ]


def _dropout_layernorm_bwd_inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    x1, x2, mask, w, b = _dropout_layernorm_fwd_inputs(torch, shape, dtype, device)
    _, mean, invstd = dropout_layernorm_fwd_torch(x1, x2, mask, w, b)
    return [mask, mean, invstd, randn(torch, shape, dtype, device), w, x1, x2]


_case = functools.partial(sweep_case, sweep=(NORM_2D, NORM_2D_QUICK, TEST_2D, GPU_TEST_2D))


CASES = [
    _case(
        "rmsnorm",
        "rmsnorm_fwd",
        "test_rmsnorm_fwd.py::rmsnorm_fwd_fusion",
        rmsnorm_fwd_definition,
        (rmsnorm_fwd_torch, rmsnorm_fwd_reference, _rmsnorm_fwd_inputs),
    ),
    _case(
        "rmsnorm",
        "rmsnorm_bwd",
        "test_rmsnorm_bwd.py::rmsnorm_bwd_fusion",
        rmsnorm_bwd_definition,
        (rmsnorm_bwd_torch, rmsnorm_bwd_reference, _rmsnorm_bwd_inputs),
    ),
    _case(
        "rmsnorm",
        "dropout_rmsnorm_fwd",
        "test_dropout_rmsnorm_fwd.py::dropout_rmsnorm_fwd_fusion",
        dropout_rmsnorm_fwd_definition,
        (dropout_rmsnorm_fwd_torch, dropout_rmsnorm_fwd_reference, _dropout_rmsnorm_fwd_inputs),
    ),
    _case(
        "rmsnorm",
        "dropout_rmsnorm_bwd",
        "test_dropout_rmsnorm_bwd.py::dropout_rmsnorm_bwd_fusion",
        dropout_rmsnorm_bwd_definition,
        (dropout_rmsnorm_bwd_torch, dropout_rmsnorm_bwd_reference, _dropout_rmsnorm_bwd_inputs),
    ),
    _case(
        "layernorm",
        "layernorm_fwd",
        "test_layernorm_fwd.py::layernorm_fwd_fusion",
        layernorm_fwd_definition,
        (layernorm_fwd_torch, layernorm_fwd_reference, _layernorm_fwd_inputs),
    ),
    _case(
        "layernorm",
        "layernorm_bwd",
        "test_layernorm_bwd.py::layernorm_bwd_fusion",
        layernorm_bwd_definition,
        (layernorm_bwd_torch, layernorm_bwd_reference, _layernorm_bwd_inputs),
    ),
    _case(
        "layernorm",
        "dropout_layernorm_fwd",
        "test_dropout_layernorm_fwd.py::dropout_layernorm_fwd_fusion",
        dropout_layernorm_fwd_definition,
        (
            dropout_layernorm_fwd_torch,
            dropout_layernorm_fwd_reference,
            _dropout_layernorm_fwd_inputs,
        ),
    ),
    _case(
        "layernorm",
        "dropout_layernorm_bwd",
        "test_dropout_layernorm_bwd.py::dropout_layernorm_bwd_fusion",
        dropout_layernorm_bwd_definition,
        (
            dropout_layernorm_bwd_torch,
            dropout_layernorm_bwd_reference,
            _dropout_layernorm_bwd_inputs,
        ),
    ),
]
