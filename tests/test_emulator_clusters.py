"""The emulator runs the blocks of a thread-block cluster together: each block has its own
shared memory (static and dynamic), kf::cluster_load reads another block's, kf::cluster_sync
waits for every thread of the cluster, and kf::cluster_reduce combines the blocks' values."""

from __future__ import annotations

import numpy as np
import pytest

from kfuse.errors import EmulatorError
from kfuse.runtime.emulator import EmulatedKernel
from kfuse.runtime.runtime_header import runtime_header

# Every kernel of this module compiles into a cache of its own (conftest).
pytestmark = pytest.mark.usefixtures("module_private_cache")


NEIGHBOURS = r"""
extern "C" __global__ void __cluster_dims__(4, 1, 1) neighbours(int* out) {
  __shared__ int mine[48];
  extern __shared__ int dynamic[];
  const unsigned rank = blockIdx.x % 4, t = threadIdx.x;
  mine[t] = (int)(blockIdx.x * 1000 + t);
  dynamic[t] = -(int)(blockIdx.x * 1000 + t);
  kf::cluster_sync();
  // The static array of the next block of the cluster, the dynamic one of the previous.
  out[2 * (blockIdx.x * 48 + t)] = kf::cluster_load(&mine[t], (rank + 1) % 4);
  out[2 * (blockIdx.x * 48 + t) + 1] = kf::cluster_load(&dynamic[47 - t], (rank + 3) % 4);
  kf::cluster_sync();  // no block exits while another may still read its shared memory
}
"""

REDUCE = r"""
struct Sum { __device__ float operator()(float a, float b) const { return a + b; } };
extern "C" __global__ void __cluster_dims__(2, 1, 1) cluster_sum(const float* x, float* out) {
  __shared__ float scratch[32];
  __shared__ __align__(16) unsigned char slots[64];
  int phase = 0;
  float v = x[blockIdx.x * blockDim.x + threadIdx.x];
  float block = kf::block_reduce(v, Sum(), scratch);
  float total = kf::cluster_reduce<2>(block, Sum(), slots, phase);
  float again = kf::cluster_reduce<2>(total * 2.0f, Sum(), slots, phase);
  if (threadIdx.x == 0) { out[2 * blockIdx.x] = total; out[2 * blockIdx.x + 1] = again; }
  kf::cluster_sync();
}
"""

MIXED_BARRIERS = r"""
extern "C" __global__ void __cluster_dims__(2, 1, 1) mixed(int* out) {
  // Block 1's thread 0 waits for the cluster, its other threads for the block: neither opens.
  if (blockIdx.x % 2 == 0 || threadIdx.x == 0) kf::cluster_sync();
  else __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = 1;
}
"""

READS_AN_EXITED_BLOCK = r"""
extern "C" __global__ void __cluster_dims__(2, 1, 1) late(int* out) {
  __shared__ int mine[32];
  mine[threadIdx.x] = threadIdx.x;
  if (blockIdx.x % 2 == 1) return;  // block 1 leaves without waiting for the others
  kf::cluster_sync();
  out[threadIdx.x] = kf::cluster_load(&mine[threadIdx.x], 1u);
}
"""


def _kernel(body: str, name: str) -> EmulatedKernel:
    return EmulatedKernel(runtime_header() + body, name)


def test_each_block_of_a_cluster_has_its_own_shared_memory_and_reads_the_others() -> None:
    k = _kernel(NEIGHBOURS, "neighbours")
    assert k.cluster == (4, 1, 1)
    out = np.zeros(8 * 48 * 2, np.int32)
    k.launch(8, 48, 48 * 4, [out])
    got = out.reshape(8, 48, 2)
    for block in range(8):
        base, rank = block - block % 4, block % 4
        after, before = base + (rank + 1) % 4, base + (rank + 3) % 4
        np.testing.assert_array_equal(got[block, :, 0], after * 1000 + np.arange(48))
        np.testing.assert_array_equal(got[block, :, 1], -(before * 1000 + 47 - np.arange(48)))


def test_cluster_reduce_combines_the_blocks_of_each_cluster() -> None:
    k = _kernel(REDUCE, "cluster_sum")
    x = np.arange(6 * 64, dtype=np.float32)
    out = np.zeros(12, np.float32)
    k.launch(6, 64, 0, [x, out])
    sums = x.reshape(3, 128).sum(axis=1)  # clusters of two blocks of 64
    np.testing.assert_array_equal(out[0::2], np.repeat(sums, 2))
    np.testing.assert_array_equal(out[1::2], np.repeat(4 * sums, 2))


def test_threads_that_wait_at_different_barriers_are_a_deadlock() -> None:
    k = _kernel(MIXED_BARRIERS, "mixed")
    with pytest.raises(EmulatorError, match=r"block \(1,0,0\) deadlocked.*cluster of 2"):
        k.launch(2, 32, 0, [np.zeros(64, np.int32)])


def test_reading_the_shared_memory_of_a_block_that_exited_is_an_error() -> None:
    k = _kernel(READS_AN_EXITED_BLOCK, "late")
    with pytest.raises(EmulatorError, match="block 1 of its cluster, which has exited"):
        k.launch(2, 32, 0, [np.zeros(32, np.int32)])


def test_a_grid_the_clusters_do_not_divide_is_refused() -> None:
    k = _kernel(NEIGHBOURS, "neighbours")
    with pytest.raises(EmulatorError, match="not a multiple of the cluster's 4 blocks"):
        k.launch(6, 48, 48 * 4, [np.zeros(6 * 96, np.int32)])


# Two kernels of one source, one name the tail of the other's: each kernel's own signature is
# read (the emulator's messages name its parameters; its launches use its cluster shape).
TWO_KERNELS = """
extern "C" __global__ void __cluster_dims__(4, 1, 1) split_sum(const float* x, int n) {}
__device__ int helper(int sum);
extern "C" __global__ void __launch_bounds__(128) __cluster_dims__(2, 2, 1)
sum(float* out, const int rows) {}
extern "C" __global__ void plain(double* y) { helper(sum_rows(1)); }
"""


@pytest.mark.parametrize(
    ("name", "params", "cluster"),
    [
        ("split_sum", ("x", "n"), (4, 1, 1)),
        ("sum", ("out", "rows"), (2, 2, 1)),
        ("plain", ("y",), (1, 1, 1)),
        ("helper", (None,), (1, 1, 1)),  # a device function, not a kernel
    ],
)
def test_a_kernels_parameter_names_and_cluster_shape_are_its_own(
    name: str, params: tuple[str | None, ...], cluster: tuple[int, int, int]
) -> None:
    from kfuse.runtime.emulator.kernel import cluster_dims, parameter_names

    assert parameter_names(TWO_KERNELS, name, len(params)) == params
    assert cluster_dims(TWO_KERNELS, name) == cluster
