// kfuse device runtime: reads of an op's tensor by the kernel that consumes the op: at
// positions that another tensor holds (index_select, gather and take_along_axis:
// kfuse.codegen.indexed) and inside a window of it (pad: kfuse.codegen.windowed). Put after
// the runtime header only in kernels whose own code reads so, as the float8 part is, so that
// every other kernel's source stays what it was.

namespace kf {

// Whether T is a float8 storage type (kf_float8.cuh, which comes before this part where a
// kernel has float8 values: a struct of one byte, `bits`); this part names neither type, so
// that it compiles without that part too. Functions, not a trait's static member, which NVRTC
// would emit into the PTX as a global.
template <typename T>
__device__ constexpr auto is_float8_storage(int) -> decltype((void)T{}.bits, bool()) {
  return sizeof(T) == 1;
}
template <typename T>
__device__ constexpr bool is_float8_storage(long) {
  return false;
}

// What an indexed read gives at a position outside its axis: NaN for the floating types, so
// that the wrong element shows in everything computed from it, and 0 (false) for the others.
// The read itself never leaves the tensor, and the host raises an InputError naming the
// position (kfuse.runtime.index_checks). float8's NaN is 0x7f in both formats (e4m3fn has no
// other; e5m2's, as torch writes it); a float8 type has no conversion from 0 to fall back on.
template <typename T>
__device__ __forceinline__ T index_fill() {
  if constexpr (is_float8_storage<T>(0)) {
    T nan{};
    nan.bits = 0x7f;
    return nan;
  } else {
    return (T)0;
  }
}
template <>
__device__ __forceinline__ float index_fill<float>() {
  return __uint_as_float(0x7fc00000u);
}
template <>
__device__ __forceinline__ double index_fill<double>() {
  return __longlong_as_double(0x7ff8000000000000LL);
}
template <>
__device__ __forceinline__ half index_fill<half>() {
  return half_from_bits(0x7e00);
}
template <>
__device__ __forceinline__ bfloat16 index_fill<bfloat16>() {
  return bfloat16_from_bits(0x7fc0);
}

// `value`, an element of an index tensor, as a position along an axis of `extent`; -1 where it
// is outside [0, extent). Such a read records itself in `flags`, two words per input of the
// kernel in host memory the device writes through (kfuse.runtime.index_checks): for read
// `read` (its input's number), flags[2 read] the value, then flags[2 read + 1] = 1, which the
// host waits for before reading the value. Plain 64-bit stores, each whole: reads that race
// leave one of their values, with no atomic on host memory, which a PCIe link may not carry.
// No host synchronization and no trap: the kernel runs on, and the CUDA context stays usable.
template <typename I, typename Index>
__device__ __forceinline__ Index indexed_position(I value, Index extent, unsigned long long* flags,
                                                  int read) {
  const long long v = (long long)value;
  if (v >= 0 && v < (long long)extent) return (Index)v;
  volatile unsigned long long* f = flags + 2 * read;
  f[0] = (unsigned long long)v;
  __threadfence_system();
  f[1] = 1ULL;
  return (Index)-1;
}

// The element `off` of `t` moved `position` steps of `step` along the indexed axis, or
// index_fill where the position is outside it (-1, from indexed_position).
template <typename T, int N, typename Index, typename Off>
__device__ __forceinline__ T indexed_load(const Tensor<T, N, Index>& t, Off off, Index position,
                                          Index step) {
  return position < 0 ? index_fill<T>() : load(t, off + position * step);
}

// The vector at `off` of `t` moved `position` steps of `step`, or a vector of index_fill.
template <int V, typename T, int N, typename Index, typename Off>
__device__ __forceinline__ Vec<T, V> indexed_load_vec(const Tensor<T, N, Index>& t, Off off,
                                                      Index position, Index step) {
  if (position >= 0) return load_vec<V>(t, off + position * step);
  Vec<T, V> v;
  for (int j = 0; j < V; ++j) v[j] = index_fill<T>();
  return v;
}

// Whether coordinate `c` of a padded axis falls on the tensor: c - low in [0, extent), one
// unsigned compare (a negative difference is a large unsigned one).
template <typename Index>
__device__ __forceinline__ bool window_in(Index c, Index low, Index extent) {
  return (unsigned long long)((long long)c - (long long)low) < (unsigned long long)extent;
}

// The element `off` of `t` where `inside`, else `fill` (the pad value): nothing is read
// outside the window.
template <typename T, int N, typename Index, typename Off>
__device__ __forceinline__ T window_load(const Tensor<T, N, Index>& t, Off off, bool inside,
                                         T fill) {
  return inside ? load(t, off) : fill;
}

// The vector at `off` of `t` where `inside` (a row inside the window), else `fill` V times.
template <int V, typename T, int N, typename Index, typename Off>
__device__ __forceinline__ Vec<T, V> window_load_vec(const Tensor<T, N, Index>& t, Off off,
                                                     bool inside, T fill) {
  if (inside) return load_vec<V>(t, off);
  Vec<T, V> v;
  for (int j = 0; j < V; ++j) v[j] = fill;
  return v;
}

}  // namespace kf
