"""G1: a sequence of ten fusions captured into one CUDA graph and replayed, against the sum of
its kernels' own times (issue 60: a replay within 10% of that sum).

The ten are the steps of a small block on x [4096, 1024] fp32 (16 MB a tensor), each its own
FusionDefinition taking the previous one's output: scale and shift, relu, centre the rows,
an RMS norm, a tanh GELU, a row softmax, a row affine, SiLU, column means, and their broadcast
add. Each fusion is warmed up on a side stream (its third call takes the C++ fast path), then
the ten calls are captured under torch.cuda.graph.

* replay: CUDA events around batches of graph.replay(), the median batch per replay;
* kernels: the sum of the kernels' times of one eager pass of the ten (kfuse.PythonProfiler,
  CUPTI), the median of five passes;
* eager: the ten calls made from Python back to back, the same events (host cost included
  where the GPU waits for it).

The replay's last output is checked against the eager pass's (the same kernels), and the
eager pass against torch in float64 first.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from kfuse import FusionDefinition

ROWS, COLS = 4096, 1024


def _unary(build: Callable[[FusionDefinition, Any], Any]) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(build(fd, x))
    return fd


def _row_mean(fd: FusionDefinition, x: Any) -> Any:
    return fd.ops.div(fd.ops.sum(x, dims=[1], keepdim=True), float(COLS))


def _rms_norm(fd: FusionDefinition, x: Any) -> Any:
    mean_square = _row_mean(fd, fd.ops.mul(x, x))
    return fd.ops.mul(x, fd.ops.rsqrt(fd.ops.add(mean_square, 1e-6)))


def _gelu(fd: FusionDefinition, x: Any) -> Any:
    cube = fd.ops.mul(fd.ops.mul(x, x), x)
    inner = fd.ops.mul(fd.ops.add(x, fd.ops.mul(cube, 0.044715)), 0.7978845608028654)
    return fd.ops.mul(fd.ops.mul(x, 0.5), fd.ops.add(fd.ops.tanh(inner), 1.0))


def _softmax(fd: FusionDefinition, x: Any) -> Any:
    shifted = fd.ops.sub(x, fd.ops.max(x, dims=[1], keepdim=True))
    e = fd.ops.exp(shifted)
    return fd.ops.div(e, fd.ops.sum(e, dims=[1], keepdim=True))


def _affine() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        w = fd.define_tensor(shape=[-1], contiguity=[True])
        b = fd.define_tensor(shape=[-1], contiguity=[True])
        row = fd.ops.broadcast_in_dim(w, shape=fd.ops.shape(x), broadcast_dims=[1])
        shift = fd.ops.broadcast_in_dim(b, shape=fd.ops.shape(x), broadcast_dims=[1])
        fd.add_output(fd.ops.add(fd.ops.mul(fd.ops.mul(x, float(COLS)), row), shift))
    return fd


def _column_means() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.div(fd.ops.sum(x, dims=[0]), float(ROWS)))
    return fd


def _add_row() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        r = fd.define_tensor(shape=[-1], contiguity=[True])
        fd.add_output(fd.ops.sub(x, fd.ops.broadcast_in_dim(r, fd.ops.shape(x), [1])))
    return fd


def sequence() -> list[FusionDefinition]:
    """The ten fusions, in order (the affine one takes (x, w, b), the last (x, means))."""
    return [
        _unary(lambda fd, x: fd.ops.add(fd.ops.mul(x, 2.0), 1.0)),
        _unary(lambda fd, x: fd.ops.relu(x)),
        _unary(lambda fd, x: fd.ops.sub(x, _row_mean(fd, x))),
        _unary(_rms_norm),
        _unary(_gelu),
        _unary(_softmax),
        _affine(),
        _unary(lambda fd, x: fd.ops.mul(x, fd.ops.sigmoid(x))),
        _column_means(),
        _add_row(),
    ]


def run_sequence(fds: list[FusionDefinition], x: Any, w: Any, b: Any) -> Any:
    """The ten calls: each fusion on the previous one's output."""
    for k, fd in enumerate(fds):
        if k == 6:
            (x,) = fd.execute([x, w, b])
        elif k == 8:
            (means,) = fd.execute([x])
        elif k == 9:
            (x,) = fd.execute([x, means])
        else:
            (x,) = fd.execute([x])
    return x


def reference(torch: Any, x: Any, w: Any, b: Any) -> Any:
    """The ten steps in float64 torch."""
    x, w, b = x.double(), w.double(), b.double()
    x = torch.relu(x * 2 + 1)
    x = x - x.mean(dim=1, keepdim=True)
    x = x * torch.rsqrt((x * x).mean(dim=1, keepdim=True) + 1e-6)
    x = 0.5 * x * (1 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x**3)))
    x = torch.softmax(x, dim=1)
    x = x * COLS * w + b
    x = x * torch.sigmoid(x)
    return x - x.mean(dim=0)


def graph_replay(torch: Any, log: Callable[[str], None], batches: int = 5) -> list[dict[str, Any]]:
    import kfuse

    gen = torch.Generator(device="cuda").manual_seed(60)
    x = torch.randn(ROWS, COLS, device="cuda", generator=gen)
    w = torch.rand(COLS, device="cuda", generator=gen) + 0.5
    b = torch.randn(COLS, device="cuda", generator=gen)
    fds = sequence()
    eager = run_sequence(fds, x, w, b)
    torch.testing.assert_close(eager.double(), reference(torch, x, w, b), rtol=2e-4, atol=2e-5)

    side = torch.cuda.Stream()  # warm-up off the capture stream, as torch's docs ask
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            run_sequence(fds, x, w, b)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = run_sequence(fds, x, w, b)
    graph.replay()
    torch.cuda.synchronize()
    # (the column means may combine partial sums in another order: close, not equal)
    torch.testing.assert_close(captured, eager, rtol=1e-5, atol=1e-6)

    def per_call_us(call: Callable[[], Any], per_batch: int = 50) -> float:
        for _ in range(5):
            call()
        samples = []
        for _ in range(batches):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            for _ in range(per_batch):
                call()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3 / per_batch)
        return statistics.median(samples)

    kernel_sums = []
    for _ in range(batches):
        with kfuse.PythonProfiler() as prof:
            run_sequence(fds, x, w, b)
        kernel_sums.append(sum(p.kernel_time_ms for p in prof.profiles) * 1e3)
    kernels_us = statistics.median(kernel_sums)
    replay_us = per_call_us(graph.replay)
    eager_us = per_call_us(lambda: run_sequence(fds, x, w, b))
    log(f"  G1    ten fusions' kernels (CUPTI) {kernels_us:8.1f} us")
    for what, us in (("graph replay", replay_us), ("eager calls", eager_us)):
        log(f"  G1    {what:29s} {us:8.1f} us  ({us / kernels_us:.3f}x the kernels)")
    return [
        {"workload": "G1", "peer": "kfuse kernels (CUPTI sum)", "us_per_call": kernels_us},
        {
            "workload": "G1",
            "peer": "kfuse graph replay",
            "us_per_call": replay_us,
            "ratio_to_kernels": replay_us / kernels_us,
        },
        {
            "workload": "G1",
            "peer": "kfuse eager calls",
            "us_per_call": eager_us,
            "ratio_to_kernels": eager_us / kernels_us,
        },
    ]
