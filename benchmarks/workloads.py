"""The benchmark workloads of shared/bench/WORKLOADS.md, each as a kfuse fusion plus its peers.

A Workload knows how to make its inputs (random, never zeros), build the kfuse definition,
compute the result with PyTorch eager (also the function torch.compile compiles), optionally
with CuPy, compute a float64 reference, and how many bytes must move.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kfuse import DataType, FusionDefinition


@dataclass
class Workload:
    """One benchmark row."""

    id: str
    description: str
    make_inputs: Callable[[Any, bool], list[Any]]  # (torch, quick) -> torch CUDA tensors
    definition: Callable[[], FusionDefinition]
    eager: Callable[..., Any]  # torch eager; also what torch.compile compiles
    reference: Callable[..., Any]  # float64 result from the same inputs
    bytes_moved: Callable[[list[Any]], int]
    cupy: Callable[..., Any] | None = None  # takes CuPy arrays
    tolerance: tuple[float, float] | None = None  # (atol, rtol); None: by output dtype


def _randn(torch: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    return torch.randn(shape, device="cuda", dtype=torch.float32).to(dtype)


def _bias_gelu_definition(dtype: DataType) -> Callable[[], FusionDefinition]:
    def build() -> FusionDefinition:
        with FusionDefinition() as fd:
            x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=dtype)
            b = fd.define_tensor(shape=[-1], contiguity=True, dtype=dtype)
            xf = fd.ops.cast(x, DataType.Float)
            bf = fd.ops.broadcast_in_dim(
                fd.ops.cast(b, DataType.Float), shape=fd.ops.shape(x), broadcast_dims=[1]
            )
            y = fd.ops.mul(fd.ops.gelu(fd.ops.add(xf, bf), approximate="tanh"), 0.5)
            fd.add_output(fd.ops.cast(y, dtype))
        return fd

    return build


def _bias_gelu_eager(x: Any, b: Any) -> Any:
    import torch

    y = torch.nn.functional.gelu(x.float() + b.float()[None, :], approximate="tanh") * 0.5
    return y.to(x.dtype)


def _bias_gelu_reference(x: Any, b: Any) -> Any:
    import torch

    return torch.nn.functional.gelu(x.double() + b.double()[None, :], approximate="tanh") * 0.5


_CUPY_GELU = None


def _bias_gelu_cupy(x: Any, b: Any) -> Any:
    global _CUPY_GELU
    import cupy

    if _CUPY_GELU is None:
        _CUPY_GELU = cupy.ElementwiseKernel(
            "float32 x, float32 b",
            "float32 y",
            "float v = x + b; "
            "y = 0.5f * (0.5f * v * (1.0f + tanhf(0.7978845608028654f * "
            "(v + 0.044715f * v * v * v))));",
            "kfuse_bench_bias_gelu",
        )
    return _CUPY_GELU(x, b[None, :])


def _w1_inputs(dtype_name: str) -> Callable[[Any, bool], list[Any]]:
    def make(torch: Any, quick: bool) -> list[Any]:
        m, n = (4096, 8192) if quick else (16384, 8192)
        dtype = getattr(torch, dtype_name)
        return [_randn(torch, (m, n), dtype), _randn(torch, (n,), dtype)]

    return make


def _elementwise_bytes(inputs: list[Any]) -> int:
    x = inputs[0]
    return 2 * x.numel() * x.element_size()


def _sum_definition(dim: int) -> Callable[[], FusionDefinition]:
    def build() -> FusionDefinition:
        with FusionDefinition() as fd:
            x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
            fd.add_output(fd.ops.sum(x, dims=[dim]))
        return fd

    return build


def _sum_inputs(torch: Any, quick: bool) -> list[Any]:
    n = 8192 if quick else 16384
    return [torch.randn((n, n), device="cuda", dtype=torch.float32)]


def _read_bytes(inputs: list[Any]) -> int:
    x = inputs[0]
    return x.numel() * x.element_size()


def _norm_inputs(with_weight: bool, with_bias: bool) -> Callable[[Any, bool], list[Any]]:
    def make(torch: Any, quick: bool) -> list[Any]:
        m, n = (8192, 4096) if quick else (32768, 4096)
        out = [_randn(torch, (m, n), torch.bfloat16)]
        if with_weight:
            out.append(_randn(torch, (n,), torch.bfloat16))
        if with_bias:
            out.append(_randn(torch, (n,), torch.bfloat16))
        return out

    return make


def _softmax_definition() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.BFloat16)
        y = fd.ops.softmax(fd.ops.cast(x, DataType.Float), dim=-1)
        fd.add_output(fd.ops.cast(y, DataType.BFloat16))
    return fd


def _softmax_eager(x: Any) -> Any:
    import torch

    return torch.softmax(x.float(), dim=-1).to(torch.bfloat16)


def _softmax_reference(x: Any) -> Any:
    import torch

    return torch.softmax(x.double(), dim=-1)


def h1_definition() -> FusionDefinition:
    """H1's fusion: out = (a + b) * 2 on fp32 vectors (a host cost workload: one kernel)."""
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1], contiguity=True)
        b = fd.define_tensor(shape=[-1], contiguity=True)
        fd.add_output(fd.ops.mul(fd.ops.add(a, b), 2.0))
    return fd


