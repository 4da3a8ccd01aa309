"""Normalization backward fusions written the way nvFuser's Python benchmarks write them
(explicit backward math from saved statistics; bf16 cast to float and back), shared by the
inner_outer_persistent tests on the emulator and on the GPU, with their inputs; and the
tutorial's var_mean normalization, which the cluster tests of both pin to clusters."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from kfuse.dtypes import DataType
from kfuse.frontend import FusionDefinition

BF16 = ml_dtypes.bfloat16


def rms_norm_backward(dtype: DataType = DataType.BFloat16) -> FusionDefinition:
    """Inputs x [N, H], rms [N, 1] (float), grad [N, H], weight [H]; outputs dx, dweight."""
    # from benchmarks/python/test_rmsnorm_bwd.py::rmsnorm_bwd_fusion
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype)
        rms = fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=DataType.Float)
        grad = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype)
        weight = fd.define_tensor(shape=[-1], contiguity=[True], dtype=dtype)
        two = fd.define_scalar(2.0, dtype=DataType.Double)
        x, grad, weight = (fd.ops.cast(t, DataType.Float) for t in (x, grad, weight))
        full = fd.ops.shape(x)
        rms_b = fd.ops.broadcast_in_dim(rms, shape=full, broadcast_dims=[0, 1])
        inv = fd.ops.reciprocal(rms_b)
        x_hat = fd.ops.mul(x, inv)
        weight_b = fd.ops.broadcast_in_dim(weight, shape=full, broadcast_dims=[1])
        dweight = fd.ops.sum(fd.ops.mul(grad, x_hat), dims=[0])
        gw = fd.ops.mul(grad, weight_b)
        term = fd.ops.mul(fd.ops.mul(fd.ops.neg(gw), x), fd.ops.reciprocal(fd.ops.pow(rms_b, two)))
        row = fd.ops.sum(term, dims=[1])
        rows = [fd.ops.size(x, 0), 1]
        row_b = fd.ops.broadcast_in_dim(row, shape=rows, broadcast_dims=[0])
        scaled = fd.ops.mul(row_b, fd.ops.reciprocal(fd.ops.mul(two, rms)))
        scaled = fd.ops.mul(scaled, fd.ops.reciprocal(fd.ops.size(x, 1)))
        # nvFuser sums the keepdim'd [N, 1] value over its size-1 axis (a squeeze).
        again = fd.ops.broadcast_in_dim(
            fd.ops.sum(scaled, dims=[1]), shape=rows, broadcast_dims=[0]
        )
        again = fd.ops.broadcast_in_dim(again, shape=full, broadcast_dims=[0, 1])
        dx = fd.ops.add(fd.ops.mul(gw, inv), fd.ops.mul(fd.ops.mul(again, two), x))
        fd.add_output(fd.ops.cast(dx, dtype))
        fd.add_output(fd.ops.cast(dweight, dtype))
    return fd


def layer_norm_backward(dtype: DataType = DataType.BFloat16) -> FusionDefinition:
    """Inputs x, grad [N, H], mean [N] and invstd [N, 1] (float), weight [H]; outputs dx,
    dweight, dbias."""
    # from benchmarks/python/test_layernorm_bwd.py::layernorm_bwd_fusion
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype)
        grad = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype)
        mean = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        invstd = fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=DataType.Float)
        weight = fd.define_tensor(shape=[-1], contiguity=[True], dtype=dtype)
        x, grad, weight = (fd.ops.cast(t, DataType.Float) for t in (x, grad, weight))
        rows, full = [fd.ops.size(x, 0), 1], fd.ops.shape(x)
        mean_b = fd.ops.broadcast_in_dim(
            fd.ops.broadcast_in_dim(mean, shape=rows, broadcast_dims=[0]),
            shape=full,
            broadcast_dims=[0, 1],
        )
        centered = fd.ops.sub(x, mean_b)
        invstd_b = fd.ops.broadcast_in_dim(invstd, shape=full, broadcast_dims=[0, 1])
        x_hat = fd.ops.mul(centered, invstd_b)
        weight_b = fd.ops.broadcast_in_dim(weight, shape=full, broadcast_dims=[1])
        dbias = fd.ops.sum(grad, dims=[0])
        gw = fd.ops.mul(grad, weight_b)
        dweight = fd.ops.sum(fd.ops.mul(grad, x_hat), dims=[0])
        a = fd.ops.mul(gw, invstd_b)
        s1 = fd.ops.sum(fd.ops.mul(gw, centered), dims=[1])
        s2 = fd.ops.sum(fd.ops.neg(a), dims=[1])
        s1_b = fd.ops.broadcast_in_dim(s1, shape=rows, broadcast_dims=[0])
        s2_b = fd.ops.broadcast_in_dim(s2, shape=rows, broadcast_dims=[0])
        t = fd.ops.mul(fd.ops.mul(-0.5, s1_b), fd.ops.pow(invstd, 3.0))
        t = fd.ops.broadcast_in_dim(
            fd.ops.broadcast_in_dim(fd.ops.sum(t, dims=[1]), shape=rows, broadcast_dims=[0]),
            shape=full,
            broadcast_dims=[0, 1],
        )
        inv_h = fd.ops.reciprocal(fd.ops.size(x, 1))
        dx = fd.ops.mul(fd.ops.mul(fd.ops.mul(2.0, t), centered), inv_h)
        s2_full = fd.ops.broadcast_in_dim(
            fd.ops.broadcast_in_dim(fd.ops.sum(s2_b, dims=[1]), shape=rows, broadcast_dims=[0]),
            shape=full,
            broadcast_dims=[0, 1],
        )
        dx = fd.ops.add(a, fd.ops.add(dx, fd.ops.mul(inv_h, s2_full)))
        fd.add_output(fd.ops.cast(dx, dtype))
        fd.add_output(fd.ops.cast(dweight, dtype))
        fd.add_output(fd.ops.cast(dbias, dtype))
    return fd


def shared_column_input() -> FusionDefinition:
    """Row sums, and three column reductions of one input: a sum written twice and a max
    (a GPU campaign found the first of two such column sums left at zero: every column
    reduction of an input needs its own accumulator)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        fd.add_output(fd.ops.sum(x, dims=[1]))
        fd.add_output(fd.ops.sum(x, dims=[0]))
        fd.add_output(fd.ops.sum(x, dims=[0]))
        fd.add_output(fd.ops.max(x, dims=[0]))
    return fd


