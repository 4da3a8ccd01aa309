"""Run the benchmark workloads on a GPU against the peers, in one process, on the same inputs.

    python benchmarks/run.py [--quick] [--only W1,W1f] [--json out.json] [--reps 50]

Per workload: check every peer's result against a float64 reference first, then time each with
CUDA events (warm-up, then the median of --reps timed calls), report achieved bandwidth and its
fraction of the device-to-device copy bandwidth measured at the start of the run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workloads import WORKLOADS, Workload, h1_definition, h1s_definition  # noqa: E402


def time_ms(
    torch: Any,
    fn: Callable[[], Any],
    reps: int,
    warmup: int = 5,
    before: Callable[[], Any] | None = None,
) -> float:
    """Median milliseconds of `fn`'s GPU work by CUDA events, each call timed on its own.

    Before each call the stream is kept busy for about a millisecond (torch.cuda._sleep), so
    the host-side cost of the call (Python, argument packing, launch) is hidden behind it and
    the events bracket only the GPU work. Host cost is measured separately (H1). `before`, if
    given, runs before each timed call, after the sleep and outside the events (the model
    suite flushes L2 there).
    """
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(2_000_000)
        if before is not None:
            before()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def copy_bandwidth(torch: Any, reps: int) -> float:
    """Device-to-device copy bandwidth in GB/s (bytes read + written), 2 GiB buffers."""
    n = 2**29  # 2 GiB of float32
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    ms = time_ms(torch, lambda: dst.copy_(src), reps)
    return 2 * src.numel() * 4 / (ms * 1e-3) / 1e9


def check(
    name: str, result: Any, reference: Any, dtype: Any, tolerance: tuple[float, float] | None = None
) -> str:
    """'ok' or a description of the mismatch (max abs error against the float64 result)."""
    import torch

    atol, rtol = tolerance or {torch.bfloat16: (1e-2, 1e-2), torch.float16: (1e-3, 1e-3)}.get(
        dtype, (1e-5, 1e-5)
    )
    got = result.double() if hasattr(result, "double") else torch.as_tensor(result).double()
    err = (got - reference).abs()
    bad = err > atol + rtol * reference.abs()
    if bool(bad.any()) or bool(torch.isnan(got).any() != torch.isnan(reference).any()):
        return f"MISMATCH {name}: max abs err {float(err.max()):.3g}"
    return "ok"


def run_workload(
    torch: Any,
    w: Workload,
    quick: bool,
    reps: int,
    copy_gbs: float,
    log: Callable[[str], None],
    only_peers: set[str],
) -> list[dict[str, Any]]:
    inputs = w.make_inputs(torch, quick)
    reference = w.reference(*inputs)
    nbytes = w.bytes_moved(inputs)
    fd = w.definition()
    peers: dict[str, Callable[[], Any]] = {
        "kfuse": lambda: fd.execute(inputs)[0],
        "torch eager": lambda: w.eager(*inputs),
    }
    try:
        compiled = torch.compile(w.eager)
        peers["torch.compile"] = lambda: compiled(*inputs)
    except Exception as exc:  # noqa: BLE001 - a peer that cannot run is reported, not fatal
        log(f"  torch.compile unavailable: {exc}")
    if w.cupy is not None:
        try:
            import cupy

            cp_inputs = [cupy.from_dlpack(t) for t in inputs]
            peers["cupy"] = lambda: w.cupy(*cp_inputs)
        except Exception as exc:  # noqa: BLE001
            log(f"  cupy unavailable: {exc}")
    rows = []
    for name, fn in peers.items():
        if only_peers and name not in only_peers:
            continue
        try:
            result = fn()
            if name == "cupy":
                result = torch.from_dlpack(result)
            status = check(name, result, reference, inputs[0].dtype, w.tolerance)
            ms = time_ms(torch, fn, reps)
        except Exception as exc:  # noqa: BLE001
            rows.append({"workload": w.id, "peer": name, "status": f"error: {exc}"})
            log(f"  {w.id:5s} {name:14s} error: {exc}")
            continue
        gbs = nbytes / (ms * 1e-3) / 1e9
        rows.append(
            {
                "workload": w.id,
                "peer": name,
                "status": status,
                "ms": ms,
                "gbs": gbs,
                "fraction_of_copy": gbs / copy_gbs,
                "bytes": nbytes,
            }
        )
        log(
            f"  {w.id:5s} {name:14s} {ms:8.3f} ms {gbs:8.0f} GB/s {100 * gbs / copy_gbs:5.1f}% "
            f"of copy  [{status}]"
        )
    return rows


def host_overhead(torch: Any, calls: int, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """H1: wall-clock microseconds per cached call of out = (a + b) * 2 on fp32 [1024]."""
    fd = h1_definition()
    ta = torch.randn(1024, device="cuda")
    tb = torch.randn(1024, device="cuda")
    tout = torch.empty_like(ta)
    peers: dict[str, Callable[[], Any]] = {
        "kfuse (torch)": lambda: fd.execute([ta, tb]),
        "kfuse (torch, outputs=)": lambda: fd.execute([ta, tb], outputs=[tout]),
        "torch eager (two ops)": lambda: (ta + tb) * 2,
    }
    try:
        import cupy

        ca, cb = cupy.from_dlpack(ta), cupy.from_dlpack(tb)
        kernel = cupy.ElementwiseKernel(
            "float32 a, float32 b", "float32 y", "y = (a + b) * 2.0f", "kfuse_bench_h1"
        )
        cout = cupy.empty_like(ca)
        kout = cupy.empty_like(ca)
        peers["kfuse (cupy)"] = lambda: fd.execute([ca, cb])
        peers["kfuse (cupy, outputs=)"] = lambda: fd.execute([ca, cb], outputs=[kout])
        peers["cupy ElementwiseKernel (preallocated out)"] = lambda: kernel(ca, cb, cout)
        peers["cupy ElementwiseKernel (allocating)"] = lambda: kernel(ca, cb)
    except Exception as exc:  # noqa: BLE001
        log(f"  cupy unavailable: {exc}")
    rows = []
    for name, fn in peers.items():
        us = _us_per_call(torch, fn, calls)
        rows.append({"workload": "H1", "peer": name, "us_per_call": us})
        log(f"  H1    {name:42s} {us:7.2f} us per call")
    by_peer = {r["peer"]: r["us_per_call"] for r in rows}
    # kfuse's allocating calls against CuPy's allocating one, outputs= against CuPy's
    # preallocated one
    for key, peer, what in (
        ("ratio_to_cupy_allocating", "cupy ElementwiseKernel (allocating)", "allocating"),
        ("ratio_to_cupy_preallocated", "cupy ElementwiseKernel (preallocated out)", "preallocated"),
    ):
        ref = by_peer.get(peer)
        if not ref:
            continue
        for r in rows:
            given = "outputs=" in r["peer"]
            if r["peer"].startswith("kfuse") and given == (what == "preallocated"):
                r[key] = r["us_per_call"] / ref
                log(f"  H1    {r['peer']}: {r[key]:.2f}x CuPy's {what} call")
    return rows


def _us_per_call(torch: Any, fn: Callable[[], Any], calls: int) -> float:
    """Wall-clock microseconds per call of `fn`, warmed up: the median of five batches."""
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls // 5):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) / (calls // 5) * 1e6)
    return statistics.median(samples)


def segmented_host_overhead(torch: Any, calls: int, log: Callable[[str], None]) -> list[Any]:
    """H1s: wall-clock microseconds per cached call of a fusion of three segments (a row sum,
    then two column sums of what the rows scaled; all generated kernels, one program), fp32
    [64, 64]: the host cost of a segmented call, beside H1's one kernel."""
    fd = h1s_definition()
    tx = torch.randn(64, 64, device="cuda")
    segments = len(fd.segments([tx]))
    us = _us_per_call(torch, lambda: fd.execute([tx]), calls)
    log(f"  H1s   kfuse (torch), {segments} segments {us:7.2f} us per call")
    return [{"workload": "H1s", "peer": "kfuse (torch)", "segments": segments, "us_per_call": us}]


