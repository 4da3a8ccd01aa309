"""nvFuser's host benchmarks (benchmarks/python/host/ in NVIDIA's Fuser repository) in kfuse:
the host time of fd.execute, the GPU idle before each call, for

* many_segments: x + y, then five times a transposed matmul beside an add (matmuls are
  library segments, so the fusion runs as a dozen segments in turn), fp32 [5, 5];
* many_pointwise_ops (num_iters 2, 8, 16, 22): cos and sin of a sum, summed, num_iters
  times, on fp16 [13] promoted to fp32: one kernel of many ops;
* adaptive_layernorm_fwd: a layer norm over [1, 30720, 1024] fp16 scaled by (1 + scale) and
  shifted, per batch row.

in nvFuser's three modes:

* compile: the first call of a new FusionDefinition (kfuse keeps compiled kernels per
  process by source, so rounds after the first load them from memory: the first round, with
  its NVRTC compiles, is reported apart as `cold_us`);
* steady: a cached call with the same inputs every time;
* dynamic: one call per input size in turn, each size seen before (nvFuser's sizes), so that
  every call's signature differs from the previous call's.

Each result is checked against the eager framework first (as nvFuser's `validate` does).

    python benchmarks/host_benchmarks.py [--only REGEX] [--reps 200] [--json OUT]
        [--device cuda|emulator]

--device emulator runs on NumPy arrays on the host emulator, its kernel launches stubbed
(smaller layer-norm sizes): a check that the script runs, and the host path's own cost,
without a GPU.
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kfuse import DataType, FusionDefinition


def many_matmul_fusion(fd: FusionDefinition) -> None:
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
    y = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
    a = fd.ops.add(x, y)
    for _ in range(5):
        a_t = fd.ops.permute(a, [1, 0])
        a = fd.ops.add(fd.ops.matmul(a_t, y), fd.ops.add(a_t, y))
    fd.add_output(a)


def many_matmul_eager(xp: Any, x: Any, y: Any) -> list[Any]:
    a = x + y
    for _ in range(5):
        a_t = a.T
        a = xp.matmul(a_t, y) + (a_t + y)
    return [a]


def pointwise_ops_fusion(fd: FusionDefinition, num_iters: int) -> None:
    x = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Half)
    y = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Half)
    a = fd.ops.add(fd.ops.cast(x, DataType.Float), fd.ops.cast(y, DataType.Float))
    for _ in range(num_iters):
        a = fd.ops.add(fd.ops.cos(a), fd.ops.sin(a))
    fd.add_output(fd.ops.cast(a, DataType.Half))


def pointwise_ops_eager(xp: Any, x: Any, y: Any, num_iters: int) -> list[Any]:
    a = x.astype(xp.float32) + y.astype(xp.float32)
    for _ in range(num_iters):
        a = xp.cos(a) + xp.sin(a)
    return [a.astype(xp.float16)]


def adaptive_layernorm_fusion(fd: FusionDefinition, eps: float = 1e-6) -> None:
    t0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True] * 3, dtype=DataType.Half)
    scale = fd.define_tensor(shape=[-1, -1], contiguity=[True] * 2, dtype=DataType.Half)
    shift = fd.define_tensor(shape=[-1, -1], contiguity=[True] * 2, dtype=DataType.Half)
    x = fd.ops.cast(t0, DataType.Float)
    var, mean = fd.ops.var_mean(x, dims=[2], correction=0, keepdim=False)
    rows = [fd.ops.size(t0, 0), fd.ops.size(t0, 1), 1]
    var_b = fd.ops.broadcast_in_dim(var, shape=rows, broadcast_dims=[0, 1])
    mean_b = fd.ops.broadcast_in_dim(mean, shape=rows, broadcast_dims=[0, 1])
    invstd = fd.ops.rsqrt(fd.ops.add(var_b, fd.define_scalar(eps, dtype=DataType.Double)))
    full = fd.ops.shape(t0)
    normed = fd.ops.mul(
        fd.ops.sub(x, fd.ops.broadcast_in_dim(mean_b, shape=full, broadcast_dims=[0, 1, 2])),
        fd.ops.broadcast_in_dim(invstd, shape=full, broadcast_dims=[0, 1, 2]),
    )
    scale3 = fd.ops.reshape(scale, new_shape=[fd.ops.size(scale, 0), 1, fd.ops.size(scale, 1)])
    one_plus = fd.ops.cast(
        fd.ops.add(
            fd.define_scalar(1.0, dtype=DataType.Double), fd.ops.cast(scale3, DataType.Float)
        ),
        DataType.Half,
    )
    scaled = fd.ops.mul(
        normed,
        fd.ops.cast(
            fd.ops.broadcast_in_dim(one_plus, shape=full, broadcast_dims=[0, 1, 2]),
            DataType.Float,
        ),
    )
    shift3 = fd.ops.reshape(shift, new_shape=[fd.ops.size(shift, 0), 1, fd.ops.size(shift, 1)])
    shifted = fd.ops.add(
        scaled,
        fd.ops.cast(
            fd.ops.broadcast_in_dim(shift3, shape=full, broadcast_dims=[0, 1, 2]), DataType.Float
        ),
    )
    fd.add_output(mean)
    fd.add_output(invstd)
    fd.add_output(fd.ops.cast(shifted, DataType.Half))


def adaptive_layernorm_eager(xp: Any, t0: Any, scale: Any, shift: Any) -> list[Any]:
    x = t0.astype(xp.float32)
    mean = x.mean(axis=-1)
    var = ((x - mean[..., None]) ** 2).mean(axis=-1)
    invstd = 1.0 / xp.sqrt(var + 1e-6)[..., None]
    normed = (x - mean[..., None]) * invstd
    one_plus = (1.0 + scale.astype(xp.float32)).astype(xp.float16).astype(xp.float32)
    out = normed * one_plus[:, None, :] + shift.astype(xp.float32)[:, None, :]
    return [mean, invstd, out.astype(xp.float16)]


@dataclass(frozen=True)
class HostCase:
    """One host benchmark: define(fd); eager(xp, *inputs) -> outputs; steady: the input
    shapes of compile and steady; dynamic: those dynamic cycles through; dtypes per input."""

    name: str
    define: Callable[[FusionDefinition], None]
    eager: Callable[..., list[Any]]
    dtypes: tuple[str, ...]
    steady: tuple[tuple[int, ...], ...]
    dynamic: tuple[tuple[tuple[int, ...], ...], ...]
    tolerance: float


def _layernorm_shapes(b: int, t: int, d: int = 1024) -> tuple[tuple[int, ...], ...]:
    return ((b, t, d), (b, d), (b, d))


def cases(small: bool) -> list[HostCase]:
    """nvFuser's cases; `small`: layer-norm rows cut 64-fold (the emulator's)."""
    t = 30 * 1024 // (64 if small else 1)
    step = 128 // (64 if small else 1)
    found = [
        HostCase(
            "many_segments",
            many_matmul_fusion,
            many_matmul_eager,
            ("float32", "float32"),
            ((5, 5), (5, 5)),
            tuple(((n, n), (n, n)) for n in (5, 7, 9, 11)),
            1e-3,
        )
    ]
    for num_iters in (2, 8, 16, 22):
        found.append(
            HostCase(
                f"many_pointwise_ops_{num_iters}",
                lambda fd, n=num_iters: pointwise_ops_fusion(fd, n),
                lambda xp, x, y, n=num_iters: pointwise_ops_eager(xp, x, y, n),
                ("float16", "float16"),
                ((13,), (13,)),
                tuple(((n,), (n,)) for n in (5, 10, 13, 15, 17, 20)),
                2e-2,
            )
        )
    found.append(
        HostCase(
            "adaptive_layernorm_fwd",
            adaptive_layernorm_fusion,
            adaptive_layernorm_eager,
            ("float16", "float16", "float16"),
            _layernorm_shapes(1, t),
            tuple(_layernorm_shapes(b, t + k * step) for b in (1, 2) for k in range(5)),
            2e-2,
        )
    )
    return found


class Target:
    """Arrays and timing on the GPU (torch) or on the emulator (NumPy, launches stubbed)."""

    def __init__(self, device: str) -> None:
        import numpy

        self.numpy = numpy
        self.rng = numpy.random.default_rng(0)
        self.on_gpu = device == "cuda"
        if self.on_gpu:
            import torch

            self.torch = torch
        else:
            self._stub_launches()

    def _stub_launches(self) -> None:
        import kfuse.engine.packed_kernel as packed_kernel
        import kfuse.engine.program as program
        from kfuse.runtime.emulator import EmulatedKernel

        EmulatedKernel.launch = lambda *args, **kwargs: None  # type: ignore[method-assign]
        program.poison = lambda array: None  # type: ignore[attr-defined]
        packed_kernel.poison = lambda array: None  # type: ignore[attr-defined]

    def inputs(self, case: HostCase, shapes: tuple[tuple[int, ...], ...]) -> list[Any]:
        host = [
            (self.rng.standard_normal(s) / 4).astype(d)
            for s, d in zip(shapes, case.dtypes, strict=True)
        ]
        if not self.on_gpu:
            return host
        return [self.torch.from_numpy(a).cuda() for a in host]

    def check(self, case: HostCase, fd: FusionDefinition, inputs: list[Any]) -> float:
        """The largest error of kfuse's outputs against the eager framework's (NumPy on the
        host copies), for launches that ran (the GPU only)."""
        if not self.on_gpu:
            return 0.0
        outputs = fd.execute(inputs)
        host = [a.cpu().numpy() for a in inputs]
        expected = case.eager(self.numpy, *host)
        worst = 0.0
        for out, ref in zip(outputs, expected, strict=True):
            got = out.float().cpu().numpy().reshape(ref.shape)
            err = float(self.numpy.max(self.numpy.abs(got - ref.astype(self.numpy.float32))))
            worst = max(worst, err)
        if worst > case.tolerance * 10:
            raise AssertionError(f"{case.name}: kfuse differs from eager by {worst}")
        return worst

    def sync(self) -> None:
        if self.on_gpu:
            self.torch.cuda.synchronize()

    def host_us(self, call: Callable[[], Any]) -> float:
        """Microseconds until `call` returns, the GPU idle before it."""
        self.sync()
        started = time.perf_counter()
        call()
        return (time.perf_counter() - started) * 1e6


def measure(case: HostCase, target: Target, reps: int) -> dict[str, Any]:
    """The case's row: median host us per mode, the first compile's, its segments."""
    steady_inputs = target.inputs(case, case.steady)
    row: dict[str, Any] = {"case": case.name}

    def fresh() -> FusionDefinition:
        with FusionDefinition() as fd:
            case.define(fd)
        return fd

    compiles = [target.host_us(lambda: fresh().execute(steady_inputs)) for _ in range(5)]
    row["cold_us"] = compiles[0]
    row["compile_us"] = statistics.median(compiles[1:])
    fd = fresh()
    row["max_error"] = target.check(case, fd, steady_inputs)
    row["segments"] = len(fd.segments(steady_inputs))
    row["steady_us"] = _median_call(target, [lambda: fd.execute(steady_inputs)], reps)
    row["program"] = type(fd.last_program()).__name__
    dynamic = [target.inputs(case, shapes) for shapes in case.dynamic]
    for inputs in dynamic:
        target.check(case, fd, inputs)
    calls = [lambda inputs=inputs: fd.execute(inputs) for inputs in dynamic]
    row["dynamic_us"] = _median_call(target, calls, reps)
    return row


def _median_call(target: Target, calls: list[Callable[[], Any]], reps: int) -> float:
    """Median host us of the calls taken in turn, after three rounds of warm-up."""
    for _ in range(3):
        for call in calls:
            call()
    times = []
    gc.collect()
    gc.disable()
    try:
        for k in range(reps):
            times.append(target.host_us(calls[k % len(calls)]))
    finally:
        gc.enable()
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="regular expression on case names")
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--json", default="")
    parser.add_argument("--device", choices=("cuda", "emulator"), default="cuda")
    args = parser.parse_args(argv)
    target = Target(args.device)
    rows = []
    for case in cases(small=not target.on_gpu):
        if args.only and not re.search(args.only, case.name):
            continue
        row = measure(case, target, args.reps)
        rows.append(row)
        print(
            f"{case.name:26s} {row['segments']:2d} segments ({row['program']}): "
            f"compile {row['compile_us']:9.1f} us (first {row['cold_us']:10.1f}), "
            f"steady {row['steady_us']:7.1f} us, dynamic {row['dynamic_us']:7.1f} us",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": args.device, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
