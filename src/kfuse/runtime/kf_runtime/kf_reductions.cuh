// kfuse device runtime: reduction operators, Welford, warp, block and cluster reductions, and
// the fast transcendental forms (see kf_base.cuh for the rules every part keeps). The last
// part: it builds on all the others.

namespace kf {

// ---------------------------------------------------------------------------------------------
// Reduction operators. Each is a functor (so block reductions take it by value) with the
// identity the code generator initialises accumulators with. max/min propagate NaN as torch
// does. Accumulator types: int, long long, float, double (and bool for max/min).
// ---------------------------------------------------------------------------------------------

namespace detail {

template <typename T>
struct Limits;

template <>
struct Limits<float> {
  __device__ __forceinline__ static float lowest() { return __uint_as_float(0xff800000u); }
  __device__ __forceinline__ static float highest() { return __uint_as_float(0x7f800000u); }
};
template <>
struct Limits<double> {
  __device__ __forceinline__ static double lowest() {
    return __longlong_as_double((long long)0xfff0000000000000ULL);
  }
  __device__ __forceinline__ static double highest() {
    return __longlong_as_double(0x7ff0000000000000LL);
  }
};
template <>
struct Limits<int> {
  __device__ __forceinline__ static int lowest() { return -2147483647 - 1; }
  __device__ __forceinline__ static int highest() { return 2147483647; }
};
template <>
struct Limits<long long> {
  __device__ __forceinline__ static long long lowest() { return -9223372036854775807LL - 1; }
  __device__ __forceinline__ static long long highest() { return 9223372036854775807LL; }
};
template <>
struct Limits<bool> {
  __device__ __forceinline__ static bool lowest() { return false; }
  __device__ __forceinline__ static bool highest() { return true; }
};

}  // namespace detail

struct SumOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return add(a, b); }
  template <typename T>
  __device__ __forceinline__ static T identity() { return (T)0; }
};

struct ProdOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return mul(a, b); }
  template <typename T>
  __device__ __forceinline__ static T identity() { return (T)1; }
};

struct MaxOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return maximum(a, b); }
  __device__ __forceinline__ bool operator()(bool a, bool b) const { return a || b; }
  template <typename T>
  __device__ __forceinline__ static T identity() { return detail::Limits<T>::lowest(); }
};

struct MinOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return minimum(a, b); }
  __device__ __forceinline__ bool operator()(bool a, bool b) const { return a && b; }
  template <typename T>
  __device__ __forceinline__ static T identity() { return detail::Limits<T>::highest(); }
};

// ---------------------------------------------------------------------------------------------
// Welford, as (shift, sum, M2, count): the mean is shift + sum / count, where sum adds the
// values measured from shift (a value of the data, or 0 where that value is not finite), and
// M2 is combined with Chan et al.'s parallel formula. Keeping a sum rather than a running mean
// makes the mean exact wherever the shifted sums are (integer-valued data, equal values): the
// mean of a row of equal values is that value, and the mean of -8..8 in any order is 0, as the
// reference's shift + sum(x - shift) / n is; a running mean rounds at every combine, and a
// mean of 1.5e-8 where the data's is 0 turns x - mean = 0 into 1.5e-8, and 0 * inf = NaN
// into inf. Two states measured from different shifts are combined by moving one sum to the
// other's shift: an exact step for integer-valued data. count is kept in T so that the combine
// is pure floating point.
// ---------------------------------------------------------------------------------------------

template <typename T>
struct WelfordState {
  T shift;
  T sum;
  T m2;
  T count;
};

template <typename T>
__device__ __forceinline__ WelfordState<T> welford_identity() {
  WelfordState<T> s;
  s.shift = (T)0;
  s.sum = (T)0;
  s.m2 = (T)0;
  s.count = (T)0;
  return s;
}

// The mean of a non-empty state. Infinities: a row with +inf (and no -inf or NaN) has the sum
// +inf and so the mean +inf, as torch.mean's sum / n gives; inf and -inf give NaN.
template <typename T>
__device__ __forceinline__ T welford_mean(const WelfordState<T>& s) {
  return s.shift + s.sum / s.count;
}

