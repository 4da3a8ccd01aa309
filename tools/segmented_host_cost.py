"""Host cost of a cached segmented call, per segment count (issue 60: the cost of a segmented
call should grow by about 1 us per extra segment, or less).

On the emulator the kernels' launches and the outputs' poisoning are made no-ops, so what is
timed is kfuse's own host work: the signature check, the plan, allocations, argument packing,
and the library calls (NumPy's matmul of small matrices: a few us each, also timed alone and
reported, to be taken off). On a GPU (--device cuda) the launches are real and enqueued, the
GPU idle before each call.

The fusions are chains of a pointwise segment and a matmul (a library segment) taken in turn,
as nvFuser's many-segment host benchmark builds them: 1 segment is the pointwise one alone
(a KernelProgram), 2, 4, 8 and 16 a SegmentedProgram; "reduction+library" is an
index_select feeding a reduction (the profile of issue 60).

    PYTHONPATH=src python3 tools/segmented_host_cost.py [--reps 2000] [--device cuda]
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
    """index_select (a library segment) of a reshaped, cast table, then a row sum."""
    with FusionDefinition() as fd:
        table = fd.define_tensor(shape=[-1, -1])
        rows = fd.define_tensor(shape=[-1], dtype=fd_int())
        picked = fd.ops.index_select(table, rows, dim=0)
        fd.add_output(fd.ops.sum(fd.ops.mul(picked, picked), dims=[1]))
    return fd


def fd_int() -> Any:
    from kfuse import DataType

    return DataType.Int


def stub_the_emulator() -> None:
    """Kernel launches and output poisoning made no-ops (the host work stays)."""
    import kfuse.engine.program as program
    from kfuse.runtime.emulator import EmulatedKernel

    EmulatedKernel.launch = lambda *args, **kwargs: None  # type: ignore[method-assign]
    program.poison = lambda array: None  # type: ignore[attr-defined]


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
    args = parser.parse_args()
    if args.device == "cuda":
        import torch

        def make(*shape: int) -> Any:
            return torch.randn(*shape, device="cuda")

        def rows(n: int, high: int) -> Any:
            return torch.randint(0, high, (n,), device="cuda")

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

        def sync() -> None:
            return None

        matmul = numpy.matmul
    x, y = make(8, 8), make(8, 8)
    matmul_us = per_call_us(lambda: matmul(x, y), args.reps, sync)
    print(f"library call alone (matmul of 8x8): {matmul_us:.1f} us")
    first = None
    for n in SEGMENTS:
        fd = chain(n)
        us = per_call_us(lambda fd=fd: fd.execute([x, y]), args.reps, sync)
        program = type(fd._executor().last_compiled).__name__
        matmuls = (n - 1 + 1) // 2
        own = us - matmuls * matmul_us
        first = own if first is None else first
        growth = "" if n == 1 else f", {(own - first) / (n - 1):6.1f} us per extra segment"
        print(
            f"{n:2d} segments ({program}): {us:8.1f} us a call, {own:8.1f} us less matmuls{growth}"
        )
    fd = gathered_sum()
    table, picked = make(64, 32), rows(16, 64)
    us = per_call_us(lambda: fd.execute([table, picked]), args.reps, sync)
    program = type(fd._executor().last_compiled).__name__
    print(f"index_select -> sum ({program}): {us:8.1f} us a call")


if __name__ == "__main__":
    main()
