"""The benchmark workloads of shared/bench/WORKLOADS.md, each as a kfuse fusion plus its peers.

A Workload knows how to make its inputs (random, never zeros), build the kfuse definition,
compute the result with PyTorch eager (also the function torch.compile compiles), optionally
with CuPy, compute a float64 reference, and how many bytes must move.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

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
    out_dtype: Any = None


def _randn(torch: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    return torch.randn(shape, device="cuda", dtype=torch.float32).to(dtype)


def _bias_gelu_definition(dtype: DataType) -> Callable[[], FusionDefinition]:
    def build() -> FusionDefinition:
        with FusionDefinition() as fd:
            x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=dtype)
            b = fd.define_tensor(shape=[-1], contiguity=True, dtype=dtype)
            xf = fd.ops.cast(x, DataType.Float)
            bf = fd.ops.broadcast_in_dim(fd.ops.cast(b, DataType.Float), shape=fd.ops.shape(x),
                                         broadcast_dims=[1])
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
            "float32 x, float32 b", "float32 y",
            "float v = x + b; "
            "y = 0.5f * (0.5f * v * (1.0f + tanhf(0.7978845608028654f * "
            "(v + 0.044715f * v * v * v))));",
            "kfuse_bench_bias_gelu")
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


WORKLOADS: list[Workload] = [
    Workload("W1", "gelu_tanh(x + bias) * 0.5, bf16 [16384, 8192]", _w1_inputs("bfloat16"),
             _bias_gelu_definition(DataType.BFloat16), _bias_gelu_eager, _bias_gelu_reference,
             _elementwise_bytes),
    Workload("W1f", "gelu_tanh(x + bias) * 0.5, fp32 [16384, 8192]", _w1_inputs("float32"),
             _bias_gelu_definition(DataType.Float), _bias_gelu_eager, _bias_gelu_reference,
             _elementwise_bytes, cupy=_bias_gelu_cupy),
]
