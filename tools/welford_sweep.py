"""Time a bf16 Welford statistics fusion (var_mean of float(x); --op sum: its sum) over a
grid of ReductionParams, on the GPU, against the heuristics' own choice and torch.compile:

    python3 tools/welford_sweep.py 200704x256 --dim 0 \
        --grid "vectorize_iter=4,8 block_y=4,8 unroll_reduction=8,16 grid_y=264,528"

Each grid entry is FIELD=V1,V2,...; every combination is tried (grid_x follows from the
kept extent and the vector, or for an inner reduction from the rows and block_y, unless
given). Timing is benchmarks/run.py's time_ms (the stream kept busy before each call, so
manual_execute's host checks stay outside the CUDA events; L2 flushed), and each
combination's results are checked against float64 first. Timing manual calls with plain
events measured their host cost instead (found 2026-12-03, at c4431f4).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))


def welford_fusion(dim: int, op: str = "welford") -> Any:
    """var_mean of float(x) over `dim`, or (op "sum") its sum alone."""
    from kfuse import DataType, FusionDefinition

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
        if op == "sum":
            fd.add_output(fd.ops.sum(fd.ops.cast(x, DataType.Float), dims=[dim]))
            return fd
        var, mean = fd.ops.var_mean(
            fd.ops.cast(x, DataType.Float), dims=[dim], correction=0, keepdim=False
        )
        fd.add_output(var)
        fd.add_output(mean)
    return fd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shape", help="ROWSxCOLS, e.g. 200704x256")
    parser.add_argument("--dim", type=int, choices=[0, 1], default=1)
    parser.add_argument("--grid", required=True)
    parser.add_argument("--op", choices=["welford", "sum"], default="welford")
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()

    import torch
    from models import measure
    from models.run import load_suite
    from params_sweep import sweep  # this script's folder is on sys.path

    from kfuse.schedule import SchedulerType, compute_heuristics
    from kfuse.schedule.reduction import _plan
    from kfuse.schedule.reduction_params import fill_launch_params

    suite = load_suite()
    flush, _ = measure.l2_flusher(torch)
    rows, cols = (int(n) for n in args.shape.split("x"))
    x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
    xd = x.double()
    refs = (
        [xd.sum(dim=args.dim)]
        if args.op == "sum"
        else list(torch.var_mean(xd, dim=args.dim, correction=0))
    )
    fd = welford_fusion(args.dim, args.op)

    def error(out: list[Any]) -> float:
        return max(float((o.double() - r).abs().max()) for o, r in zip(out, refs))

    fd.execute([x])
    base = compute_heuristics(fd, SchedulerType.reduction, [x])
    us = suite.time_ms(torch, lambda: fd.execute([x]), args.reps, before=flush) * 1e3
    print(f"heuristics: {us:.1f} us, error {error(fd.execute([x])):.1e}: {base}")
    compiled = torch.compile(
        (lambda t: t.float().sum(dim=args.dim))
        if args.op == "sum"
        else (lambda t: torch.var_mean(t.float(), dim=args.dim, correction=0))
    )
    compiled(x)
    us = suite.time_ms(torch, lambda: compiled(x), args.reps, before=flush) * 1e3
    print(f"torch.compile: {us:.1f} us")

    def configure(fields: dict[str, int]) -> Any:
        params = compute_heuristics(fd, SchedulerType.reduction, [x])
        for name, value in fields.items():
            setattr(params, name, value)
        if "grid_x" not in fields and not params.fastest_dim_reduction:
            kept = cols if args.dim == 0 else rows
            groups = -(-kept // int(params.vectorize_iter))
            params.grid_x = max(1, -(-groups // int(params.block_x)))
        elif "grid_x" not in fields:  # an inner reduction: a row per thread row
            params.grid_x = -(-rows // int(params.block_y))
        fill_launch_params(params, _plan(fd.fusion))
        return params

    sweep(
        args.grid,
        configure,
        lambda p: f"error {error(fd.manual_execute([x], p)):.1e}",
        lambda p: (
            suite.time_ms(torch, lambda: fd.manual_execute([x], p), args.reps, before=flush) * 1e3
        ),
    )


if __name__ == "__main__":
    main()
