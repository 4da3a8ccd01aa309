// kfuse device runtime, optional part: the 32-bit window check that codegen.windowed writes
// in kernels that index in int (switches.WINDOW_CHECK_32). runtime_header.with_optional_parts
// puts it after the other parts in the kernels that name kf::window_in32, and only there, so
// no other kernel's source changes.
//
// Whether coordinate `c` of a padded axis falls on the tensor, c - low in [0, extent), as
// kf::window_in (kf_reads.cuh) but in 32 bits: c and low are both in [0, 2^31) (a coordinate;
// a pad's low width or a cat part's offset), so c - low cannot overflow an int and a negative
// one is past any extent unsigned. A function, not the compare written inline: ptxas gave
// the inline form more registers (48 against 32 for a bf16 rotary's cat, sm_90).

namespace kf {

__device__ __forceinline__ bool window_in32(int c, int low, int extent) {
  return (unsigned)(c - low) < (unsigned)extent;
}

}  // namespace kf