def h1s_definition() -> FusionDefinition:
    """H1s's fusion: a row sum, then two column sums of what the rows scaled (three
    segments, all generated kernels, one program)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True)
        y = fd.ops.mul(x, fd.ops.sum(x, dims=[1], keepdim=True))
        z = fd.ops.mul(y, fd.ops.sum(y, dims=[0], keepdim=True))
        w = fd.ops.sub(z, fd.ops.max(z, dims=[1], keepdim=True))
        fd.add_output(fd.ops.sum(w, dims=[0]))
    return fd


def _rmsnorm_definition() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.BFloat16)
        w = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.BFloat16)
        xf = fd.ops.cast(x, DataType.Float)
        ms = fd.ops.mean(fd.ops.mul(xf, xf), dims=[1], keepdim=True)
        y = fd.ops.mul(
            fd.ops.mul(xf, fd.ops.rsqrt(fd.ops.add(ms, 1e-6))),
            fd.ops.broadcast_in_dim(
                fd.ops.cast(w, DataType.Float), shape=fd.ops.shape(x), broadcast_dims=[1]
            ),
        )
        fd.add_output(fd.ops.cast(y, DataType.BFloat16))
    return fd


def _rmsnorm_eager(x: Any, w: Any) -> Any:
    import torch

    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
    return y.to(torch.bfloat16)


def _rmsnorm_reference(x: Any, w: Any) -> Any:
    import torch

    xd = x.double()
    return xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()


def _layernorm_definition() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.BFloat16)
        w = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.BFloat16)
        b = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.BFloat16)
        y = fd.ops.layer_norm(
            fd.ops.cast(x, DataType.Float),
            fd.ops.cast(w, DataType.Float),
            fd.ops.cast(b, DataType.Float),
            eps=1e-5,
        )
        fd.add_output(fd.ops.cast(y, DataType.BFloat16))
    return fd


def _layernorm_eager(x: Any, w: Any, b: Any) -> Any:
    import torch

    y = torch.nn.functional.layer_norm(x.float(), (x.shape[-1],), w.float(), b.float(), 1e-5)
    return y.to(torch.bfloat16)


def _layernorm_reference(x: Any, w: Any, b: Any) -> Any:
    import torch

    return torch.nn.functional.layer_norm(x.double(), (x.shape[-1],), w.double(), b.double(), 1e-5)


def _cupy_sum(axis: int) -> Callable[..., Any]:
    def run(x: Any) -> Any:
        return x.sum(axis=axis)

    return run


WORKLOADS: list[Workload] = [
    Workload(
        "W1",
        "gelu_tanh(x + bias) * 0.5, bf16 [16384, 8192]",
        _w1_inputs("bfloat16"),
        _bias_gelu_definition(DataType.BFloat16),
        _bias_gelu_eager,
        _bias_gelu_reference,
        _elementwise_bytes,
    ),
    Workload(
        "W1f",
        "gelu_tanh(x + bias) * 0.5, fp32 [16384, 8192]",
        _w1_inputs("float32"),
        _bias_gelu_definition(DataType.Float),
        _bias_gelu_eager,
        _bias_gelu_reference,
        _elementwise_bytes,
        cupy=_bias_gelu_cupy,
    ),
    Workload(
        "W2",
        "sum(x, dim=1), fp32 [16384, 16384]",
        _sum_inputs,
        _sum_definition(1),
        lambda x: x.sum(dim=1),
        lambda x: x.double().sum(dim=1),
        _read_bytes,
        cupy=_cupy_sum(1),
        tolerance=(1e-2, 1e-4),
    ),
    Workload(
        "W3",
        "sum(x, dim=0), fp32 [16384, 16384]",
        _sum_inputs,
        _sum_definition(0),
        lambda x: x.sum(dim=0),
        lambda x: x.double().sum(dim=0),
        _read_bytes,
        cupy=_cupy_sum(0),
        tolerance=(1e-2, 1e-4),
    ),
    Workload(
        "W4",
        "softmax(float(x), -1) as bf16, [32768, 4096]",
        _norm_inputs(False, False),
        _softmax_definition,
        _softmax_eager,
        _softmax_reference,
        _elementwise_bytes,
    ),
    Workload(
        "W5",
        "rmsnorm, bf16 [32768, 4096], fp32 math",
        _norm_inputs(True, False),
        _rmsnorm_definition,
        _rmsnorm_eager,
        _rmsnorm_reference,
        _elementwise_bytes,
    ),
    Workload(
        "W6",
        "layernorm with weight and bias, bf16 [32768, 4096]",
        _norm_inputs(True, True),
        _layernorm_definition,
        _layernorm_eager,
        _layernorm_reference,
        _elementwise_bytes,
    ),
]
