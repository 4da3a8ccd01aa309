"""Put kfuse's kernels for a benchmark workload or model-suite case next to torch.compile's.

    python tools/peer_kernels.py W1f [--out DIR]
    python tools/peer_kernels.py rmsnorm_fwd:8192x8192 [--dtype bfloat16] [--out DIR]

Writes into DIR (default $OUT or ./peer-kernels): inductor's generated Python (its Triton
kernels with their launch configurations), both cubins, and their SASS (cuobjdump), and prints
each kernel's name, launch shape, registers and SASS instruction count. For reading why one of
the two kernels is faster; it changes nothing in kfuse. Needs a GPU, torch and cuobjdump.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PeerCall = tuple[Any, Callable[[], Any], Callable[..., Any], list[Any]]
"""(kfuse's FusionDefinition, a call of it on the inputs, the eager function, the inputs)"""
LAUNCH_LINES = re.compile(r"triton_heuristics|num_warps|XBLOCK|R0?BLOCK|def triton_|\.run\(")
"""The lines of inductor's code that say how its kernels are launched."""


def _sass(cubin: Path) -> tuple[str, int]:
    """The SASS of a cubin and its count of instructions."""
    text = subprocess.run(
        ["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=False
    ).stdout
    return text, len(re.findall(r"^\s+/\*[0-9a-f]{4,}\*/", text, flags=re.M))


def _workload_call(torch: Any, name: str) -> PeerCall:
    """The PeerCall of workload `name`."""
    from workloads import WORKLOADS

    workload = next((w for w in WORKLOADS if w.id == name), None)
    if workload is None:
        raise SystemExit(f"no workload {name!r} (W1 ... W6) and no model-suite case of that name")
    inputs = workload.make_inputs(torch, False)
    fd = workload.definition()
    return fd, lambda: fd.execute(inputs), workload.eager, inputs


def _model_case_call(torch: Any, spec: str, dtype: str) -> PeerCall:
    """The PeerCall of a model-suite case, CASE or CASE:SIZE (its quick size by default)."""
    from models import measure, registry

    case, shape = registry.case_and_shape(spec)
    torch.manual_seed(0)
    inputs = case.make_inputs(torch, shape, getattr(torch, dtype), "cuda")
    fd, _ = measure.definition(case, dtype)
    torch._dynamo.reset()  # a fresh compile, so its code is captured
    return fd, lambda: fd.execute(inputs), case.torch_fn, inputs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", help="a workload (W1f) or a model-suite CASE[:SIZE]")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--out", default=os.environ.get("OUT", "peer-kernels"))
    args = parser.parse_args()
    out = Path(args.out) / f"peer-kernels-{args.workload.replace(':', '-')}"
    shutil.rmtree(out, ignore_errors=True)
    (out / "kfuse").mkdir(parents=True)
    # Both compilers write their cubins into caches of their own under `out`, so the files of
    # this workload are the only ones there.
    os.environ["KFUSE_CACHE_DIR"] = str(out / "kfuse")
    os.environ["TRITON_CACHE_DIR"] = str(out / "triton")

    import torch
    from torch._inductor.utils import run_and_get_code

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from models import registry

    cases = [*registry.CASES, *registry.PROBE_CASES]
    is_case = ":" in args.workload or any(c.name == args.workload for c in cases)
    if is_case:
        fd, call, eager, inputs = _model_case_call(torch, args.workload, args.dtype)
    else:
        fd, call, eager, inputs = _workload_call(torch, args.workload)
    call()
    for line in str(fd._executor_cache.last_compiled).splitlines():  # its kernels' launches
        print("kfuse:", line)
    _, codes = run_and_get_code(torch.compile(eager, dynamic=False), *inputs)
    (out / "inductor.py").write_text("\n\n".join(codes))
    for line in "\n".join(codes).splitlines():
        if LAUNCH_LINES.search(line):
            print("inductor:", line.strip())
    torch.cuda.synchronize()
    # kfuse's cache entries carry a header (kernel_cache); write their payloads out as cubins.
    from kfuse.runtime import kernel_cache

    for entry in sorted(kernel_cache.cache_dir().glob("[0-9a-f]*")):
        (out / f"kfuse-{entry.name[:16]}.cubin").write_bytes(kernel_cache.load(entry.name))
    for cubin in sorted(out.rglob("*.cubin")):
        text, count = _sass(cubin)
        if not count:
            continue
        (out / (cubin.parent.name + "-" + cubin.name + ".sass")).write_text(text)
        usage = subprocess.run(
            ["cuobjdump", "-res-usage", str(cubin)], capture_output=True, text=True, check=False
        ).stdout
        regs = " ".join(re.findall(r"REG:\d+", usage))
        print(f"{cubin.relative_to(out)}: {count} SASS instructions, {regs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
