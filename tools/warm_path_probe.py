"""Where the first call of a new definition goes, with the on-disk caches warm (issue 60: W5's
warm path under 1 ms): each compiler stage of kfuse.engine.compiler timed alone, the loaded
kernel's disk read and module load apart, then whole first calls as benchmarks/run.py's C1
times them.

Each repetition builds W5's definition anew and forgets every loaded kernel (only the disk
caches stay warm, as in a new process), so nothing in memory is reused but what a process
keeps once (imports, the CUDA context, the package's fingerprint). Medians of --reps, in us.

    PYTHONPATH=src:benchmarks python3 tools/warm_path_probe.py [--device cuda] [--reps 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def _forget_loaded_kernels(device: str) -> None:
    """Empty the in-memory caches a new process would not have (the disk caches stay)."""
    if device == "cuda":
        from kfuse.runtime.backends.cuda import CUDA_BACKEND

        CUDA_BACKEND._kernels.clear()


def _inputs(device: str) -> list[Any]:
    import torch

    m, n = (32768, 4096) if device == "cuda" else (64, 4096)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn((m, n), generator=gen).to(torch.bfloat16)
    w = torch.randn((n,), generator=gen).to(torch.bfloat16)
    return [x.cuda(), w.cuda()] if device == "cuda" else [x, w]


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


class _Stopwatch:
    """Seconds between marks, by the name of the step each mark ends."""

    def __init__(self) -> None:
        self.last = time.perf_counter()
        self.steps: dict[str, float] = {}

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.steps[name] = now - self.last
        self.last = now


def _new_call(device: str, inputs: list[Any], watch: _Stopwatch) -> tuple[Any, Any]:
    """A new definition's FusionExecutorCache and RuntimeInfo for `inputs`, the loaded
    kernels forgotten first: the steps every first call starts with, timed."""
    from workloads import _rmsnorm_definition

    from kfuse.engine.executor import FusionExecutorCache
    from kfuse.runtime.info import build_runtime_info

    _forget_loaded_kernels(device)
    fd = _rmsnorm_definition()
    watch.last = time.perf_counter()
    executor = FusionExecutorCache(fd.fusion)
    watch.mark("canonicalize")
    info = build_runtime_info(executor.fusion, inputs)
    watch.mark("runtime info")
    return executor, info


def stage_times(device: str, inputs: list[Any]) -> dict[str, float]:
    """One first call taken apart: seconds per stage."""
    from kfuse.engine import compiler

    watch = _Stopwatch()
    executor, info = _new_call(device, inputs, watch)
    partition = compiler.stage_partition(executor.fusion, info, None, segment=True)
    watch.mark("partition")
    params = compiler.stage_params(partition, None)
    watch.mark("params")
    kernels = compiler.stage_kernels(partition, params)
    watch.mark("kernels (codegen)")
    launches = compiler.stage_compile(partition, params, kernels)
    watch.mark("compile (disk cache, module load)")
    program = compiler.stage_program(partition, params, launches)
    watch.mark("program")
    program.run(info, None)
    _sync(device)
    watch.mark("run (allocate, launch, sync)")
    return watch.steps


def stored_times(device: str, inputs: list[Any]) -> dict[str, float]:
    """One first call whose program the program store holds (kfuse.engine.program_store):
    the stages it runs instead of the compiler's ({} where it holds none)."""
    from kfuse.engine import program_store
    from kfuse.engine.signature import program_key

    watch = _Stopwatch()
    executor, info = _new_call(device, inputs, watch)
    key = program_key(info, None)
    watch.mark("signature")
    program = program_store.load(executor.fusion, info, key)
    watch.mark("program store (key, read, unpickle, kernel load)")
    if program is None:
        return {}
    program.run(info, None)
    _sync(device)
    watch.mark("run (allocate, launch, sync)")
    return watch.steps


def kernel_load_times(device: str, inputs: list[Any]) -> dict[str, float]:
    """W5's kernel from the cubin cache (the path without the program store): the entry's
    read and check, then the module load."""
    if device != "cuda":
        return {}
    from workloads import _rmsnorm_definition

    from kfuse import _C
    from kfuse.engine.compiler import KernelCompiler
    from kfuse.runtime import kernel_cache
    from kfuse.runtime.backends.cuda import CUDA_BACKEND
    from kfuse.runtime.info import build_runtime_info

    fd = _rmsnorm_definition()
    fd.execute(inputs)
    program = fd.last_program()
    launch = program.launches[0]
    compiler = KernelCompiler(program.params.cparams)
    arch = compiler.target_arch(build_runtime_info(fd.fusion, inputs))
    start = time.perf_counter()
    key, identity = CUDA_BACKEND._disk_entry(launch.source, launch.name, arch, compiler.options)
    cubin = kernel_cache.load(key, identity)
    read = time.perf_counter()
    if cubin is None:
        return {"disk entry (not found)": read - start}
    _C.Kernel(cubin, launch.name, inputs[0].get_device())
    loaded = time.perf_counter()
    return {"cubin entry read and checked": read - start, "module load": loaded - read}


def first_call(device: str, inputs: list[Any], profile: Any = None) -> float:
    """Seconds of C1's measure: a new definition's first execute, synchronized (recorded by
    `profile`, a cProfile.Profile, where given)."""
    from workloads import _rmsnorm_definition

    _forget_loaded_kernels(device)
    fd = _rmsnorm_definition()
    _sync(device)
    start = time.perf_counter()
    if profile is None:
        fd.execute(inputs)
    else:
        profile.runcall(fd.execute, inputs)
    _sync(device)
    return time.perf_counter() - start


def _medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {name: statistics.median(run[name] for run in runs) for name in runs[0]}


def _report(title: str, times: dict[str, float]) -> None:
    print(title)
    for name, seconds in times.items():
        print(f"  {name:44s} {seconds * 1e6:9.1f} us")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "emulator"), default="emulator")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument(
        "--profile", type=int, default=0, metavar="N", help="then cProfile N whole first calls"
    )
    args = parser.parse_args(argv)
    inputs = _inputs(args.device)
    first_call(args.device, inputs)  # fills the disk caches (and the process's one-time work)

    def repeat(f: Callable[[str, list[Any]], Any]) -> list[Any]:
        return [f(args.device, inputs) for _ in range(args.reps)]

    stages = _medians(repeat(stage_times))
    _report("W5's first call by stage, disk caches warm (medians):", stages)
    print(f"  {'sum':44s} {sum(stages.values()) * 1e6:9.1f} us")
    stored = repeat(stored_times)
    if stored[0]:
        stored_medians = _medians(stored)
        _report("The same call with its program stored (medians):", stored_medians)
        print(f"  {'sum':44s} {sum(stored_medians.values()) * 1e6:9.1f} us")
    else:
        print("The program store holds no program for it (KFUSE_PROGRAM_CACHE=0?)")
    loads = kernel_load_times(args.device, inputs)
    if loads:
        _report(
            "its kernel's load:",
            _medians([kernel_load_times(args.device, inputs) for _ in range(args.reps)]),
        )
    calls = repeat(first_call)
    median = statistics.median(calls) * 1e6
    print(f"whole first call (C1 warm), median of {args.reps}: {median:.1f} us")
    if args.profile:
        import cProfile
        import pstats

        profile = cProfile.Profile()
        for _ in range(args.profile):
            first_call(args.device, inputs, profile)
        stats = pstats.Stats(profile)
        stats.sort_stats("cumulative").print_stats(45)
        stats.sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
