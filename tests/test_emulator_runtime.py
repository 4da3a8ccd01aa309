"""kfuse.runtime.emulator with kfuse's device-helper header (runtime/kf_runtime/kf_*.cuh) in
front of the kernel, as generated kernels have it: Tensor arguments, bounds-checked
kf::load/store, block reductions.
"""

from __future__ import annotations

import numpy as np
import pytest

from kfuse.errors import EmulatorError
from kfuse.runtime.emulator import EmulatedKernel
from kfuse.runtime.runtime_header import runtime_header

# Every kernel of this module compiles into a cache of its own (conftest).
pytestmark = pytest.mark.usefixtures("module_private_cache")


KERNELS = r"""
// Row sums of a 2-D float tensor, one block per row, through kf::block_reduce_x and the
// generated-code form of dynamic shared memory; plus a half-precision copy of the input.
extern "C" __global__ void __launch_bounds__(1024)
row_sum(kf::Tensor<float, 2, int> x, kf::Tensor<float, 1, int> out,
        kf::Tensor<kf::half, 2, long long> xh, int shift) {
  extern __shared__ __align__(16) unsigned char kf_dyn_smem[];
  float* scratch = reinterpret_cast<float*>(kf_dyn_smem);
  int row = blockIdx.x;
  float acc = kf::SumOp::identity<float>();
  for (int c = threadIdx.x; c < x.size[1]; c += blockDim.x) {
    float v = kf::load(x, row * x.stride[0] + c * x.stride[1]);
    kf::store(xh, (long long)row * xh.stride[0] + c * xh.stride[1], kf::from_float<kf::half>(v));
    acc = kf::SumOp()(acc, v);
  }
  acc = kf::block_reduce_x(acc, kf::SumOp(), scratch);
  if (threadIdx.x == 0) kf::store(out, (row + shift) * out.stride[0], acc);
}

// Four floats from `offset` as one 16-byte vector, stored likewise.
extern "C" __global__ void copy_vec4(kf::Tensor<float, 1, int> x, kf::Tensor<float, 1, int> y,
                                     int offset) {
  kf::store_vec<4>(y, 0, kf::load_vec<4>(x, offset));
}
"""


def _source() -> str:
    return runtime_header() + "\n" + KERNELS


@pytest.mark.parametrize("block", [32, 96, 256, 1024, 48])
def test_row_sums_through_the_runtime_header(block):
    k = EmulatedKernel(_source(), "row_sum")
    assert k.param_sizes == (24, 16, 40, 4)
    x = np.random.default_rng(4).integers(-50, 50, (5, 700)).astype(np.float32)
    xt = np.ascontiguousarray(x.T).T  # column-major view
    out = np.zeros(5, np.float32)
    xh = np.zeros((5, 700), np.float16)
    k.launch(5, block, block * 4, [xt, out, xh.view(np.uint16), 0])
    np.testing.assert_array_equal(out, x.sum(1))
    np.testing.assert_array_equal(xh, x.astype(np.float16))


def test_out_of_bounds_store_through_kf_store_is_caught():
    k = EmulatedKernel(_source(), "row_sum")
    x = np.ones((3, 10), np.float32)
    out = np.zeros(3, np.float32)
    xh = np.zeros((3, 10), np.uint16)
    with pytest.raises(EmulatorError) as e:
        k.launch(3, 32, 128, [x, out, xh, 1])  # row 2 writes out[3]
    msg = str(e.value)
    assert "'row_sum'" in msg and "thread (0,0,0) of block (2,0,0)" in msg
    assert "offset 3" in msg and "[0, 2]" in msg and "parameter 1 'out'" in msg


def test_a_vector_access_the_gpu_would_find_misaligned_is_caught():
    """A 16-byte vector read 4 bytes past an aligned start: the host would read it, the GPU
    stops with a misaligned address, so the emulator stops too, naming the access."""
    k = EmulatedKernel(_source(), "copy_vec4")
    x = np.arange(16, dtype=np.float32)
    y = np.zeros(4, np.float32)
    k.launch(1, 1, 0, [x, y, 8])
    np.testing.assert_array_equal(y, x[8:12])
    with pytest.raises(EmulatorError) as e:
        k.launch(1, 1, 0, [x, y, 3])
    msg = str(e.value)
    assert "misaligned vector access to tensor `t`" in msg
    assert "4 elements as one access, which needs 16-byte alignment" in msg
    assert "parameter 0 'x'" in msg
