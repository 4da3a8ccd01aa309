"""GPU A/B of kfuse.codegen.outlined_math and kfuse.codegen.shared_math: nvFuser's
many-pointwise-ops fusion (a = cos(a) + sin(a), n times, fp16 in and out, float inside) over
2^24 elements, its kernel time with the heavy calls outlined or inlined
(switches.OUTLINE_HEAVY_MATH) and with sin and cos of one value from one sincos call or two
calls (switches.SHARE_SINCOS), torch.compile's beside them, each checked against float64
first and the variants' outputs against each other bit for bit; and each kfuse variant's
first-call (compile) time.

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
        rows, outputs = {}, {}
        variants = {
            "outlined+sincos": (True, True),
            "outlined": (True, False),
            "inlined+sincos": (False, True),
            "inlined": (False, False),
        }
        for label, (outline, sincos) in variants.items():
            switches.OUTLINE_HEAVY_MATH, switches.SHARE_SINCOS = outline, sincos
            with FusionDefinition() as fd:
                pointwise_ops_fusion(fd, iters)
            started = time.perf_counter()
            (got,) = fd.execute([x, y])
            torch.cuda.synchronize()
            first = time.perf_counter() - started
            err = (got.double() - want).abs().max().item()
            us = 1e3 * time_ms(torch, lambda fd=fd: fd.execute([x, y]), 30, before=flush)
            rows[label], outputs[label] = us, got
            print(f"n={iters} kfuse {label:16s}: {us:8.1f} us, first {first:6.2f} s, err {err:.2e}")
        same = all(torch.equal(o, outputs["inlined"]) for o in outputs.values())
        got = compiled(x, y)
        err = (got.double() - want).abs().max().item()
        us = 1e3 * time_ms(torch, lambda c=compiled: c(x, y), 30, before=flush)
        best = min(rows, key=rows.__getitem__)
        print(
            f"n={iters} torch.compile: {us:8.1f} us, max err {err:.2e}; kfuse variants "
            f"{'bit-identical' if same else 'DIFFER'}; best {best}, compile/best "
            f"{us / rows[best]:.3f}"
        )
    switches.OUTLINE_HEAVY_MATH, switches.SHARE_SINCOS = True, True


if __name__ == "__main__":
    main()
