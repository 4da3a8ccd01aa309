"""Run the model-fusion suite on a GPU: nvFuser's benchmark fusions in kfuse against torch.compile
and torch eager, in one process, on the same inputs.

    python benchmarks/models/run.py [--only REGEX] [--quick] [--json OUT] [--md OUT] [--reps N]
                                       [--kernels]
    python benchmarks/models/run.py --list [--quick] [--only REGEX]   # what would run; no GPU

Per case, dtype and size: every peer's result is checked against a float64 reference first (a
mismatch is reported and marks the row), then each peer is timed by CUDA events (median of
--reps calls, L2 flushed before each), reported in us, GB/s and % of the device-to-device copy
bandwidth measured once at the start, with kfuse's speed over torch.compile's and kfuse's
segments. torch.compile compiles every shape afresh (dynamic=False). The JSON is rewritten
after every row, so a run cut short keeps what it measured; --budget stops starting new rows
after that many seconds (the rest are recorded as skipped). --kernels adds one profiled kfuse
call per row (kfuse.PythonProfiler, CUPTI): each kernel's time, grid, block and registers,
printed and kept in the row's "kernel_profile".
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # benchmarks/: the models package

from models import registry, table  # noqa: E402
from models.case import DTYPES, Case, Shape  # noqa: E402


def load_suite() -> Any:
    """benchmarks/run.py (time_ms, copy_bandwidth, check, versions, commit), loaded by path:
    `import run` would find this file."""
    spec = importlib.util.spec_from_file_location("kfuse_bench_run", HERE.parent / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def unmeasured(case: Case, shape: Shape, dtype: str, status: str) -> dict[str, Any]:
    """The row of a case and size that was not measured, and why."""
    return {
        "family": case.family,
        "case": case.name,
        "source": case.source,
        "shape": list(shape),
        "dtype": dtype,
        "status": status,
    }


def plan(
    cases: list[Case], quick: bool, dtypes: list[str] | None = None
) -> list[tuple[Case, str, Shape]]:
    """(case, dtype, shape) in the order they run: `dtypes`, or each case's own (Case.dtypes)
    where None. Quick runs take the first of a case's own dtypes."""
    return [
        (case, dtype, shape)
        for case in cases
        for dtype in (dtypes or (case.dtypes[:1] if quick else case.dtypes))
        for shape in (case.quick_sizes if quick else case.sizes)
    ]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default="", help="regular expression on case or family names")
    parser.add_argument("--quick", action="store_true", help="one size per case (about 90 s)")
    parser.add_argument("--json", default="", help="write every row and the machine info here")
    parser.add_argument("--md", default="", help="write the Markdown table here")
    parser.add_argument("--reps", type=int, default=0, help="timed calls per peer (50; quick 20)")
    parser.add_argument(
        "--dtype",
        default="",
        choices=["", *DTYPES, "all"],
        help="bfloat16, float32, or all (both, as nvFuser runs them); default each case's "
        "own: bfloat16, and float32 too for the transpose family",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=540.0,
        help="seconds after which no new row starts (default 540: under a 10-minute limit)",
    )
    parser.add_argument(
        "--kernels",
        action="store_true",
        help="also profile one kfuse call per row (CUPTI): each kernel's time, grid and block",
    )
    parser.add_argument("--list", action="store_true", help="print the plan and exit")
    return parser.parse_args(argv)


def configure_dynamo(torch: Any) -> None:
    """Every shape is compiled afresh (the runner resets Dynamo); the limits are raised anyway
    so that no shape falls back to eager silently."""
    config = torch._dynamo.config
    for name in (
        "cache_size_limit",
        "recompile_limit",
        "accumulated_cache_size_limit",
        "accumulated_recompile_limit",
    ):
        if hasattr(config, name):
            setattr(config, name, max(getattr(config, name), 1024))
    # A failure to compile must show as an error, not as eager speed.
    if hasattr(config, "suppress_errors"):
        config.suppress_errors = False


