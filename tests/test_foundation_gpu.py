"""KernelExecutor on a GPU: a hand-written kernel over strided 2-D views gives exact results
with CuPy and torch inputs on a non-default stream; a bad launch raises CudaError and the next
launch still works."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import kfuse
from gpu_support import requires_gpu

pytestmark = [pytest.mark.gpu, requires_gpu]

# The ABI's Tensor (docs/INTERFACES.md): data pointer, sizes[N], strides[N] in elements.
SAXPY = r"""
template <typename T, int N, typename Index>
struct Tensor { T* data; Index size[N]; Index stride[N]; };
using Index = INDEX;
extern "C" __global__ void saxpy(Tensor<float, 2, Index> out, Tensor<float, 2, Index> x,
                                 Tensor<float, 2, Index> y, float a) {
    long long n = (long long)out.size[0] * out.size[1];
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        Index r = i / out.size[1], c = i % out.size[1];
        float xv = x.data[r * x.stride[0] + c * x.stride[1]];
        float yv = y.data[r * y.stride[0] + c * y.stride[1]];
        out.data[r * out.stride[0] + c * out.stride[1]] = a * xv + yv;
    }
}
"""

SMEM_COPY = r"""
extern "C" __global__ void smem_copy(float* out, const float* x, int n) {
    extern __shared__ float buf[];
    for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = x[i];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = buf[n - 1 - i];
}
"""

FRAMEWORKS = [
    pytest.param(
        name,
        marks=pytest.mark.skipif(
            importlib.util.find_spec(name) is None, reason=f"{name} is not installed"
        ),
    )
    for name in ("torch", "cupy")
]


def make_inputs(framework: str):
    """out (contiguous), x (a strided slice), y (a transposed view), as NumPy-exact floats."""
    rng = np.random.default_rng(0)
    base_x = rng.integers(-64, 64, size=(130, 99)).astype(np.float32)
    base_y = rng.integers(-64, 64, size=(33, 65)).astype(np.float32)
    if framework == "torch":
        import torch

        x = torch.from_numpy(base_x).cuda()[::2, 1::3]
        y = torch.from_numpy(base_y).cuda().t()
        out = torch.empty((65, 33), dtype=torch.float32, device="cuda")
    else:
        import cupy

        x = cupy.asarray(base_x)[::2, 1::3]
        y = cupy.asarray(base_y).T
        out = cupy.empty((65, 33), dtype=cupy.float32)
    expected = 2.5 * base_x[::2, 1::3] + base_y.T
    return out, x, y, expected


def to_numpy(array) -> np.ndarray:
    return array.cpu().numpy() if hasattr(array, "cpu") else array.get()


def non_default_stream(framework: str):
    if framework == "torch":
        import torch

        stream = torch.cuda.Stream()
        return stream, torch.cuda.stream(stream)
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    return stream, stream


@pytest.mark.parametrize("index", ["int", "long long"])
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_saxpy_strided_on_current_stream(framework: str, index: str) -> None:
    out, x, y, expected = make_inputs(framework)
    assert x.shape == y.shape == out.shape == expected.shape
    ex = kfuse.KernelExecutor()
    cparams = kfuse.CompileParams(index_type="int32" if index == "int" else "int64")
    ex.compile(SAXPY.replace("INDEX", index), "saxpy", kfuse.LaunchParams(block_x=128), cparams)
    kernel = ex.kernel(0)
    expected_param = 8 + (8 if index == "int" else 16) * 2
    assert kernel.param_sizes == [expected_param] * 3 + [4]
    stream, context = non_default_stream(framework)
    with context:  # stream=None: the framework's current stream, i.e. `stream`
        ex.run([out, x, y, 2.5], kfuse.LaunchParams(grid_x=7))
    stream.synchronize()
    np.testing.assert_array_equal(to_numpy(out), expected)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_saxpy_on_explicit_stream(framework: str) -> None:
    out, x, y, expected = make_inputs(framework)
    ex = kfuse.KernelExecutor()
    ex.compile(SAXPY.replace("INDEX", "long long"), "saxpy")
    stream, _ = non_default_stream(framework)
    ex.run([out, x, y, 2.5], kfuse.LaunchParams(grid_x=16, block_x=256), stream=stream)
    stream.synchronize()
    np.testing.assert_array_equal(to_numpy(out), expected)


def test_too_many_threads_raises_and_next_launch_works() -> None:
    torch = pytest.importorskip("torch")
    out, x, y, expected = make_inputs("torch")
    ex = kfuse.KernelExecutor()
    ex.compile(SAXPY.replace("INDEX", "long long"), "saxpy", kfuse.LaunchParams(grid_x=4))
    with pytest.raises(kfuse.CudaError) as info:
        # Every block dimension is within its own limit; their product is not.
        ex.run([out, x, y, 2.5], kfuse.LaunchParams(block_x=32, block_y=64))
    assert info.value.code == 1 and info.value.name == "CUDA_ERROR_INVALID_VALUE"
    assert "2048 threads" in str(info.value) and "saxpy" in str(info.value)
    ex.run([out, x, y, 2.5], kfuse.LaunchParams(block_x=128))
    torch.cuda.synchronize()
    np.testing.assert_array_equal(to_numpy(out), expected)


def test_large_dynamic_shared_memory() -> None:
    torch = pytest.importorskip("torch")
    props = kfuse._C.get_device_properties(0)
    n = min(props.shared_mem_per_block_optin, 96 * 1024) // 4
    assert n * 4 > 48 * 1024
    x = torch.arange(n, dtype=torch.float32, device="cuda")
    out = torch.empty_like(x)
    ex = kfuse.KernelExecutor()
    ex.compile(SMEM_COPY, "smem_copy")
    ex.run([out, x, n], kfuse.LaunchParams(grid_x=1, block_x=256, shared_mem=n * 4))
    torch.cuda.synchronize()
    assert torch.equal(out, x.flip(0))


def test_bad_arguments_are_reported_by_parameter() -> None:
    pytest.importorskip("torch")
    out, x, y, _ = make_inputs("torch")
    ex = kfuse.KernelExecutor()
    ex.compile(
        SAXPY.replace("INDEX", "long long"), "saxpy", kfuse.LaunchParams(grid_x=1, block_x=32)
    )
    with pytest.raises(kfuse.InputError, match="takes 4 parameters"):
        ex.run([out, x, y])
    with pytest.raises(kfuse.InputError, match="parameter 1"):
        ex.run([out, x.cpu(), y, 2.5])
    with pytest.raises(kfuse.InputError, match="parameter 3"):
        ex.run([out, x, y, True])  # a bool needs a 1-byte parameter, this one has 4
    with pytest.raises(kfuse.InputError, match="argument 3"):
        ex.run([out, x, y, "2.5"])


def test_device_properties() -> None:
    props = kfuse._C.get_device_properties(0)
    assert props.major >= 7 and props.sm_count > 0 and props.warp_size == 32
    assert props.max_threads_per_block == 1024
    assert props.total_memory > 1 << 30
    assert props.shared_mem_per_block_optin >= props.shared_mem_per_block


def test_tensor_descriptor_arguments() -> None:
    """An object with an int `data` pointer plus `shape` and `strides` (in elements) is a tensor
    argument too, for memory described by hand."""
    torch = pytest.importorskip("torch")
    from typing import NamedTuple

    class Descriptor(NamedTuple):
        data: int
        shape: tuple[int, ...]
        strides: tuple[int, ...]

    out, x, y, expected = make_inputs("torch")
    described = [Descriptor(t.data_ptr(), tuple(t.shape), tuple(t.stride())) for t in (out, x, y)]
    ex = kfuse.KernelExecutor()
    ex.compile(
        SAXPY.replace("INDEX", "long long"), "saxpy", kfuse.LaunchParams(grid_x=8, block_x=128)
    )
    ex.run([*described, 2.5])
    torch.cuda.synchronize()
    np.testing.assert_array_equal(to_numpy(out), expected)
