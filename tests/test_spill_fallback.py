"""The CUDA backend's spill fallback (kfuse.runtime.backends.spill_fallback): a kernel that
offers one is compiled again with it where its first compile has a stack frame (local
memory), and only there, and the fallback is taken where it costs less (instructions and
frame bytes). NVRTC only: no GPU needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from kfuse.engine import dump
from kfuse.runtime.backends import cubin_info, spill_fallback
from kfuse.runtime.backends.cuda import compile_to_cubin, fitted_compile, nvrtc_cubin, nvrtc_options
from test_dump_binaries import nvrtc_and_nvdisasm_or_skip
from tools_support import load_tool

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


def test_instructions_counts_the_disassembled_code(tmp_path: Path) -> None:
    nvrtc_and_nvdisasm_or_skip()
    sass_tool = load_tool("kernel_sass.py")
    tool = dump.find_disassembler()[0]
    for source in (OFFERS, spill_fallback.fallback_source(OFFERS)):
        cubin = nvrtc_cubin(source, "pick", "sm_90", nvrtc_options())
        sass = sass_tool.disassemble(cubin, tool)  # type: ignore[attr-defined]
        counted = sum(sass_tool.opcode_counts(sass).values())  # type: ignore[attr-defined]
        assert cubin_info.instructions(cubin) == counted > 0


# (instructions, frame bytes) of written and fallback choices of suite kernels (sm_90): the
# choices STACK_BYTE_COST was read from (spill_fallback's docstring), and the one it decides.
SUITE_CHOICES = [
    ("softmax_bwd_dim1 [4096, 16384]", (344, 48), (472, 0), True),  # 109.7 -> 93.1 us
    ("rmsnorm_bwd [32768, 1024]", (552, 8), (672, 0), True),
    ("rmsnorm_bwd [16384, 4096]", (584, 8), (696, 0), True),
    ("dropout_rmsnorm_fwd_rng [2048, 16384]", (1264, 8), (2184, 0), False),
    ("dropout_layernorm_fwd_rng [2048, 16384]", (1648, 24), (1952, 40), False),
]


@pytest.mark.parametrize("case, written, fallback, taken", SUITE_CHOICES)
def test_the_fallback_is_taken_where_it_costs_less(
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    written: tuple[int, int],
    fallback: tuple[int, int],
    taken: bool,
) -> None:
    kernels = {b"written": written, b"fallback": fallback}
    monkeypatch.setattr(cubin_info, "instructions", lambda cubin: kernels[cubin][0])
    monkeypatch.setattr(cubin_info, "frame_bytes", lambda cubin: kernels[cubin][1])
    assert spill_fallback.prefer_fallback(b"written", b"fallback") is taken, case


def test_a_spilling_kernel_keeps_its_first_choice_where_that_costs_less(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = _compiles(monkeypatch)
    monkeypatch.setattr(spill_fallback, "prefer_fallback", lambda written, fallback: False)
    source, cubin = fitted_compile(OFFERS, "pick", "sm_90", nvrtc_options())
    assert "#define KF_SPILL_FALLBACK" not in source and cubin_info.frame_bytes(cubin) > 0
    assert any("#define KF_SPILL_FALLBACK" in s for s in seen)  # compiled, and not taken
