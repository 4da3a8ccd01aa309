// kfuse device runtime, optional part: counter-based random numbers (uniform, normal) with
// nvFuser's semantics. runtime_header.with_optional_parts puts it after the other parts in
// the kernels that name kf::philox, and only there, so no other kernel's source changes.
//
// A value of an RNG op depends on (seed, offset, the element's linear index over the op's
// logical output shape) alone:
//   * one Philox 4x32-10 call (key = the 64-bit seed, counter = (offset, subsequence), each a
//     64-bit number as two 32-bit words, low word first, offset in words 0 and 1) gives four
//     32-bit words;
//   * the subsequence is linear_index / 4 and the remainder picks the word (Double:
//     linear_index / 2, two words per value).
// kfuse.reference.philox computes the same numbers with NumPy, bit for bit: every change here
// is a change there.
//
// Bit-identity between the GPU, the emulator and NumPy: every floating-point operation below
// is one that IEEE 754 rounds the same everywhere (+, -, *, /, sqrt, conversions, written as
// separate operations: the GPU compiles with --fmad=false and the host compiler contracts
// nothing). The normal transform needs log, sin and cos; the CUDA library's logf/sinf/cosf
// and glibc's differ in the last bit for some arguments (neither is correctly rounded, and
// NumPy's are a third implementation), so they are computed here from those operations
// alone: a Taylor series in each case, with enough terms that the truncation is far below
// an ulp. There is no fmaf in them either, since NumPy has no float32 fma to match it with
// (the one fmaf here, in rng_unit_float, has an exact product, so it rounds as NumPy's
// separate multiply and add do).

namespace kf {

struct PhiloxBlock {
  unsigned int word[4];
};

namespace rng_detail {

// The high half of a 32 x 32-bit product (mul.hi.u32 on the GPU).
__device__ __forceinline__ unsigned int mul_high(unsigned int a, unsigned int b) {
  return (unsigned int)(((unsigned long long)a * b) >> 32);
}

// Philox's multipliers and its Weyl key increments (Salmon et al., SC'11, and Random123).
constexpr unsigned int kMul0 = 0xD2511F53u;
constexpr unsigned int kMul1 = 0xCD9E8D57u;
constexpr unsigned int kKeyStep0 = 0x9E3779B9u;
constexpr unsigned int kKeyStep1 = 0xBB67AE85u;

__device__ __forceinline__ void philox_round(unsigned int (&c)[4], unsigned int k0, unsigned int k1) {
#if defined(KF_PHILOX_WIDE_PRODUCTS) && defined(KFUSE_USE_PTX)
  // Each product whole from one mul.wide.u32 (one IMAD.WIDE.U32), where NVVM writes a mul.lo
  // and a mul.hi (two IMADs): kfuse.switches.PHILOX_WIDE_PRODUCTS. The same bits.
  unsigned long long p0, p1;
  asm("mul.wide.u32 %0, %1, %2;" : "=l"(p0) : "r"(c[0]), "r"(kMul0));
  asm("mul.wide.u32 %0, %1, %2;" : "=l"(p1) : "r"(c[2]), "r"(kMul1));
  const unsigned int hi0 = (unsigned int)(p0 >> 32), lo0 = (unsigned int)p0;
  const unsigned int hi1 = (unsigned int)(p1 >> 32), lo1 = (unsigned int)p1;
#else
  const unsigned int hi0 = mul_high(kMul0, c[0]);
  const unsigned int lo0 = kMul0 * c[0];
  const unsigned int hi1 = mul_high(kMul1, c[2]);
  const unsigned int lo1 = kMul1 * c[2];
#endif
  const unsigned int n0 = hi1 ^ c[1] ^ k0;
  const unsigned int n2 = hi0 ^ c[3] ^ k1;
  c[0] = n0;
  c[1] = lo1;
  c[2] = n2;
  c[3] = lo0;
}

}  // namespace rng_detail

// Philox 4x32 with ten rounds applied to a counter of four words and a key of two.
__device__ __forceinline__ PhiloxBlock philox4x32_10(unsigned int c0, unsigned int c1,
                                                     unsigned int c2, unsigned int c3,
                                                     unsigned int k0, unsigned int k1) {
  unsigned int c[4] = {c0, c1, c2, c3};
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    rng_detail::philox_round(c, k0, k1);
    k0 += rng_detail::kKeyStep0;
    k1 += rng_detail::kKeyStep1;
  }
  return PhiloxBlock{{c[0], c[1], c[2], c[3]}};
}

