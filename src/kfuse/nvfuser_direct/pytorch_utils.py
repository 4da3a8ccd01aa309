"""nvFuser's `nvfuser_direct.pytorch_utils`, for programs (and nvFuser's own tests and
benchmark harness) that import it: torch dtypes and Python number types as DataTypes, a
test decorator that retries once after torch runs out of GPU memory, and the current GPU's
properties under nvFuser's names. Like nvFuser's, it needs torch (imported on first use).
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from typing import Any

from kfuse.dtypes import DataType, from_array_dtype
from kfuse.errors import DefinitionError, InputError

_PYTHON_TYPES = {
    bool: DataType.Bool,
    int: DataType.Int,
    float: DataType.Double,
    complex: DataType.ComplexDouble,
}


def torch_dtype_to_nvfuser_dtype(dtype: Any) -> DataType:
    """The DataType of a torch dtype, or of a Python number type (bool, int, float, complex:
    Bool, Int, Double, ComplexDouble, as nvFuser maps them)."""
    if dtype in _PYTHON_TYPES:
        return _PYTHON_TYPES[dtype]
    try:
        return from_array_dtype(dtype)
    except (DefinitionError, InputError):
        raise InputError(f"torch_dtype_to_nvfuser_dtype: no DataType for {dtype!r}") from None


def python_scalar_to_nvfuser_dtype(value: bool | int | float | complex) -> DataType:
    """The DataType of a Python number (its type's, as torch_dtype_to_nvfuser_dtype)."""
    kind = type(value)
    if kind not in _PYTHON_TYPES:
        raise InputError(
            f"python_scalar_to_nvfuser_dtype: {value!r} is not a bool, int, float or complex"
        )
    return _PYTHON_TYPES[kind]


def retry_on_oom_or_skip_test(func: Callable[..., Any]) -> Callable[..., Any]:
    """A test decorator: where the test runs out of GPU memory (torch.OutOfMemoryError), free
    what can be freed and run it once more; out of memory again, skip it (pytest.skip)."""

    @functools.wraps(func)
    def retried(*args: Any, **kwargs: Any) -> Any:
        import torch

        try:
            return func(*args, **kwargs)
        except torch.OutOfMemoryError:
            pass  # retried below, outside the handler, so the failed frames can be freed
        gc.collect()
        torch.cuda.empty_cache()
        try:
            return func(*args, **kwargs)
        except torch.OutOfMemoryError as err:
            import pytest

            pytest.skip(f"the test ran out of GPU memory twice: {err}")

    return retried


def get_device_properties() -> dict[str, Any]:
    """The current torch device's properties under nvFuser's keys (its benchmarks read
    them): name, compute capability, memory, SM count, per-block limits, clocks in kHz, L2
    bytes, bus width in bits and the peak DRAM bandwidth in GB/s. Raises kfuse.CudaError
    where there is no GPU."""
    import torch

    from kfuse import _C

    p = _C.get_device_properties(torch.cuda.current_device())
    return {
        "gpu_name": p.name,
        "gpu_compute_capability_major": p.major,
        "gpu_compute_capability_minor": p.minor,
        "gpu_gmem_bytes": p.total_memory,
        "gpu_sm_count": p.sm_count,
        "gpu_max_threads_per_block": p.max_threads_per_block,
        "gpu_smem_bytes_per_block": p.shared_mem_per_block,
        "gpu_regs_per_block": p.regs_per_block,
        "gpu_clock_rate_khz": p.clock_khz,
        "gpu_l2_bytes": p.l2_cache_bytes,
        "gpu_mem_clock_khz": p.memory_clock_khz,
        "gpu_mem_bus_width": p.memory_bus_width,
        "gpu_max_threads_per_sm": p.max_threads_per_sm,
        "gpu_peak_bandwidth_gbps": p.peak_bandwidth_gbs,
    }
