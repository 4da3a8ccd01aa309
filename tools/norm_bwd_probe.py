"""Probe: RMS norm and layer norm backward (nvFuser's fusions, tests/norm_fusions.py) on a GPU,
kfuse's heuristics and pinned variants of grid_x / threads per row, against torch eager and
torch.compile of the same math, in one process. For tuning inner_outer_persistent; the model
suite (benchmarks/models) gives the figures.

    python tools/norm_bwd_probe.py [--sizes 16384x4096,...] [--variants]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "benchmarks")]

import torch  # noqa: E402
from run import copy_bandwidth, time_ms  # noqa: E402

from kfuse import schedule  # noqa: E402
from kfuse.schedule import SchedulerType  # noqa: E402
from norm_fusions import layer_norm_backward, rms_norm_backward  # noqa: E402


def rms_inputs(n: int, h: int) -> list:
    x = torch.randn(n, h, device="cuda", dtype=torch.bfloat16)
    g = torch.randn(n, h, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(h, device="cuda", dtype=torch.bfloat16)
    rms = torch.sqrt((x.float() ** 2).mean(1, keepdim=True) + 1e-5)
    return [x, rms, g, w]


def rms_torch(x, rms, g, w):  # noqa: ANN001, ANN201
    xf, gf, wf = x.float(), g.float(), w.float()
    x_hat = xf / rms
    gw = gf * wf
    dx = gw / rms - xf * (gw * xf).sum(1, keepdim=True) / (xf.shape[1] * rms**3)
    return dx.to(x.dtype), (gf * x_hat).sum(0).to(x.dtype)


def ln_inputs(n: int, h: int) -> list:
    x = torch.randn(n, h, device="cuda", dtype=torch.bfloat16)
    g = torch.randn(n, h, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(h, device="cuda", dtype=torch.bfloat16)
    mean = x.float().mean(1)
    invstd = torch.rsqrt(x.float().var(1, unbiased=False) + 1e-5)[:, None]
    return [x, g, mean, invstd, w]


def ln_torch(x, g, mean, invstd, w):  # noqa: ANN001, ANN201
    xf, gf, wf = x.float(), g.float(), w.float()
    x_hat = (xf - mean[:, None]) * invstd
    gw = gf * wf
    h = xf.shape[1]
    dx = invstd * (gw - gw.mean(1, keepdim=True) - x_hat * (gw * x_hat).mean(1, keepdim=True))
    dw = (gf * x_hat).sum(0)
    return dx.to(x.dtype), dw.to(x.dtype), gf.sum(0).to(x.dtype), h


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="16384x1024,16384x4096,8192x8192,4096x16384,32768x2048")
    ap.add_argument("--variants", action="store_true")
    args = ap.parse_args()
    torch._dynamo.config.cache_size_limit = 64
    copy = copy_bandwidth(torch, 20)
    print(f"copy {copy:.0f} GB/s")
    cases = [
        ("rms_bwd", rms_norm_backward, rms_inputs, rms_torch),
        ("ln_bwd", layer_norm_backward, ln_inputs, lambda *a: ln_torch(*a)[:3]),
    ]
    for name, define, make, peer in cases:
        fd = define()
        for size in args.sizes.split(","):
            n, h = (int(s) for s in size.split("x"))
            inputs = make(n, h)
            outs = fd.execute(inputs)
            ref = peer(*[t.double() if t.is_floating_point() else t for t in inputs])
            err = max(float((o.double() - r.double()).abs().max()) for o, r in zip(outs, ref))
            moved = sum(t.numel() * t.element_size() for t in inputs + list(outs))
            compiled = torch.compile(peer, dynamic=False)
            compiled(*inputs)
            k = time_ms(torch, lambda fd=fd, a=inputs: fd.execute(a), 30)
            c = time_ms(torch, lambda f=compiled, a=inputs: f(*a), 30)
            e = time_ms(torch, lambda f=peer, a=inputs: f(*a), 10)
            prog = fd.last_program()
            print(
                f"{name} {n}x{h}: kfuse {k * 1e3:.1f} us ({moved / k / 1e6 / copy:.0%} of copy) "
                f"compile {c * 1e3:.1f} eager {e * 1e3:.1f} -> {c / k:.2f}x compile; "
                f"err {err:.3g}; {prog.scheduler.value} {len(prog.launches)} kernels "
                f"{[(la.grid, la.block) for la in prog.launches]}"
            )
            if args.variants and prog.scheduler is SchedulerType.inner_outer_persistent:
                variants(fd, inputs, prog.params)


def variants(fd, inputs, base) -> None:  # noqa: ANN001
    """Rows held in registers or shared memory, vectors a thread, rows a block, grid."""
    h = inputs[0].shape[-1]
    vecs = -(-h // int(base.vectorize_reduction))
    for in_smem in (False, True):
        for batch in (1, 2, 4, 8):
            bx = -(-vecs // batch)
            bx = 1 << (bx - 1).bit_length()
            if bx > 1024 or bx < 8 or (not in_smem and batch > 4):
                continue
            for by in (1, 2, 4, 8):
                if bx * by > 1024 or (by > 1 and bx * by < 128) or bx * by > 512 and by > 1:
                    continue
                p = schedule.compute_heuristics(
                    fd.fusion, SchedulerType.inner_outer_persistent, inputs
                )
                p.smem_persistent = in_smem
                p.persistent_batch_size = -(-vecs // bx)
                p.block_x, p.block_y = bx, by
                for blocks in (1, 2, 4):
                    p.grid_x = 132 * blocks * max(1, 512 // (bx * by))
                    what = (
                        f"smem {int(in_smem)} batch {p.persistent_batch_size} "
                        f"block ({bx},{by}) grid {p.grid_x}"
                    )
                    report(fd, inputs, p, what)


def report(fd, inputs, params, what: str) -> None:  # noqa: ANN001
    try:
        fd.manual_execute(inputs, heuristic_params=params)
        ms = time_ms(torch, lambda: fd.manual_execute(inputs, heuristic_params=params), 20)
        print(f"    {ms * 1e3:7.1f} us  {what}")
    except Exception as exc:  # noqa: BLE001 - a probe reports and goes on
        print(f"    {what}: {type(exc).__name__}: {str(exc)[:120]}")


if __name__ == "__main__":
    main()
