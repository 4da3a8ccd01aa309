// kfuse device runtime: the float8 storage types float8_e4m3fn and float8_e5m2, their
// conversions and casts (see kf_base.cuh for the rules every part keeps).
//
// Not one of the parts runtime_header() always joins: a kernel that reads or writes a float8
// value gets this part after the header (kfuse.codegen.runtime_header.float8_header), so
// every other kernel's source stays as it was. It only adds overloads of to_float and
// specialisations of FromFloat and Cast, which the header's templates find when a kernel's
// code instantiates them.
//
// Conversions follow torch (c10::Float8_e4m3fn, c10::Float8_e5m2): float -> float8 rounds to
// nearest even; e4m3fn, which has no infinity, saturates a finite overflow and an infinity
// to +-448; e5m2 overflows to +-inf; NaN becomes sign | 0x7f. They are written as bit
// manipulation on every target: PTX's cvt ... satfinite would saturate e5m2 as well, and the
// host emulator needs the same answers anyway. Every other type reaches float8 through float
// and leaves it through float (exact), as c10 does.

namespace kf {

struct float8_e4m3fn {
  unsigned char bits;
};

struct float8_e5m2 {
  unsigned char bits;
};

__device__ __forceinline__ float8_e4m3fn float8_e4m3fn_from_bits(unsigned char b) {
  float8_e4m3fn v;
  v.bits = b;
  return v;
}

__device__ __forceinline__ float8_e5m2 float8_e5m2_from_bits(unsigned char b) {
  float8_e5m2 v;
  v.bits = b;
  return v;
}

namespace detail {

// One float8 format: M mantissa bits, exponent bias B; `last_finite_bits` is the largest
// float (as bits) that does not overflow after rounding, `overflow_code` what a larger
// magnitude becomes (sign added).
template <int M, int B>
__device__ __forceinline__ unsigned char float_to_float8_bits(float f, unsigned int last_finite_bits,
                                                              unsigned int overflow_code) {
  unsigned int x = __float_as_uint(f);
  unsigned int sign = (x >> 24) & 0x80u;
  unsigned int ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) {
    return (unsigned char)(sign | 0x7fu);
  }
  if (ax > last_finite_bits) {
    return (unsigned char)(sign | overflow_code);
  }
  const int dropped = 23 - M;
  if (ax >= (unsigned int)(128 - B) << 23) {  // normal: |f| >= 2^(1 - B)
    unsigned int odd = (ax >> dropped) & 1u;
    ax += (1u << (dropped - 1)) - 1u + odd;  // RNE; a carry bumps the exponent correctly
    return (unsigned char)(sign | ((ax - ((unsigned int)(127 - B) << 23)) >> dropped));
  }
  // Subnormal: |f| in units of the smallest subnormal 2^(1 - B - M) is mant * 2^(e - shift0).
  int e = (int)(ax >> 23);
  int shift = (151 - B - M) - e;
  if (shift > 24) {  // below half the smallest subnormal (float subnormals included): zero
    return (unsigned char)sign;
  }
  unsigned int mant = (ax & 0x7fffffu) | 0x800000u;
  unsigned int q = mant >> shift;
  unsigned int rem = mant & ((1u << shift) - 1u);
  unsigned int halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (q & 1u))) {
    ++q;  // may become the smallest normal's code: that encoding is right as is
  }
  return (unsigned char)(sign | q);
}

// float8 -> float, exact for every code. `nan` says whether a code of the top exponent
// is NaN (e4m3fn: only mantissa 111; e5m2: any nonzero mantissa); e5m2's 0x7c is infinity.
template <int E, int M, int B>
__device__ __forceinline__ float float8_bits_to_float(unsigned char b, bool nan, bool inf) {
  unsigned int sign = ((unsigned int)b & 0x80u) << 24;
  unsigned int exp = ((unsigned int)b >> M) & ((1u << E) - 1u);
  unsigned int mant = (unsigned int)b & ((1u << M) - 1u);
  if (nan) {
    return __uint_as_float(sign | 0x7fc00000u);
  }
  if (inf) {
    return __uint_as_float(sign | 0x7f800000u);
  }
  if (exp == 0u) {  // zero or subnormal: mant * 2^(1 - B - M), exact in float
    float mag = (float)mant * __uint_as_float((unsigned int)(128 - B - M) << 23);
    return __uint_as_float(sign | __float_as_uint(mag));
  }
  return __uint_as_float(sign | ((exp + 127u - B) << 23) | (mant << (23 - M)));
}