// a / b inside welford_combine, where b is a count (a positive integer): for float, a times
// the hardware reciprocal (rcp.approx: within an ulp of 1 / b), not the IEEE
// division, which is a dozen instructions with a slow path. A combine has three of them, and
// an outer Welford kernel combines every batch of loaded rows into every lane's state: a
// bf16 batch norm's statistics kernel went from 2216 to 1288 SASS instructions. The
// emulator (no PTX) divides.
template <typename T>
__device__ __forceinline__ T welford_ratio(T a, T b) {
  return a / b;
}
#if defined(KFUSE_USE_PTX)
template <>
__device__ __forceinline__ float welford_ratio<float>(float a, float b) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(b));
  return a * r;
}
#endif

template <typename T>
__device__ __forceinline__ WelfordState<T> welford_combine(const WelfordState<T>& a,
                                                           const WelfordState<T>& b) {
  // Empty sides are skipped explicitly: 0/0 would otherwise poison the result with NaN.
  if (b.count == (T)0) return a;
  if (a.count == (T)0) return b;
  WelfordState<T> r;
  r.count = a.count + b.count;
  r.shift = a.shift;
  // b's values measured from a's shift. Equal shifts (a row of equal values, or states that
  // share the row's first value) add nothing, so the common case stays a plain sum.
  const T moved = b.shift == a.shift ? (T)0 : b.count * (b.shift - a.shift);
  r.sum = a.sum + (b.sum + moved);
  const T b_frac = welford_ratio(b.count, r.count);
  // The difference of the two means; infinite or NaN where either side holds an infinity or
  // a NaN, which then makes M2 NaN (as torch's variance of such a row is).
  const T delta =
      (b.shift - a.shift) + (welford_ratio(b.sum, b.count) - welford_ratio(a.sum, a.count));
  r.m2 = a.m2 + b.m2 + delta * delta * a.count * b_frac;
  return r;
}

// One value: measured from itself where it is finite (sum 0, M2 0), else from 0 (sum and
// M2 its NaN or infinity, so that M2 comes out NaN, as torch's variance of it is).
template <typename T>
__device__ __forceinline__ void welford_update(WelfordState<T>& s, T x) {
  WelfordState<T> one;
  const bool finite = isfinite(x);
  one.shift = finite ? x : (T)0;
  one.sum = finite ? (T)0 : x;
  one.m2 = finite ? (T)0 : x - x;
  one.count = (T)1;
  s = welford_combine(s, one);
}

// Folds N values loaded together into s: their own sum and M2 first (M2 from their mean, in
// two passes over the registers), then one combine (Chan et al.). The batch is measured from
// its first value, so that values far from zero (1000 +- 0.01) do not lose their spread in a
// sum of large numbers. (N is a constant: the compiler unrolls the loops; no #pragma, which
// the emulator's host compiler rejects.) A NaN or infinite first value is no shift (inf - inf
// would make every value NaN).
template <typename T, int N>
__device__ __forceinline__ void welford_update_batch(WelfordState<T>& s, const T (&v)[N]) {
  const T shift = isfinite(v[0]) ? v[0] : (T)0;
  T sum = (T)0;
  for (int i = 0; i < N; ++i) sum += v[i] - shift;
  const T mean = sum / (T)N;
  T m2 = (T)0;
  for (int i = 0; i < N; ++i) {
    const T d = (v[i] - shift) - mean;
    m2 += d * d;
  }
  WelfordState<T> b;
  b.count = (T)N;
  b.shift = shift;
  b.sum = sum;
  b.m2 = m2;
  s = welford_combine(s, b);
}

struct WelfordOp {
  template <typename T>
  __device__ __forceinline__ WelfordState<T> operator()(const WelfordState<T>& a,
                                                        const WelfordState<T>& b) const {
    return welford_combine(a, b);
  }
};

// ---------------------------------------------------------------------------------------------
// Online softmax statistics: a running maximum and the sum of exp(x - max) in one pass, for a
// max(x) and a sum(exp(x - broadcast(max))) over the same axes that the reduction scheduler
// folds into one accumulator (kfuse.codegen.reduction_plan, fold_softmax). The sum is kept
// relative to the running maximum and rescaled when that grows (Milakov and Gimelshein,
// "Online normalizer calculation for softmax", 2018).
//
// What the two reductions give, exactly: the max propagates NaN; every exp(x - max) term is
// NaN where x and the max are the same infinity (inf - inf), so a row whose max is +inf or
// -inf (all -inf) has the sum NaN, and -inf values under a finite max add 0. The state keeps
// sum 0 while its max is -inf (no term is formed then) and softmax_sum puts the NaN back for
// a non-empty row whose max stayed -inf; a +inf max meets itself in exp(inf - inf) and a NaN
// max spreads through the rescale, as in the two reductions.
// ---------------------------------------------------------------------------------------------

