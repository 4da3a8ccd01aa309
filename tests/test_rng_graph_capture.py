"""Random ops under torch's CUDA graph capture, on a GPU: stateless ops (seed and offset
given) are captured and replayed with the numbers of the values captured; stateful ops are
refused with an InputError that leaves the capture intact (kfuse.runtime.rng_state says
why: torch gives the device pointers a replay needs to C++ code only)."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_support import cuda_torch, requires_gpu
from kfuse import DataType, FusionDefinition
from kfuse.errors import InputError
from kfuse.reference import philox

pytestmark = [pytest.mark.gpu, requires_gpu]


def _noisy(stateless: bool) -> FusionDefinition:
    """x + uniform(0, 1) over x's shape; seeded by two Int scalar inputs where `stateless`."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        seeds: dict[str, Any] = {}
        if stateless:
            seeds["rng_seed"] = fd.define_scalar(dtype=DataType.Int)
            seeds["rng_offset"] = fd.define_scalar(dtype=DataType.Int)
        u = fd.ops.uniform(0.0, 1.0, fd.ops.shape(x), dtype=DataType.Float, **seeds)
        fd.add_output(fd.ops.add(x, u))
    return fd


def test_stateless_random_numbers_replay_from_a_captured_graph() -> None:
    torch = cuda_torch()
    fd = _noisy(stateless=True)
    x = torch.zeros(129, 1000, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # compiled and cached before the capture, as torch asks
            fd.execute([x, 11, 5])
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        (out,) = fd.execute([x, 11, 5])
    expected = torch.from_numpy(philox.uniform(11, 5, (129, 1000), DataType.Float)).cuda()
    for _ in range(2):
        out.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, expected)


def test_stateful_random_numbers_are_refused_under_capture() -> None:
    torch = cuda_torch()
    fd = _noisy(stateless=False)
    x = torch.zeros(64, 64, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fd.execute([x])  # compiled before the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(InputError, match="CUDA graph capture"), torch.cuda.graph(graph):
        fd.execute([x])
    # Nothing was left half-captured: the generator and later launches work as before.
    torch.manual_seed(3)
    (first,) = fd.execute([x])
    (again,) = _noisy(stateless=True).execute([x, 3, 0])
    assert torch.equal(first, again)
