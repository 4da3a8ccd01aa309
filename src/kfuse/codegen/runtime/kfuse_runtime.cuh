// kfuse device runtime: the helpers every generated kernel is built on.
//
// The code generator prepends this one file, as is, to every kernel's source. It is compiled two
// ways and must mean the same thing in both:
//   * by NVRTC for the GPU, with -DKFUSE_USE_PTX and no toolkit headers at all;
//   * by the host C++ compiler in the emulator (-DKFUSE_EMULATOR, no KFUSE_USE_PTX), which
//     provides the CUDA built-ins listed in docs/INTERFACES.md and nothing more.
// Hence: no #include, no <cstdint> (plain int / long long / unsigned ... only), inline PTX only
// under KFUSE_USE_PTX with a portable #else, and only the built-ins named in INTERFACES.md.
// kfuse_reductions.cuh (reduction operators, Welford, warp and block reductions, the fast
// transcendental forms) follows this file in every kernel; runtime_header() joins the two.
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

// Threads of the block, and this thread's rank in it, in x-fastest order (the order warps are
// formed in).
__device__ __forceinline__ int block_threads() {
  return (int)(blockDim.x * blockDim.y * blockDim.z);
}

__device__ __forceinline__ int thread_rank() {
  return (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
}

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

// ---------------------------------------------------------------------------------------------
// Classification. Done on the bits so that neither fast-math nor a host <math.h> macro can
// change the answer.
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ bool isnan(float x) {
  return (__float_as_uint(x) & 0x7fffffffu) > 0x7f800000u;
}
__device__ __forceinline__ bool isinf(float x) {
  return (__float_as_uint(x) & 0x7fffffffu) == 0x7f800000u;
}
__device__ __forceinline__ bool isfinite(float x) {
  return (__float_as_uint(x) & 0x7f800000u) != 0x7f800000u;
}
__device__ __forceinline__ bool isnan(double x) {
  return (__double_as_longlong(x) & 0x7fffffffffffffffLL) > 0x7ff0000000000000LL;
}
__device__ __forceinline__ bool isinf(double x) {
  return (__double_as_longlong(x) & 0x7fffffffffffffffLL) == 0x7ff0000000000000LL;
}
__device__ __forceinline__ bool isfinite(double x) {
  return (__double_as_longlong(x) & 0x7ff0000000000000LL) != 0x7ff0000000000000LL;
}
// Integers are always finite.
__device__ __forceinline__ bool isnan(int) { return false; }
__device__ __forceinline__ bool isnan(long long) { return false; }
__device__ __forceinline__ bool isinf(int) { return false; }
__device__ __forceinline__ bool isinf(long long) { return false; }
__device__ __forceinline__ bool isfinite(int) { return true; }
__device__ __forceinline__ bool isfinite(long long) { return true; }

// ---------------------------------------------------------------------------------------------
// Floating-point math: one line each for float and double, mapped onto the CUDA math built-ins
// that INTERFACES.md lists (the emulator provides exactly those).
// ---------------------------------------------------------------------------------------------

#define KF_UNARY_MATH(name, ffun, dfun)                                             \
  __device__ __forceinline__ float name(float x) { return ::ffun(x); }              \
  __device__ __forceinline__ double name(double x) { return ::dfun(x); }

KF_UNARY_MATH(exp, expf, exp)
KF_UNARY_MATH(exp2, exp2f, exp2)
KF_UNARY_MATH(expm1, expm1f, expm1)
KF_UNARY_MATH(log, logf, log)
KF_UNARY_MATH(log2, log2f, log2)
KF_UNARY_MATH(log10, log10f, log10)
KF_UNARY_MATH(log1p, log1pf, log1p)
KF_UNARY_MATH(sqrt, sqrtf, sqrt)
KF_UNARY_MATH(sin, sinf, sin)
KF_UNARY_MATH(cos, cosf, cos)
KF_UNARY_MATH(tan, tanf, tan)
KF_UNARY_MATH(asin, asinf, asin)
KF_UNARY_MATH(acos, acosf, acos)
KF_UNARY_MATH(atan, atanf, atan)
KF_UNARY_MATH(sinh, sinhf, sinh)
KF_UNARY_MATH(cosh, coshf, cosh)
KF_UNARY_MATH(tanh, tanhf, tanh)
KF_UNARY_MATH(asinh, asinhf, asinh)
KF_UNARY_MATH(acosh, acoshf, acosh)
KF_UNARY_MATH(atanh, atanhf, atanh)
KF_UNARY_MATH(erf, erff, erf)
KF_UNARY_MATH(erfc, erfcf, erfc)
KF_UNARY_MATH(floor, floorf, floor)
KF_UNARY_MATH(ceil, ceilf, ceil)
KF_UNARY_MATH(trunc, truncf, trunc)
KF_UNARY_MATH(abs, fabsf, fabs)
// torch.round rounds half to even: rint in the default rounding mode, not C's round.
KF_UNARY_MATH(round, rintf, rint)

#undef KF_UNARY_MATH

__device__ __forceinline__ float rsqrt(float x) { return ::rsqrtf(x); }
// No double rsqrt in host C: 1/sqrt is correctly rounded twice, close enough and portable.
__device__ __forceinline__ double rsqrt(double x) { return 1.0 / ::sqrt(x); }

__device__ __forceinline__ float reciprocal(float x) { return 1.0f / x; }
__device__ __forceinline__ double reciprocal(double x) { return 1.0 / x; }

__device__ __forceinline__ float neg(float x) { return -x; }
__device__ __forceinline__ double neg(double x) { return -x; }

// torch's formulas, so results match the eager GPU path as closely as possible.
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + ::expf(-x)); }
__device__ __forceinline__ double sigmoid(double x) { return 1.0 / (1.0 + ::exp(-x)); }

