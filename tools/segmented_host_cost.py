"""Host cost of a cached segmented call, per segment count (issue 60: the cost of a segmented
call should grow by about 1 us per extra segment, or less).

On the emulator the kernels' launches and the outputs' poisoning are made no-ops, so what is
timed is kfuse's own host work: the signature check, the plan, allocations, argument packing,
and the library calls (NumPy's matmul of small matrices: a few us each, also timed alone and
reported, to be taken off). On a GPU (--device cuda) the launches are real and enqueued, the
GPU idle before each call.

The fusions are chains of a pointwise segment and a matmul (a library segment) taken in turn,
as nvFuser's many-segment host benchmark builds them: 1 segment is the pointwise one alone
(a KernelProgram), 2, 4, 8 and 16 a SegmentedProgram; the last row is an index_select,
reshape and cast feeding a row sum (the fusion issue 60 profiled). --checked plans no
replay (kfuse.engine.segmented_replay), so every cached call takes the checked path: the
cost before replays.

    PYTHONPATH=src python3 tools/segmented_host_cost.py [--reps 2000] [--device cuda] [--checked]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

from kfuse import FusionDefinition

SEGMENTS = (1, 2, 4, 8, 16)


def chain(segments: int) -> FusionDefinition:
    """`segments` segments: a pointwise one, then (matmul, pointwise) pairs, ending on a
    matmul when `segments` is even."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        y = fd.define_tensor(shape=[-1, -1])
        a = fd.ops.add(x, y)
        for k in range(1, segments):
            a = fd.ops.matmul(a, y) if k % 2 else fd.ops.mul(fd.ops.add(a, y), a)
        fd.add_output(a)
    return fd


def gathered_sum() -> FusionDefinition:
    """index_select of a [V, 4, 8] bf16 table, reshaped to rows and cast (a library segment),
    then a row sum (a reduction): the fusion issue 60 profiled."""
    from kfuse import DataType

    with FusionDefinition() as fd:
        table = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.BFloat16)
        rows = fd.define_tensor(shape=[-1], dtype=DataType.Int)
        picked = fd.ops.index_select(table, rows, dim=0)
        width = fd.ops.mul(fd.ops.size(table, 1), fd.ops.size(table, 2))
        flat = fd.ops.reshape(picked, new_shape=[fd.ops.size(rows, 0), width])
        fd.add_output(fd.ops.sum(fd.ops.cast(flat, DataType.Float), dims=[1]))
    return fd


def stub_the_emulator() -> None:
    """Kernel launches and output poisoning made no-ops (the host work stays)."""
    import kfuse.engine.packed_kernel as packed_kernel
    import kfuse.engine.program as program
    import kfuse.engine.replay_runs as replay_runs
    from kfuse.runtime.emulator import EmulatedKernel

    EmulatedKernel.launch = lambda *args, **kwargs: None  # type: ignore[method-assign]
    program.poison = lambda array: None  # type: ignore[attr-defined]
    packed_kernel.poison = lambda array: None  # type: ignore[attr-defined]
    replay_runs.poison = lambda array: None  # type: ignore[attr-defined]


def per_call_us(call: Callable[[], Any], reps: int, sync: Callable[[], None]) -> float:
    """Median microseconds of `call`, after two calls that compile and cache."""
    for _ in range(3):
        call()
    times = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(reps):
            sync()
            started = time.perf_counter()
            call()
            times.append(time.perf_counter() - started)
    finally:
        gc.enable()
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--device", choices=("emulator", "cuda"), default="emulator")
    parser.add_argument("--checked", action="store_true", help="no replays: the checked path")
    args = parser.parse_args()
    if args.checked:
        from kfuse.engine.segmented_replay import SegmentedReplays

        SegmentedReplays.add = lambda *args, **kwargs: None  # type: ignore[method-assign]
    if args.device == "cuda":
        import torch

        def make(*shape: int) -> Any:
            return torch.randn(*shape, device="cuda")

        def rows(n: int, high: int) -> Any:
            return torch.randint(0, high, (n,), device="cuda")

        def bf16(a: Any) -> Any:
            return a.to(torch.bfloat16)

        sync: Callable[[], None] = torch.cuda.synchronize
        matmul = torch.matmul
    else:
        import numpy

        stub_the_emulator()
        rng = numpy.random.default_rng(0)

        def make(*shape: int) -> Any:
            return rng.standard_normal(shape, dtype=numpy.float32)

        def rows(n: int, high: int) -> Any:
            return rng.integers(0, high, n)

        def bf16(a: Any) -> Any:
            import ml_dtypes

            return a.astype(ml_dtypes.bfloat16)

        def sync() -> None:
            return None

        matmul = numpy.matmul
    x, y = make(8, 8), make(8, 8)
    matmul_us = per_call_us(lambda: matmul(x, y), args.reps, sync)
    print(f"library call alone (matmul of 8x8): {matmul_us:.1f} us")
    base = None
    for n in SEGMENTS:
        fd = chain(n)
        us = per_call_us(lambda fd=fd: fd.execute([x, y]), args.reps, sync)
        program = type(fd._executor().last_compiled).__name__
        own = us - (n // 2) * matmul_us
        # The growth from the smallest segmented call (2 segments) on.
        growth = ""
        if base is not None:
            growth = f", {(own - base) / (n - 2):6.1f} us per segment beyond 2"
        elif n == 2:
            base = own
        print(
            f"{n:2d} segments ({program}): {us:8.1f} us a call, {own:8.1f} us less matmuls{growth}"
        )
    fd = gathered_sum()
    table, picked = bf16(make(64, 4, 8)), rows(16, 64)
    us = per_call_us(lambda: fd.execute([table, picked]), args.reps, sync)
    program = type(fd._executor().last_compiled).__name__
    print(f"index_select, reshape, cast -> sum ({program}): {us:8.1f} us a call")


if __name__ == "__main__":
    main()
