"""kfuse.runtime.emulator: hand-written CUDA kernels run on the CPU, one construct at a time."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from kfuse.errors import EmulatorError
from kfuse.runtime.emulator import EmulatedKernel, clear_memory_cache, compiler_invocations

# Every kernel of this module compiles into a cache of its own (conftest).
pytestmark = pytest.mark.usefixtures("module_private_cache")


TENSOR_STRUCTS = r"""
struct T2i { float* data; int size[2]; int stride[2]; };
struct T2l { float* data; long long size[2]; long long stride[2]; };
"""

ELEMENTWISE = (
    TENSOR_STRUCTS
    + r"""
extern "C" __global__ void __launch_bounds__(128)
scale_add(T2i x, T2l out, float alpha, double beta, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  int r = (int)(i / x.size[1]), c = (int)(i % x.size[1]);
  float v = x.data[r * x.stride[0] + c * x.stride[1]];
  long long o = r * out.stride[0] + c * out.stride[1];
  KF_CHECK_BOUNDS(out, o, 1);
  out.data[o] = v * alpha + (float)beta;
}
"""
)


def test_elementwise_over_strided_tensors_is_exact():
    k = EmulatedKernel(ELEMENTWISE, "scale_add")
    assert k.param_sizes == (24, 40, 4, 8, 8)
    assert not k.uses_fibers  # no barrier or warp op: threads run as plain calls
    base = np.arange(7 * 13 * 2, dtype=np.float32).reshape(13, 14)
    x = base[1:, 3::2].T  # offset, transposed, non-unit strides
    out_full = np.zeros((x.shape[1], x.shape[0] * 2), np.float32)
    out = out_full[:, ::2].T  # strided output view
    n = x.size
    k.launch(((n + 127) // 128,), (128, 1, 1), 0, [x, out, 2.5, 0.25, n])
    np.testing.assert_array_equal(out, x * np.float32(2.5) + np.float32(0.25))
    assert not out_full[:, 1::2].any()


def test_out_of_bounds_write_names_kernel_thread_block_and_parameter():
    k = EmulatedKernel(ELEMENTWISE, "scale_add")
    x = np.ones((4, 8), np.float32)
    out = np.zeros((4, 8), np.float32)
    guard = out.reshape(-1)[:24].reshape(3, 8)  # kernel walks 32 elements over 24
    with pytest.raises(EmulatorError) as e:
        k.launch(1, 64, 0, [x, guard, 1.0, 0.0, 32])
    msg = str(e.value)
    assert "'scale_add'" in msg
    assert "thread (24,0,0) of block (0,0,0)" in msg
    assert "out-of-bounds" in msg and "offset 24" in msg and "[0, 23]" in msg
    assert "parameter 1 'out'" in msg
    assert not out[3].any()  # the bad write did not happen


BLOCK_REDUCE = r"""
extern "C" __global__ void block_sum(const int* __restrict__ x, int* out, int n) {
  __shared__ int partial[1024];
  int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  int nt = blockDim.x * blockDim.y * blockDim.z;
  int acc = 0;
  for (int i = blockIdx.x * nt + tid; i < n; i += nt * gridDim.x) acc += x[i];
  partial[tid] = acc;
  __syncthreads();
  for (int s = nt / 2; s > 0; s >>= 1) {
    if (tid < s) partial[tid] += partial[tid + s];
    __syncthreads();
  }
  if (tid == 0) out[blockIdx.x] = partial[0];
}
"""


def test_block_reduction_through_shared_memory_and_syncthreads():
    k = EmulatedKernel(BLOCK_REDUCE, "block_sum")
    assert k.uses_fibers
    x = np.random.default_rng(0).integers(-1000, 1000, 50_000).astype(np.int32)
    out = np.zeros(6, np.int32)
    k.launch((6, 1, 1), (16, 4, 2), 0, [x, out, x.size])
    assert int(out.sum()) == int(x.sum())


WARP = r"""
extern "C" __global__ void warp_ops(const float* x, float* sums, float* bcast, float* scan,
                                    float* seg, unsigned* votes) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  int lane = threadIdx.x & 31;
  float v = x[t];
  float a = v, b = v;
  for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
  for (int o = 16; o > 0; o >>= 1) b += __shfl_down_sync(0xffffffffu, b, o);
  sums[2 * t] = a;
  sums[2 * t + 1] = b;
  bcast[t] = __shfl_sync(0xffffffffu, v, 7);
  float p = v;
  for (int o = 1; o < 32; o <<= 1) {
    float q = __shfl_up_sync(0xffffffffu, p, o);
    if (lane >= o) p += q;
  }
  scan[t] = p;
  float s = v;
  for (int o = 4; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o, 8);
  seg[t] = s;
  bool pred = v > 0.0f;
  unsigned bal = __ballot_sync(0xffffffffu, pred);
  int any = __any_sync(0xffffffffu, pred);
  int all = __all_sync(0xffffffffu, pred);
  __syncwarp();
  if (lane == 0) {
    int w = t / 32;
    votes[3 * w] = bal; votes[3 * w + 1] = any; votes[3 * w + 2] = all;
  }
}
"""


def test_warp_shuffles_and_votes():
    k = EmulatedKernel(WARP, "warp_ops")
    nwarps = 4
    x = np.random.default_rng(1).integers(-8, 8, 32 * nwarps).astype(np.float32)
    x[64:96] = np.abs(x[64:96]) + 1  # warp 2: all positive
    x[96:128] = -np.abs(x[96:128]) - 1  # warp 3: none positive
    sums = np.zeros(2 * x.size, np.float32)
    bcast, scan, seg = (np.zeros_like(x) for _ in range(3))
    votes = np.zeros(3 * nwarps, np.uint32)
    k.launch(2, 64, 0, [x, sums, bcast, scan, seg, votes])
    w = x.reshape(nwarps, 32)
    np.testing.assert_array_equal(
        sums[0::2].reshape(nwarps, 32), np.repeat(w.sum(1, keepdims=True), 32, 1)
    )
    np.testing.assert_array_equal(sums[1::2].reshape(nwarps, 32)[:, 0], w.sum(1))
    np.testing.assert_array_equal(bcast.reshape(nwarps, 32), np.repeat(w[:, 7:8], 32, 1))
    np.testing.assert_array_equal(scan.reshape(nwarps, 32), np.cumsum(w, 1))
    segs = w.reshape(nwarps, 4, 8).sum(2, keepdims=True)
    np.testing.assert_array_equal(seg.reshape(nwarps, 4, 8), np.repeat(segs, 8, 2))
    for i in range(nwarps):
        bits = sum(1 << lane for lane in range(32) if w[i, lane] > 0)
        assert votes[3 * i] == bits
        assert votes[3 * i + 1] == int(bits != 0)
        assert votes[3 * i + 2] == int(bits == 0xFFFFFFFF)


GRID_REDUCE = r"""
__device__ float block_total(float v) {
  __shared__ float warp_sums[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  float r = 0.0f;
  if (threadIdx.x == 0)
    for (int w = 0; w < (int)(blockDim.x + 31) / 32; ++w) r += warp_sums[w];
  __syncthreads();
  return r;
}

extern "C" __global__ void grid_sum(const float* x, int n, float* partials,
                                    unsigned* counter, float* result) {
  __shared__ bool is_last;
  float v = 0.0f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    v += x[i];
  float total = block_total(v);
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = total;
    __threadfence();
    unsigned done = atomicAdd(counter, 1u);
    is_last = (done == gridDim.x - 1);
  }
  __syncthreads();
  if (is_last && threadIdx.x == 0) {
    float s = 0.0f;
    for (unsigned b = 0; b < gridDim.x; ++b) s += partials[b];
    *result = s;
    *counter = 0;
  }
}
"""


def test_grid_reduction_with_last_block_done_counter():
    k = EmulatedKernel(GRID_REDUCE, "grid_sum")
    x = np.random.default_rng(2).integers(0, 100, 100_000).astype(np.float32)
    grid = 10
    partials = np.zeros(grid, np.float32)
    counter = np.zeros(1, np.uint32)
    result = np.zeros(1, np.float32)
    k.launch(grid, 256, 0, [x, x.size, partials, counter, result])
    assert result[0] == x.sum(dtype=np.float64)  # integers below 2^24: exact
    assert counter[0] == 0


DYN_SMEM = r"""
extern __shared__ float file_scope_smem[];

