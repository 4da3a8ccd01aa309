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

// A vector load reads V consecutive elements: those at off, off + 1, ... (unit stride). Each
// element is computed from an index written (q << 2) | c, c a constant, so that a random read's
// subsequence (index / 4) is the same expression q for a group of four and its word (index % 4)
// the constant c: the compiler makes the group one Philox call whose words stay in registers.
// Written off + j, each element paid the PhiloxMemo's test and a word picked by a computed
// index (a local array: STL in sm_90 SASS). Where V is a multiple of four and off is too (rows
// of a multiple of four elements), the vector is V / 4 whole groups; else it lies in the
// (V + 6) / 4 groups from off's, of which each lane takes its element by off % 4 (a select,
// no indexing). Computed lane by lane instead, those vectors took 4,600 of the 7,100 sm_90
// instructions of a dropout + layer norm forward's kernel.
template <int V, typename T, int N, typename Index, typename F, typename Off>
__device__ __forceinline__ Vec<T, V> load_vec(const Generated<T, N, Index, F>& g, Off off) {
  Vec<T, V> v;
  const long long at = (long long)off;
  const long long q = at >> 2;
  if (V % 4 == 0 && (at & 3) == 0) {
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = g.value(((q + j / 4) << 2) | (j % 4));
    return v;
  }
  constexpr int kGroups = (V + 6) / 4;
  T w[4 * kGroups];
#pragma unroll
  for (int k = 0; k < 4 * kGroups; ++k) w[k] = g.value(((q + k / 4) << 2) | (k % 4));
  const int r = (int)(at & 3);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    v[j] = r == 0 ? w[j] : r == 1 ? w[j + 1] : r == 2 ? w[j + 2] : w[j + 3];
  }
  return v;
}

// load_vec's whole groups alone, where the scheduler found every vector of the read starting
// at a multiple of four (ReductionKernelSpec.grouped_reads); zeros where not `ok`. Without the
// code for the other vectors, a dropout + layer norm forward's kernel of [8192, 8192] no longer
// spilled (sm_90).
template <int V, typename T, int N, typename Index, typename F, typename Off>
__device__ __forceinline__ Vec<T, V> load_vec_groups(const Generated<T, N, Index, F>& g, Off off,
                                                     bool ok) {
  static_assert(V % 4 == 0, "whole groups of four");
  Vec<T, V> v;
#pragma unroll
  for (int j = 0; j < V; ++j) v[j] = T{};
  if (ok) {
    const long long q = (long long)off >> 2;
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = g.value(((q + j / 4) << 2) | (j % 4));
  }
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
