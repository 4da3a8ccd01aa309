"""Pointwise fusions of [batch, hidden] inputs, one family per nvFuser file: GELU (tanh form)
of x + bias forward and backward (test_gelu_fwd.py, test_gelu_bwd.py), SiLU(x) * y forward and
backward (test_silu_mul_{fwd,bwd}.py), relu(x * scale + bias) forward with its mask and
backward (test_scale_bias_relu_{fwd,bwd}.py), x * x (test_pointwise_mul.py), a vector added
along either axis of a contiguous input (test_broadcast_add_fwd.py; its strided form is
transpose.py's bcast_add_strided_dim0, whose torch function and reference it shares), and
GELU's backward summed over either axis, a pointwise + reduction fusion
(test_gelu_bwd_reduction.py); and nvFuser's many-pointwise-ops host benchmark
(benchmarks/python/host/test_many_pointwise_ops.py: a = cos(a) + sin(a), n times, on the sum
of two vectors), whose kernel is compute-bound: its time is the math's, not the memory's.

The definitions keep nvFuser's spelling: GELU's constants as it writes them (0.79788456 for
sqrt(2 / pi), 0.1070322243 for 3 * 0.044715 * sqrt(2 / pi)), the bias broadcast to [1, hidden]
and added with an implicit broadcast, scale-bias-relu's mask taken after the sum is rounded to
the input dtype, the broadcast add's two broadcasts (to [1, n] or [m, 1], then to x's shape).
API differences: fd.ops.size(t, i) / fd.ops.shape(t) for t.size(i) / t.shape(); no is_cpu;
sum's dtype=DataType.Null is the default; every scalar names dtype=DataType.Double (nvFuser's
GELU scalars leave it out and get Double, as kfuse's would).

nvFuser's benchmarks pass biases and scales of ones; here every input is random (never all
ones or zeros), so that a wrong broadcast cannot pass. scale_bias_relu_fwd's inputs are
rounded to bf16 values in either dtype, so that its Bool mask, compared exactly with the
float64 reference's, cannot flip where a float32 peer rounds x * scale before adding bias.
"""

from __future__ import annotations

import functools
from typing import Any

from kfuse import DataType, FusionDefinition
from models.case import Shape, demote, matrix, promote, randn, sweep_case, vector
from models.sweeps import GPU_TEST_2D, POINTWISE, POINTWISE_QUICK, TEST_2D
from models.transpose import bcast_add_reference, bcast_add_torch

SQRT_2_OVER_PI = 0.79788456  # nvFuser's truncation
GELU_CUBIC = 0.044715
GELU_CUBIC_GRAD = 0.1070322243  # 3 * GELU_CUBIC * SQRT_2_OVER_PI, as nvFuser writes it


# ---- kfuse definitions ----


def _double(fd: FusionDefinition, value: float) -> Any:
    return fd.define_scalar(value, dtype=DataType.Double)


def _add_bias(fd: FusionDefinition, x: Any, bias: Any) -> Any:
    """x + bias, the bias broadcast to [1, hidden] first (promoted operands)."""
    row = fd.ops.broadcast_in_dim(bias, shape=[1, fd.ops.size(x, -1)], broadcast_dims=[1])
    return fd.ops.add(x, row)


def _gelu_bwd(fd: FusionDefinition, x: Any, grad: Any, bias: Any) -> Any:
    """grad * gelu'(x + bias) in the order nvFuser's backward computes it (promoted)."""
    u = _add_bias(fd, x, bias)
    one, half = _double(fd, 1.0), _double(fd, 0.5)
    inner = fd.ops.mul(
        fd.ops.mul(u, _double(fd, SQRT_2_OVER_PI)),
        fd.ops.add(one, fd.ops.mul(fd.ops.mul(u, _double(fd, GELU_CUBIC)), u)),
    )
    t = fd.ops.tanh(inner)
    sech2 = fd.ops.add(fd.ops.neg(fd.ops.mul(t, t)), one)
    d_inner = fd.ops.add(
        fd.ops.mul(fd.ops.mul(u, _double(fd, GELU_CUBIC_GRAD)), u), _double(fd, SQRT_2_OVER_PI)
    )
    via_tanh = fd.ops.mul(fd.ops.mul(u, half), fd.ops.mul(sech2, d_inner))
    direct = fd.ops.mul(fd.ops.add(t, one), half)
    return fd.ops.mul(grad, fd.ops.add(via_tanh, direct))


