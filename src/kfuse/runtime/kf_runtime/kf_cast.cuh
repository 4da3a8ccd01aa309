// kfuse device runtime: cast<To>(From) (see kf_base.cuh for the rules every part keeps).

namespace kf {

// ---------------------------------------------------------------------------------------------
// cast<To>(From): every pair of bool, int, long long, half, bfloat16, float, double, with
// PyTorch's semantics: float -> integer truncates toward zero (saturating, NaN -> 0, as on the
// GPU); anything -> bool is x != 0 (NaN -> true); integers and double reach half/bfloat16
// through float (as c10::Half / c10::BFloat16 do).
// ---------------------------------------------------------------------------------------------

namespace detail {

// Integer <-> integer, integer -> float/double, float <-> double, anything -> bool (for the
// built-in types static_cast<bool> is exactly x != 0, NaN included).
template <typename To, typename From>
struct Cast {
  __device__ __forceinline__ static To apply(From x) { return static_cast<To>(x); }
};

template <>
struct Cast<int, float> {
  __device__ __forceinline__ static int apply(float x) { return f2i(x); }
};
template <>
struct Cast<int, double> {
  __device__ __forceinline__ static int apply(double x) { return f2i(x); }
};
template <>
struct Cast<long long, float> {
  __device__ __forceinline__ static long long apply(float x) { return f2ll(x); }
};
template <>
struct Cast<long long, double> {
  __device__ __forceinline__ static long long apply(double x) { return f2ll(x); }
};

// Into the 16-bit types: through float.
template <typename From>
struct Cast<half, From> {
  __device__ __forceinline__ static half apply(From x) {
    return FromFloat<half>::apply(static_cast<float>(x));
  }
};
template <typename From>
struct Cast<bfloat16, From> {
  __device__ __forceinline__ static bfloat16 apply(From x) {
    return FromFloat<bfloat16>::apply(static_cast<float>(x));
  }
};

// Out of the 16-bit types: widen to float (exact), then the float rule.
template <typename To>
struct Cast<To, half> {
  __device__ __forceinline__ static To apply(half x) { return Cast<To, float>::apply(to_float(x)); }
};
template <typename To>
struct Cast<To, bfloat16> {
  __device__ __forceinline__ static To apply(bfloat16 x) {
    return Cast<To, float>::apply(to_float(x));
  }
};

// The four pairs both partial specialisations above match.
template <>
struct Cast<half, half> {
  __device__ __forceinline__ static half apply(half x) { return x; }
};
template <>
struct Cast<bfloat16, bfloat16> {
  __device__ __forceinline__ static bfloat16 apply(bfloat16 x) { return x; }
};
template <>
struct Cast<half, bfloat16> {
  __device__ __forceinline__ static half apply(bfloat16 x) {
    return FromFloat<half>::apply(to_float(x));
  }
};
template <>
struct Cast<bfloat16, half> {
  __device__ __forceinline__ static bfloat16 apply(half x) {
    return FromFloat<bfloat16>::apply(to_float(x));
  }
};

}  // namespace detail

template <typename To, typename From>
__device__ __forceinline__ To cast(From x) {
  return detail::Cast<To, From>::apply(x);
}

}  // namespace kf