extern "C" __global__ void reverse_block(const float* x, float* out) {
  extern __shared__ __align__(16) unsigned char kf_dyn_smem[];
  float* buf = reinterpret_cast<float*>(kf_dyn_smem);
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  buf[threadIdx.x] = x[i];
  __syncthreads();
  out[i] = file_scope_smem[blockDim.x - 1 - threadIdx.x];  // the same buffer
}
"""


def test_dynamic_shared_memory_both_extern_forms():
    k = EmulatedKernel(DYN_SMEM, "reverse_block")
    x = np.arange(3 * 96, dtype=np.float32)
    out = np.zeros_like(x)
    k.launch(3, 96, 96 * 4, [x, out])
    np.testing.assert_array_equal(out, x.reshape(3, 96)[:, ::-1].reshape(-1))


VEC4 = r"""
extern "C" __global__ void axpy4(const float* __restrict__ x, float* __restrict__ y, float a,
                                 int n4) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n4) {
    float4 v = reinterpret_cast<const float4*>(x)[i];
    float4 w = *reinterpret_cast<float4*>(y + 4 * i);
    w = make_float4(fmaf(a, v.x, w.x), a * v.y + w.y, a * v.z + w.z, a * v.w + w.w);
    reinterpret_cast<float4*>(y)[i] = w;
    int4 bits = reinterpret_cast<const int4*>(x)[i];
    if (__int_as_float(bits.x) != v.x) y[4 * i] = -1.0f;
  }
}
"""


def test_float4_vector_loads_and_stores():
    k = EmulatedKernel(VEC4, "axpy4")
    x = np.arange(64, dtype=np.float32)
    y = np.ones(64, np.float32)
    k.launch(1, 32, 0, [x, y, 2.0, 16])
    np.testing.assert_array_equal(y, 2 * np.arange(64, dtype=np.float32) + 1)


ATOMICS = r"""
__device__ float atomic_max_float(float* addr, float v) {
  int* p = reinterpret_cast<int*>(addr);
  int old = *p, assumed;
  do {
    assumed = old;
    if (__int_as_float(assumed) >= v) break;
    old = atomicCAS(p, assumed, __float_as_int(v));
  } while (old != assumed);
  return __int_as_float(old);
}

