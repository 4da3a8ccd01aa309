"""Achieved FP32 arithmetic of a model-suite case's kernels against the GPU's FP32 peak (issue 61:
compute-bound rows at 60% of the peak or above), kfuse's and torch.compile's, from Nsight
Compute's instruction counters:

    python3 tools/kernel_flops.py many_pointwise_ops_8 [CASE ...] [--size N] [--peers kfuse,tc]

Each kernel of the case's third call is profiled (the first compiles, the second warms up;
tools/model_case.py runs them) with the executed FP32 adds, multiplies and fused
multiply-adds (a thread's predicated-on instruction counts: smsp__sass_thread_inst_executed_
op_{fadd,fmul,ffma}_pred_on.sum) and the SM cycles the kernel took (sm__cycles_elapsed.max).
FLOPs are adds + multiplies + 2 x fused multiply-adds. The peak is what those cycles allow,
128 FP32 lanes an SM each doing one fused multiply-add a cycle (sm_80 to sm_90's
FP32 rate), so the fraction does not depend on the clock that ncu locks the GPU to (its
default: the base clock). The special-function unit's work (MUFU: sin, cos, exp2, rsqrt's
approximations) and the integer and conversion instructions count for nothing here: a kernel
busy with those shows a low fraction of the FP32 peak although it is at another limit, which
the instruction mix (also printed: each kind's share of the executed instructions) shows.
"""

from __future__ import annotations

import argparse
import csv
import io
import subprocess
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
FP32_LANES_PER_SM = 128  # FP32 units an SM (sm_80 to sm_90): one FFMA each a cycle
# What the FLOPs and the peak are computed from.
CORE = {
    "fadd": "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "fmul": "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
    "ffma": "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "cycles": "sm__cycles_elapsed.max",
    "sms": "device__attribute_multiprocessor_count",
}
# The instruction mix: warp instructions issued to each pipe, as shares of all (fma: FP32
# arithmetic; alu: integer and logic; xu: the special functions and conversions; lsu: memory),
# and how busy the xu pipe was. Left out (FLOPs alone) where this ncu does not know a name.
PIPES = ("fma", "alu", "xu", "lsu")
MIX = {
    **{p: f"smsp__inst_executed_pipe_{p}.sum" for p in PIPES},
    "warp_instructions": "smsp__inst_executed.sum",
    "xu_busy": "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active",
}
REGEX = {"kfuse": "kfuse_", "tc": "triton"}


def case_command(case: str, peer: str, size: str, calls: int) -> list[str]:
    command = [sys.executable, str(TOOLS / "model_case.py"), case, "--peer", peer]
    command += ["--calls", str(calls)] + (["--size", size] if size else [])
    return command


def profile(case: str, peer: str, size: str) -> list[dict[str, float]]:
    """Per kernel of the case's third call: the CORE (and MIX) metrics' values, and "name"."""
    # Once outside the profiler, so that kfuse's kernels come from its disk cache under it.
    subprocess.run(case_command(case, peer, size, 1), capture_output=True, timeout=300)
    launches = max(
        1, len(_ncu(case_command(case, peer, size, 1), peer, {"cycles": CORE["cycles"]}))
    )
    window = ["--launch-skip", str(2 * launches), "--launch-count", str(launches)]
    three = case_command(case, peer, size, 3)
    return _ncu(three, peer, {**CORE, **MIX}, window) or _ncu(three, peer, CORE, window)


def _ncu(
    command: list[str], peer: str, metrics: dict[str, str], window: list[str] | None = None
) -> list[dict[str, float]]:
    """Nsight Compute's values of `metrics` for each kernel `command` launches (ncu --csv)."""
    ncu = ["ncu", "--csv", "--kernel-name", f"regex:{REGEX[peer]}", *(window or [])]
    ncu += ["--metrics", ",".join(metrics.values())]
    done = subprocess.run(ncu + command, capture_output=True, text=True, timeout=300)
    start = done.stdout.find('"ID"')
    if start < 0:
        return []
    by_id: dict[str, dict] = {}
    names = {v: k for k, v in metrics.items()}
    for row in csv.DictReader(io.StringIO(done.stdout[start:])):
        kernel = by_id.setdefault(row["ID"], {"name": row["Kernel Name"]})
        if row["Metric Name"] in names:
            kernel[names[row["Metric Name"]]] = float(row["Metric Value"].replace(",", ""))
    return list(by_id.values())


def report(case: str, peer: str, kernels: list[dict]) -> None:
    for k in kernels:
        flops = k.get("fadd", 0) + k.get("fmul", 0) + 2 * k.get("ffma", 0)
        peak = k.get("cycles", 0) * k.get("sms", 0) * FP32_LANES_PER_SM * 2
        share = flops / peak if peak else 0.0
        mix = ""
        if k.get("warp_instructions"):
            shares = (f"{p} {k.get(p, 0) / k['warp_instructions']:.0%}" for p in PIPES)
            mix = f"  ({', '.join(shares)}; xu pipe {k.get('xu_busy', 0):.0f}% busy)"
        print(
            f"{case} {peer:5s} {k['name'][:48]:48s} {flops / 1e9:8.3f} GFLOP "
            f"{k.get('cycles', 0):10.0f} cycles  {share:6.1%} of FP32 peak{mix}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="+")
    parser.add_argument("--size", default="", help="e.g. 16777216 (default: the quick size)")
    parser.add_argument("--peers", default="kfuse,tc")
    args = parser.parse_args()
    for case in args.cases:
        for peer in args.peers.split(","):
            kernels = profile(case, peer, args.size)
            if not kernels:
                print(f"{case} {peer}: ncu reported no kernel")
            report(case, peer, kernels)


if __name__ == "__main__":
    main()
