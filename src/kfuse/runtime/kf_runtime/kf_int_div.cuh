// Integer division, the integer-division part of the runtime (included only by kernels that
// divide integers: kfuse.runtime.runtime_header.with_optional_parts).
namespace kf {

// nvFuser's div of two integers: C's `/`, the quotient rounded toward zero. C++ leaves a zero
// divisor and INT_MIN / -1 undefined, and the host emulator's CPU traps on both: a zero
// divisor gives 0 (as kf::fmod of integers), and -1 negates with wrap-around.
__device__ __forceinline__ int div_trunc(int a, int b) {
  if (b == 0) return 0;
  if (b == -1) return neg(a);
  return a / b;
}
__device__ __forceinline__ long long div_trunc(long long a, long long b) {
  if (b == 0) return 0;
  if (b == -1) return neg(a);
  return a / b;
}

}  // namespace kf