template <typename T>
struct SoftmaxState {
  T max;
  T sum;
};

template <typename T>
__device__ __forceinline__ SoftmaxState<T> softmax_identity() {
  SoftmaxState<T> s;
  s.max = detail::Limits<T>::lowest();  // -inf
  s.sum = (T)0;
  return s;
}

template <typename T>
__device__ __forceinline__ SoftmaxState<T> softmax_combine(const SoftmaxState<T>& a,
                                                           const SoftmaxState<T>& b) {
  SoftmaxState<T> r;
  r.max = maximum(a.max, b.max);
  // Each side's sum moved to the common maximum; a side whose max is -inf has sum 0 and adds
  // 0 (0 * exp(-inf - m) = 0 for a finite m; both -inf: the result stays the empty state).
  r.sum = r.max == detail::Limits<T>::lowest() ? (T)0
                                       : a.sum * exp(a.max - r.max) + b.sum * exp(b.max - r.max);
  return r;
}

// The sum of the two reductions for a row of n elements (the state's max is their max).
template <typename T>
__device__ __forceinline__ T softmax_sum(const SoftmaxState<T>& s, long long n) {
  const T inf = detail::Limits<T>::highest();
  return s.max == detail::Limits<T>::lowest() && n > 0 ? inf - inf : s.sum;
}

struct SoftmaxOp {
  template <typename T>
  __device__ __forceinline__ SoftmaxState<T> operator()(const SoftmaxState<T>& a,
                                                        const SoftmaxState<T>& b) const {
    return softmax_combine(a, b);
  }
};

// ---------------------------------------------------------------------------------------------
// Warp and block reductions. Deterministic: a fixed combine tree, no atomics, so a given launch
// configuration always gives the same bits. Every thread of the warp / block must call them
// (they contain __shfl_*_sync with a full mask, and __syncthreads).
// ---------------------------------------------------------------------------------------------