def gelu_fwd_definition(dtype: DataType) -> FusionDefinition:
    # from test_gelu_fwd.py::gelu_fwd_fusion
    with FusionDefinition() as fd:
        x = promote(fd, matrix(fd, dtype), dtype)
        bias = promote(fd, vector(fd, dtype), dtype)
        u = _add_bias(fd, x, bias)
        one = _double(fd, 1.0)
        cubic = fd.ops.add(fd.ops.mul(fd.ops.mul(_double(fd, GELU_CUBIC), u), u), one)
        t = fd.ops.tanh(fd.ops.mul(fd.ops.mul(_double(fd, SQRT_2_OVER_PI), u), cubic))
        y = fd.ops.mul(_double(fd, 0.5), fd.ops.mul(fd.ops.add(one, t), u))
        fd.add_output(demote(fd, y, dtype))
    return fd


def gelu_bwd_definition(dtype: DataType) -> FusionDefinition:
    # from test_gelu_bwd.py::gelu_bwd_fusion
    with FusionDefinition() as fd:
        x, grad, bias = matrix(fd, dtype), matrix(fd, dtype), vector(fd, dtype)
        x, grad, bias = (promote(fd, t, dtype) for t in (x, grad, bias))
        fd.add_output(demote(fd, _gelu_bwd(fd, x, grad, bias), dtype))
    return fd


def many_pointwise_ops_definition(iterations: int) -> Any:
    def define(dtype: DataType) -> FusionDefinition:
        with FusionDefinition() as fd:
            x, y = vector(fd, dtype), vector(fd, dtype)
            a = fd.ops.add(fd.ops.cast(x, DataType.Float), fd.ops.cast(y, DataType.Float))
            for _ in range(iterations):
                a = fd.ops.add(fd.ops.cos(a), fd.ops.sin(a))
            fd.add_output(fd.ops.cast(a, dtype))
        return fd

    return define


def gelu_bwd_reduction_definition(axis: int) -> Any:
    def define(dtype: DataType) -> FusionDefinition:
        # from test_gelu_bwd_reduction.py::gelu_bwd_reduction_fusion
        with FusionDefinition() as fd:
            x, grad, bias = matrix(fd, dtype), matrix(fd, dtype), vector(fd, dtype)
            x, grad, bias = (promote(fd, t, dtype) for t in (x, grad, bias))
            dx = _gelu_bwd(fd, x, grad, bias)
            fd.add_output(demote(fd, fd.ops.sum(dx, dims=[axis], keepdim=False), dtype))
        return fd

    return define


def _sigmoid(fd: FusionDefinition, x: Any) -> Any:
    """1 / (1 + exp(-x)), spelled as nvFuser's SiLU fusions spell it."""
    return fd.ops.reciprocal(fd.ops.add(_double(fd, 1.0), fd.ops.exp(fd.ops.neg(x))))


def silu_mul_fwd_definition(dtype: DataType) -> FusionDefinition:
    # from test_silu_mul_fwd.py::silu_mul_fwd_fusion
    with FusionDefinition() as fd:
        x = promote(fd, matrix(fd, dtype), dtype)
        y = promote(fd, matrix(fd, dtype), dtype)
        out = fd.ops.mul(fd.ops.mul(x, _sigmoid(fd, x)), y)
        fd.add_output(demote(fd, out, dtype))
    return fd


def silu_mul_bwd_definition(dtype: DataType) -> FusionDefinition:
    # from test_silu_mul_bwd.py::silu_mul_bwd_fusion
    with FusionDefinition() as fd:
        grad, x, y = matrix(fd, dtype), matrix(fd, dtype), matrix(fd, dtype)
        grad, x, y = (promote(fd, t, dtype) for t in (grad, x, y))
        e = fd.ops.exp(fd.ops.neg(x))
        sig = fd.ops.reciprocal(fd.ops.add(_double(fd, 1.0), e))
        gy = fd.ops.mul(grad, y)
        dy = fd.ops.mul(grad, fd.ops.mul(x, sig))
        # dx = gy * sig - (1 * (-(gy * x) * sig * sig) * e), as nvFuser orders it:
        # d sigmoid / dx = e * sig^2
        through_sig = fd.ops.mul(fd.ops.mul(fd.ops.neg(fd.ops.mul(gy, x)), sig), sig)
        through_sig = fd.ops.mul(fd.ops.mul(_double(fd, 1.0), through_sig), e)
        dx = fd.ops.add(fd.ops.mul(gy, sig), fd.ops.neg(through_sig))
        fd.add_output(demote(fd, dy, dtype))
        fd.add_output(demote(fd, dx, dtype))
    return fd


