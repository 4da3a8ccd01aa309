// kfuse device runtime: half and bfloat16 storage types and their conversions (see kf_base.cuh for the rules every part keeps).

namespace kf {

// ---------------------------------------------------------------------------------------------
// Reduced-precision storage types. Aggregates holding the raw bits (alignment 2), so they can
// live in __shared__ arrays, unions and Vec without constructors getting in the way.
// ---------------------------------------------------------------------------------------------

struct half {
  unsigned short bits;
};

struct bfloat16 {
  unsigned short bits;
};

__device__ __forceinline__ half half_from_bits(unsigned short b) {
  half h;
  h.bits = b;
  return h;
}

__device__ __forceinline__ bfloat16 bfloat16_from_bits(unsigned short b) {
  bfloat16 h;
  h.bits = b;
  return h;
}

// A float that holds a bfloat16 value exactly (rounded by cast<bfloat16>, or widened from
// one): its top half is that bfloat16, so narrowing it needs no conversion instruction.
__device__ __forceinline__ bfloat16 bfloat16_from_exact(float f) {
  return bfloat16_from_bits((unsigned short)(__float_as_uint(f) >> 16));
}

namespace detail {

// float -> binary16, round to nearest even, exact for every input (subnormals, overflow to
// inf, NaN kept as a quiet NaN with the top payload bits).
__device__ __forceinline__ unsigned short float_to_half_bits(float f) {
  unsigned int x = __float_as_uint(f);
  unsigned int sign = (x >> 16) & 0x8000u;
  unsigned int ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) {
    return (unsigned short)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  }
  // 65520 is the midpoint between 65504 (largest half, odd mantissa) and 65536: ties go up.
  if (ax >= 0x477ff000u) {
    return (unsigned short)(sign | 0x7c00u);
  }
  if (ax >= 0x38800000u) {  // normal half range, |f| >= 2^-14
    unsigned int odd = (ax >> 13) & 1u;
    ax += 0xfffu + odd;  // RNE on the 13 dropped bits; a carry bumps the exponent correctly
    return (unsigned short)(sign | ((ax - 0x38000000u) >> 13));
  }
  // Subnormal half: value in units of 2^-24 is mant * 2^(e - 126); shift right by 126 - e.
  int e = (int)(ax >> 23);
  if (e < 102) {  // below 2^-25: rounds to zero even at the tie point
    return (unsigned short)sign;
  }
  unsigned int mant = (ax & 0x7fffffu) | 0x800000u;
  int shift = 126 - e;  // 14 .. 24
  unsigned int q = mant >> shift;
  unsigned int rem = mant & ((1u << shift) - 1u);
  unsigned int halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (q & 1u))) {
    ++q;  // may become 0x400, the smallest normal: that encoding is right as is
  }
  return (unsigned short)(sign | q);
}

__device__ __forceinline__ float half_bits_to_float(unsigned short h) {
  unsigned int sign = ((unsigned int)h & 0x8000u) << 16;
  unsigned int exp = ((unsigned int)h >> 10) & 0x1fu;
  unsigned int mant = (unsigned int)h & 0x3ffu;
  if (exp == 0x1fu) {  // inf or NaN; NaN payload moves up unchanged
    return __uint_as_float(sign | 0x7f800000u | (mant << 13));
  }
  if (exp == 0u) {  // zero or subnormal: mant * 2^-24 is exact in float
    float mag = (float)mant * 5.9604644775390625e-8f;
    return __uint_as_float(sign | __float_as_uint(mag));
  }
  return __uint_as_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

// float -> bfloat16, round to nearest even; NaN stays NaN (quiet bit forced so that truncating
// the payload cannot turn it into inf).
__device__ __forceinline__ unsigned short float_to_bfloat16_bits(float f) {
  unsigned int x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return (unsigned short)((x >> 16) | 0x0040u);
  }
  x += 0x7fffu + ((x >> 16) & 1u);  // overflow past the largest finite value lands on inf
  return (unsigned short)(x >> 16);
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// to_float / from_float. The PTX forms are single instructions on sm_80+; the portable forms
// are bit-exact with them (except the NaN payload chosen for bfloat16: both are quiet NaNs).
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ float to_float(half x) {
#if defined(KFUSE_USE_PTX)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
  return f;
#else
  return detail::half_bits_to_float(x.bits);
#endif
}

// bfloat16 is the top half of a float: widening is a shift on every architecture.
__device__ __forceinline__ float to_float(bfloat16 x) {
  return __uint_as_float((unsigned int)x.bits << 16);
}

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(double x) { return (float)x; }
__device__ __forceinline__ float to_float(int x) { return (float)x; }
__device__ __forceinline__ float to_float(long long x) { return (float)x; }
__device__ __forceinline__ float to_float(bool x) { return x ? 1.0f : 0.0f; }

namespace detail {

// Float to integer as CUDA's cvt.rzi does it (and torch on the GPU): truncate toward zero,
// saturate out-of-range values, NaN -> 0. Written out so the emulator gives the same answer
// instead of C++'s undefined behaviour. `limit` is 2^(bits-1), exact in float and double.
template <typename I, typename F>
__device__ __forceinline__ I float_to_int(F x, F limit, I lowest, I highest) {
  if (!(x == x)) return (I)0;
  if (x >= limit) return highest;
  if (x <= -limit) return lowest;
  return (I)x;
}

__device__ __forceinline__ int f2i(float x) {
  return float_to_int<int, float>(x, 2147483648.0f, (int)(-2147483647 - 1), 2147483647);
}
__device__ __forceinline__ int f2i(double x) {
  return float_to_int<int, double>(x, 2147483648.0, (int)(-2147483647 - 1), 2147483647);
}
__device__ __forceinline__ long long f2ll(float x) {
  return float_to_int<long long, float>(x, 9223372036854775808.0f, -9223372036854775807LL - 1,
                                        9223372036854775807LL);
}
__device__ __forceinline__ long long f2ll(double x) {
  return float_to_int<long long, double>(x, 9223372036854775808.0, -9223372036854775807LL - 1,
                                         9223372036854775807LL);
}

template <typename T>
struct FromFloat;

template <>
struct FromFloat<half> {
  __device__ __forceinline__ static half apply(float f) {
#if defined(KFUSE_USE_PTX)
    unsigned short b;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(b) : "f"(f));
    return half_from_bits(b);
#else
    return half_from_bits(float_to_half_bits(f));
#endif
  }
};

template <>
struct FromFloat<bfloat16> {
  __device__ __forceinline__ static bfloat16 apply(float f) {
#if defined(KFUSE_USE_PTX) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
    unsigned short b;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(f));
    return bfloat16_from_bits(b);
#else
    return bfloat16_from_bits(float_to_bfloat16_bits(f));
#endif
  }
};

template <>
struct FromFloat<float> {
  __device__ __forceinline__ static float apply(float f) { return f; }
};
template <>
struct FromFloat<double> {
  __device__ __forceinline__ static double apply(float f) { return (double)f; }
};
template <>
struct FromFloat<int> {
  __device__ __forceinline__ static int apply(float f) { return f2i(f); }
};
template <>
struct FromFloat<long long> {
  __device__ __forceinline__ static long long apply(float f) { return f2ll(f); }
};
template <>
struct FromFloat<bool> {
  __device__ __forceinline__ static bool apply(float f) { return f != 0.0f; }  // NaN -> true
};

}  // namespace detail

template <typename T>
__device__ __forceinline__ T from_float(float f) {
  return detail::FromFloat<T>::apply(f);
}

}  // namespace kf