// relu keeps NaN (torch clamps with NaN propagation) and -0 (NaN < 0 and -0 < 0 are false).
__device__ __forceinline__ float relu(float x) { return x < 0.0f ? 0.0f : x; }
__device__ __forceinline__ double relu(double x) { return x < 0.0 ? 0.0 : x; }

__device__ __forceinline__ float silu(float x) { return x / (1.0f + ::expf(-x)); }
__device__ __forceinline__ double silu(double x) { return x / (1.0 + ::exp(-x)); }

__device__ __forceinline__ float gelu_erf(float x) {
  return x * 0.5f * (1.0f + ::erff(x * 0.70710678118654752440f));
}
__device__ __forceinline__ double gelu_erf(double x) {
  return x * 0.5 * (1.0 + ::erf(x * 0.70710678118654752440));
}

// 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
__device__ __forceinline__ float gelu_tanh(float x) {
  float inner = 0.79788456080286535588f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + ::tanhf(inner));
}
__device__ __forceinline__ double gelu_tanh(double x) {
  double inner = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + ::tanh(inner));
}

// torch.sign: (0 < x) - (x < 0); NaN gives 0 on both torch backends.
__device__ __forceinline__ float sign(float x) {
  return (float)((0.0f < x) - (x < 0.0f));
}
__device__ __forceinline__ double sign(double x) { return (double)((0.0 < x) - (x < 0.0)); }

__device__ __forceinline__ float fmod(float a, float b) { return ::fmodf(a, b); }
__device__ __forceinline__ double fmod(double a, double b) { return ::fmod(a, b); }

// torch.remainder: C fmod moved onto the divisor's side.
__device__ __forceinline__ float remainder(float a, float b) {
  float r = ::fmodf(a, b);
  if (r != 0.0f && ((b < 0.0f) != (r < 0.0f))) r += b;
  return r;
}
__device__ __forceinline__ double remainder(double a, double b) {
  double r = ::fmod(a, b);
  if (r != 0.0 && ((b < 0.0) != (r < 0.0))) r += b;
  return r;
}

__device__ __forceinline__ float pow(float a, float b) { return ::powf(a, b); }
__device__ __forceinline__ double pow(double a, double b) { return ::pow(a, b); }

__device__ __forceinline__ float atan2(float a, float b) { return ::atan2f(a, b); }
__device__ __forceinline__ double atan2(double a, double b) { return ::atan2(a, b); }