def scale_bias_relu_fwd_definition(dtype: DataType) -> FusionDefinition:
    # from test_scale_bias_relu_fwd.py::sbr_fwd_fusion
    with FusionDefinition() as fd:
        bias, scale, x = vector(fd, dtype), vector(fd, dtype), matrix(fd, dtype)
        bias, scale, x = (promote(fd, t, dtype) for t in (bias, scale, x))
        shape = fd.ops.shape(x)
        scaled = fd.ops.mul(x, fd.ops.broadcast_in_dim(scale, shape=shape, broadcast_dims=[1]))
        y = fd.ops.add(scaled, fd.ops.broadcast_in_dim(bias, shape=shape, broadcast_dims=[1]))
        y = demote(fd, y, dtype)  # nvFuser rounds before the comparison
        zero = _double(fd, 0.0)
        mask = fd.ops.gt(y, zero)
        fd.add_output(mask)
        fd.add_output(fd.ops.where(mask, y, zero))
    return fd


def scale_bias_relu_bwd_definition(dtype: DataType) -> FusionDefinition:
    # from test_scale_bias_relu_bwd.py::sbr_bwd_fusion
    with FusionDefinition() as fd:
        scale = vector(fd, dtype)
        mask = matrix(fd, DataType.Bool)
        grad = matrix(fd, dtype)
        scale, grad = promote(fd, scale, dtype), promote(fd, grad, dtype)
        scale_full = fd.ops.broadcast_in_dim(scale, shape=fd.ops.shape(grad), broadcast_dims=[1])
        dx = fd.ops.mul(fd.ops.where(mask, grad, _double(fd, 0.0)), scale_full)
        fd.add_output(demote(fd, dx, dtype))
    return fd


def pointwise_mul_definition(dtype: DataType) -> FusionDefinition:
    # from test_pointwise_mul.py::pointwise_mul_fusion
    with FusionDefinition() as fd:
        x = promote(fd, matrix(fd, dtype), dtype)
        fd.add_output(demote(fd, fd.ops.mul(x, x), dtype))
    return fd


def bcast_add_contiguous_definition(bcast_axis: int) -> Any:
    def define(dtype: DataType) -> FusionDefinition:
        # from test_broadcast_add_fwd.py::bcast_add_fusion (contiguous=True: stride_order [1, 0])
        with FusionDefinition() as fd:
            v = fd.define_tensor(shape=[-1], contiguity=[True], dtype=dtype, stride_order=[0])
            x = fd.define_tensor(
                shape=[-1, -1], contiguity=[True, True], dtype=dtype, stride_order=[1, 0]
            )
            kept = [fd.ops.size(x, 0), fd.ops.size(x, 1)]
            kept[bcast_axis] = 1
            b = fd.ops.broadcast_in_dim(v, shape=kept, broadcast_dims=[1 - bcast_axis])
            b = fd.ops.broadcast_in_dim(b, shape=fd.ops.shape(x), broadcast_dims=[0, 1])
            out = fd.ops.add(promote(fd, x, dtype), promote(fd, b, dtype))
            fd.add_output(demote(fd, out, dtype))
        return fd

    return define


# ---- torch: the same math, float32 compute ----


def gelu_fwd_torch(x: Any, bias: Any) -> tuple[Any]:
    import torch

    y = torch.nn.functional.gelu(x.float() + bias.float(), approximate="tanh")
    return (y.to(x.dtype),)


def _gelu_bwd_torch(x: Any, grad: Any, bias: Any) -> Any:
    """dx in float32: the kernel autograd runs for gelu(x + bias, approximate='tanh')."""
    import torch

    return torch.ops.aten.gelu_backward(grad.float(), x.float() + bias.float(), approximate="tanh")


def gelu_bwd_torch(x: Any, grad: Any, bias: Any) -> tuple[Any]:
    return (_gelu_bwd_torch(x, grad, bias).to(x.dtype),)


def gelu_bwd_reduction_torch(axis: int) -> Any:
    def fn(x: Any, grad: Any, bias: Any) -> tuple[Any]:
        return (_gelu_bwd_torch(x, grad, bias).sum(axis).to(x.dtype),)

    fn.__name__ = f"gelu_bwd_reduction_dim{axis}"
    return fn


def many_pointwise_ops_torch(iterations: int) -> Any:
    def fn(x: Any, y: Any) -> tuple[Any]:
        a = x.float() + y.float()
        for _ in range(iterations):
            a = a.cos() + a.sin()
        return (a.to(x.dtype),)

    return fn


def silu_mul_fwd_torch(x: Any, y: Any) -> tuple[Any]:
    import torch

    return ((torch.nn.functional.silu(x.float()) * y.float()).to(x.dtype),)


