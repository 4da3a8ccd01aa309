"""The outer_persistent scheduler on a GPU: outer normalizations with torch CUDA tensors against
the reference, from short columns to the longest one block holds, with the sizes the
benchmarks sweep (channels-last batch norm, softmax over axis 0), one kernel each."""

from __future__ import annotations

import pytest

from gpu_support import requires_gpu
from kfuse import schedule
from kfuse.dtypes import DataType
from kfuse.reference import evaluate
from kfuse.schedule import SchedulerType
from kfuse.testing import assert_outputs_close
from outer_norm_fusions import FUSIONS

pytestmark = [pytest.mark.gpu, requires_gpu]
OP = SchedulerType.outer_persistent
TORCH_DTYPES = {DataType.BFloat16: "bfloat16", DataType.Float: "float32"}


def _torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    return torch


def _inputs(torch, name: str, dtype: DataType, rows: int, cols: int) -> list:
    torch.manual_seed(0)
    shapes = FUSIONS[name][1](rows, cols)
    defined = FUSIONS[name][0](dtype).fusion.inputs
    return [
        (torch.randn(s, device="cuda") + (1.5 if k == len(shapes) - 1 else 0)).to(
            torch.float32 if v.dtype is DataType.Float else getattr(torch, TORCH_DTYPES[dtype])
        )
        for k, (s, v) in enumerate(zip(shapes, defined, strict=True))
    ]


@pytest.mark.parametrize("dtype", [DataType.BFloat16, DataType.Float])
@pytest.mark.parametrize("name", sorted(FUSIONS))
@pytest.mark.parametrize(
    ("rows", "cols"), [(37, 13), (1024, 1024), (4096, 512), (8192, 64), (16384, 256)]
)
def test_outer_norms_on_the_gpu(name: str, dtype: DataType, rows: int, cols: int) -> None:
    torch = _torch()
    fd = FUSIONS[name][0](dtype)
    inputs = _inputs(torch, name, dtype, rows, cols)
    held, why = schedule.can_schedule(fd.fusion, OP, inputs)
    # Columns this short are always held in one block; longer ones where a block holding
    # them is still a 32-byte sector wide (a backward's two held inputs: up to 512 rows).
    assert held or rows >= 1024, why
    out = fd.execute(inputs)
    assert (fd.last_scheduler() is OP) == held  # longer ones: segmented, still right
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)


@pytest.mark.parametrize("dtype", [DataType.BFloat16, DataType.Float])
@pytest.mark.parametrize("name", sorted(FUSIONS))
@pytest.mark.parametrize(("rows", "cols"), [(4096, 1024), (8192, 72), (12544, 256)])
def test_columns_split_over_a_cluster_on_the_gpu(
    name: str, dtype: DataType, rows: int, cols: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """switches.OUTER_CLUSTERS: columns one block cannot hold, held by a cluster's blocks
    (72 columns: a group of 8 cut by the end of the columns, in float)."""
    from kfuse import switches

    monkeypatch.setattr(switches, "OUTER_CLUSTERS", True)
    torch = _torch()
    fd = FUSIONS[name][0](dtype)
    inputs = _inputs(torch, name, dtype, rows, cols)
    held, why = schedule.can_schedule(fd.fusion, OP, inputs)
    out = fd.execute(inputs)
    assert (fd.last_scheduler() is OP) == held, why
    if held:
        params = schedule.compute_heuristics(fd.fusion, OP, inputs)
        assert params.cluster_size > 1, "a column one block holds: not this test's case"
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)