// The four words nvFuser's philox(seed, subsequence, offset) gives.
__device__ __forceinline__ PhiloxBlock philox(unsigned long long seed,
                                              unsigned long long subsequence,
                                              unsigned long long offset) {
  return philox4x32_10((unsigned int)offset, (unsigned int)(offset >> 32),
                       (unsigned int)subsequence, (unsigned int)(subsequence >> 32),
                       (unsigned int)seed, (unsigned int)(seed >> 32));
}

// A thread's last Philox block: the values of one subsequence (four floats, two doubles)
// are usually consecutive elements of one thread, which then pay for one call, not four.
struct PhiloxMemo {
  unsigned long long subsequence = ~0ull;
  unsigned long long offset = ~0ull;
  PhiloxBlock block;
  __device__ __forceinline__ const PhiloxBlock& get(unsigned long long seed,
                                                    unsigned long long subsequence_,
                                                    unsigned long long offset_) {
    if (subsequence_ != subsequence || offset_ != offset) {
      block = philox(seed, subsequence_, offset_);
      subsequence = subsequence_;
      offset = offset_;
    }
    return block;
  }
};

// ---------------------------------------------------------------------------------------------
// Words to uniform numbers
// ---------------------------------------------------------------------------------------------

// (0, 1]: x / 2^32 plus half a step. Near 1 the float rounds to 1.0 (x >= 2^32 - 128).
// One fused multiply-add: the product by a power of two is exact, so rounding the sum once
// gives the bits of the separate multiply and add (kfuse.reference.philox's), one
// instruction fewer for every random number.
__device__ __forceinline__ float rng_unit_float(unsigned int x) {
  const float scale = 0x1p-32f;
  return ::fmaf((float)x, scale, 0.5f * scale);
}

// (0, 1] from 53 bits: x in the low 32, y shifted up by 21 (the two overlap, XORed).
__device__ __forceinline__ double rng_unit_double(unsigned int x, unsigned int y) {
  const double scale = 0x1p-53;
  const unsigned long long z = (unsigned long long)x ^ ((unsigned long long)y << 21);
  return ::fma((double)z, scale, 0.5 * scale);  // exact product: as rng_unit_float
}

// [0, 1): the (0, 1] number with 1.0 folded to 0, as nvFuser's uniformf.
__device__ __forceinline__ float rng_uniform01_float(unsigned int x) {
  const float u = rng_unit_float(x);
  return u == 1.0f ? 0.0f : u;
}

__device__ __forceinline__ double rng_uniform01_double(unsigned int x, unsigned int y) {
  const double u = rng_unit_double(x, y);
  return u == 1.0 ? 0.0 : u;
}

// ---------------------------------------------------------------------------------------------
// log, sin and cos from basic operations only (see the top of this file)
// ---------------------------------------------------------------------------------------------

// log(x) for x in [0, 1] (a uniform number): x = m * 2^e with m in [sqrt(1/2), sqrt(2)),
// log(m) = log((1 + s) / (1 - s)) = 2s + 2s^3/3 + 2s^5/5 + ... with s = f / (2 + f), f = m - 1,
// |s| <= 0.172; written f - s * (f - R) with R = 2s^2/3 + 2s^4/5 + ..., which keeps f exact.
// log(0) = -inf, as logf gives.
__device__ __forceinline__ float rng_log_float(float x) {
  if (x == 0.0f) return -__int_as_float(0x7f800000);
  const unsigned int bits = __float_as_uint(x);
  int e = (int)(bits >> 23) - 127;
  float m = __uint_as_float((bits & 0x007fffffu) | 0x3f800000u);
  if (m > 0x1.6a09e6p+0f) {
    m = m * 0.5f;
    e += 1;
  }
  const float f = m - 1.0f;
  const float s = f / (2.0f + f);
  const float z = s * s;
  // Truncated after 2z^4/9: the next term is below 2^-30 of the result.
  float p = 0x1.c71c72p-3f;
  p = p * z + 0x1.24924ap-2f;
  p = p * z + 0x1.99999ap-2f;
  p = p * z + 0x1.555556p-1f;
  const float r = p * z;
  const float log_m = f - s * (f - r);
  // ln 2 in two parts; the first has 12 significant bits, so e times it is exact.
  const float fe = (float)e;
  return fe * 0x1.62ep-1f + (fe * 0x1.0bfbe8p-15f + log_m);
}

