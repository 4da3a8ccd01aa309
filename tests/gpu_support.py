"""GPU detection for tests: ``requires_gpu`` marks a test ``gpu`` and skips it, with the reason,
where kfuse sees no CUDA device."""

from __future__ import annotations

import functools

import pytest

import kfuse


@functools.cache
def gpu_status() -> tuple[int, str]:
    """(number of CUDA devices, why there are none)."""
    try:
        count = kfuse._C.device_count()
    except kfuse.CudaError as exc:
        return 0, f"no usable CUDA driver: {exc.name}: {exc.text}"
    return count, "" if count else "the CUDA driver sees no device"


def gpu_count() -> int:
    """Number of CUDA devices kfuse can use (0 without a driver)."""
    return gpu_status()[0]


requires_gpu = pytest.mark.skipif(
    gpu_count() == 0, reason=f"needs an NVIDIA GPU ({gpu_status()[1]})"
)


def cuda_torch():  # noqa: ANN201 - torch itself, imported only here
    """torch, for a GPU test that runs on torch's CUDA tensors: skipped, with the reason,
    where torch is missing or built without CUDA."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    return torch


def cuda_cupy():  # noqa: ANN201 - CuPy itself, imported only here
    """CuPy, for a GPU test that runs on CuPy's arrays: skipped, with the reason, where CuPy is
    missing or sees no device."""
    cupy = pytest.importorskip("cupy")
    if cupy.cuda.runtime.getDeviceCount() == 0:
        pytest.skip("CuPy sees no device")
    return cupy
