"""Parameter sweeps on the GPU: the pointwise schedule of W1/W1f over vector, unroll and block
shapes (through manual_execute, so each row is exactly the kernel those params give), and a
bf16 softmax over row lengths 1024 to 65536 (2^27 elements each).

    python benchmarks/sweep.py [--json out.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import copy_bandwidth, time_ms  # noqa: E402
from workloads import WORKLOADS, _softmax_definition  # noqa: E402


def pointwise_sweep(torch: Any, copy_gbs: float, log: Any) -> list[dict[str, Any]]:
    from kfuse import SchedulerType, schedule

    rows = []
    for w in [w for w in WORKLOADS if w.id in ("W1", "W1f")]:
        inputs = w.make_inputs(torch, False)
        nbytes = w.bytes_moved(inputs)
        fd = w.definition()
        base = schedule.compute_heuristics(fd.fusion, SchedulerType.pointwise, inputs)
        log(
            f"{w.id} heuristics: V={base.vectorization_factor} U={base.unroll_factor} "
            f"block=({base.block_x},{base.block_y}) grid=({base.grid_x},{base.grid_y})"
        )
        for unroll, (bx, by) in itertools.product(
            [1, 2, 4], [(128, 1), (256, 1), (512, 1), (128, 4), (256, 2)]
        ):
            hp = schedule.compute_heuristics(fd.fusion, SchedulerType.pointwise, inputs)
            hp.unroll_factor, hp.block_x, hp.block_y = unroll, bx, by
            vecs = -(-inputs[0].shape[1] // hp.vectorization_factor)
            hp.grid_x = max(1, -(-vecs // (bx * unroll)))
            hp.grid_y = min(65535, -(-inputs[0].shape[0] // by))
            ms = time_ms(
                torch,
                lambda fd=fd, inputs=inputs, hp=hp: fd.manual_execute(inputs, heuristic_params=hp),
                30,
            )
            gbs = nbytes / (ms * 1e-3) / 1e9
            rows.append(
                {
                    "workload": w.id,
                    "unroll": unroll,
                    "block": [bx, by],
                    "ms": ms,
                    "fraction_of_copy": gbs / copy_gbs,
                }
            )
            log(
                f"  {w.id} U={unroll} block=({bx},{by}): {ms * 1e3:7.1f} us "
                f"{100 * gbs / copy_gbs:5.1f}% of copy"
            )
    return rows


def softmax_sweep(torch: Any, copy_gbs: float, log: Any) -> list[dict[str, Any]]:
    rows = []
    fd = _softmax_definition()
    for n in [1024, 2048, 4096, 8192, 16384, 32768, 65536]:
        x = torch.randn(2**27 // n, n, device="cuda").to(torch.bfloat16)
        (out,) = fd.execute([x])
        err = float((out.double() - torch.softmax(x.double(), -1)).abs().max())
        ms = time_ms(torch, lambda fd=fd, x=x: fd.execute([x]), 30)
        gbs = 2 * x.numel() * 2 / (ms * 1e-3) / 1e9
        segments = len(fd.segments([x]))
        rows.append(
            {
                "row": n,
                "ms": ms,
                "fraction_of_copy": gbs / copy_gbs,
                "scheduler": str(fd.last_scheduler()),
                "segments": segments,
                "max_abs_err": err,
            }
        )
        log(
            f"  softmax bf16 row {n:6d}: {ms * 1e3:7.1f} us {100 * gbs / copy_gbs:5.1f}% of "
            f"copy, {fd.last_scheduler()} ({segments} segment(s)), max err {err:.2e}"
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    import torch

    def log(line: str) -> None:
        print(line, flush=True)

    copy_gbs = copy_bandwidth(torch, 20)
    log(f"device-to-device copy: {copy_gbs:.0f} GB/s")
    result = {
        "copy_gbs": copy_gbs,
        "softmax": softmax_sweep(torch, copy_gbs, log),
        "pointwise": pointwise_sweep(torch, copy_gbs, log),
    }
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
