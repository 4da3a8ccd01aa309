"""The compile-time paths on a GPU (NVRTC and the driver): a merged segmented fusion's kernels
compiled in threads (kfuse.engine.compile_batch) are those compiled one after another, and run
to the same outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpu_support import cuda_torch, requires_gpu
from kfuse.engine.program import SegmentKernelsProgram
from kfuse.runtime.backends.cuda import CUDA_BACKEND
from test_segment_runtime import two_axis_sum

pytestmark = [pytest.mark.gpu, requires_gpu]


def _described(fd: Any) -> list[tuple]:
    return [
        (k.name, k.source, k.grid, k.block, k.shared_mem, repr(k.operands))
        for k in fd.last_program().launches
    ]


def test_segments_compiled_in_threads_run_as_compiled_serially(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = cuda_torch()
    results: list[Any] = []
    for setting in ("0", "1"):
        monkeypatch.setenv("KFUSE_CACHE_DIR", str(tmp_path / setting))  # NVRTC compiles
        monkeypatch.setenv("KFUSE_PARALLEL_COMPILE", setting)
        CUDA_BACKEND._kernels.clear()
        fd, inputs = two_axis_sum()
        args = [torch.as_tensor(a, device="cuda") for a in inputs(0)]
        out = fd.execute(args)
        assert isinstance(fd.last_program(), SegmentKernelsProgram)
        results.append((_described(fd), [o.cpu() for o in out]))
    assert results[0][0] == results[1][0]
    for a, b in zip(results[0][1], results[1][1]):
        assert torch.equal(a, b)
