"""Where each microsecond of a cached call goes (issue 60): the host fast path's stages.

For each fusion below, on torch tensors and on CuPy arrays, with and without outputs=:

* loop: microseconds per call of back-to-back calls (benchmarks/run.py's H1 figure: the
  larger of the host's time and the GPU's);
* host: one call's host time with the GPU idle (synchronized before each call, untimed),
  the median, as fd.execute sees it;
* the stages of that call (kfuse._C.FastCall.stage_times, each run on its own and timed in
  C++): fd.execute's Python frame and the dispatch into C++ (host less the C++ call), the
  inputs' layout match, the given outputs' match, the stream query, the outputs'
  allocation (freeing included), the workspaces', each kernel's launch, and the rest of the
  C++ call (its result, its scratch: the call less its stages).

The fusions: H1 ((a + b) * 2 on fp32 [1024], one kernel), H1 with a scalar input ((a + b) *
s, whose value the scalar program computes each call) and H1s (three kernels: a row sum and
two column sums, fp32 [64, 64]). A GPU is needed (the emulator has no fast path).

    PYTHONPATH=src python3 tools/host_call_probe.py [--repeats 2000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kfuse import FusionDefinition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from workloads import h1_definition as h1  # noqa: E402  (benchmarks/run.py's H1, H1s)
from workloads import h1s_definition as h1s  # noqa: E402


def h1_scalar() -> FusionDefinition:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1], contiguity=True)
        b = fd.define_tensor(shape=[-1], contiguity=True)
        s = fd.define_scalar()
        fd.add_output(fd.ops.mul(fd.ops.add(a, b), s))
    return fd


def loop_us(fn: Callable[[], Any], calls: int, sync: Callable[[], None]) -> float:
    """Microseconds per call of `calls` back-to-back calls (median of five batches)."""
    for _ in range(200):
        fn()
    sync()
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls // 5):
            fn()
        sync()
        samples.append((time.perf_counter() - start) / (calls // 5) * 1e6)
    return statistics.median(samples)


def host_us(fn: Callable[[], Any], repeats: int, sync: Callable[[], None]) -> float:
    """Median microseconds of one call's host time, the GPU idle before each."""
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - start)
    sync()
    return statistics.median(times) / 1e3


def probe(
    label: str,
    fd: FusionDefinition,
    inputs: list[Any],
    outputs: list[Any] | None,
    repeats: int,
    sync: Callable[[], None],
) -> list[str]:
    """The report's lines for one fusion, framework and outputs= choice."""

    def run() -> Any:
        return fd.execute(inputs) if outputs is None else fd.execute(inputs, outputs=outputs)

    for _ in range(3):  # compile, then build the FastCall (on a layout's second call)
        run()
    sync()
    cache = fd._executor().fast_calls
    if cache is None or len(cache) == 0:
        return [f"{label}: no fast call was built (the checked path runs every call)"]
    entry = cache.entries()[0]  # the only layout these calls have
    loop = loop_us(run, 5 * repeats, sync)
    host = host_us(run, repeats, sync)
    stages = entry.stage_times(inputs, outputs, repeats, sync)
    call_us = stages["call"] / 1e3
    rows = [("fd.execute's Python frame and dispatch into C++", host - call_us)]
    named = [k for k in stages if k not in ("call", "launches")]
    rows += [(k, stages[k] / 1e3) for k in named]
    rows += [(f"launch {k}", ns / 1e3) for k, ns in enumerate(stages["launches"])]
    staged = sum(stages[k] for k in named) + sum(stages["launches"])
    rows.append(("rest of the C++ call", call_us - staged / 1e3))
    lines = [f"{label}: loop {loop:.2f} us a call; one call {host:.2f} us of host time"]
    lines += [f"    {name:50s} {us:6.2f} us" for name, us in rows]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=2000)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("host_call_probe: needs torch (and a GPU)")
        return 1
    if not torch.cuda.is_available():
        print("host_call_probe: needs a GPU (the emulator has no fast path)")
        return 1
    sync = torch.cuda.synchronize
    cases: list[tuple[str, Callable[[], FusionDefinition], list[Any], Any]] = []
    a, b = torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")
    x = torch.randn(64, 64, device="cuda")
    cases.append(("H1 torch", h1, [a, b], None))
    cases.append(("H1 torch, outputs=", h1, [a, b], [torch.empty_like(a)]))
    cases.append(("H1 torch, scalar input", h1_scalar, [a, b, 2.0], None))
    cases.append(("H1s torch (three kernels)", h1s, [x], None))
    try:
        import cupy

        ca, cb = cupy.from_dlpack(a), cupy.from_dlpack(b)
        cases.append(("H1 cupy", h1, [ca, cb], None))
        cases.append(("H1 cupy, outputs=", h1, [ca, cb], [cupy.empty_like(ca)]))
    except ImportError:
        print("cupy not installed: torch rows only")
    for label, make, inputs, outputs in cases:
        for line in probe(label, make(), inputs, outputs, args.repeats, sync):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
