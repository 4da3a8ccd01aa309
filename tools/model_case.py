"""Run one model-suite case a few times at its quick size (or --size), for Nsight Compute to
profile its kernels (tools/device_ncu.sh):

    ncu --kernel-name regex:kfuse_ python3 tools/model_case.py groupnorm_fwd_g1 [--peer tc]

The first call compiles; the later ones are the ones to profile (ncu --launch-skip). With
--peer tc the case's torch.compile function runs instead (its Triton kernels: regex:triton).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import torch  # noqa: E402
from models import measure, registry  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "case", choices=sorted(c.name for c in [*registry.CASES, *registry.PROBE_CASES])
    )
    parser.add_argument("--peer", choices=["kfuse", "tc"], default="kfuse")
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--size", default="", help="e.g. 32768x1024 (default: the quick size)")
    args = parser.parse_args()
    case, shape = registry.case_and_shape(f"{args.case}:{args.size}" if args.size else args.case)
    torch.manual_seed(0)
    inputs = case.make_inputs(torch, shape, torch.bfloat16, "cuda")
    if args.peer == "kfuse":
        fd, _ = measure.definition(case, "bfloat16")
        call = lambda: fd.execute(inputs)  # noqa: E731
    else:
        compiled = measure.fresh_compile(torch, case.torch_fn)
        call = lambda: compiled(*inputs)  # noqa: E731
    for _ in range(args.calls):
        call()
    torch.cuda.synchronize()
    if args.peer == "kfuse":
        print(args.case, list(shape), [s.scheduler.value for s in fd.segments(inputs)])


if __name__ == "__main__":
    main()
