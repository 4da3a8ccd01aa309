// kfuse device runtime: complex numbers (see kf_base.cuh for the rules every part keeps). Put
// after the runtime header only in kernels that name kf::complex, as the float8 part is, so that
// every other kernel's source stays what it was.
//
// kf::complex<T> (T float or double) is C's and torch's layout: the real part, then the imaginary
// part, aligned to its whole size (8 or 16 bytes), so that a complex64 element moves as one 8-byte
// access and a Vec of them as 16-byte ones. Trivially constructible, as half is: it lives in Vec,
// shared arrays and registers without a constructor running. The operators and the kf:: overloads below let the
// op table's templates for real operands ("({0} + {1})", "kf::exp({0})") serve complex ones.

namespace kf {

template <typename T>
struct alignas(2 * sizeof(T)) complex {
  T re;
  T im;
  complex() = default;  // trivial: shared arrays, unions and Vec take it
  // (complex<T>)x of a real x is x + 0i, so that the runtime's generic (T)0 (the zero an
  // indexed read fills in, a sum's identity) serves complex values too.
  __device__ __forceinline__ explicit complex(T r) : re(r), im((T)0) {}
};

template <typename T>
__device__ __forceinline__ complex<T> make_complex(T re, T im) {
  complex<T> z;
  z.re = re;
  z.im = im;
  return z;
}

template <typename T>
__device__ __forceinline__ T real(complex<T> z) {
  return z.re;
}

template <typename T>
__device__ __forceinline__ T imag(complex<T> z) {
  return z.im;
}

template <typename T>
__device__ __forceinline__ complex<T> operator+(complex<T> a, complex<T> b) {
  return make_complex(a.re + b.re, a.im + b.im);
}

template <typename T>
__device__ __forceinline__ complex<T> operator-(complex<T> a, complex<T> b) {
  return make_complex(a.re - b.re, a.im - b.im);
}

template <typename T>
__device__ __forceinline__ complex<T> operator-(complex<T> a) {
  return make_complex(-a.re, -a.im);
}

template <typename T>
__device__ __forceinline__ complex<T> operator*(complex<T> a, complex<T> b) {
  return make_complex(a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re);
}

// Smith's division: the divisor scaled by its larger part first, so that |b|^2 is never formed
// (it overflows for parts above sqrt(max), where the quotient itself is representable).
template <typename T>
__device__ __forceinline__ complex<T> operator/(complex<T> a, complex<T> b) {
  if (abs(b.re) >= abs(b.im)) {
    const T r = b.im / b.re;
    const T d = b.re + b.im * r;
    return make_complex((a.re + a.im * r) / d, (a.im - a.re * r) / d);
  }
  const T r = b.re / b.im;
  const T d = b.re * r + b.im;
  return make_complex((a.re * r + a.im) / d, (a.im * r - a.re) / d);
}

template <typename T>
__device__ __forceinline__ bool operator==(complex<T> a, complex<T> b) {
  return a.re == b.re && a.im == b.im;
}

template <typename T>
__device__ __forceinline__ bool operator!=(complex<T> a, complex<T> b) {
  return !(a == b);
}

template <typename T>
__device__ __forceinline__ complex<T> neg(complex<T> a) {
  return -a;
}

// |z| without forming re^2 + im^2 at full scale (it overflows or underflows where |z| does not):
// the parts are divided by the larger one. An infinite part gives inf, even with a NaN beside it.
template <typename T>
__device__ __forceinline__ T abs(complex<T> z) {
  const T a = abs(z.re);
  const T b = abs(z.im);
  if (isinf(a) || isinf(b)) return isinf(a) ? a : b;
  if (isnan(a) || isnan(b)) return a + b;
  const T big = a > b ? a : b;
  const T small = a > b ? b : a;
  if (big == (T)0) return (T)0;
  const T q = small / big;
  return big * sqrt((T)1 + q * q);
}

template <typename T>
__device__ __forceinline__ complex<T> reciprocal(complex<T> z) {
  return make_complex((T)1, (T)0) / z;
}

template <typename T>
__device__ __forceinline__ complex<T> exp(complex<T> z) {
  const T m = exp(z.re);
  if (z.im == (T)0) return make_complex(m, z.im);  // e^x of a real x keeps its zero part
  return make_complex(m * cos(z.im), m * sin(z.im));
}

template <typename T>
__device__ __forceinline__ complex<T> log(complex<T> z) {
  return make_complex(log(abs(z)), atan2(z.im, z.re));
}

// The principal root: a non-negative real part, the imaginary part's sign that of z.im.
template <typename T>
__device__ __forceinline__ complex<T> sqrt(complex<T> z) {
  if (z.re == (T)0 && z.im == (T)0) return make_complex((T)0, z.im);
  if (isinf(z.im)) return make_complex(abs(z.im), z.im);
  const T t = sqrt((abs(z.re) + abs(z)) * (T)0.5);
  if (z.re >= (T)0) return make_complex(t, z.im / (t + t));
  const T im = abs(z.im) / (t + t);
  return make_complex(im, signbit(z.im) ? -t : t);
}

template <typename T>
__device__ __forceinline__ complex<T> rsqrt(complex<T> z) {
  return reciprocal(sqrt(z));
}

template <typename T>
__device__ __forceinline__ complex<T> sin(complex<T> z) {
  return make_complex(sin(z.re) * cosh(z.im), cos(z.re) * sinh(z.im));
}

template <typename T>
__device__ __forceinline__ complex<T> cos(complex<T> z) {
  return make_complex(cos(z.re) * cosh(z.im), -(sin(z.re) * sinh(z.im)));
}

// tanh(x + iy) in Kahan's form, from sinh x and tan y: with beta = 1 + tan^2 y, the real part
// is beta cosh x sinh x / (1 + beta sinh^2 x) and the imaginary part tan y / (1 + beta sinh^2 x).
// No difference cancels (the textbook (sinh 2x + i sin 2y) / (cosh 2x + cos 2y) loses digits
// near the poles, x = 0, y = pi/2 + k pi). Past |x| = 20 sinh^2 x overflows float while the
// value is within rounding of +-1 + 0i: the limit, the imaginary part's sign kept.
template <typename T>
__device__ __forceinline__ complex<T> tanh(complex<T> z) {
  if (abs(z.re) > (T)20) {
    const T one = signbit(z.re) ? (T)-1 : (T)1;
    return make_complex(one, (T)4 * sin(z.im) * cos(z.im) * exp((T)-2 * abs(z.re)));
  }
  const T t = tan(z.im);
  const T beta = (T)1 + t * t;
  const T sh = sinh(z.re);
  const T ch = cosh(z.re);
  const T den = (T)1 + beta * sh * sh;
  return make_complex(beta * ch * sh / den, t / den);
}

template <typename T>
__device__ __forceinline__ bool isnan(complex<T> z) {
  return isnan(z.re) || isnan(z.im);
}

template <typename T>
__device__ __forceinline__ bool isinf(complex<T> z) {
  return isinf(z.re) || isinf(z.im);
}

template <typename T>
__device__ __forceinline__ bool isfinite(complex<T> z) {
  return isfinite(z.re) && isfinite(z.im);
}

template <typename T>
__device__ __forceinline__ bool isreal(complex<T> z) {
  return z.im == (T)0;
}

// cast<To>(From) with complex values, as torch converts: a real value becomes the real part (the
// imaginary part +0); a complex value to a real type keeps its real part only, to bool whether
// either part is nonzero.
namespace detail {

template <typename T, typename From>
struct Cast<complex<T>, From> {
  __device__ __forceinline__ static complex<T> apply(From x) {
    return make_complex(Cast<T, From>::apply(x), (T)0);
  }
};
template <typename To, typename T>
struct Cast<To, complex<T>> {
  __device__ __forceinline__ static To apply(complex<T> z) { return Cast<To, T>::apply(z.re); }
};
template <typename T, typename U>
struct Cast<complex<T>, complex<U>> {
  __device__ __forceinline__ static complex<T> apply(complex<U> z) {
    return make_complex((T)z.re, (T)z.im);
  }
};
template <typename T>
struct Cast<bool, complex<T>> {
  __device__ __forceinline__ static bool apply(complex<T> z) {
    return z.re != (T)0 || z.im != (T)0;
  }
};
template <typename T>
struct Cast<half, complex<T>> {
  __device__ __forceinline__ static half apply(complex<T> z) { return Cast<half, T>::apply(z.re); }
};
template <typename T>
struct Cast<bfloat16, complex<T>> {
  __device__ __forceinline__ static bfloat16 apply(complex<T> z) {
    return Cast<bfloat16, T>::apply(z.re);
  }
};
template <typename T>
struct Cast<complex<T>, half> {
  __device__ __forceinline__ static complex<T> apply(half x) {
    return make_complex((T)to_float(x), (T)0);
  }
};
template <typename T>
struct Cast<complex<T>, bfloat16> {
  __device__ __forceinline__ static complex<T> apply(bfloat16 x) {
    return make_complex((T)to_float(x), (T)0);
  }
};

// A complex value moved across lanes part by part (the reductions' shuffles).
template <typename T, typename Move>
__device__ __forceinline__ complex<T> shuffled(complex<T> v, Move move) {
  return make_complex(move(v.re), move(v.im));
}

}  // namespace detail

}  // namespace kf
