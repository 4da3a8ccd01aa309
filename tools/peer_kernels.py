"""Put kfuse's kernel for a benchmark workload next to the one torch.compile generates.

    python tools/peer_kernels.py W1f [--out DIR]

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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _sass(cubin: Path) -> tuple[str, int]:
    """The SASS of a cubin and its count of instructions."""
    text = subprocess.run(
        ["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=False
    ).stdout
    return text, len(re.findall(r"^\s+/\*[0-9a-f]{4,}\*/", text, flags=re.M))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload")
    parser.add_argument("--out", default=os.environ.get("OUT", "peer-kernels"))
    args = parser.parse_args()
    out = Path(args.out) / f"peer-kernels-{args.workload}"
    shutil.rmtree(out, ignore_errors=True)
    (out / "kfuse").mkdir(parents=True)
    # Both compilers write their cubins into caches of their own under `out`, so the files of
    # this workload are the only ones there.
    os.environ["KFUSE_CACHE_DIR"] = str(out / "kfuse")
    os.environ["TRITON_CACHE_DIR"] = str(out / "triton")

    import torch
    from torch._inductor.utils import run_and_get_code

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from workloads import WORKLOADS

    workload = next(w for w in WORKLOADS if w.id == args.workload)
    inputs = workload.make_inputs(torch, False)
    fd = workload.definition()
    fd.execute(inputs)
    launch = fd._executor_cache.last_compiled.launches[0]
    print(f"kfuse: grid {launch.grid} block {launch.block} shared {launch.shared_mem}")
    _, codes = run_and_get_code(torch.compile(workload.eager), *inputs)
    (out / "inductor.py").write_text("\n\n".join(codes))
    for line in "\n".join(codes).splitlines():
        if re.search(r"triton_heuristics|num_warps|XBLOCK|RBLOCK|def triton_|\.run\(", line):
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
