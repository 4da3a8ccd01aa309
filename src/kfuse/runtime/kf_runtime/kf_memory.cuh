// kfuse device runtime: memory access through Tensors (see kf_base.cuh for the rules every part keeps).

namespace kf {

// ---------------------------------------------------------------------------------------------
// Memory access. Generated code goes through the Tensor forms so that the emulator can check
// bounds (KF_CHECK_BOUNDS(tensor, element offset, element count)); the pointer forms are for
// places that have no Tensor (scratch buffers, hand-written kernels).
// ---------------------------------------------------------------------------------------------

#ifdef KF_CHECK_BOUNDS
#define KF_BOUNDS_(t, off, count) KF_CHECK_BOUNDS(t, off, count)
#else
#define KF_BOUNDS_(t, off, count) ((void)0)
#endif

namespace detail {

template <int Bytes>
struct VecAlign {
  static constexpr int value = Bytes >= 16 ? 16 : Bytes;
};

// Unsigned words as wide and as aligned as a Vec of `Bytes` bytes: moved as one ld/st
// (.v2/.v4 up to 16 bytes) as the Vec is.
template <int Bytes>
struct VecWord {
  static_assert(Bytes % 4 == 0, "kf::Vec of 4 bytes or more is whole words");
  struct alignas(VecAlign<Bytes>::value) type {
    unsigned int w[Bytes / 4];
  };
};
template <>
struct VecWord<1> {
  using type = unsigned char;
};
template <>
struct VecWord<2> {
  using type = unsigned short;
};

}  // namespace detail

// V consecutive elements moved as one 2/4/8/16-byte access. Aligned to min(sizeof(T) * V, 16):
// the caller guarantees the address is aligned that much (the scheduler checks alignment).
template <typename T, int V>
struct alignas(detail::VecAlign<(int)sizeof(T) * V>::value) Vec {
  static_assert(V >= 1 && (V & (V - 1)) == 0, "kf::Vec width must be a power of two");
  T val[V];

  __device__ __forceinline__ T& operator[](int i) { return val[i]; }
  __device__ __forceinline__ const T& operator[](int i) const { return val[i]; }
};

// Element j of a bf16 vector (or of an array of bf16) as a float. On the GPU, from the 32-bit
// word that holds it and its neighbour: w << 16 for the even one, w & 0xffff0000 for the odd
// one, one instruction each, where passing the 16-bit element on costs two (a PRMT, then a
// shift) in sm_90 SASS (little-endian: element 2k is the word's low half; a vector of 2 or
// more is 4-byte aligned). The emulator's host compiler takes the element itself (the same
// value) from the vector passed by value: passed by reference, GCC 12 stopped with an
// internal error (its SRA pass) on a campaign's normalization kernels.
#if defined(KFUSE_USE_PTX)
template <int V>
__device__ __forceinline__ float bf16_lane(const Vec<bfloat16, V>& v, int j) {
  if (V >= 2) {
    const unsigned int w = reinterpret_cast<const unsigned int*>(&v)[j >> 1];
    return __uint_as_float((j & 1) ? (w & 0xffff0000u) : (w << 16));
  }
  return to_float(v.val[j]);
}

template <int N>
__device__ __forceinline__ float bf16_lane(const bfloat16 (&a)[N], int j) {
  return to_float(a[j]);
}
#else
template <typename Lanes>
__device__ __forceinline__ float bf16_lane(Lanes lanes, int j) {
  return to_float(lanes[j]);
}
#endif

template <typename T>
__device__ __forceinline__ T ld(const T* p) {
  return *p;
}

template <typename T>
__device__ __forceinline__ void st(T* p, T v) {
  *p = v;
}

// A whole Vec is copied through a pointer to the aligned aggregate; NVCC turns that into one
// ld/st.v2/.v4 (checked in the tests' PTX), and the host compiler into a plain copy.
template <int V, typename T>
__device__ __forceinline__ Vec<T, V> load_vec(const T* p) {
  return *reinterpret_cast<const Vec<T, V>*>(p);
}

template <int V, typename T>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, V>& v) {
  *reinterpret_cast<Vec<T, V>*>(p) = v;
}

// A vector of 16, 8 or 4 bytes from global to shared memory without passing through
// registers (cp.async, sm_80 and later): 16 bytes through L2 only (.cg), the smaller ones
// through L1 (.ca, the only form of those sizes). The copy is complete for the issuing thread
// after copy_async_wait().
template <typename T, int V, int N, typename Index, typename Off>
__device__ __forceinline__ void copy_async(Vec<T, V>* dst, const Tensor<T, N, Index>& t,
                                           Off off) {
  static_assert(sizeof(Vec<T, V>) == 16 || sizeof(Vec<T, V>) == 8 || sizeof(Vec<T, V>) == 4,
                "kf::copy_async moves vectors of 16, 8 or 4 bytes");
  KF_BOUNDS_(t, off, V);
#if defined(KFUSE_USE_PTX) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
  unsigned s;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(s) : "l"(dst));
  if (sizeof(Vec<T, V>) == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(t.data + off)
                 : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(s), "l"(t.data + off),
                 "n"((int)sizeof(Vec<T, V>))
                 : "memory");
  }
#else
  *dst = load_vec<V>(t.data + off);
#endif
}

__device__ __forceinline__ void copy_async_wait() {
#if defined(KFUSE_USE_PTX) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
  asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

template <typename T, int N, typename Index, typename Off>
__device__ __forceinline__ T load(const Tensor<T, N, Index>& t, Off off) {
  KF_BOUNDS_(t, off, 1);
  return t.data[off];
}

template <typename T, int N, typename Index, typename Off>
__device__ __forceinline__ void store(const Tensor<T, N, Index>& t, Off off, T v) {
  KF_BOUNDS_(t, off, 1);
  t.data[off] = v;
}

template <int V, typename T, int N, typename Index, typename Off>
__device__ __forceinline__ Vec<T, V> load_vec(const Tensor<T, N, Index>& t, Off off) {
  KF_BOUNDS_(t, off, V);
  return load_vec<V>(t.data + off);
}

// The vector at `off` where `ok`, else a vector of zeros, chosen as whole 4-, 8- or 16-byte
// words. Held rows load this way: a vector of 16-bit elements zeroed and then loaded under a
// guard is merged lane by lane, a byte permute (PRMT) per lane in sm_90 SASS (120 of an RMS
// norm backward kernel's 880 instructions); chosen as words it costs none.
template <int V, typename T, int N, typename Index, typename Off>
__device__ __forceinline__ Vec<T, V> load_vec_or_zero(const Tensor<T, N, Index>& t, Off off,
                                                      bool ok) {
  // A union reads the word back as the Vec (what NVCC and GCC define for type punning).
  union {
    typename detail::VecWord<(int)sizeof(Vec<T, V>)>::type word;
    Vec<T, V> vec;
  } u;
  u.word = {};
  if (ok) {
    KF_BOUNDS_(t, off, V);
    u.word = *reinterpret_cast<const decltype(u.word)*>(t.data + off);
  }
  return u.vec;
}

template <int V, typename T, int N, typename Index, typename Off>
__device__ __forceinline__ void store_vec(const Tensor<T, N, Index>& t, Off off,
                                          const Vec<T, V>& v) {
  KF_BOUNDS_(t, off, V);
  store_vec<V>(t.data + off, v);
}

}  // namespace kf

#undef KF_BOUNDS_
