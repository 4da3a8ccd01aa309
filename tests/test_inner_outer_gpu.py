"""The inner_outer_persistent scheduler on a GPU: RMS norm and layer norm backward as nvFuser
writes them, with torch CUDA tensors, at model sizes (one kernel and its finalize, no
segments), against kfuse.reference in float64."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_support import requires_gpu
from kfuse.dtypes import DataType
from kfuse.reference import evaluate
from kfuse.schedule import SchedulerType
from kfuse.testing import assert_outputs_close
from norm_fusions import (
    BF16,
    layer_norm_backward,
    layer_norm_backward_inputs,
    rms_norm_backward,
    rms_norm_backward_inputs,
    shared_column_input,
)

pytestmark = [pytest.mark.gpu, requires_gpu]
IO = SchedulerType.inner_outer_persistent


def _on_gpu(arrays: list) -> list:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    out = []
    for a in arrays:
        if a.dtype == BF16:
            out.append(torch.from_numpy(a.astype(np.float32)).to("cuda", torch.bfloat16))
        else:
            out.append(torch.from_numpy(np.ascontiguousarray(a)).cuda())
    return out


@pytest.mark.parametrize(("n", "h"), [(2048, 1024), (4096, 4096), (1000, 16384), (333, 777)])
def test_rms_norm_backward(n: int, h: int) -> None:
    fd = rms_norm_backward()
    host = rms_norm_backward_inputs(n, h)
    out = fd.execute(_on_gpu(host))
    assert fd.last_scheduler() is IO
    assert [len(fd.segments(_on_gpu(host)))] == [1]
    got = [o.float().cpu().numpy().astype(BF16) for o in out]
    assert_outputs_close(fd, got, evaluate(fd.fusion, host), host)


@pytest.mark.parametrize(("n", "h", "dtype"), [(8192, 2048, BF16), (1024, 4096, np.float32)])
def test_layer_norm_backward(n: int, h: int, dtype: type) -> None:
    fd = layer_norm_backward(DataType.BFloat16 if dtype is BF16 else DataType.Float)
    host = layer_norm_backward_inputs(n, h, dtype)
    out = fd.execute(_on_gpu(host))
    assert fd.last_scheduler() is IO
    got = [o.float().cpu().numpy().astype(dtype) for o in out]
    assert_outputs_close(fd, got, evaluate(fd.fusion, host), host)


@pytest.mark.parametrize("shape", [(1, 1), (4096, 1024), (3000, 40)])
def test_column_reductions_of_one_input(shape: tuple[int, int]) -> None:
    """Found by a GPU campaign: each column reduction of an input has its own partials."""
    fd = shared_column_input()
    host = [np.random.default_rng(7).standard_normal(shape).astype(np.float32)]
    out = fd.execute(_on_gpu(host))
    assert fd.last_scheduler() is IO
    got = [o.cpu().numpy() for o in out]
    assert_outputs_close(fd, got, evaluate(fd.fusion, host), host)
