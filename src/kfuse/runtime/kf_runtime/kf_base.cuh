// kfuse device runtime: the helpers every generated kernel is built on, in six files that
// runtime_header() joins in this order, each building on the ones before:
//   kf_base.cuh        conventions, the kernel ABI's Tensor, small utilities
//   kf_types.cuh       half and bfloat16 storage types, to_float / from_float, float -> int
//   kf_cast.cuh        cast<To>(From) with PyTorch's semantics
//   kf_math.cuh        classification, floating-point and integer math
//   kf_memory.cuh      loads and stores through Tensors, vectors, asynchronous copies
//   kf_reductions.cuh  reduction operators, Welford, warp, block and cluster reductions, the
//                      fast transcendental forms
//
// The code generator prepends them, as they are, to every kernel's source. They are compiled two
// ways and must mean the same thing in both:
//   * by NVRTC for the GPU, with -DKFUSE_USE_PTX and no toolkit headers at all;
//   * by the host C++ compiler in the emulator (-DKFUSE_EMULATOR, no KFUSE_USE_PTX), which
//     provides the CUDA built-ins listed in docs/INTERFACES.md and nothing more.
// Hence: no #include, no <cstdint> (plain int / long long / unsigned ... only), inline PTX only
// under KFUSE_USE_PTX with a portable #else, and only the built-ins named in INTERFACES.md.
//
// Conventions the code generator relies on:
//   * half and bfloat16 are storage types. Arithmetic is done in float: load, kf::to_float,
//     compute, kf::from_float<T>. Math helpers exist for float and double (and integers where
//     torch defines the op); reductions accumulate in float/double/int/long long.
//   * Global memory is read and written through kf::load / kf::store / kf::load_vec /
//     kf::store_vec on a Tensor, so the emulator can bounds-check through KF_CHECK_BOUNDS.
//   * Calls to C math functions are written with a leading :: because kf:: defines functions of
//     the same names (kf::exp(double) must not find itself).

namespace kf {

// ---------------------------------------------------------------------------------------------
// Kernel ABI: tensors are passed by value. The launcher packs bytes in exactly this order
// (pointer, sizes, strides; strides in elements), so the layout must not change.
// ---------------------------------------------------------------------------------------------

template <typename T, int N, typename Index>
struct Tensor {
  T* data;
  Index size[N];
  Index stride[N];
};

// A 0-d tensor is a pointer only (a zero-length array member is not standard C++).
template <typename T, typename Index>
struct Tensor<T, 0, Index> {
  T* data;
};

// ---------------------------------------------------------------------------------------------
// Small utilities
// ---------------------------------------------------------------------------------------------

template <typename T>
__device__ __forceinline__ constexpr T ceil_div(T a, T b) {
  return (a + b - 1) / b;
}

// Quotient and remainder of two non-negative indices (a coordinate, an extent), computed
// unsigned: a division by a run-time extent is about 14 instructions unsigned in sm_90 SASS and
// about 20 signed (absolute values, then the sign put back), and a thread decomposing its row
// index over four axes pays it four times.
__device__ __forceinline__ int index_div(int a, int b) {
  return (int)((unsigned)a / (unsigned)b);
}

__device__ __forceinline__ long long index_div(long long a, long long b) {
  return (long long)((unsigned long long)a / (unsigned long long)b);
}

__device__ __forceinline__ int index_mod(int a, int b) {
  return (int)((unsigned)a % (unsigned)b);
}

__device__ __forceinline__ long long index_mod(long long a, long long b) {
  return (long long)((unsigned long long)a % (unsigned long long)b);
}

// Threads of the block, and this thread's rank in it, in x-fastest order (the order warps are
// formed in).
__device__ __forceinline__ int block_threads() {
  return (int)(blockDim.x * blockDim.y * blockDim.z);
}

__device__ __forceinline__ int thread_rank() {
  return (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
}

}  // namespace kf
