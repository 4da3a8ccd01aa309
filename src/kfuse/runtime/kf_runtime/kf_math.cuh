// kfuse device runtime: classification, floating-point and integer math (see kf_base.cuh for the rules every part keeps).

namespace kf {

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
// torch.round rounds half to even: rint in the default rounding mode, not C's round.
KF_UNARY_MATH(round, rintf, rint)

#undef KF_UNARY_MATH

// sin and cos of one argument (codegen.shared_math pairs them): CUDA's sincosf and sincos run
// the argument reduction, the costly part, once for both, and give sinf's and cosf's values
// bit for bit (tests/test_shared_math_gpu.py). The emulator calls the two C functions.
template <typename T>
struct SinCos {
  T sin;
  T cos;
};
__device__ __forceinline__ SinCos<float> sincos(float x) {
  SinCos<float> r;
#ifdef KFUSE_USE_PTX
  ::sincosf(x, &r.sin, &r.cos);
#else
  r.sin = ::sinf(x);
  r.cos = ::cosf(x);
#endif
  return r;
}
__device__ __forceinline__ SinCos<double> sincos(double x) {
  SinCos<double> r;
#ifdef KFUSE_USE_PTX
  ::sincos(x, &r.sin, &r.cos);
#else
  r.sin = ::sin(x);
  r.cos = ::cos(x);
#endif
  return r;
}

// A float's |x| by clearing its sign bit, not ::fabsf: ptxas (CUDA 13.0, sm_80 and sm_90)
// folds a comparison of fabsf's result with a constant that every number satisfies
// (|x| > -1, |x| >= 0, -|x| <= 0) to true, though NaN makes it false. The bit form gives the
// same value for every input, NaN included, and ptxas knows nothing of its range.
__device__ __forceinline__ float abs(float x) {
  return __uint_as_float(__float_as_uint(x) & 0x7fffffffu);
}
// ptxas makes no such fold for double comparisons (checked like the float one).
__device__ __forceinline__ double abs(double x) { return ::fabs(x); }

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

// An int's minimum, maximum or selection leaves through minmax_barrier. ptxas (NVRTC 12.9 to
// 13.3 for sm_90 and sm_100; 13.4 fixed it) merges two chained 32-bit min/max into one
// three-input VIMNMX3 and loses a negation it had folded into the inner one's operand:
// max(max(acc, -a), b) runs as max(acc, a, b). A GPU campaign met it as max(neg(x)) over an
// Int32 axis reading 6 where 8 was right. An identity byte permute (prmt) is an instruction
// ptxas does not look through, so a min/max of kfuse's never merges with the next one and
// every negation stays an instruction of its own (tests/test_int_minmax_sass.py).
__device__ __forceinline__ int minmax_barrier(int x) {
#if defined(KFUSE_USE_PTX) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  int r;
  asm("prmt.b32 %0, %1, 0, 0x3210;" : "=r"(r) : "r"(x));
  return r;
#else
  return x;
#endif
}
// 64-bit min/max is two 32-bit halves and selects: no VIMNMX3, nothing to keep apart.
__device__ __forceinline__ long long minmax_barrier(long long x) { return x; }

// Integer add, sub, mul and negation wrap around (two's complement), as torch's do. C++ leaves
// a signed overflow undefined and NVVM builds on that: it took abs(x) as never negative, so
// remainder(m, abs(m) + 1) for m = INT_MIN skipped its sign fix and a GPU campaign read INT_MIN
// where 1 was right. They are done in the unsigned type, where overflow is defined, and
// converted back (modulo 2^N in NVRTC and the host compilers alike).
template <typename I>
struct unsigned_of;
template <>
struct unsigned_of<int> {
  using type = unsigned int;
};
template <>
struct unsigned_of<long long> {
  using type = unsigned long long;
};

#define KF_INT_MATH(I)                                                                     \
  __device__ __forceinline__ I add(I a, I b) {                                             \
    using U = unsigned_of<I>::type;                                                        \
    return (I)((U)a + (U)b);                                                               \
  }                                                                                        \
  __device__ __forceinline__ I sub(I a, I b) {                                             \
    using U = unsigned_of<I>::type;                                                        \
    return (I)((U)a - (U)b);                                                               \
  }                                                                                        \
  __device__ __forceinline__ I mul(I a, I b) {                                             \
    using U = unsigned_of<I>::type;                                                        \
    return (I)((U)a * (U)b);                                                               \
  }                                                                                        \
  __device__ __forceinline__ I neg(I x) { return sub((I)0, x); }                           \
  __device__ __forceinline__ I abs(I x) { return x < 0 ? neg(x) : x; }                     \
  __device__ __forceinline__ I sign(I x) { return (I)((0 < x) - (x < 0)); }                \
  __device__ __forceinline__ I maximum(I a, I b) { return minmax_barrier(a > b ? a : b); } \
  __device__ __forceinline__ I minimum(I a, I b) { return minmax_barrier(a < b ? a : b); } \
  __device__ __forceinline__ I where(bool c, I a, I b) { return minmax_barrier(c ? a : b); } \
  __device__ __forceinline__ I clamp(I x, I lo, I hi) { return minimum(maximum(x, lo), hi); } \
  __device__ __forceinline__ I fmod(I a, I b) {                                            \
    if (b == 0 || b == (I)-1) return (I)0;                                                 \
    return (I)(a % b);                                                                     \
  }                                                                                        \
  __device__ __forceinline__ I remainder(I a, I b) {                                       \
    if (b == 0 || b == (I)-1) return (I)0;                                                 \
    I r = (I)(a % b);                                                                      \
    if (r != 0 && ((r < 0) != (b < 0))) r = add(r, b);                                    \
    return r;                                                                              \
  }

KF_INT_MATH(int)
KF_INT_MATH(long long)

#undef KF_INT_MATH

// The floating forms, so that a reduction's combine (SumOp, ProdOp) names one function for
// every type; the integer overloads above are exact matches and win over these.
template <typename T>
__device__ __forceinline__ T add(T a, T b) { return a + b; }
template <typename T>
__device__ __forceinline__ T mul(T a, T b) { return a * b; }

template <typename T>
__device__ __forceinline__ T where(bool c, T a, T b) {
  return c ? a : b;
}

}  // namespace kf