// torch.maximum / minimum: a NaN in either operand wins.
// On sm_80+ one max.NaN / min.NaN instruction does this (a canonical NaN instead of a's
// payload); the portable form costs about six integer and float instructions per element, which
// makes a max reduction such as softmax's issue-bound.
__device__ __forceinline__ float maximum(float a, float b) {
#if defined(KFUSE_USE_PTX) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return isnan(a) ? a : (isnan(b) ? b : (a > b ? a : b));
#endif
}
__device__ __forceinline__ double maximum(double a, double b) {
  return isnan(a) ? a : (isnan(b) ? b : (a > b ? a : b));
}
__device__ __forceinline__ float minimum(float a, float b) {
#if defined(KFUSE_USE_PTX) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
  float r;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return isnan(a) ? a : (isnan(b) ? b : (a < b ? a : b));
#endif
}
__device__ __forceinline__ double minimum(double a, double b) {
  return isnan(a) ? a : (isnan(b) ? b : (a < b ? a : b));
}

// torch.clamp with tensor bounds: NaN anywhere propagates; lo > hi gives hi.
__device__ __forceinline__ float clamp(float x, float lo, float hi) {
  return minimum(maximum(x, lo), hi);
}
__device__ __forceinline__ double clamp(double x, double lo, double hi) {
  return minimum(maximum(x, lo), hi);
}

// torch.lerp: two formulas so that w == 1 gives exactly b and w == 0 exactly a.
__device__ __forceinline__ float lerp(float a, float b, float w) {
  float d = b - a;
  return ::fabsf(w) < 0.5f ? a + w * d : b - d * (1.0f - w);
}
__device__ __forceinline__ double lerp(double a, double b, double w) {
  double d = b - a;
  return ::fabs(w) < 0.5 ? a + w * d : b - d * (1.0 - w);
}

// ---------------------------------------------------------------------------------------------
// Integer math. Division by zero is defined here as 0 (torch raises on the CPU, the GPU returns
// garbage); MIN % -1, which traps on x86, is 0 as in mathematics.
// ---------------------------------------------------------------------------------------------

#define KF_INT_MATH(I)                                                                     \
  __device__ __forceinline__ I abs(I x) { return x < 0 ? (I)(0 - x) : x; }                 \
  __device__ __forceinline__ I neg(I x) { return (I)(0 - x); }                             \
  __device__ __forceinline__ I sign(I x) { return (I)((0 < x) - (x < 0)); }                \
  __device__ __forceinline__ I maximum(I a, I b) { return a > b ? a : b; }                 \
  __device__ __forceinline__ I minimum(I a, I b) { return a < b ? a : b; }                 \
  __device__ __forceinline__ I clamp(I x, I lo, I hi) { return minimum(maximum(x, lo), hi); } \
  __device__ __forceinline__ I fmod(I a, I b) {                                            \
    if (b == 0 || b == (I)-1) return (I)0;                                                 \
    return (I)(a % b);                                                                     \
  }                                                                                        \
  __device__ __forceinline__ I remainder(I a, I b) {                                       \
    if (b == 0 || b == (I)-1) return (I)0;                                                 \
    I r = (I)(a % b);                                                                      \
    if (r != 0 && ((r < 0) != (b < 0))) r = (I)(r + b);                                    \
    return r;                                                                              \
  }

KF_INT_MATH(int)
KF_INT_MATH(long long)

#undef KF_INT_MATH

template <typename T>
__device__ __forceinline__ T where(bool c, T a, T b) {
  return c ? a : b;
}

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

// 16 bytes from global to shared memory without passing through registers (cp.async, sm_80
// and later). The copy is complete for the issuing thread after copy_async_wait().
template <typename T, int V, int N, typename Index, typename Off>
__device__ __forceinline__ void copy_async(Vec<T, V>* dst, const Tensor<T, N, Index>& t,
                                           Off off) {
  static_assert(sizeof(Vec<T, V>) == 16, "kf::copy_async moves 16-byte vectors");
  KF_BOUNDS_(t, off, V);
#if defined(KFUSE_USE_PTX) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
  unsigned s;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(s) : "l"(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(t.data + off)
               : "memory");
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

template <int V, typename T, int N, typename Index, typename Off>
__device__ __forceinline__ void store_vec(const Tensor<T, N, Index>& t, Off off,
                                          const Vec<T, V>& v) {
  KF_BOUNDS_(t, off, V);
  store_vec<V>(t.data + off, v);
}

}  // namespace kf

#undef KF_BOUNDS_
