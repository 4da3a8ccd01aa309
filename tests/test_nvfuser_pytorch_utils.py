"""kfuse.nvfuser_direct.pytorch_utils, nvFuser's `nvfuser_direct.pytorch_utils` (its tests and
benchmark harness import it), and nvFuser's test_import_correct."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from gpu_support import requires_gpu
from kfuse.errors import InputError
from kfuse.nvfuser_direct import DataType
from kfuse.nvfuser_direct.pytorch_utils import (
    get_device_properties,
    python_scalar_to_nvfuser_dtype,
    retry_on_oom_or_skip_test,
    torch_dtype_to_nvfuser_dtype,
)


def test_import_correct() -> None:
    # nvFuser's test_import.py: `import nvfuser_direct` works (here once installed), in a
    # fresh interpreter, its submodule too.
    code = (
        "import kfuse.nvfuser_direct as n; n.install(); import nvfuser_direct; "
        "from nvfuser_direct.pytorch_utils import torch_dtype_to_nvfuser_dtype as f; "
        "import kfuse.nvfuser_direct.pytorch_utils as p; assert f is p.torch_dtype_to_nvfuser_dtype"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_torch_dtypes_and_python_types_map_as_nvfusers() -> None:
    expected = {
        torch.cdouble: DataType.ComplexDouble,
        torch.cfloat: DataType.ComplexFloat,
        torch.double: DataType.Double,
        torch.float: DataType.Float,
        torch.half: DataType.Half,
        torch.bfloat16: DataType.BFloat16,
        torch.float8_e4m3fn: DataType.Float8_e4m3fn,
        torch.float8_e5m2: DataType.Float8_e5m2,
        torch.long: DataType.Int,
        torch.int: DataType.Int32,
        torch.bool: DataType.Bool,
        complex: DataType.ComplexDouble,
        float: DataType.Double,
        int: DataType.Int,
        bool: DataType.Bool,
    }
    for dtype, want in expected.items():
        assert torch_dtype_to_nvfuser_dtype(dtype) is want, dtype
    assert [python_scalar_to_nvfuser_dtype(v) for v in (True, 3, 2.5, 1j)] == [
        DataType.Bool,
        DataType.Int,
        DataType.Double,
        DataType.ComplexDouble,
    ]
    with pytest.raises(InputError, match="no DataType for torch.int16"):
        torch_dtype_to_nvfuser_dtype(torch.int16)
    with pytest.raises(InputError, match="not a bool, int, float or complex"):
        python_scalar_to_nvfuser_dtype("3")  # type: ignore[arg-type]


def test_an_out_of_memory_test_runs_again_then_is_skipped() -> None:
    calls: list[int] = []

    @retry_on_oom_or_skip_test
    def flaky(fail: int) -> str:
        calls.append(1)
        if len(calls) <= fail:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return "ran"

    assert flaky(0) == "ran" and len(calls) == 1
    calls.clear()
    assert flaky(1) == "ran" and len(calls) == 2
    calls.clear()
    with pytest.raises(pytest.skip.Exception, match="out of GPU memory twice"):
        flaky(2)
    assert len(calls) == 2


@pytest.mark.gpu
@requires_gpu
def test_device_properties_under_nvfusers_keys() -> None:
    props = get_device_properties()
    device = torch.cuda.get_device_properties(torch.cuda.current_device())
    assert props["gpu_name"] == device.name
    assert (props["gpu_compute_capability_major"], props["gpu_compute_capability_minor"]) == (
        device.major,
        device.minor,
    )
    assert props["gpu_sm_count"] == device.multi_processor_count
    assert props["gpu_gmem_bytes"] == device.total_memory
    for key in (
        "gpu_max_threads_per_block", "gpu_smem_bytes_per_block", "gpu_regs_per_block",
        "gpu_clock_rate_khz", "gpu_l2_bytes", "gpu_mem_clock_khz", "gpu_mem_bus_width",
        "gpu_max_threads_per_sm",
    ):  # fmt: skip
        assert isinstance(props[key], int) and props[key] > 0, key
    bits, khz = props["gpu_mem_bus_width"], props["gpu_mem_clock_khz"]
    assert props["gpu_peak_bandwidth_gbps"] == pytest.approx(2 * bits * khz / 8e6)