def silu_mul_bwd_torch(grad: Any, x: Any, y: Any) -> tuple[Any, Any]:
    import torch

    gf, xf = grad.float(), x.float()
    dy = gf * torch.nn.functional.silu(xf)
    dx = torch.ops.aten.silu_backward(gf * y.float(), xf)
    return dy.to(x.dtype), dx.to(x.dtype)


def scale_bias_relu_fwd_torch(bias: Any, scale: Any, x: Any) -> tuple[Any, Any]:
    import torch

    y = (x.float() * scale.float() + bias.float()).to(x.dtype)
    return y > 0, torch.relu(y)


def scale_bias_relu_bwd_torch(scale: Any, mask: Any, grad: Any) -> tuple[Any]:
    import torch

    dx = torch.where(mask, grad.float(), 0.0) * scale.float()
    return (dx.to(grad.dtype),)


def pointwise_mul_torch(x: Any) -> tuple[Any]:
    xf = x.float()
    return ((xf * xf).to(x.dtype),)


# ---- float64 references: forwards written out, backwards by autograd ----


def _gelu64(x: Any, bias: Any) -> Any:
    import torch

    return torch.nn.functional.gelu(x + bias, approximate="tanh")


def _silu_mul64(x: Any, y: Any) -> Any:
    import torch

    return torch.nn.functional.silu(x) * y


def _grads(fn: Any, grad: Any, *leaves: Any) -> tuple[Any, ...]:
    """d(sum(fn(*leaves) * grad)) / d(leaves) in float64."""
    import torch

    with torch.enable_grad():
        xs = [t.detach().double().requires_grad_() for t in leaves]
        fn(*xs).backward(grad.double())
    return tuple(t.grad for t in xs)


def gelu_fwd_reference(x: Any, bias: Any) -> tuple[Any]:
    return (_gelu64(x.double(), bias.double()),)


def gelu_bwd_reference(x: Any, grad: Any, bias: Any) -> tuple[Any]:
    return (_grads(lambda x: _gelu64(x, bias.double()), grad, x)[0],)


def gelu_bwd_reduction_reference(axis: int) -> Any:
    def fn(x: Any, grad: Any, bias: Any) -> tuple[Any]:
        return (gelu_bwd_reference(x, grad, bias)[0].sum(axis),)

    return fn


def many_pointwise_ops_reference(iterations: int) -> Any:
    def fn(x: Any, y: Any) -> tuple[Any]:
        a = x.double() + y.double()
        for _ in range(iterations):
            a = a.cos() + a.sin()
        return (a,)

    return fn


def silu_mul_fwd_reference(x: Any, y: Any) -> tuple[Any]:
    return (_silu_mul64(x.double(), y.double()),)


def silu_mul_bwd_reference(grad: Any, x: Any, y: Any) -> tuple[Any, Any]:
    dx, dy = _grads(_silu_mul64, grad, x, y)
    return dy, dx  # nvFuser's order: y's gradient first


def scale_bias_relu_fwd_reference(bias: Any, scale: Any, x: Any) -> tuple[Any, Any]:
    import torch

    y = x.double() * scale.double() + bias.double()
    return y > 0, torch.relu(y)


def scale_bias_relu_bwd_reference(scale: Any, mask: Any, grad: Any) -> tuple[Any]:
    import torch

    return (torch.where(mask, grad.double(), 0.0) * scale.double(),)


def pointwise_mul_reference(x: Any) -> tuple[Any]:
    x64 = x.double()
    return (x64 * x64,)


# ---- inputs: random, in the fusions' order ----