def rms_norm_backward_inputs(
    n: int, h: int, dtype: Any = BF16, seed: int = 0, module: Any = np
) -> list[Any]:
    """NumPy inputs (module=np), or CuPy's with module=cupy after conversion by the caller."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, h)).astype(dtype)
    grad = rng.standard_normal((n, h)).astype(dtype)
    weight = rng.standard_normal(h).astype(dtype)
    rms = np.sqrt((x.astype(np.float64) ** 2).mean(1, keepdims=True) + 1e-5).astype(np.float32)
    return [x, rms, grad, weight]


def layer_norm_backward_inputs(n: int, h: int, dtype: Any = BF16, seed: int = 0) -> list[Any]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, h)).astype(dtype)
    grad = rng.standard_normal((n, h)).astype(dtype)
    weight = rng.standard_normal(h).astype(dtype)
    xd = x.astype(np.float64)
    mean = xd.mean(1).astype(np.float32)
    invstd = (1 / np.sqrt(xd.var(1) + 1e-5)).astype(np.float32)[:, None]
    return [x, grad, mean, invstd, weight]


def norm_backward_on_h200(backward: str, n: int, h: int) -> tuple[FusionDefinition, Any]:
    """The RMS ("rms") or layer ("layer") norm backward and the RuntimeInfo of a call with
    inputs of n rows of h on the H200 profile (shapes only: nothing of that size is made)."""
    from planning import gpu_info

    if backward == "rms":
        fd, make = rms_norm_backward(), rms_norm_backward_inputs
    else:
        fd, make = layer_norm_backward(), layer_norm_backward_inputs
    # The inputs' shapes at [n, h], from those of a [2, 8] call (rows 2, columns 8).
    shapes = [tuple({2: n, 8: h}.get(d, d) for d in a.shape) for a in make(2, 8)]
    return fd, gpu_info(fd, shapes, "h200")


def var_mean_normalization() -> FusionDefinition:
    """The tutorial's layer norm from var_mean (a Welford): outputs the normalized rows and
    their variance."""
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1])
        var, mean = fd.ops.var_mean(t, [1], correction=0, keepdim=True)
        fd.add_output(fd.ops.mul(fd.ops.sub(t, mean), fd.ops.rsqrt(fd.ops.add(var, 1e-5))))
        fd.add_output(var)
    return fd