extern "C" __global__ void atomics(const int* x, int n, int* imax, int* imin, float* fmax_,
                                   unsigned long long* total, float* fsum, int* hist,
                                   int* last) {
  __shared__ int block_count;
  if (threadIdx.x == 0) block_count = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    atomicMax(imax, x[i]);
    atomicMin(imin, x[i]);
    atomic_max_float(fmax_, (float)x[i]);
    atomicAdd(total, (unsigned long long)(x[i] + 1000));
    atomicAdd(fsum, 1.0f);
    atomicAdd(&hist[(x[i] + 1000) % 8], 1);
    atomicAdd(&block_count, 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) atomicExch(last, block_count);
}
"""


def test_atomics_cas_loop_max_min_add_exch():
    k = EmulatedKernel(ATOMICS, "atomics")
    x = np.random.default_rng(3).integers(-1000, 1000, 5000).astype(np.int32)
    imax = np.array([-(2**31)], np.int32)
    imin = np.array([2**31 - 1], np.int32)
    fmax_ = np.array([-np.inf], np.float32)
    total = np.zeros(1, np.uint64)
    fsum = np.zeros(1, np.float32)
    hist = np.zeros(8, np.int32)
    last = np.zeros(1, np.int32)
    k.launch(4, 128, 0, [x, x.size, imax, imin, fmax_, total, fsum, hist, last])
    assert imax[0] == x.max() and imin[0] == x.min() and fmax_[0] == x.max()
    assert total[0] == int((x.astype(np.int64) + 1000).sum())
    assert fsum[0] == x.size
    np.testing.assert_array_equal(hist, np.bincount((x + 1000) % 8, minlength=8))
    assert last[0] > 0


SPIN = r"""
extern "C" __global__ void wait_for_block1(int* flag, int* out) {
  if (blockIdx.x == 0) {
    while (atomicAdd(flag, 0) == 0) { }
    out[0] = 1;
  } else {
    atomicExch(flag, 1);
  }
}

