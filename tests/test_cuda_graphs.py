"""fd.execute captured into CUDA graphs, on a GPU: under torch.cuda.graph (warmed up on a
side stream, as torch's documentation asks) and under CuPy's Stream.begin_capture; each graph
replayed after new input values are written into the captured inputs in place, and compared
with the frameworks' own eager result. Pointwise, segmented and library (matmul) fusions,
with outputs= given and without; a fusion never run before its capture; and the clear
InputError (a capture left intact, no hang, no wrong replay) where capture cannot work
(kfuse.runtime.capture). Random ops under capture: tests/test_rng_graph_capture.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gpu_support import cuda_cupy, cuda_torch, requires_gpu
from kfuse import FusionDefinition
from kfuse.errors import InputError
from small_fusions import (
    relu_of_matmul,
    rows_of,
    rows_of_a_product,
    scaled_sum,
    sums_over_both_axes,
)

pytestmark = [pytest.mark.gpu, requires_gpu]

REPLAYS = 3


def _warm_up(torch: Any, run: Callable[[], Any], times: int = 3) -> None:
    """`run` on a side stream before capture, as torch.cuda.graph's documentation asks
    (three times: kfuse's fast path takes a layout from its third call)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(times):
            run()
    torch.cuda.current_stream().wait_stream(side)


def _close(torch: Any, actual: Any, expected: Any, what: str, **tolerances: Any) -> None:
    torch.testing.assert_close(actual, expected, msg=lambda m: f"{what}: {m}", **tolerances)


def test_torch_graph_replays_a_pointwise_fusion_into_given_outputs() -> None:
    torch = cuda_torch()
    fd = scaled_sum(1)
    a, b = torch.randn(4096, device="cuda"), torch.randn(4096, device="cuda")
    out = torch.empty(4096, device="cuda")
    _warm_up(torch, lambda: fd.execute([a, b], outputs=[out]))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        (result,) = fd.execute([a, b], outputs=[out])
    assert result is out, "execute under capture returned another array than the one given"
    for k in range(REPLAYS):
        a.copy_(torch.randn(4096, device="cuda"))
        b.copy_(torch.randn(4096, device="cuda"))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _close(torch, out, (a + b) * 2, f"replay {k}")


def test_torch_graph_replays_the_fast_path_call() -> None:
    """Warmed up three times, the captured call is the C++ fast path's: its output, allocated
    in the graph's pool, is rewritten by every replay."""
    torch = cuda_torch()
    fd = scaled_sum(1)
    a, b = torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")
    _warm_up(torch, lambda: fd.execute([a, b]))
    assert fd._executor_cache.fast_calls is not None, "the warm-up built no fast-path entry"
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        (out,) = fd.execute([a, b])
    for k in range(REPLAYS):
        a.copy_(torch.randn(1024, device="cuda"))
        b.fill_(float(k))
        graph.replay()
        torch.cuda.synchronize()
        _close(torch, out, (a + b) * 2, f"replay {k}")


def test_torch_graph_captures_a_fusion_never_run_before() -> None:
    """This definition compiles (or loads from the disk cache) its kernel during the capture."""
    torch = cuda_torch()
    scaled_sum(1).execute([torch.ones(8, device="cuda")] * 2)  # kfuse itself initialised
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.tanh(fd.ops.mul(x, fd.define_scalar(0.5))))
    x = torch.randn(64, 96, device="cuda")
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        (out,) = fd.execute([x])
    for k in range(REPLAYS):
        x.copy_(torch.randn(64, 96, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        _close(torch, out, torch.tanh(x * 0.5), f"replay {k}")


def test_torch_graph_replays_a_segmented_fusion() -> None:
    torch = cuda_torch()
    fd = sums_over_both_axes()
    x = torch.randn(300, 500, device="cuda")
    given = [torch.empty(300, 500, device="cuda"), torch.empty(300, device="cuda")]
    _warm_up(torch, lambda: fd.execute([x], outputs=given))
    program = fd.last_program()
    assert program is not None and len(program.schedulers()) >= 2, (
        f"expected a segmented fusion, ran {program}"
    )
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        returned = fd.execute([x], outputs=given)
    assert all(r is g for r, g in zip(returned, given, strict=True))
    for k in range(REPLAYS):
        x.copy_(torch.randn(300, 500, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        _close(torch, given[0], x + x.sum(0), f"replay {k}, output 0", rtol=1e-4, atol=1e-4)
        _close(torch, given[1], x.sum(1), f"replay {k}, output 1", rtol=1e-4, atol=1e-4)


def test_torch_graph_replays_a_fusion_with_a_matmul_segment() -> None:
    torch = cuda_torch()
    fd = relu_of_matmul()
    a, b = torch.randn(64, 32, device="cuda"), torch.randn(32, 48, device="cuda")
    out = torch.empty(64, 48, device="cuda")
    _warm_up(torch, lambda: fd.execute([a, b], outputs=[out]))  # cuBLAS initialised too
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        (result,) = fd.execute([a, b], outputs=[out])
    assert result is out
    for k in range(REPLAYS):
        a.copy_(torch.randn(64, 32, device="cuda"))
        b.copy_(torch.randn(32, 48, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        _close(torch, out, torch.relu(a @ b), f"replay {k}", rtol=1e-4, atol=1e-4)


def test_torch_graph_replays_index_select_with_new_indices() -> None:
    torch = cuda_torch()
    fd = rows_of()
    table = torch.randn(50, 16, device="cuda")
    index = torch.tensor([3, 0, 49, 7], device="cuda")
    _warm_up(torch, lambda: fd.execute([table, index]))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        (out,) = fd.execute([table, index])
    for k in range(REPLAYS):
        index.copy_(torch.randint(0, 50, (4,), device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        _close(torch, out, torch.exp(table[index]), f"replay {k}")
    # A replay that reads outside the axis is reported by the next kfuse call.
    index[1] = 50
    graph.replay()
    torch.cuda.synchronize()
    with pytest.raises(InputError, match=r"index_select along axis 0: an index holds 50"):
        fd.execute([table, torch.tensor([1, 2, 3, 4], device="cuda")])


def test_index_select_never_run_before_capture_is_refused_and_the_capture_ends() -> None:
    torch = cuda_torch()
    fd = rows_of()
    table = torch.randn(50, 16, device="cuda")
    index = torch.tensor([3, 0, 49, 7], device="cuda")
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with (
        pytest.raises(InputError, match="Run the fusion once on this device before capturing"),
        torch.cuda.graph(graph),
    ):
        fd.execute([table, index])
    # The capture ended cleanly: the fusion runs eagerly, and right.
    (out,) = fd.execute([table, index])
    _close(torch, out, torch.exp(table[index]), "after the refused capture")


def test_a_host_checked_index_select_is_refused_under_torch_capture() -> None:
    torch = cuda_torch()
    fd = rows_of_a_product()
    t = torch.randn(20, 8, device="cuda")
    index = torch.tensor([4, 19, 0], device="cuda")
    _warm_up(torch, lambda: fd.execute([t, index]))
    graph = torch.cuda.CUDAGraph()
    with (
        pytest.raises(InputError, match=r"under CUDA graph capture: index_select to T\d+ runs"),
        torch.cuda.graph(graph),
    ):
        fd.execute([t, index])
    (out,) = fd.execute([t, index])
    _close(torch, out, (t @ t.T)[index], "after the refused capture", rtol=1e-4, atol=1e-4)


def test_cupy_stream_capture_replays_a_pointwise_fusion_into_given_outputs() -> None:
    cupy = cuda_cupy()
    fd = scaled_sum(1)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        a = cupy.random.standard_normal(4096, dtype=cupy.float32)
        b = cupy.random.standard_normal(4096, dtype=cupy.float32)
        out = cupy.empty(4096, cupy.float32)
        fd.execute([a, b], outputs=[out])  # compiled before the capture
        stream.begin_capture()
        try:
            (result,) = fd.execute([a, b], outputs=[out])
        finally:
            graph = stream.end_capture()
        assert result is out
        for k in range(REPLAYS):
            a[...] = cupy.random.standard_normal(4096, dtype=cupy.float32)
            b[...] = float(k)
            graph.launch(stream)
            stream.synchronize()
            cupy.testing.assert_allclose(out, (a + b) * 2, rtol=1e-6, err_msg=f"replay {k}")


def test_cupy_stream_capture_of_a_fusion_never_run_before() -> None:
    cupy = cuda_cupy()
    scaled_sum(1).execute([cupy.ones(8, cupy.float32)] * 2)  # kfuse itself initialised
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.sigmoid(fd.ops.add(x, fd.define_scalar(0.25))))
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        x = cupy.random.standard_normal((32, 200), dtype=cupy.float32)
        out = cupy.empty((32, 200), cupy.float32)
        stream.synchronize()
        stream.begin_capture()
        try:
            fd.execute([x], outputs=[out])
        finally:
            graph = stream.end_capture()
        for k in range(REPLAYS):
            x[...] = cupy.random.standard_normal((32, 200), dtype=cupy.float32)
            graph.launch(stream)
            stream.synchronize()
            expected = 1 / (1 + cupy.exp(-(x + 0.25)))
            cupy.testing.assert_allclose(out, expected, rtol=1e-5, err_msg=f"replay {k}")


def test_stateful_random_ops_are_refused_under_cupy_capture() -> None:
    cupy = cuda_cupy()
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1])
        fd.add_output(fd.ops.add(x, fd.ops.uniform(0.0, 1.0, fd.ops.shape(x))))
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        x = cupy.zeros(256, cupy.float32)
        fd.execute([x])  # compiled before the capture
        stream.synchronize()
        stream.begin_capture()
        try:
            with pytest.raises(InputError, match="rng_seed and rng_offset"):
                fd.execute([x])
        finally:
            stream.end_capture()
        assert not stream.is_capturing()
        (out,) = fd.execute([x])  # eager again, and still drawing numbers in [0, 1)
        values = cupy.asnumpy(out)
    assert ((values >= 0) & (values < 1)).all(), f"uniform drew values outside [0, 1): {values}"
