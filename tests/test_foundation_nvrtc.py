"""NVRTC compiles to a cubin for an explicit architecture with no GPU, and a bad kernel gives a
CompileError carrying the log and the numbered source."""

from __future__ import annotations

import pytest

import kfuse
from kfuse import _C
from kfuse.runtime import nvrtc_loader

AXPY = r"""
extern "C" __global__ void axpy(float* y, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}
"""


def test_nvrtc_version_and_library() -> None:
    path = nvrtc_loader.ensure_loaded()
    assert "nvrtc" in path
    major, minor = _C.nvrtc_version()
    assert major >= 12 and minor >= 0
    assert 80 in _C.nvrtc_supported_archs()


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_compile_to_cubin_for_explicit_arch(arch: str) -> None:
    cubin = _C.compile_to_cubin(AXPY, "axpy.cu", arch, ["--std=c++17"])
    assert isinstance(cubin, bytes)
    assert cubin[:4] == b"\x7fELF"


def test_syntax_error_gives_log_and_numbered_source() -> None:
    bad = 'extern "C" __global__ void k(float* x) {\n    x[0] = 1.0f\n}\n'
    with pytest.raises(kfuse.CompileError) as info:
        _C.compile_to_cubin(bad, "bad.cu", "sm_80")
    err = info.value
    assert isinstance(err, kfuse.KfuseError)
    assert "error" in err.log and "bad.cu" in err.log
    assert err.source == bad
    message = str(err)
    assert "   2 |     x[0] = 1.0f" in message
    assert err.log.splitlines()[0] in message


def test_invalid_arch_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="sm_90"):
        _C.compile_to_cubin(AXPY, "axpy.cu", "compute_90")