extern "C" __global__ void wait_volatile(int* flag, int* out) {
  if (blockIdx.x == 0) {
    while (*(volatile int*)flag == 0) { }
    out[0] = 1;
  } else {
    flag[0] = 1;
  }
}

extern "C" __global__ void lock_then_wait(int* lock) {
  // Lock handed between the threads of one block: fine, they run as fibers.
  __syncthreads();
  while (atomicCAS(lock, 0, 1) != 0) { }
  atomicExch(lock, 0);
  if (blockIdx.x == 0 && threadIdx.x == 0) while (atomicCAS(lock + 1, 1, 2) != 1) { }
}
"""


def _launch_with_timeout(kernel, *launch_args, timeout=30.0):
    outcome: dict[str, BaseException | None] = {"error": None}

    def run():
        try:
            kernel.launch(*launch_args)
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            outcome["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "the emulated launch hung"
    return outcome["error"]


@pytest.mark.parametrize("name", ["wait_for_block1", "lock_then_wait", "wait_volatile"])
def test_kernel_spinning_on_another_block_is_reported(name):
    k = EmulatedKernel(SPIN, name, watchdog_seconds=0.5)
    args = [np.zeros(2, np.int32), np.zeros(1, np.int32)][: len(k.param_sizes)]
    err = _launch_with_timeout(k, 2, 64, 0, args)
    assert isinstance(err, EmulatorError)
    assert "spins waiting for another block" in str(err) and repr(name) in str(err)


DEADLOCK = r"""
extern "C" __global__ void shuffle_vs_barrier(int* out) {
  int v = threadIdx.x;
  if (threadIdx.x == 0) v = __shfl_sync(0x3u, v, 1);  // lane 1 never comes: it is at the barrier
  else __syncthreads();
  out[threadIdx.x] = v;
}