namespace detail {

// The three lane moves, as functors (NVRTC compiles no lambdas in device code) that shuffled()
// applies to each 32-bit-shuffleable part of a value.
struct ShflXor {
  unsigned mask;
  int lane_mask;
  template <typename U>
  __device__ __forceinline__ U operator()(U x) const {
    return __shfl_xor_sync(mask, x, lane_mask, 32);
  }
};
struct ShflDown {
  unsigned mask;
  int delta;
  template <typename U>
  __device__ __forceinline__ U operator()(U x) const {
    return __shfl_down_sync(mask, x, delta, 32);
  }
};
struct ShflUp {
  unsigned mask;
  int delta;
  template <typename U>
  __device__ __forceinline__ U operator()(U x) const {
    return __shfl_up_sync(mask, x, delta, 32);
  }
};
struct ShflFrom {
  unsigned mask;
  int src;
  template <typename U>
  __device__ __forceinline__ U operator()(U x) const {
    return __shfl_sync(mask, x, src, 32);
  }
};

// A value moved across lanes: the accumulator types directly, WelfordState field by field, and
// bool, which has no shuffle of its own, as an int.
template <typename T, typename Move>
__device__ __forceinline__ T shuffled(T v, Move move) {
  return move(v);
}
template <typename T, typename Move>
__device__ __forceinline__ WelfordState<T> shuffled(const WelfordState<T>& v, Move move) {
  WelfordState<T> r;
  r.shift = move(v.shift);
  r.sum = move(v.sum);
  r.m2 = move(v.m2);
  r.count = move(v.count);
  return r;
}
template <typename T, typename Move>
__device__ __forceinline__ SoftmaxState<T> shuffled(const SoftmaxState<T>& v, Move move) {
  SoftmaxState<T> r;
  r.max = move(v.max);
  r.sum = move(v.sum);
  return r;
}
template <typename Move>
__device__ __forceinline__ bool shuffled(bool v, Move move) {
  return move((int)v) != 0;
}

template <typename T>
__device__ __forceinline__ T shfl_xor(unsigned mask, const T& v, int lane_mask) {
  return shuffled(v, ShflXor{mask, lane_mask});
}
template <typename T>
__device__ __forceinline__ T shfl_down(unsigned mask, const T& v, int delta) {
  return shuffled(v, ShflDown{mask, delta});
}
template <typename T>
__device__ __forceinline__ T shfl_up(unsigned mask, const T& v, int delta) {
  return shuffled(v, ShflUp{mask, delta});
}
template <typename T>
__device__ __forceinline__ T shfl(unsigned mask, const T& v, int src) {
  return shuffled(v, ShflFrom{mask, src});
}

// Butterfly over groups of `width` lanes (a power of two <= 32, groups aligned to it): every
// lane of a group ends with the group's result.
template <typename T, typename Op>
__device__ __forceinline__ T butterfly(T v, Op op, unsigned mask, int width) {
  for (int offset = width >> 1; offset > 0; offset >>= 1) {
    v = op(v, shfl_xor(mask, v, offset));
  }
  return v;
}

// Lanes 0..n-1 of a full warp hold values (n <= 32, any n); returns the reduction of those n
// values to every lane. A down-sweep guarded by n, then a broadcast from lane 0.
template <typename T, typename Op>
__device__ __forceinline__ T warp_reduce_first(T v, Op op, int n, int lane) {
  int span = 1;
  while (span < n) span <<= 1;
  for (int offset = span >> 1; offset > 0; offset >>= 1) {
    T other = shfl_down(0xffffffffu, v, offset);
    if (lane + offset < n) v = op(v, other);
  }
  return shfl(0xffffffffu, v, 0);
}

// The block is seen as rows of `row_len` consecutive threads (in thread_rank order); each row
// is reduced independently and every thread gets its row's result.
// scratch: at least block_threads() elements of T in shared memory.
template <typename T, typename Op>
__device__ __forceinline__ T reduce_rows(T v, Op op, T* scratch, int row_len) {
  const int nthreads = block_threads();
  const int rank = thread_rank();
  const int row = rank / row_len;
  const int x = rank - row * row_len;

  if (row_len % 32 == 0) {
    // Whole warps, each inside one row: shuffle within warps, then combine warp results.
    const int lane = rank & 31;
    const int warps_per_row = row_len / 32;
    v = butterfly(v, op, 0xffffffffu, 32);
    if (warps_per_row == 1) return v;
    if (lane == 0) scratch[rank >> 5] = v;
    __syncthreads();
    // Every warp of the row repeats the same combine tree, so they agree bit for bit.
    const int first = row * warps_per_row;
    T w = scratch[first + (lane < warps_per_row ? lane : 0)];
    w = warp_reduce_first(w, op, warps_per_row, lane);
    __syncthreads();  // scratch may be reused by the next call
    return w;
  }

  if (row_len < 32 && (32 % row_len) == 0) {
    // Several whole rows per warp. The last warp may be partial: shuffle among present lanes.
    const int warp_base = rank & ~31;
    const int present = nthreads - warp_base;
    const unsigned mask = present >= 32 ? 0xffffffffu : ((1u << present) - 1u);
    return butterfly(v, op, mask, row_len);
  }

  // Rows that neither fill nor tile warps (e.g. 48 or 100 threads): tree in shared memory.
  T* mine = scratch + row * row_len;
  mine[x] = v;
  __syncthreads();
  int span = 1;
  while (span < row_len) span <<= 1;
  for (int offset = span >> 1; offset > 0; offset >>= 1) {
    if (x < offset && x + offset < row_len) mine[x] = op(mine[x], mine[x + offset]);
    __syncthreads();
  }
  T r = mine[0];
  __syncthreads();  // scratch may be reused by the next call
  return r;
}

}  // namespace detail

// Reduction over the 32 lanes of a full warp; every lane gets the result.
template <typename T, typename Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
  return detail::butterfly(v, op, 0xffffffffu, 32);
}

// Reduction over threadIdx.x, independently for each (threadIdx.y, threadIdx.z); every thread
// gets its row's result. Any block shape up to 1024 threads. scratch: __shared__ T with at least
// blockDim.x * blockDim.y * blockDim.z elements.
template <typename T, typename Op>
__device__ __forceinline__ T block_reduce_x(T v, Op op, T* scratch) {
  return detail::reduce_rows(v, op, scratch, (int)blockDim.x);
}