def _bias_inputs(n: int) -> Any:
    """n [batch, hidden] tensors, then the [hidden] bias (GELU's x, grad, bias)."""

    def make(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
        matrices = [randn(torch, shape, dtype, device) for _ in range(n)]
        return matrices + [randn(torch, shape[1:], dtype, device)]

    return make


def _matrices(n: int) -> Any:
    def make(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
        return [randn(torch, shape, dtype, device) for _ in range(n)]

    return make


def _bf16_exact(torch: Any, shape: Shape, dtype: Any, device: str) -> Any:
    """randn rounded to bf16, in `dtype`: x * scale is then exact in float32 and the sign of
    x * scale + bias (the mask, compared exactly) is the same however a peer rounds or fuses
    the multiply-add, in float32 as in bf16."""
    return randn(torch, shape, torch.bfloat16, device).to(dtype)


def _scale_bias_relu_fwd_inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    vec = shape[1:]
    return [
        _bf16_exact(torch, vec, dtype, device),
        _bf16_exact(torch, vec, dtype, device),
        _bf16_exact(torch, shape, dtype, device),
    ]


def _scale_bias_relu_bwd_inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    """scale, the forward's mask (x * scale + bias > 0, as nvFuser draws it) and grad."""
    bias, scale, x = _scale_bias_relu_fwd_inputs(torch, shape, dtype, device)
    mask = scale_bias_relu_fwd_reference(bias, scale, x)[0]
    return [scale, mask, randn(torch, shape, dtype, device)]


def _bcast_contiguous_inputs(bcast_axis: int) -> Any:
    def make(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
        v = randn(torch, (shape[1 - bcast_axis],), dtype, device)
        return [v, randn(torch, shape, dtype, device)]

    return make


_case = functools.partial(sweep_case, sweep=(POINTWISE, POINTWISE_QUICK, TEST_2D, GPU_TEST_2D))


CASES = [
    _case(
        "gelu_fwd",
        "gelu_fwd",
        "test_gelu_fwd.py::gelu_fwd_fusion",
        gelu_fwd_definition,
        (gelu_fwd_torch, gelu_fwd_reference, _bias_inputs(1)),
    ),
    _case(
        "gelu_bwd",
        "gelu_bwd",
        "test_gelu_bwd.py::gelu_bwd_fusion",
        gelu_bwd_definition,
        (gelu_bwd_torch, gelu_bwd_reference, _bias_inputs(2)),
    ),
    _case(
        "silu_mul_fwd",
        "silu_mul_fwd",
        "test_silu_mul_fwd.py::silu_mul_fwd_fusion",
        silu_mul_fwd_definition,
        (silu_mul_fwd_torch, silu_mul_fwd_reference, _matrices(2)),
    ),
    _case(
        "silu_mul_bwd",
        "silu_mul_bwd",
        "test_silu_mul_bwd.py::silu_mul_bwd_fusion",
        silu_mul_bwd_definition,
        (silu_mul_bwd_torch, silu_mul_bwd_reference, _matrices(3)),
    ),
    _case(
        "scale_bias_relu_fwd",
        "scale_bias_relu_fwd",
        "test_scale_bias_relu_fwd.py::sbr_fwd_fusion",
        scale_bias_relu_fwd_definition,
        (
            scale_bias_relu_fwd_torch,
            scale_bias_relu_fwd_reference,
            _scale_bias_relu_fwd_inputs,
        ),
    ),
    _case(
        "scale_bias_relu_bwd",
        "scale_bias_relu_bwd",
        "test_scale_bias_relu_bwd.py::sbr_bwd_fusion",
        scale_bias_relu_bwd_definition,
        (
            scale_bias_relu_bwd_torch,
            scale_bias_relu_bwd_reference,
            _scale_bias_relu_bwd_inputs,
        ),
    ),
    _case(
        "pointwise_mul",
        "pointwise_mul",
        "test_pointwise_mul.py::pointwise_mul_fusion",
        pointwise_mul_definition,
        (pointwise_mul_torch, pointwise_mul_reference, _matrices(1)),
    ),
    *(
        _case(
            "broadcast_add_fwd",
            f"bcast_add_contiguous_dim{axis}",
            "test_broadcast_add_fwd.py::bcast_add_fusion",
            bcast_add_contiguous_definition(axis),
            (
                bcast_add_torch(axis, "contiguous"),
                bcast_add_reference(axis),
                _bcast_contiguous_inputs(axis),
            ),
        )
        for axis in (0, 1)
    ),
    *(
        _case(
            "gelu_bwd_reduction",
            f"gelu_bwd_reduction_dim{axis}",
            "test_gelu_bwd_reduction.py::gelu_bwd_reduction_fusion",
            gelu_bwd_reduction_definition(axis),
            (
                gelu_bwd_reduction_torch(axis),
                gelu_bwd_reduction_reference(axis),
                _bias_inputs(2),
            ),
        )
        for axis in (0, 1)
    ),
    *(
        sweep_case(
            "many_pointwise_ops",
            f"many_pointwise_ops_{iterations}",
            "test_many_pointwise_ops.py::pointwise_ops_fusion",
            many_pointwise_ops_definition(iterations),
            (
                many_pointwise_ops_torch(iterations),
                many_pointwise_ops_reference(iterations),
                _matrices(2),
            ),
            # nvFuser's host benchmark runs [13]; its kernel's cost shows at 2^24 values
            sweep=(((1 << 24,),), ((1 << 24,),), (13,), (1 << 20,)),
        )
        for iterations in (2, 8)
    ),
]