// 464 = 0x43e80000 is the midpoint between 448 (mantissa 110, even) and the NaN code: it
// rounds down to 448, anything above saturates.
__device__ __forceinline__ unsigned char float_to_float8_e4m3fn_bits(float f) {
  return float_to_float8_bits<3, 7>(f, 0x43e80000u, 0x7eu);
}

// 61440 = 0x47700000 is the midpoint between 57344 (mantissa 11, odd) and 65536: it rounds up
// to infinity, as everything above it does.
__device__ __forceinline__ unsigned char float_to_float8_e5m2_bits(float f) {
  return float_to_float8_bits<2, 15>(f, 0x476fffffu, 0x7cu);
}

}  // namespace detail

__device__ __forceinline__ float to_float(float8_e4m3fn x) {
  bool nan = (x.bits & 0x7fu) == 0x7fu;
  return detail::float8_bits_to_float<4, 3, 7>(x.bits, nan, false);
}

__device__ __forceinline__ float to_float(float8_e5m2 x) {
  bool top = (x.bits & 0x7cu) == 0x7cu;
  bool nan = top && (x.bits & 0x03u) != 0u;
  return detail::float8_bits_to_float<5, 2, 15>(x.bits, nan, top && !nan);
}

namespace detail {

template <>
struct FromFloat<float8_e4m3fn> {
  __device__ __forceinline__ static float8_e4m3fn apply(float f) {
    return float8_e4m3fn_from_bits(float_to_float8_e4m3fn_bits(f));
  }
};

template <>
struct FromFloat<float8_e5m2> {
  __device__ __forceinline__ static float8_e5m2 apply(float f) {
    return float8_e5m2_from_bits(float_to_float8_e5m2_bits(f));
  }
};

// Into float8 from the built-in types: through float (double rounds twice, as in c10).
template <typename From>
struct Cast<float8_e4m3fn, From> {
  __device__ __forceinline__ static float8_e4m3fn apply(From x) {
    return FromFloat<float8_e4m3fn>::apply(static_cast<float>(x));
  }
};
template <typename From>
struct Cast<float8_e5m2, From> {
  __device__ __forceinline__ static float8_e5m2 apply(From x) {
    return FromFloat<float8_e5m2>::apply(static_cast<float>(x));
  }
};

// Out of float8 into the built-in types: widen to float (exact), then the float rule.
template <typename To>
struct Cast<To, float8_e4m3fn> {
  __device__ __forceinline__ static To apply(float8_e4m3fn x) {
    return Cast<To, float>::apply(to_float(x));
  }
};
template <typename To>
struct Cast<To, float8_e5m2> {
  __device__ __forceinline__ static To apply(float8_e5m2 x) {
    return Cast<To, float>::apply(to_float(x));
  }
};

// The pairs of two storage types, which more than one partial specialisation matches:
// through float, except a type to itself.
#define KF_CAST_THROUGH_FLOAT(To, From)                              \
  template <>                                                        \
  struct Cast<To, From> {                                            \
    __device__ __forceinline__ static To apply(From x) {             \
      return FromFloat<To>::apply(to_float(x));                      \
    }                                                                \
  };
KF_CAST_THROUGH_FLOAT(float8_e4m3fn, half)
KF_CAST_THROUGH_FLOAT(float8_e4m3fn, bfloat16)
KF_CAST_THROUGH_FLOAT(float8_e4m3fn, float8_e5m2)
KF_CAST_THROUGH_FLOAT(float8_e5m2, half)
KF_CAST_THROUGH_FLOAT(float8_e5m2, bfloat16)
KF_CAST_THROUGH_FLOAT(float8_e5m2, float8_e4m3fn)
KF_CAST_THROUGH_FLOAT(half, float8_e4m3fn)
KF_CAST_THROUGH_FLOAT(half, float8_e5m2)
KF_CAST_THROUGH_FLOAT(bfloat16, float8_e4m3fn)
KF_CAST_THROUGH_FLOAT(bfloat16, float8_e5m2)
#undef KF_CAST_THROUGH_FLOAT

template <>
struct Cast<float8_e4m3fn, float8_e4m3fn> {
  __device__ __forceinline__ static float8_e4m3fn apply(float8_e4m3fn x) { return x; }
};
template <>
struct Cast<float8_e5m2, float8_e5m2> {
  __device__ __forceinline__ static float8_e5m2 apply(float8_e5m2 x) { return x; }
};

}  // namespace detail

}  // namespace kf
