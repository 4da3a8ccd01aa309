// kfuse device runtime, optional part: the fused multiply-add that codegen.contraction writes
// for a sum of a product nothing else reads. runtime_header.with_optional_parts puts it after
// the other parts in the kernels that name kf::fma, and only there, so no other kernel's
// source changes.
//
// a * b + c rounded once. CUDA's fmaf and fma and the host's libm ones (the emulator's
// cuda_emu.h includes <math.h>) are correctly rounded, so the GPU and the emulator give the
// same bits. Kernels are compiled with --fmad=false: the compiler fuses no other product.

namespace kf {

__device__ __forceinline__ float fma(float a, float b, float c) { return ::fmaf(a, b, c); }
__device__ __forceinline__ double fma(double a, double b, double c) { return ::fma(a, b, c); }

}  // namespace kf
