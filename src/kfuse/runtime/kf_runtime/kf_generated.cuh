// kfuse device runtime: generated values (full, iota, random numbers) read by the reduction
// kernels where they would load an input (kfuse.codegen.generated). Put after the runtime header
// only in kernels that read one so, as the float8 part is, so that every other kernel's source
// stays what it was.
//
// Such a read is a kf::Tensor with no data (the launcher passes the sizes and the strides of the
// generated tensor's own contiguous layout) together with `value`, a function of a linear index in
// that layout: the offset a load would read at is that index, so every load below computes the
// elements it would have read, and the kernel's loads, whatever their form (an element, a
// vector, a guarded vector, an asynchronous copy into shared memory), stay as they are.

namespace kf {

template <typename T, int N, typename Index, typename F>
struct Generated {
  Index size[N];
  Index stride[N];
  F value;  // linear index (long long) -> the element, in T
};

// The read of `layout` (the kernel parameter, no data) through `value`.
template <typename T, int N, typename Index, typename F>
__device__ __forceinline__ Generated<T, N, Index, F> generated(const Tensor<T, N, Index>& layout,
                                                             F value) {
  Generated<T, N, Index, F> g{{}, {}, value};
  for (int d = 0; d < N; ++d) {
    g.size[d] = layout.size[d];
    g.stride[d] = layout.stride[d];
  }
  return g;
}

template <typename T, int N, typename Index, typename F, typename Off>
__device__ __forceinline__ T load(const Generated<T, N, Index, F>& g, Off off) {
  return g.value((long long)off);
}

// A vector load reads V consecutive elements: those at off, off + 1, ... (unit stride). Where
// V is a multiple of four and off is too (rows of a multiple of four elements), each group of
// four is given its index as (q << 2) | c, c a constant: a random read's subsequence (index / 4)
// is then the same expression q for the four, and its word (index % 4) the constant c, so the
// compiler makes the group one Philox call whose words stay in registers. Written off + j,
// each element paid the PhiloxMemo's test and a word picked by a computed index (a local
// array: STL in sm_90 SASS). (Other vectors taken by a function out of line made the kernel
// shorter but spill: its call's saved registers.)
template <int V, typename T, int N, typename Index, typename F, typename Off>
__device__ __forceinline__ Vec<T, V> load_vec(const Generated<T, N, Index, F>& g, Off off) {
  Vec<T, V> v;
  const long long at = (long long)off;
  if (V % 4 == 0 && (at & 3) == 0) {
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = g.value((((at >> 2) + j / 4) << 2) | (j % 4));
    return v;
  }
#pragma unroll
  for (int j = 0; j < V; ++j) v[j] = g.value(at + j);
  return v;
}

// Zeros where not `ok`, as kf::load_vec_or_zero gives them; nothing computed there.
template <int V, typename T, int N, typename Index, typename F, typename Off>
__device__ __forceinline__ Vec<T, V> load_vec_or_zero(const Generated<T, N, Index, F>& g, Off off,
                                                      bool ok) {
  Vec<T, V> v;
#pragma unroll
  for (int j = 0; j < V; ++j) v[j] = T{};
  if (ok) v = load_vec<V>(g, off);
  return v;
}

// The elements a copy into shared memory would move, stored there now: complete before the
// copy_async_wait() and barrier that the kernel has after it anyway.
template <typename T, int V, int N, typename Index, typename F, typename Off>
__device__ __forceinline__ void copy_async(Vec<T, V>* dst, const Generated<T, N, Index, F>& g,
                                           Off off) {
  *dst = load_vec<V>(g, off);
}

}  // namespace kf
