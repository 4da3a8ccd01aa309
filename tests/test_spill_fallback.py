"""The CUDA backend's spill fallback (kfuse.runtime.backends.spill_fallback): a kernel that
offers one is compiled again with it where its first compile has a stack frame (local
memory), and only there. NVRTC only: no GPU needed."""

from __future__ import annotations

import pytest

from kfuse.runtime.backends import cubin_info, spill_fallback
from kfuse.runtime.backends.cuda import compile_to_cubin, fitted_compile, nvrtc_cubin, nvrtc_options

pytest.importorskip("kfuse._C")

# The first choice indexes an array of running products by a loaded value, which puts it in
# local memory; the fallback reads one element straight from global memory.
OFFERS = """
#ifndef KF_SPILL_FALLBACK
#define KF_LOCAL_ARRAY 1
#else
#define KF_LOCAL_ARRAY 0
#endif
extern "C" __global__ void __launch_bounds__(256) pick(float* out, const float* in,
                                                       const int* index) {
#if KF_LOCAL_ARRAY
  float a[64];
  float s = 1.f;
  for (int i = 0; i < 64; ++i) { s = s * in[i * 256 + threadIdx.x] + 1.f; a[i] = s; }
  out[threadIdx.x] = a[index[threadIdx.x] & 63];
#else
  out[threadIdx.x] = in[(index[threadIdx.x] & 63) * 256 + threadIdx.x];
#endif
}
"""


def _compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the sources NVRTC is given (each compile of fitted_compile)."""
    from kfuse.runtime.backends import cuda

    seen: list[str] = []
    real = cuda.nvrtc_cubin

    def recording(source: str, *args: object) -> bytes:
        seen.append(source)
        return real(source, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(cuda, "nvrtc_cubin", recording)
    return seen


def test_frame_bytes_reads_local_memory() -> None:
    options = nvrtc_options()
    assert cubin_info.frame_bytes(nvrtc_cubin(OFFERS, "pick", "sm_90", options)) >= 64 * 4
    chosen = spill_fallback.fallback_source(OFFERS)
    assert cubin_info.frame_bytes(nvrtc_cubin(chosen, "pick", "sm_90", options)) == 0


def test_a_kernel_that_spills_is_compiled_with_its_fallback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = _compiles(monkeypatch)
    source, cubin = fitted_compile(OFFERS, "pick", "sm_90", nvrtc_options())
    assert source.count("#define KF_SPILL_FALLBACK 1") == 1
    assert source.index("#define KF_SPILL_FALLBACK") < source.index("#ifndef KF_SPILL_FALLBACK")
    assert cubin_info.frame_bytes(cubin) == 0
    assert seen[0] == OFFERS and any("#define KF_SPILL_FALLBACK" in s for s in seen[1:])
    assert compile_to_cubin(OFFERS, "pick", "sm_90", nvrtc_options()) == cubin


def test_a_kernel_that_does_not_spill_keeps_its_first_choice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fine = OFFERS.replace("#define KF_LOCAL_ARRAY 1", "#define KF_LOCAL_ARRAY 0")
    seen = _compiles(monkeypatch)
    source, cubin = fitted_compile(fine, "pick", "sm_90", nvrtc_options())
    assert "#define KF_SPILL_FALLBACK" not in source
    assert all("#define KF_SPILL_FALLBACK" not in s for s in seen)


def test_a_kernel_without_a_fallback_is_taken_as_it_spills() -> None:
    plain = OFFERS.replace("#ifndef KF_SPILL_FALLBACK", "#ifndef KF_NOTHING")
    assert not spill_fallback.offers_fallback(plain)
    source, cubin = fitted_compile(plain, "pick", "sm_90", nvrtc_options())
    assert "#define KF_SPILL_FALLBACK" not in source
    assert cubin_info.frame_bytes(cubin) > 0
