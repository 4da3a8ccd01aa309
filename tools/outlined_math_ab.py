"""GPU A/B of kfuse.codegen.outlined_math: nvFuser's many-pointwise-ops fusion (a = cos(a) +
sin(a), n times, fp16 in and out, float inside) over 2^24 elements, its kernel time with the
heavy calls outlined and inlined (switches.OUTLINE_HEAVY_MATH), torch.compile's beside them,
each checked against float64 first; and each kfuse variant's first-call (compile) time.

    python3 tools/outlined_math_ab.py [N ...]      (default 2 8)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / p) for p in ("benchmarks", "")]

import torch  # noqa: E402
from host_benchmarks import pointwise_ops_fusion  # noqa: E402
from models.measure import l2_flusher  # noqa: E402
from run import time_ms  # noqa: E402

from kfuse import FusionDefinition, switches  # noqa: E402


def chain(a: torch.Tensor, b: torch.Tensor, iters: int) -> torch.Tensor:
    """The fusion's arithmetic in a's dtype (host_benchmarks' eager form is NumPy's)."""
    s = a + b
    for _ in range(iters):
        s = torch.cos(s) + torch.sin(s)
    return s


def main() -> None:
    counts = [int(a) for a in sys.argv[1:]] or [2, 8]
    flush, _ = l2_flusher(torch)
    n = 1 << 24
    x, y = (torch.randn(n, device="cuda").half() for _ in range(2))
    for iters in counts:
        want = chain(x.double(), y.double(), iters)

        def eager(a: torch.Tensor, b: torch.Tensor, k: int = iters) -> torch.Tensor:
            return chain(a.float(), b.float(), k).half()

        compiled = torch.compile(eager, dynamic=False)
        rows = {}
        for label, on in (("outlined", True), ("inlined", False)):
            switches.OUTLINE_HEAVY_MATH = on
            with FusionDefinition() as fd:
                pointwise_ops_fusion(fd, iters)
            started = time.perf_counter()
            (got,) = fd.execute([x, y])
            torch.cuda.synchronize()
            first = time.perf_counter() - started
            err = (got.double() - want).abs().max().item()
            us = 1e3 * time_ms(torch, lambda fd=fd: fd.execute([x, y]), 30, before=flush)
            rows[label] = us
            print(f"n={iters} kfuse {label}: {us:8.1f} us, first {first:6.2f} s, err {err:.2e}")
        got = compiled(x, y)
        err = (got.double() - want).abs().max().item()
        us = 1e3 * time_ms(torch, lambda c=compiled: c(x, y), 30, before=flush)
        print(
            f"n={iters} torch.compile: {us:8.1f} us, max err {err:.2e}; "
            f"outlined/inlined time {rows['outlined'] / rows['inlined']:.3f}, "
            f"compile/outlined {us / rows['outlined']:.3f}"
        )
    switches.OUTLINE_HEAVY_MATH = True


if __name__ == "__main__":
    main()
