"""A segmented fusion's replayed call on a GPU (kfuse.engine.segmented_replay): its kernel
segments launch through replay runs (kfuse.engine.replay_runs), a library segment through
its framework; the
replay is right on torch and CuPy arrays, on a caller's stream, and captured into a CUDA graph
that is replayed with new input values."""

from __future__ import annotations

from typing import Any

import pytest

import kfuse.engine.executor as executor
from gpu_support import cuda_torch, requires_gpu
from kfuse import FusionDefinition
from kfuse.engine.program import KernelProgram, SegmentedProgram
from kfuse.engine.replay_runs import KernelRun

pytestmark = [pytest.mark.gpu, requires_gpu]


def matmul_chain(links: int = 2) -> FusionDefinition:
    """A pointwise segment, then (matmul, pointwise) `links` times."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        y = fd.define_tensor(shape=[-1, -1])
        a = fd.ops.add(x, y)
        for _ in range(links):
            a = fd.ops.tanh(fd.ops.matmul(a, y) + a)
        fd.add_output(a)
    return fd


def reference(x: Any, y: Any, tanh: Any, links: int = 2) -> Any:
    a = x + y
    for _ in range(links):
        a = tanh(a @ y + a)
    return a


def test_a_replayed_torch_call_launches_its_kernel_segments_through_replay_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch = cuda_torch()
    fd = matmul_chain()
    x, y = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda") / 8
    for _ in range(2):
        fd.execute([x, y])
    program = fd.last_program()
    assert isinstance(program, SegmentedProgram)
    (replay,) = fd._executor().replays.entries.values()
    kernels = [s for s in replay.steps if isinstance(s.program, KernelProgram)]
    in_runs = [s for unit in replay.units if isinstance(unit, KernelRun) for s in unit.steps]
    assert kernels and in_runs == kernels
    # A FastCall per kernel segment still stands by, for a call whose run cannot take it.
    assert all(s.fast is not None for s in kernels)

    def no_checked_path(*args: object, **kwargs: object) -> None:
        raise AssertionError("a planned signature took the checked path")

    monkeypatch.setattr(executor, "build_runtime_info", no_checked_path)
    for k in range(4):
        x2, y2 = torch.randn_like(x), torch.randn_like(y) / 8
        (out,) = fd.execute([x2, y2])
        torch.testing.assert_close(out, reference(x2, y2, torch.tanh), rtol=1e-4, atol=1e-4)
        assert fd._executor().replays.hits == k + 1


def test_a_replayed_cupy_call_is_right_on_a_callers_stream() -> None:
    cupy = pytest.importorskip("cupy")
    fd = matmul_chain()
    x = cupy.random.standard_normal((32, 32), dtype=cupy.float32)
    y = cupy.random.standard_normal((32, 32), dtype=cupy.float32) / 8
    stream = cupy.cuda.Stream(non_blocking=True)
    cupy.cuda.Device().synchronize()
    for _ in range(4):  # compiles; plans; replays twice
        (out,) = fd.execute([x, y], stream=stream.ptr)
    stream.synchronize()
    assert fd._executor().replays.hits == 2
    cupy.testing.assert_allclose(out, reference(x, y, cupy.tanh), rtol=1e-4, atol=1e-4)


def test_a_captured_replay_is_rewritten_by_every_graph_replay() -> None:
    torch = cuda_torch()
    fd = matmul_chain()
    x, y = torch.randn(48, 48, device="cuda"), torch.randn(48, 48, device="cuda") / 8
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # compiles; plans; replays
            fd.execute([x, y])
    torch.cuda.current_stream().wait_stream(side)
    hits = fd._executor().replays.hits
    assert hits == 1
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        (out,) = fd.execute([x, y])
    assert fd._executor().replays.hits == hits + 1
    for k in range(3):
        x.copy_(torch.randn(48, 48, device="cuda"))
        y.copy_(torch.randn(48, 48, device="cuda") / 8)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(
            out,
            reference(x, y, torch.tanh),
            rtol=1e-4,
            atol=1e-4,
            msg=lambda m, k=k: f"replay {k}: {m}",
        )


def test_a_replayed_host_checked_library_segment_refuses_capture() -> None:
    """scatter's positions are checked on the host (a read that a capture forbids): a
    replayed call is refused under capture as a checked one is, and runs right after. (A
    gather a kernel can read is a generated kernel, checked on the device, and is captured.)"""
    torch = cuda_torch()
    from kfuse.errors import InputError
    from small_fusions import exp_of_a_scatter

    fd = exp_of_a_scatter()
    t = torch.randn(20, 8, device="cuda") / 4
    index = torch.tensor([[4, 19, 0, 7, 3, 11, 2, 5]], device="cuda")
    src = torch.randn(1, 8, device="cuda") / 4
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # compiles; plans; replays
            fd.execute([t, index, src])
    torch.cuda.current_stream().wait_stream(side)
    assert isinstance(fd.last_program(), SegmentedProgram)
    assert fd._executor().replays.hits == 1
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(InputError, match="under CUDA graph capture"), torch.cuda.graph(graph):
        fd.execute([t, index, src])
    (out,) = fd.execute([t, index, src])
    expected = torch.exp(torch.scatter(t, 0, index, src) * 0.5)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
