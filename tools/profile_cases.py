"""Per-kernel times of model-suite cases on the GPU (CUPTI through kfuse.PythonProfiler):
which segment of a slow fusion takes the time.

    python tools/profile_cases.py REGEX [--size 64x256x56x56] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import torch  # noqa: E402
from models import registry  # noqa: E402
from models.case import DTYPES  # noqa: E402

import kfuse  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("pattern")
    parser.add_argument("--size", default="")
    parser.add_argument("--dtype", default="bfloat16", choices=list(DTYPES))
    args = parser.parse_args()
    for case in registry.CASES:
        if not re.search(args.pattern, case.name) or case.skip:
            continue
        shape = tuple(int(s) for s in args.size.split("x")) if args.size else case.quick_sizes[0]
        fd = case.define(DTYPES[args.dtype])
        inputs = case.make_inputs(torch, shape, getattr(torch, args.dtype), "cuda")
        for _ in range(3):
            fd.execute(inputs)
        torch.cuda.synchronize()
        with kfuse.PythonProfiler() as prof:
            fd.execute(inputs)
        p = prof.profile
        print(f"== {case.name} {'x'.join(map(str, shape))}: {p.kernel_time_ms * 1e3:.1f} us")
        for k in p.kernel_profiles:
            print(
                f"   {k.scheduler:22s} {k.time_ms * 1e3:8.1f} us  grid {k.grid} block {k.block}"
                f"  {k.effective_bandwidth_gbs:7.0f} GB/s  regs {k.registers}  {k.name[:40]}"
            )


if __name__ == "__main__":
    main()