__device__ __forceinline__ double rng_log_double(double x) {
  if (x == 0.0) return -__longlong_as_double(0x7ff0000000000000ll);
  const unsigned long long bits = (unsigned long long)__double_as_longlong(x);
  int e = (int)(bits >> 52) - 1023;
  double m = __longlong_as_double(
      (long long)((bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull));
  if (m > 0x1.6a09e667f3bcdp+0) {
    m = m * 0.5;
    e += 1;
  }
  const double f = m - 1.0;
  const double s = f / (2.0 + f);
  const double z = s * s;
  // Truncated after 2z^10/21: the next term is below 2^-60 of the result.
  double p = 0x1.8618618618618p-4;
  p = p * z + 0x1.af286bca1af28p-4;
  p = p * z + 0x1.e1e1e1e1e1e1ep-4;
  p = p * z + 0x1.1111111111111p-3;
  p = p * z + 0x1.3b13b13b13b14p-3;
  p = p * z + 0x1.745d1745d1746p-3;
  p = p * z + 0x1.c71c71c71c71cp-3;
  p = p * z + 0x1.2492492492492p-2;
  p = p * z + 0x1.999999999999ap-2;
  p = p * z + 0x1.5555555555555p-1;
  const double r = p * z;
  const double log_m = f - s * (f - r);
  // ln 2 in two parts; the first has 32 significant bits, so e times it is exact.
  const double de = (double)e;
  return de * 0x1.62e42feep-1 + (de * 0x1.a39ef35793c76p-33 + log_m);
}

// sin(v) (want_cos false) or cos(v) for v in [0, 2 pi]: v = k pi/2 + r with |r| <= pi/4
// (pi/2 in three parts, the first two short enough that k times them is exact for k <= 4),
// then the Taylor series of sin r or cos r and the quadrant's sign and swap.
__device__ __forceinline__ float rng_sin_or_cos_float(float v, bool want_cos) {
  const int k = (int)(v * 0x1.45f306p-1f + 0.5f);
  const float fk = (float)k;
  const float r = ((v - fk * 0x1.92p+0f) - fk * 0x1.fb4p-12f) - fk * 0x1.4442d2p-24f;
  const float z = r * r;
  // sin r to r^9 and cos r to r^10: the next terms are below 2^-28 of the result.
  float ps = 0x1.71de3ap-19f;
  ps = ps * z - 0x1.a01a02p-13f;
  ps = ps * z + 0x1.111112p-7f;
  ps = ps * z - 0x1.555556p-3f;
  const float sin_r = r + r * (z * ps);
  float pc = -0x1.27e4fcp-22f;
  pc = pc * z + 0x1.a01a02p-16f;
  pc = pc * z - 0x1.6c16c2p-10f;
  pc = pc * z + 0x1.555556p-5f;
  pc = pc * z - 0.5f;
  const float cos_r = 1.0f + z * pc;
  const int quadrant = (k + (want_cos ? 1 : 0)) & 3;
  // sin(r + q pi/2): sin r, cos r, -sin r, -cos r; cos(x) = sin(x + pi/2).
  const float magnitude = (quadrant & 1) ? cos_r : sin_r;
  return (quadrant & 2) ? -magnitude : magnitude;
}

__device__ __forceinline__ double rng_sin_or_cos_double(double v, bool want_cos) {
  const int k = (int)(v * 0x1.45f306dc9c883p-1 + 0.5);
  const double dk = (double)k;
  const double r =
      ((v - dk * 0x1.921fb544p+0) - dk * 0x1.0b4611a6p-34) - dk * 0x1.3198a2e037073p-69;
  const double z = r * r;
  // sin r to r^17 and cos r to r^18: the next terms are below 2^-60 of the result.
  double ps = 0x1.952c77030ad4ap-49;
  ps = ps * z - 0x1.ae7f3e733b81fp-41;
  ps = ps * z + 0x1.6124613a86d09p-33;
  ps = ps * z - 0x1.ae64567f544e4p-26;
  ps = ps * z + 0x1.71de3a556c734p-19;
  ps = ps * z - 0x1.a01a01a01a01ap-13;
  ps = ps * z + 0x1.1111111111111p-7;
  ps = ps * z - 0x1.5555555555555p-3;
  const double sin_r = r + r * (z * ps);
  double pc = 0x1.6827863b97d97p-53;
  pc = pc * z - 0x1.ae7f3e733b81fp-45;
  pc = pc * z + 0x1.93974a8c07c9dp-37;
  pc = pc * z - 0x1.1eed8eff8d898p-29;
  pc = pc * z + 0x1.27e4fb7789f5cp-22;
  pc = pc * z - 0x1.a01a01a01a01ap-16;
  pc = pc * z + 0x1.6c16c16c16c17p-10;
  pc = pc * z - 0x1.5555555555555p-5;
  pc = pc * z + 0.5;
  const double cos_r = 1.0 - z * pc;
  const int quadrant = (k + (want_cos ? 1 : 0)) & 3;
  const double magnitude = (quadrant & 1) ? cos_r : sin_r;
  return (quadrant & 2) ? -magnitude : magnitude;
}

// ---------------------------------------------------------------------------------------------
// An RNG op's element from its Philox block and component (linear_index % 4, or % 2 for
// double), by output type. Float and double as nvFuser's rng_* functions; half and bfloat16
// (T) are computed in float, and a range's result that rounds to `to` becomes `from`.
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ float rng_uniform_float(const PhiloxBlock& b, int component) {
  return rng_uniform01_float(b.word[component]);
}

__device__ __forceinline__ float rng_uniform_range_float(const PhiloxBlock& b, int component,
                                                         float from, float to) {
  const float range = to - from;
  return from + range * rng_uniform01_float(b.word[component]);
}

__device__ __forceinline__ double rng_uniform_double(const PhiloxBlock& b, int component) {
  return rng_uniform01_double(b.word[2 * component], b.word[2 * component + 1]);
}

__device__ __forceinline__ double rng_uniform_range_double(const PhiloxBlock& b, int component,
                                                           double from, double to) {
  const double range = to - from;
  return from + range * rng_uniform_double(b, component);
}

template <typename T>
__device__ __forceinline__ T rng_uniform_narrow(const PhiloxBlock& b, int component) {
  const T result = from_float<T>(rng_unit_float(b.word[component]));
  return to_float(result) == 1.0f ? from_float<T>(0.0f) : result;
}

template <typename T>
__device__ __forceinline__ T rng_uniform_range_narrow(const PhiloxBlock& b, int component,
                                                      float from, float to) {
  const float range = to - from;
  const T result = from_float<T>(from + range * rng_unit_float(b.word[component]));
  return to_float(result) == to_float(from_float<T>(to)) ? from_float<T>(from) : result;
}

// Box-Muller on words (2j, 2j + 1) for components 2j (the sine) and 2j + 1 (the cosine).
__device__ __forceinline__ float rng_normal_float(const PhiloxBlock& b, int component) {
  const int pair = component & ~1;
  const float u = rng_uniform01_float(b.word[pair]);
  const float v = rng_uniform01_float(b.word[pair + 1]) * 0x1.921fb6p+2f;
  return sqrtf(-2.0f * rng_log_float(u)) * rng_sin_or_cos_float(v, (component & 1) != 0);
}

__device__ __forceinline__ float rng_normal_general_float(const PhiloxBlock& b, int component,
                                                          float mean, float std) {
  return rng_normal_float(b, component) * std + mean;
}

// Double: one value from all four words; component 0 the sine, 1 the cosine.
__device__ __forceinline__ double rng_normal_double(const PhiloxBlock& b, int component) {
  const double u = rng_uniform01_double(b.word[0], b.word[1]);
  const double v = rng_uniform01_double(b.word[2], b.word[3]) * 0x1.921fb54442d18p+2;
  return ::sqrt(-2.0 * rng_log_double(u)) * rng_sin_or_cos_double(v, component != 0);
}

__device__ __forceinline__ double rng_normal_general_double(const PhiloxBlock& b, int component,
                                                            double mean, double std) {
  return rng_normal_double(b, component) * std + mean;
}

template <typename T>
__device__ __forceinline__ T rng_normal_narrow(const PhiloxBlock& b, int component) {
  return from_float<T>(rng_normal_float(b, component));
}

template <typename T>
__device__ __forceinline__ T rng_normal_general_narrow(const PhiloxBlock& b, int component,
                                                       float mean, float std) {
  return from_float<T>(rng_normal_float(b, component) * std + mean);
}

}  // namespace kf