def progress(row: dict[str, Any]) -> str:
    head = f"  {row['case']} {row['dtype']} {table.size_label(row)}:"
    if row.get("status", "").startswith("skipped"):
        return f"{head} {row['status']}"
    parts = []
    for peer, p in row.get("peers", {}).items():
        if "us" in p:
            mark = "" if p.get("check") == "ok" else " WRONG"
            parts.append(
                f"{peer} {p['us']:.1f} us ({100 * p['fraction_of_copy']:.0f}% of copy, "
                f"first call {p['first_call_s']:.1f} s){mark}"
            )
        else:
            parts.append(f"{peer} {p.get('error') or p.get('check')}")
    seg = f"; kfuse {table._segments(row)} segments" if "segments" in row else ""
    ratio = f"; kfuse/compile {row['ratio']:.2f}x" if "ratio" in row else ""
    lines = [f"{head} " + " | ".join(parts) + seg + ratio]
    for peer, p in row.get("peers", {}).items():
        if "us" in p and p.get("check") != "ok":
            lines.append(f"    {peer} check: {p['check']}")
    if "note" in row:
        lines.append(f"    note: {row['note']}")
    for k in row.get("kernel_profile", ()):
        lines.append(
            f"    kernel {k['segment']} {k['scheduler']:16s} {k['us']:8.1f} us {k['gbs']:6.0f} GB/s"
            f"  grid {k['grid']} block {k['block']} regs {k['registers']}  {k['name']}"
        )
    if "kernel_profile_error" in row:
        lines.append(f"    kernel profile: {row['kernel_profile_error']}")
    lines.append(f"    [{row.get('status')}, {row.get('elapsed_s', 0):.1f} s]")
    return "\n".join(lines)


def machine_info(torch: Any, suite: Any, copy_gbs: float, l2: int) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    info: dict[str, Any] = {
        "device": props.name,
        "sm": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count,
        "memory_gib": round(props.total_memory / 2**30, 1),
        "l2_bytes": l2,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "copy_gbs": copy_gbs,
        "date": time.strftime("%Y-%m-%d"),
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        pass
    info.update(suite.versions())
    info.update(suite.commit())
    return info


def write(path: str, data: dict[str, Any]) -> None:
    if path:
        Path(path).write_text(json.dumps(data, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cases = registry.select(args.only)
    dtypes = list(DTYPES) if args.dtype == "all" else [args.dtype] if args.dtype else None
    todo = plan(cases, args.quick, dtypes)
    if args.list:
        for case, dtype, shape in todo:
            note = f"  (skipped: {case.skip})" if case.skip else ""
            print(f"{case.family:19s} {case.name:25s} {dtype:9s} {list(shape)}{note}")
        print(f"{len(todo)} rows, {len(cases)} cases")
        return 0
    if not todo:
        print(f"no case matches {args.only!r}", file=sys.stderr)
        return 2
    import torch

    from models.measure import PEERS, describe, l2_flusher, measure

    def log(line: str) -> None:
        print(line, flush=True)

    started = time.perf_counter()
    suite = load_suite()
    configure_dynamo(torch)
    reps = args.reps or (20 if args.quick else 50)
    copy_gbs = suite.copy_bandwidth(torch, reps)
    flush, l2 = l2_flusher(torch)
    data = machine_info(torch, suite, copy_gbs, l2)
    data.update(
        argv=sys.argv[1:] if argv is None else argv,
        reps=reps,
        quick=args.quick,
        dtypes=sorted({dtype for _, dtype, _ in todo}),
        peers=list(PEERS),
        rows=[],
    )
    log(
        f"device: {data['device']}; torch {data['torch']}; L2 {l2 / 2**20:.0f} MiB; "
        f"device-to-device copy {copy_gbs:.0f} GB/s; {len(todo)} rows, {reps} reps"
    )
    rows: list[dict[str, Any]] = data["rows"]
    current = None
    case_started = time.perf_counter()
    for case, dtype, shape in todo:
        if case is not current:
            if current is not None:
                log(f"{current.name}: {time.perf_counter() - case_started:.1f} s")
            current, case_started = case, time.perf_counter()
            log(f"{case.family} / {case.name} ({case.source})")
        spent = time.perf_counter() - started
        if spent > args.budget:
            row = unmeasured(
                case, shape, dtype, f"skipped: time budget ({args.budget:.0f} s) spent"
            )
        else:
            try:
                row = measure(
                    torch,
                    case,
                    shape,
                    dtype,
                    reps=reps,
                    copy_gbs=copy_gbs,
                    flush=flush,
                    suite=suite,
                    kernels=args.kernels,
                )
            except Exception as exc:  # noqa: BLE001 - e.g. out of memory making the inputs
                row = unmeasured(case, shape, dtype, f"error: {describe(exc)}")
            torch.cuda.empty_cache()
        rows.append(row)
        log(progress(row))
        data["elapsed_s"] = time.perf_counter() - started
        write(args.json, data)
    if current is not None:
        log(f"{current.name}: {time.perf_counter() - case_started:.1f} s")
    log("")
    log(table.console(rows))
    log(f"\nelapsed {time.perf_counter() - started:.0f} s")
    write(args.json, data)
    if args.md:
        Path(args.md).write_text(table.markdown(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