// The same where the generated kernel knows blockDim.x (block_x, passed as a literal): the
// branches of reduce_rows for other row lengths fold away, which takes 25-30 ms (a quarter)
// off NVRTC's time for a reduction kernel.
template <typename T, typename Op>
__device__ __forceinline__ T block_reduce_x(T v, Op op, T* scratch, int block_x) {
  return detail::reduce_rows(v, op, scratch, block_x);
}

// Reduction over the whole block; every thread gets the result. Same scratch contract.
template <typename T, typename Op>
__device__ __forceinline__ T block_reduce(T v, Op op, T* scratch) {
  return detail::reduce_rows(v, op, scratch, block_threads());
}

template <typename T>
__device__ __forceinline__ WelfordState<T> warp_welford(const WelfordState<T>& s) {
  return warp_reduce(s, WelfordOp());
}

template <typename T>
__device__ __forceinline__ WelfordState<T> block_welford_x(const WelfordState<T>& s,
                                                           WelfordState<T>* scratch) {
  return block_reduce_x(s, WelfordOp(), scratch);
}

template <typename T>
__device__ __forceinline__ WelfordState<T> block_welford_x(const WelfordState<T>& s,
                                                           WelfordState<T>* scratch, int block_x) {
  return block_reduce_x(s, WelfordOp(), scratch, block_x);
}

template <typename T>
__device__ __forceinline__ WelfordState<T> block_welford(const WelfordState<T>& s,
                                                         WelfordState<T>* scratch) {
  return block_reduce(s, WelfordOp(), scratch);
}

// ---------------------------------------------------------------------------------------------
// Thread-block clusters (sm_90 and later): the blocks of a cluster share one row, and each
// reduction's block results are combined through distributed shared memory. Every thread of
// every block of the cluster must call these, the same number of times; a kernel that uses
// them ends with cluster_sync(), so that no block exits while another may still read its
// shared memory. The emulator runs a cluster's blocks together (kf_emu::cluster_barrier,
// cluster_map); elsewhere without PTX they act on one block.
// ---------------------------------------------------------------------------------------------

// Barrier over the whole cluster; shared-memory writes before it are visible to every block
// of the cluster after it.
__device__ __forceinline__ void cluster_sync() {
#if defined(KFUSE_USE_PTX) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
               "barrier.cluster.wait.acquire.aligned;" ::: "memory");
#elif defined(KFUSE_EMULATOR)
  kf_emu::cluster_barrier();
#else
  __syncthreads();
#endif
}

// The value at `local` (this block's shared memory) in the shared memory of block `rank` of
// the cluster.
template <typename T>
__device__ __forceinline__ T cluster_load(const T* local, unsigned rank) {
#if defined(KFUSE_USE_PTX) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  unsigned addr, remote;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(addr) : "l"(local));
  asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
  constexpr int kWords = (int)((sizeof(T) + 3) / 4);
  union {
    T value;
    unsigned words[kWords];
  } u;
#pragma unroll
  for (int w = 0; w < kWords; ++w) {
    asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(u.words[w]) : "r"(remote + 4u * w)
                 : "memory");
  }
  return u.value;
#elif defined(KFUSE_EMULATOR)
  return *static_cast<const T*>(kf_emu::cluster_map(local, rank));
#else
  (void)rank;
  return *local;
#endif
}

// Combines each block's `block_value` (its block reduction's result) over the C blocks of the
// cluster, in rank order, so every block gets the same bits. slots: 64 bytes of this block's
// shared memory, 16-byte aligned: two 32-byte slots used in turn (phase), so that one barrier
// per reduction suffices: a block writes a slot again only two reductions later, after a
// barrier every block passes once it has read that slot.
template <int C, typename T, typename Op>
__device__ __forceinline__ T cluster_reduce(T block_value, Op op, unsigned char* slots,
                                            int& phase) {
  static_assert(sizeof(T) <= 32, "kf::cluster_reduce: a value must fit a 32-byte slot");
  T* slot = reinterpret_cast<T*>(slots + 32 * phase);
  phase ^= 1;
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) *slot = block_value;
  cluster_sync();
  T r = cluster_load(slot, 0u);
  for (int k = 1; k < C; ++k) r = op(r, cluster_load(slot, (unsigned)k));
  return r;
}

