"""Run the benchmark workloads on a GPU against the peers, in one process, on the same inputs.

    python benchmarks/run.py [--quick] [--only W1,W1f] [--json out.json] [--reps 50]

Per workload: check every peer's result against a float64 reference first, then time each with
CUDA events (warm-up, then the median of --reps timed calls), report achieved bandwidth and its
fraction of the device-to-device copy bandwidth measured at the start of the run.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workloads import WORKLOADS, Workload  # noqa: E402


def time_ms(torch: Any, fn: Callable[[], Any], reps: int, warmup: int = 5) -> float:
    """Median milliseconds of `fn`'s GPU work by CUDA events, each call timed on its own.

    Before each call the stream is kept busy for about a millisecond (torch.cuda._sleep), so
    the host-side cost of the call (Python, argument packing, launch) is hidden behind it and
    the events bracket only the GPU work. Host cost is measured separately (H1).
    """
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(2_000_000)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def copy_bandwidth(torch: Any, reps: int) -> float:
    """Device-to-device copy bandwidth in GB/s (bytes read + written), 2 GiB buffers."""
    n = 2 ** 29  # 2 GiB of float32
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    ms = time_ms(torch, lambda: dst.copy_(src), reps)
    return 2 * src.numel() * 4 / (ms * 1e-3) / 1e9


def check(name: str, result: Any, reference: Any, dtype: Any) -> str:
    """'ok' or a description of the mismatch (max abs error against the float64 result)."""
    import torch

    atol, rtol = {torch.bfloat16: (1e-2, 1e-2), torch.float16: (1e-3, 1e-3)}.get(
        dtype, (1e-5, 1e-5))
    got = result.double() if hasattr(result, "double") else torch.as_tensor(result).double()
    err = (got - reference).abs()
    bad = err > atol + rtol * reference.abs()
    if bool(bad.any()) or bool(torch.isnan(got).any() != torch.isnan(reference).any()):
        return f"MISMATCH {name}: max abs err {float(err.max()):.3g}"
    return "ok"


def run_workload(torch: Any, w: Workload, quick: bool, reps: int, copy_gbs: float,
                 log: Callable[[str], None]) -> list[dict[str, Any]]:
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
        try:
            result = fn()
            if name == "cupy":
                result = torch.from_dlpack(result)
            status = check(name, result, reference, inputs[0].dtype)
            ms = time_ms(torch, fn, reps)
        except Exception as exc:  # noqa: BLE001
            rows.append({"workload": w.id, "peer": name, "status": f"error: {exc}"})
            log(f"  {w.id:5s} {name:14s} error: {exc}")
            continue
        gbs = nbytes / (ms * 1e-3) / 1e9
        rows.append({"workload": w.id, "peer": name, "status": status, "ms": ms,
                     "gbs": gbs, "fraction_of_copy": gbs / copy_gbs, "bytes": nbytes})
        log(f"  {w.id:5s} {name:14s} {ms:8.3f} ms {gbs:8.0f} GB/s {100 * gbs / copy_gbs:5.1f}% "
            f"of copy  [{status}]")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller inputs, fewer reps")
    parser.add_argument("--only", default="", help="comma-separated workload ids")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--json", default="", help="write the results here")
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
        results += run_workload(torch, w, args.quick, reps, copy_gbs, log)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "device": props.name, "torch": torch.__version__, "copy_gbs": copy_gbs,
            "date": time.strftime("%Y-%m-%d"), "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
