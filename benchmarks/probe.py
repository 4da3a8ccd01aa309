"""Diagnostic probes on the GPU, for tuning (not part of the suite):

* softmax (bf16, 2^27 elements): the heuristics' choice for rows of 1024 to 65536, and long
  rows (16384 to 65536) held in shared memory over threads per row and register targets;
* the host cost of the pieces of a cached call (allocation, stream query, attribute reads,
  the launch) next to kfuse's whole H1 call and CuPy's ElementwiseKernel.

    python benchmarks/probe.py [--json out.json] [--only softmax,host]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import copy_bandwidth, time_ms  # noqa: E402
from workloads import _softmax_definition  # noqa: E402


def _kernel_of(fd: Any) -> Any:
    return fd._executor_cache.last_compiled.launches[0].kernel


def softmax_probe(torch: Any, copy_gbs: float, log: Any) -> list[dict[str, Any]]:
    """bf16 softmax, 2^27 elements: the heuristics' choice over row lengths 1024 to 65536, and
    for long rows the row held in registers or in shared memory over threads per row and the
    register target of __launch_bounds__."""
    import kfuse.codegen.persistent as cg
    from kfuse import SchedulerType, schedule

    target = cg.REGISTER_TARGET
    rows: list[dict[str, Any]] = []

    def measure(n: int, configs: list[tuple[int, bool, int]]) -> None:
        x = torch.randn(2 ** 27 // n, n, device="cuda").to(torch.bfloat16)
        ref = torch.softmax(x.double(), -1)
        nbytes = 2 * x.numel() * 2
        for bx, smem, reg in configs:
            cg.REGISTER_TARGET = reg
            fd = _softmax_definition()
            hp = schedule.compute_heuristics(fd.fusion, SchedulerType.inner_persistent, [x])
            if bx:  # 0: the heuristics' own choice
                hp.block_x, hp.block_y, hp.smem_persistent = bx, 1, smem
                hp.persistent_batch_size = -(-n // (bx * hp.vectorize_reduction))
                hp.grid_x = min(hp.grid_x, x.shape[0])
            try:
                (out,) = fd.manual_execute([x], heuristic_params=hp)
            except Exception as exc:  # a config the scheduler refuses
                log(f"  n={n} ({bx}, smem={smem}, reg={reg}): {exc}")
                continue
            err = float((out.double() - ref).abs().max())
            ms = time_ms(torch, lambda fd=fd, hp=hp: fd.manual_execute(
                [x], heuristic_params=hp), 30)
            k = _kernel_of(fd)
            frac = nbytes / (ms * 1e-3) / 1e9 / copy_gbs
            rows.append({"row": n, "heuristics": not bx, "smem": bool(hp.smem_persistent),
                         "register_target": reg, "block": [hp.block_x, hp.block_y],
                         "batch": hp.persistent_batch_size, "ms": ms, "fraction_of_copy": frac,
                         "regs": k.num_regs, "local_mem": k.local_mem, "max_abs_err": err})
            log(f"  n={n:6d} {'heur' if not bx else '    '} smem={int(hp.smem_persistent)} "
                f"reg={reg:3d} block={hp.block_x:4d} B={hp.persistent_batch_size:2d}: "
                f"{ms * 1e3:7.1f} us {100 * frac:5.1f}% regs={k.num_regs} lmem={k.local_mem} "
                f"err={err:.1e}")
        cg.REGISTER_TARGET = target

    for n in (1024, 2048, 4096, 8192):
        measure(n, [(0, False, target)])
    for n in (16384, 32768, 65536):
        measure(n, [(0, False, target)] + [(bx, True, reg) for bx in (256, 512, 1024)
                                             for reg in (64, 40)])
    return rows


def _per_call_us(fn: Any, n: int = 20000) -> float:
    for _ in range(200):
        fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def host_probe(torch: Any, log: Any) -> dict[str, float]:
    import cupy

    out: dict[str, float] = {}
    a = torch.randn(1024, device="cuda")
    dev = a.device
    raw = torch._C._cuda_getCurrentRawStream
    ca = cupy.random.standard_normal(1024, dtype=cupy.float32)
    probes = {
        "torch.empty(shape, dtype, device)": lambda: torch.empty((1024,), dtype=torch.float32,
                                                                 device=dev),
        "torch.empty_like": lambda: torch.empty_like(a),
        "tensor.new_empty": lambda: a.new_empty((1024,)),
        "torch.empty_strided": lambda: torch.empty_strided((1024,), (1,), dtype=torch.float32,
                                                           device=dev),
        "raw current stream": lambda: raw(0),
        "torch.cuda.current_stream().cuda_stream":
            lambda: torch.cuda.current_stream().cuda_stream,
        "t.data_ptr()": a.data_ptr,
        "t.shape": lambda: a.shape,
        "t.stride()": a.stride,
        "t.dtype": lambda: a.dtype,
        "t.device": lambda: a.device,
        "t.get_device()": a.get_device,
        "cupy.empty": lambda: cupy.empty((1024,), dtype=cupy.float32),
        "cupy current stream ptr": lambda: cupy.cuda.get_current_stream().ptr,
        "cupy x.data.ptr": lambda: ca.data.ptr,
        "cupy x.strides": lambda: ca.strides,
        "cupy getDevice": cupy.cuda.runtime.getDevice,
    }
    from kfuse import DataType, FusionDefinition

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        y = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        fd.add_output(fd.ops.mul(fd.ops.add(x, y), 2.0))
    b = torch.randn(1024, device="cuda")
    cb = cupy.random.standard_normal(1024, dtype=cupy.float32)
    fd.execute([a, b])
    fd.execute([ca, cb])
    launch = fd._executor_cache.last_compiled.launches[0]
    stream = raw(0)
    c = torch.empty_like(a)
    args = launch.arguments([a.data_ptr(), b.data_ptr()], [c.data_ptr()], {}, [])
    probes["kfuse Kernel.launch (args prebuilt)"] = lambda: launch.kernel.launch(
        launch.grid, launch.block, 0, stream, args)
    from kfuse._C import FastCall
    from kfuse.fast_path import input_layouts, packed_launch

    packed = packed_launch(launch, {}, 2, 1, 0)
    pa, pb, pc = a.data_ptr(), b.data_ptr(), c.data_ptr()
    probes["PackedLaunch.launch"] = lambda: packed.launch(stream, [pa, pb], [pc], [])
    match_only = FastCall("torch", 0, input_layouts([a, b]), [], [], [], raw, (0,), None, None)
    match_alloc = FastCall("torch", 0, input_layouts([a, b]), [(torch.empty_like, (), None, 0)],
                           [], [], raw, (0,), None, None)
    probes["FastCall: match only"] = lambda: match_only([a, b], None)
    probes["FastCall: match + allocate"] = lambda: match_alloc([a, b], None)
    cache = fd._executor_cache.fast_calls
    probes["FastCallCache call (torch, no Python frame)"] = lambda: cache([a, b], None)
    probes["kfuse execute (torch)"] = lambda: fd.execute([a, b])
    probes["kfuse execute (cupy)"] = lambda: fd.execute([ca, cb])
    kernel = cupy.ElementwiseKernel("float32 a, float32 b", "float32 c", "c = (a + b) * 2",
                                    "probe_h1")
    probes["cupy ElementwiseKernel (allocating)"] = lambda: kernel(ca, cb)
    for name, fn in probes.items():
        out[name] = _per_call_us(fn)
        log(f"  {name:45s} {out[name]:7.2f} us")
    torch.cuda.synchronize()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", default="")
    parser.add_argument("--only", default="softmax,host")
    args = parser.parse_args()
    import torch

    def log(line: str) -> None:
        print(line, flush=True)

    only = set(args.only.split(","))
    result: dict[str, Any] = {}
    if "host" in only:
        log("host cost per call:")
        result["host"] = host_probe(torch, log)
    if "softmax" in only:
        copy_gbs = copy_bandwidth(torch, 20)
        result["copy_gbs"] = copy_gbs
        log(f"device-to-device copy: {copy_gbs:.0f} GB/s")
        result["softmax"] = softmax_probe(torch, copy_gbs, log)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