def compile_time(torch: Any, log: Callable[[str], None], rounds: int = 3) -> list[dict[str, Any]]:
    """C1: first-call time of W5 with cold caches, then with only the on-disk cache warm:
    the median of `rounds` rounds, each in a fresh cache folder (one cold call is a single
    sample that the host's state of the moment moves by several times)."""
    import os
    import tempfile

    from workloads import _norm_inputs, _rmsnorm_definition

    from kfuse.runtime.backends.cuda import CUDA_BACKEND

    inputs = _norm_inputs(True, False)(torch, True)
    labels = ("cold (codegen + NVRTC + load)", "warm disk cache (program + load)")
    samples: dict[str, list[float]] = {label: [] for label in labels}
    old = os.environ.get("KFUSE_CACHE_DIR")
    try:
        for _ in range(rounds):
            with tempfile.TemporaryDirectory() as cache:
                os.environ["KFUSE_CACHE_DIR"] = cache
                # Warm: the program store's entry and the cubin (KFUSE_PROGRAM_CACHE=0:
                # codegen again, then the cubin).
                for label in labels:
                    CUDA_BACKEND._kernels.clear()  # forget loaded kernels: only the disk remains
                    fd = _rmsnorm_definition()
                    torch.cuda.synchronize()
                    start = time.perf_counter()
                    fd.execute(inputs)
                    torch.cuda.synchronize()
                    samples[label].append((time.perf_counter() - start) * 1e3)
    finally:
        if old is None:
            os.environ.pop("KFUSE_CACHE_DIR", None)
        else:
            os.environ["KFUSE_CACHE_DIR"] = old
    rows = []
    for label, times in samples.items():
        ms = statistics.median(times)
        rows.append({"workload": "C1", "peer": label, "ms": ms, "samples_ms": times})
        spread = f"({min(times):.1f} to {max(times):.1f} over {len(times)})"
        log(f"  C1    {label:42s} {ms:8.1f} ms {spread}")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller inputs, fewer reps")
    parser.add_argument("--only", default="", help="comma-separated workload ids")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--json", default="", help="write the results here")
    parser.add_argument(
        "--peers",
        default="",
        help="comma-separated peers to run (kfuse, torch eager, torch.compile, cupy); default all",
    )
    args = parser.parse_args(argv)
    import torch

    def log(line: str) -> None:
        print(line, flush=True)

    reps = 20 if args.quick and args.reps == 50 else args.reps
    props = torch.cuda.get_device_properties(0)
    log(f"device: {props.name}; torch {torch.__version__}; python {platform.python_version()}")
    copy_gbs = copy_bandwidth(torch, reps)
    log(f"device-to-device copy: {copy_gbs:.0f} GB/s")
    wanted = {s for s in args.only.split(",") if s}
    results: list[dict[str, Any]] = []
    for w in WORKLOADS:
        if wanted and w.id not in wanted:
            continue
        log(f"{w.id}: {w.description}")
        results += run_workload(
            torch, w, args.quick, reps, copy_gbs, log, {p for p in args.peers.split(",") if p}
        )
    if not wanted or "H1" in wanted:
        log("H1: host overhead of a cached call, out = (a + b) * 2 on fp32 [1024]")
        results += host_overhead(torch, 4000 if args.quick else 20000, log)
    if not wanted or "H1s" in wanted:
        log("H1s: host overhead of a cached call of a fusion of three segments")
        results += segmented_host_overhead(torch, 2000 if args.quick else 10000, log)
    if not wanted or "G1" in wanted:
        from graph_replay import graph_replay

        log("G1: ten fusions captured in one CUDA graph, replayed, against their kernels' times")
        try:
            results += graph_replay(torch, log)
        except Exception as exc:  # noqa: BLE001 - reported; the workloads after it still run
            log(f"  G1    failed: {type(exc).__name__}: {exc}")
            results.append({"workload": "G1", "error": f"{type(exc).__name__}: {exc}"})
    if not wanted or "C1" in wanted:
        log("C1: compile time of W5's kernel")
        results += compile_time(torch, log)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "device": props.name,
                    "torch": torch.__version__,
                    **versions(),
                    "copy_gbs": copy_gbs,
                    "date": time.strftime("%Y-%m-%d"),
                    **commit(),
                    "results": results,
                },
                indent=2,
            )
        )
    return 0


def commit() -> dict[str, str]:
    """The kfuse commit measured, from KFUSE_COMMIT (the GPU machine gets a copy of the
    working tree whose git metadata may be stale, so the caller names it)."""
    named = os.environ.get("KFUSE_COMMIT", "")
    return {"kfuse_commit": named} if named else {}


def versions() -> dict[str, str]:
    """Driver, NVRTC and Python versions, for the record. (No commit: the benchmark may run
    from a copy of a working tree whose git metadata is not its own; say it in the notes.)"""
    import platform
    import subprocess

    from kfuse import _C

    cuda = _C.driver_version()
    driver = f"CUDA {cuda // 1000}.{cuda % 1000 // 10}"
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        if smi:
            driver = f"{smi[0]} ({driver})"
    except (OSError, subprocess.CalledProcessError):
        pass  # no nvidia-smi: the CUDA version the driver supports is still known
    return {
        "driver": driver,
        "nvrtc": ".".join(map(str, _C.nvrtc_version())),
        "python": platform.python_version(),
    }


if __name__ == "__main__":
    raise SystemExit(main())
