"""The CUDA backend's register fit (kfuse.runtime.backends.register_fit): a kernel bounded by
its block size alone is compiled again with the blocks an SM its registers allow, which may
give ptxas registers but never takes occupancy. NVRTC only: no GPU needed."""

from __future__ import annotations

import pytest

from kfuse.runtime.backends import cubin_info, register_fit
from kfuse.runtime.backends.cuda import compile_to_cubin, fitted_compile, nvrtc_cubin, nvrtc_options

# Eight 16-byte loads a thread and arithmetic on all of them: the shape of the rope reduction
# whose unbounded compile kept 8 registers unused and issued its loads in four rounds.
LOADS = """
extern "C" __global__ void __launch_bounds__(256) loads(const float4* a, const float4* b,
                                                        float4* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float4 x[4], y[4];
  for (int k = 0; k < 4; ++k) { x[k] = a[4 * i + k]; y[k] = b[4 * i + k]; }
  float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int k = 0; k < 4; ++k) {
    s.x += x[k].x * y[k].y - x[k].z * y[k].w;
    s.y += x[k].y * y[k].x + x[k].w * y[k].z;
    s.z += x[k].z * y[k].x - x[k].x * y[k].w;
    s.w += x[k].w * y[k].y + x[k].y * y[k].z;
  }
  out[i] = s;
}
"""

# Enough live values that a register limit below them binds.
MANY_VALUES = """
extern "C" __global__ void many(const float* a, float* out) {
  float v[48];
  for (int k = 0; k < 48; ++k) v[k] = a[threadIdx.x + 256 * k];
  float s = 0.f;
  for (int k = 0; k < 48; ++k) s += v[k] * v[(k + 7) % 48];
  for (int k = 0; k < 48; ++k) out[threadIdx.x + 256 * k] = v[k] * s;
}
"""


@pytest.mark.parametrize(
    ("threads", "registers", "arch", "blocks"),
    [
        (256, 56, "sm_90", 4),  # 56 -> 64 a thread: 4 blocks of 8 warps
        (256, 64, "sm_90", 4),
        (256, 44, "sm_90", 5),  # 48 a thread: 5 blocks
        (128, 70, "sm_90", 7),  # 72 a thread
        (512, 30, "sm_90", 4),  # 32 a thread: 2048 threads, the SM's limit
        (512, 30, "sm_89", 3),  # 1536 threads an SM on sm_89
        (1, 20, "sm_90", 32),  # one warp a block: the 32-block limit
        (1, 20, "sm_89", 24),
        (1024, 255, "sm_90", 1),  # not even one block: still 1
    ],
)
def test_fitted_min_blocks(threads: int, registers: int, arch: str, blocks: int) -> None:
    assert register_fit.fitted_min_blocks(threads, registers, arch) == blocks


def test_fit_launch_bounds_adds_the_blocks_only_where_registers_are_left() -> None:
    source = 'extern "C" __global__ void __launch_bounds__(256) k(float* p) { p[0] = 1.f; }'
    fitted = register_fit.fit_launch_bounds(source, 56, "sm_90")
    assert fitted == source.replace("__launch_bounds__(256)", "__launch_bounds__(256, 4)")
    # 64 a thread is all that 4 blocks of 256 leave: nothing to give.
    assert register_fit.fit_launch_bounds(source, 64, "sm_90") is None
    # A scheduler's own second argument, and a kernel without bounds, stay as written.
    chosen = source.replace("(256)", "(256, 2)")
    assert register_fit.fit_launch_bounds(chosen, 56, "sm_90") is None
    unbounded = source.replace("__launch_bounds__(256) ", "")
    assert register_fit.fit_launch_bounds(unbounded, 56, "sm_90") is None


def test_cubin_registers_reads_the_register_count() -> None:
    options = nvrtc_options()
    limited = nvrtc_cubin(MANY_VALUES, "many", "sm_90", [*options, "--maxrregcount=32"])
    assert cubin_info.registers(limited) == 32
    free = nvrtc_cubin(MANY_VALUES, "many", "sm_90", options)
    assert cubin_info.registers(free) > 32
    with pytest.raises(ValueError, match="ELF"):
        cubin_info.registers(b"not a cubin")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_a_fitted_kernel_keeps_its_occupancy(arch: str) -> None:
    options = nvrtc_options()
    first = cubin_info.registers(nvrtc_cubin(LOADS, "loads", arch, options))
    source, cubin = fitted_compile(LOADS, "loads", arch, options)
    fitted = cubin_info.registers(cubin)
    blocks = register_fit.fitted_min_blocks(256, first, arch)
    assert fitted >= first
    assert register_fit.fitted_min_blocks(256, fitted, arch) == blocks
    if source != LOADS:
        assert f"__launch_bounds__(256, {blocks})" in source
    assert compile_to_cubin(LOADS, "loads", arch, options) == cubin