// Integer power with torch's integer semantics: exact by repeated squaring (wrapping like
// the integer multiply), and for negative exponents the truncated result of 1 / base^-e, which
// is 0 except for bases 1 and -1.
template <typename I>
__device__ __forceinline__ I ipow(I base, I exp) {
  if (exp < 0) {
    if (base == 1) return 1;
    if (base == -1) return (exp & 1) ? (I)-1 : (I)1;
    return 0;
  }
  I result = 1;
  while (exp) {
    if (exp & 1) result = mul(result, base);
    base = mul(base, base);
    exp >>= 1;
  }
  return result;
}

// Fast forms for values whose every use ends in a BFloat16 output (the code generator decides,
// see kfuse/codegen/precision.py): the hardware exp2 and reciprocal approximations, about
// 2 float ulp, far below bf16's 2^-8. gelu_tanh uses 0.5 * (1 + tanh(u)) = 1 / (1 + e^-2u),
// which also avoids the cancellation of 1 + tanh(u) near -1.
// exp_fast is ex2.approx.ftz(x * log2(e)): two instructions. __expf without -ftz adds a
// denormal fix-up (a compare and two multiplies); results below 2^-126 are far below what a
// bf16 output can tell from zero.
__device__ __forceinline__ float exp_fast(float x) {
#ifdef KFUSE_USE_PTX
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x * 1.4426950408889634f));
  return r;
#else
  return ::expf(x);
#endif
}

// a * approx(1 / b): 2 ulp, and unlike __fdividef right at the extremes that matter here
// (inf / finite = inf, finite / inf = 0, 0 / 0 = NaN).
__device__ __forceinline__ float div_fast(float a, float b) {
#ifdef KFUSE_USE_PTX
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(b));
  return a * r;
#else
  return a / b;
#endif
}

__device__ __forceinline__ float sigmoid_fast(float x) { return div_fast(1.0f, 1.0f + exp_fast(-x)); }
__device__ __forceinline__ float silu_fast(float x) { return div_fast(x, 1.0f + exp_fast(-x)); }
// Below u = -9, tanhf(u) is -1 and torch's 0.5 * x * (1 + tanh(u)) is exactly x * 0 (-0, or
// NaN for x = -inf), where the quotient would give a tiny negative number: the same value in
// bf16, but not the same value to multiply an infinity by (-0 * inf is NaN, as in torch).
__device__ __forceinline__ float gelu_tanh_fast(float x) {
  float u = 0.79788456080286535588f * (x + 0.044715f * x * x * x);
  return u < -9.0f ? x * 0.0f : div_fast(x, 1.0f + exp_fast(-2.0f * u));
}

// One value into online softmax statistics (see SoftmaxState), with the exp the sum's own exp
// would have used (Fast: exp_fast, where only BFloat16 outputs follow). The common case, a
// value at most the running max, is one exp and an add; a new max rescales the sum.
template <bool Fast>
__device__ __forceinline__ float softmax_exp(float x) {
  return Fast ? exp_fast(x) : exp(x);
}

template <bool Fast>
__device__ __forceinline__ void softmax_update(SoftmaxState<float>& s, float x) {
  if (x <= s.max) {  // neither is NaN
    if (s.max != detail::Limits<float>::lowest()) s.sum += softmax_exp<Fast>(x - s.max);
    return;
  }
  // A larger value, or a NaN on either side: the new max (NaN-propagating), the sum rescaled
  // (0 while the max was -inf) plus this value's term (exp(0) = 1, or NaN for inf - inf).
  const float m = maximum(s.max, x);
  s.sum = s.sum * softmax_exp<Fast>(s.max - m) + softmax_exp<Fast>(x - m);
  s.max = m;
}

// Values loaded together into online softmax statistics: their max first, then one rescale
// of the sum and an exp a value, with no branch (an update a value compares with the running
// max first, and the compiler schedules no exp past that branch). A batch whose max is -inf
// leaves the state as it was (the sum stays 0 under a -inf max, see SoftmaxState). (N is a
// constant: the loops unroll; no #pragma, which the emulator's host compiler rejects.)
template <bool Fast, int N>
__device__ __forceinline__ void softmax_update_batch(SoftmaxState<float>& s, const float (&v)[N]) {
  float m = s.max;
  for (int i = 0; i < N; ++i) m = maximum(m, v[i]);
  if (m == detail::Limits<float>::lowest()) return;
  float sum = s.sum * softmax_exp<Fast>(s.max - m);
  for (int i = 0; i < N; ++i) sum += softmax_exp<Fast>(v[i] - m);
  s.max = m;
  s.sum = sum;
}

}  // namespace kf

