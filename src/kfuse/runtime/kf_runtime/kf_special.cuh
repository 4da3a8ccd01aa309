// kfuse device runtime, optional part: the special functions and integer ops that few kernels
// use (erfinv, erfcinv, lgamma, nextafter, gcd and the shifts). runtime_header.with_optional_parts
// puts it after the other parts in the kernels that name one of them, and only there, so no
// other kernel's source changes.
//
// The floating ones are CUDA's own functions (the emulator's cuda_emu.h provides them on the
// host); the integer ones follow torch's CUDA kernels, which nvFuser's ops match.

namespace kf {

__device__ __forceinline__ float erfinv(float x) { return ::erfinvf(x); }
__device__ __forceinline__ double erfinv(double x) { return ::erfinv(x); }
__device__ __forceinline__ float erfcinv(float x) { return ::erfcinvf(x); }
__device__ __forceinline__ double erfcinv(double x) { return ::erfcinv(x); }
__device__ __forceinline__ float lgamma(float x) { return ::lgammaf(x); }
__device__ __forceinline__ double lgamma(double x) { return ::lgamma(x); }
__device__ __forceinline__ float nextafter(float a, float b) { return ::nextafterf(a, b); }
__device__ __forceinline__ double nextafter(double a, double b) { return ::nextafter(a, b); }

// Euclid's algorithm on |a| and |b|, as torch's gcd: the magnitudes are negated through an
// unsigned value (the hardware's wrapping negation, with no signed overflow), so the most
// negative value stays itself and the result is what torch's CUDA kernel gives for it.
template <typename I>
__device__ __forceinline__ I gcd(I a, I b) {
  a = a < 0 ? (I)(0ULL - (unsigned long long)a) : a;
  b = b < 0 ? (I)(0ULL - (unsigned long long)b) : b;
  while (b != 0) {
    I t = b;
    b = a % b;
    a = t;
  }
  return a;
}

// torch's CUDA shifts: a count outside [0, bits) shifts every bit out, which leaves 0 for a
// left shift and the sign for an arithmetic right shift. The left shift is done on the
// unsigned value (a signed overflow is undefined in C++; the bits are the same).
template <typename I>
__device__ __forceinline__ I shift_left(I a, I s) {
  const I bits = (I)(sizeof(I) * 8);
  return (s < 0 || s >= bits) ? (I)0 : (I)((unsigned long long)a << s);
}

template <typename I>
__device__ __forceinline__ I shift_right(I a, I s) {
  const I bits = (I)(sizeof(I) * 8);
  return (s < 0 || s >= bits) ? (a < 0 ? (I)-1 : (I)0) : (I)(a >> s);
}

// nvFuser's logical_right_shift, which it builds from the two shifts above: zeros come in
// from the left for a count in [0, bits]; any other count leaves the sign, as its
// composite's arithmetic shift does there.
template <typename I>
__device__ __forceinline__ I shift_right_logical(I a, I s) {
  const I bits = (I)(sizeof(I) * 8);
  if (s == bits) return (I)0;
  if (s < 0 || s > bits) return a < 0 ? (I)-1 : (I)0;
  const unsigned long long word = (unsigned long long)a & (~0ULL >> (64 - sizeof(I) * 8));
  return (I)(word >> s);
}

}  // namespace kf