extern "C" __global__ void partial_shuffle(int* out) {
  int v = threadIdx.x;
  if (threadIdx.x < 40) v = __shfl_xor_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = v;
}
"""


def test_deadlock_is_reported_not_hung():
    k = EmulatedKernel(DEADLOCK, "shuffle_vs_barrier")
    err = _launch_with_timeout(k, (1, 2), 64, 0, [np.zeros(64, np.int32)])
    assert isinstance(err, EmulatorError)
    msg = str(err)
    assert "block (0,0,0) deadlocked: 63 thread(s) wait at __syncthreads, 1 at a warp" in msg
    assert "thread (0,0,0) waits at a warp collective with mask 0x00000003" in msg


def test_shuffle_with_exited_lanes_uses_present_lanes():
    # Lanes 40..63 of warp 1 skip the shuffle and exit: it completes with the lanes left.
    k = EmulatedKernel(DEADLOCK, "partial_shuffle")
    out = np.zeros(64, np.int32)
    err = _launch_with_timeout(k, 1, 64, 0, [out])
    assert err is None
    np.testing.assert_array_equal(out[:32], np.arange(32) ^ 1)
    np.testing.assert_array_equal(out[32:40], np.arange(32, 40) ^ 1)
    np.testing.assert_array_equal(out[40:], np.arange(40, 64))


def test_compile_error_names_the_construct_and_shows_the_source():
    src = 'extern "C" __global__ void k(float* x) {\n  x[0] = 1.0f;\n  __nanosleep(100);\n}\n'
    with pytest.raises(EmulatorError) as e:
        EmulatedKernel(src, "k")
    msg = str(e.value)
    assert "'__nanosleep' is not defined" in msg
    assert "kernel.cu:3" in msg
    assert "> 3 |   __nanosleep(100);" in msg


@pytest.mark.parametrize("name", ["axpy8", "xpy4"])  # xpy4: only the tail of axpy4's name
def test_missing_kernel_name_is_reported(name: str):
    with pytest.raises(EmulatorError, match="not defined in the given source"):
        EmulatedKernel(VEC4, name)


def test_argument_errors_name_the_parameter():
    k = EmulatedKernel(ELEMENTWISE, "scale_add")
    x = np.ones((2, 3), np.float32)
    good = [x, x.copy(), 1.0, 1.0, 6]
    k.launch(1, 32, 0, good)
    cases = [
        ([x, np.ones(3, np.float32), 1.0, 1.0, 6], "parameter 1 'out' (40 bytes): a rank-1 array"),
        ([2.5, x, 1.0, 1.0, 6], "parameter 0 'x' (24 bytes): a float needs a 4- or 8-byte"),
        ([x, x, True, 1.0, 6], "parameter 2 'alpha' (4 bytes): a bool needs a 1-byte"),
        ([x, x, 1.0, "1", 6], "parameter 3 'beta' (8 bytes): cannot pass a str"),
        ([x, x, 1.0], "takes 5 arguments, got 3"),
    ]
    for args, expected in cases[1:]:
        with pytest.raises(EmulatorError) as e:
            k.launch(1, 32, 0, args)
        assert expected in str(e.value), str(e.value)
    with pytest.raises(EmulatorError, match=cases[0][1].replace("(", r"\(").replace(")", r"\)")):
        k.launch(1, 32, 0, cases[0][0])
    huge = np.ones((1, 1), np.float32)
    big_int = EmulatedKernel(VEC4, "axpy4")
    with pytest.raises(EmulatorError, match="parameter 3 'n4' .*does not fit"):
        big_int.launch(1, 32, 0, [huge, huge, 1.0, 2**31])


def test_launches_a_gpu_would_reject():
    k = EmulatedKernel(VEC4, "axpy4")
    x = np.zeros(4, np.float32)
    for grid, block, smem, what in [
        (1, 1025, 0, "1025 threads per block"),
        (1, (1, 1, 65), 0, "block exceeds"),
        (0, 32, 0, "at least 1"),
        ((1, 0, 1), 32, 0, "at least 1"),
        (1, 32, 300_000, "bytes of dynamic shared memory"),
    ]:
        with pytest.raises(EmulatorError, match=what):
            k.launch(grid, block, smem, [x, x, 1.0, 1])
    a100 = EmulatedKernel(VEC4, "axpy4", device="a100")
    with pytest.raises(EmulatorError, match="A100.*166912"):
        a100.launch(1, 32, 200_000, [x, x, 1.0, 1])
    k.launch(1, 32, 200_000, 0, [x, x, 1.0, 1])  # _C.Kernel's shape: stream before args


def test_second_construction_hits_the_caches():
    src = VEC4.replace("axpy4", "axpy4_cached")
    before = compiler_invocations()
    EmulatedKernel(src, "axpy4_cached")
    assert compiler_invocations() == before + 1
    EmulatedKernel(src, "axpy4_cached")  # in-process cache
    clear_memory_cache()
    k = EmulatedKernel(src, "axpy4_cached")  # disk cache
    assert compiler_invocations() == before + 1
    x = np.arange(8, dtype=np.float32)
    y = np.zeros(8, np.float32)
    k.launch(1, 2, 0, [x, y, 1.0, 2])
    np.testing.assert_array_equal(x, y)


def test_torch_cpu_tensors_as_arguments():
    torch = pytest.importorskip("torch")
    k = EmulatedKernel(ELEMENTWISE, "scale_add")
    x = torch.arange(24, dtype=torch.float32).reshape(4, 6)[:, 1::2]
    out = torch.zeros(3, 4).t()
    k.launch(1, 32, 0, [x, out, 2.0, 1.0, x.numel()])
    assert torch.equal(out, x * 2 + 1)


def test_portable_ucontext_fibers_give_the_same_results():
    k = EmulatedKernel(BLOCK_REDUCE, "block_sum", extra_flags=("-DKF_EMU_UCONTEXT",))
    x = np.arange(3000, dtype=np.int32)
    out = np.zeros(2, np.int32)
    k.launch(2, (8, 8, 2), 0, [x, out, x.size])
    assert int(out.sum()) == int(x.sum())


def test_disk_cache_off_still_compiles_once_per_process(monkeypatch):
    monkeypatch.setenv("KFUSE_CACHE_DIR", "off")
    src = VEC4.replace("axpy4", "axpy4_nocache")
    before = compiler_invocations()
    EmulatedKernel(src, "axpy4_nocache")
    EmulatedKernel(src, "axpy4_nocache")
    assert compiler_invocations() == before + 1


def test_tensor_arg_triples_are_packed_like_arrays():
    kernel_args = pytest.importorskip("kfuse.runtime.kernel_args")
    k = EmulatedKernel(ELEMENTWISE, "scale_add")
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = np.zeros((4, 3), np.float32)
    x_view = kernel_args.TensorArg(x.ctypes.data, (4, 3), (1, 4))  # x.T, by address
    k.launch(1, 32, 0, [x_view, out, 1.0, 0.5, 12])
    np.testing.assert_array_equal(out, x.T + np.float32(0.5))


MIN_MAX = r"""
extern "C" __global__ void min_max(const int* x, long long* big, float* f, int* out) {
  int a = x[threadIdx.x], b = x[threadIdx.x + 4];  // variables of one type: CUDA's int forms
  long long c = big[threadIdx.x];
  float g = f[threadIdx.x];
  out[threadIdx.x] = min(a, b);
  out[threadIdx.x + 4] = max(a, b);
  out[threadIdx.x + 8] = (int)(min(c, (long long)a) - c);  // mixed: the common type
  out[threadIdx.x + 12] = (int)max(g, 2.5f);
}
"""


def test_min_and_max_of_two_variables_of_one_type():
    """min(i, j) of two int variables is an int (the emulator's first min returned a
    reference to a temporary and did not compile)."""
    k = EmulatedKernel(MIN_MAX, "min_max")
    x = np.array([3, -7, 5, 0, 1, 2, 9, -1], dtype=np.int32)
    big = np.array([1 << 40, -5, 7, 0], dtype=np.int64)
    f = np.array([1.0, 7.5, -3.0, 2.5], dtype=np.float32)
    out = np.zeros(16, np.int32)
    k.launch(1, 4, 0, [x, big, f, out])
    np.testing.assert_array_equal(out[:4], np.minimum(x[:4], x[4:]))
    np.testing.assert_array_equal(out[4:8], np.maximum(x[:4], x[4:]))
    np.testing.assert_array_equal(out[8:12], (np.minimum(big, x[:4]) - big).astype(np.int32))
    np.testing.assert_array_equal(out[12:], np.maximum(f, 2.5).astype(np.int32))


DIVIDE = r"""
extern "C" __global__ void divide(const int* a, const int* b, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] / b[i];
}
"""


@pytest.mark.parametrize(
    ("numerator", "denominator"), [(7, 0), (-(2**31), -1)], ids=["by-zero", "least-by-minus-one"]
)
def test_an_integer_fault_in_a_kernel_is_an_error_not_the_end_of_the_process(
    numerator: int, denominator: int
) -> None:
    """x86 raises SIGFPE on an integer division by zero (and on the least int32 over -1), whose
    default action would end the user's process (a kfuse kernel bug once did that to a
    campaign); the launch traps it, fails naming the thread, and the next launch runs."""
    k = EmulatedKernel(DIVIDE, "divide")
    n = 64
    a, b, out = np.full(n, 6, np.int32), np.full(n, 3, np.int32), np.zeros(n, np.int32)
    a[37], b[37] = numerator, denominator
    err = _launch_with_timeout(k, 2, 32, 0, [a, b, out, n])
    assert isinstance(err, EmulatorError)
    assert "integer division by zero" in str(err) and "thread (5,0,0) of block (1,0,0)" in str(err)
    b[37] = 1
    assert _launch_with_timeout(k, 2, 32, 0, [a, b, out, n]) is None
    assert out[0] == 2 and out[37] == numerator
