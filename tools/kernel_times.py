"""Where a model-suite case's time goes, on the GPU: its whole call (the suite's time_ms, L2
flushed), each kernel's median over several profiled calls (CUPTI), torch.compile's whole
call with --tc, and the same again with heuristic constants changed (--ab), in one process:

    python3 tools/kernel_times.py instancenorm_bwd_nhwc:256x2048x7x7 softmax_bwd_dim0:32768x1024 \
        --tc --ab kfuse.schedule.reduction_heuristics.OUTER_MIN_BLOCKS_PER_SM=0

Each --ab is NAME=VALUE ... (a module attribute and a Python literal; several in one string,
space-separated): every case runs as is, then once per --ab with those attributes set (and
restored after). Each --edit is a Python file defining `edit(name, source) -> source`: a run
with every kernel's CUDA source passed through it before it is compiled, to measure a codegen
idea as hand edits before writing it (an edited kernel keeps its name: the profile says
"edited" where the source changed). A FusionDefinition is built afresh for each run, so no
compiled program is reused; kernels whose source differs get names of their own. Every run's
outputs are checked against the case's float64 reference first (the model suite's check).

Written on 2026-12-04 (at de7b632) from that day's probes, after the device time was spent,
and first run on a later device call.
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib
import os
import statistics
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))


def parse_settings(text: str) -> list[tuple[str, str, Any]]:
    """ "a.b.C=1 a.D=(2, 3)" -> [("a.b", "C", 1), ("a", "D", (2, 3))]."""
    out = []
    for entry in text.split():
        target, sep, value = entry.partition("=")
        module, dot, name = target.rpartition(".")
        if not sep or not dot or not module or not name:
            raise ValueError(f"{entry!r} is not MODULE.NAME=VALUE")
        out.append((module, name, ast.literal_eval(value)))
    return out


@contextmanager
def settings(entries: list[tuple[str, str, Any]]) -> Iterator[None]:
    """Set each module attribute for the duration of the block (each must exist)."""
    saved = []
    try:
        for module_name, name, value in entries:
            module = importlib.import_module(module_name)
            if not hasattr(module, name):
                raise AttributeError(f"{module_name} has no attribute {name}")
            saved.append((module, name, getattr(module, name)))
            setattr(module, name, value)
        yield
    finally:
        for module, name, value in reversed(saved):
            setattr(module, name, value)


@contextmanager
def source_edit(path: str | None) -> Iterator[set[str]]:
    """Every kernel compiled inside the block goes through `edit(name, source)` of the Python
    file at `path` (None: unchanged); yields the names of the kernels it changed."""
    from kfuse.runtime.backends import cuda

    changed: set[str] = set()
    if path is None:
        yield changed
        return
    namespace: dict[str, Any] = {}
    exec(compile(Path(path).read_text(), path, "exec"), namespace)
    edit = namespace["edit"]
    original = cuda.CudaBackend.compile

    def compile_edited(self: Any, source: str, name: str, *args: Any, **kwargs: Any) -> Any:
        edited = edit(name, source)
        if edited != source:
            changed.add(name)
        return original(self, edited, name, *args, **kwargs)

    cuda.CudaBackend.compile = compile_edited  # type: ignore[method-assign]
    try:
        yield changed
    finally:
        cuda.CudaBackend.compile = original  # type: ignore[method-assign]


def kfuse_run(
    torch: Any, measure: Any, suite: Any, case: Any, inputs: list[Any], args: Any, flush: Any
) -> tuple[float, str, dict[tuple[Any, ...], list[float]]]:
    """(whole call in us, the check's verdict, each kernel's times) for a fresh definition."""
    fd, _ = measure.definition(case, args.dtype)
    # A case that updates inputs in place runs on copies (measure.first_call).
    call, outputs = measure.first_call(case, fd.execute, inputs, as_list=True)
    check = measure.check_outputs(
        torch, "kfuse", list(outputs), case.reference(*inputs), suite.check
    )["check"]
    us = suite.time_ms(torch, call, args.reps, before=flush) * 1e3
    kernels: dict[tuple[Any, ...], list[float]] = {}
    for _ in range(args.calls):
        for k in measure.kernel_profile_rows(call, flush):
            key = (k["scheduler"], k["name"], tuple(k["grid"]), tuple(k["block"]), k["registers"])
            kernels.setdefault(key, []).append(k["us"])
    return us, check, kernels


def whole_call_us(torch: Any, suite: Any, call: Any, args: Any, flush: Any) -> float:
    """The suite's time of `call` in us (L2 flushed before each), after a first call that
    compiles."""
    call()
    return float(suite.time_ms(torch, call, args.reps, before=flush) * 1e3)


def torch_compiled(torch: Any, measure: Any, case: Any, inputs: list[Any]) -> Any:
    """A fresh torch.compile of the case's torch function, bound to `inputs` (to copies of
    them where the case updates its inputs in place)."""
    call, _ = measure.first_call(case, measure.fresh_compile(torch, case.torch_fn), inputs)
    return call


def torch_profiler_kernels(torch: Any, call: Any, flush: Any, calls: int) -> dict[str, list[float]]:
    """Each GPU activity's times (us, by name) over `calls` calls of `call` (an L2 flush before
    each, not profiled), recorded by torch.profiler: it sees torch.compile's Triton kernels and
    kfuse's driver-API launches alike, so both peers' kernels are timed by one tool. The flush's
    own kernel runs outside the profiled region."""
    from torch.profiler import ProfilerActivity, profile

    times: dict[str, list[float]] = {}
    for _ in range(calls):
        flush()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            call()
            torch.cuda.synchronize()
        for event in prof.events():
            if event.device_type == torch.autograd.DeviceType.CUDA:
                times.setdefault(event.name, []).append(event.time_range.elapsed_us())
    return times


def print_kernel_times(label: str, whole_us: float, times: dict[str, list[float]]) -> None:
    """A peer's kernels (median us each) and what its whole call spends besides them."""
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    outside = whole_us - sum(medians.values())
    print(f"  {label}: whole call {whole_us:.1f} us, {outside:.1f} us outside its kernels")
    for name, us in medians.items():
        print(f"    {us:8.1f} us  {name[:90]}")


def summary_table(labels: list[str], rows: list[tuple[str, float | None, list[str]]]) -> str:
    """The runs side by side, a line a case: torch.compile's time (where measured), then each
    variant's under a column named v0, v1, ... with a legend of what each is: read from the
    per-case lines alone, one variant's times (listed in the order --ab, then --edit) were
    once taken for another's."""
    legend = [f"  v{k}: {label}" for k, label in enumerate(labels)]
    header = f"{'case':40s} {'tc':>8s}" + "".join(f" {f'v{k}':>8s}" for k in range(len(labels)))
    lines = ["## summary (us; a variant whose check failed shows its check)", *legend, header]
    for case, tc, cells in rows:
        tc_cell = f"{tc:8.1f}" if tc is not None else f"{'-':>8s}"
        lines.append(f"{case[:40]:40s} {tc_cell}" + "".join(f" {c:>8s}" for c in cells))
    return "\n".join(lines)


def main() -> None:
    # The program store keys a program by the package's code, not by the settings (--ab) or
    # source edits this tool makes in its process (kfuse.engine.program_store): off here.
    os.environ["KFUSE_PROGRAM_CACHE"] = "0"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="+", help="CASE or CASE:SIZE (default: its quick size)")
    parser.add_argument(
        "--dtype",
        choices=["bfloat16", "float32"],
        help="the inputs' dtype (default: each case's first, bfloat16 but for float32 cases)",
    )
    parser.add_argument("--calls", type=int, default=5, help="profiled calls a run (median)")
    parser.add_argument("--reps", type=int, default=30, help="timed calls of the whole call")
    parser.add_argument("--tc", action="store_true", help="also time torch.compile")
    parser.add_argument("--ab", action="append", default=[], help="MODULE.NAME=VALUE ...")
    parser.add_argument("--edit", action="append", default=[], help="FILE.py with edit()")
    parser.add_argument(
        "--torch-profiler",
        action="store_true",
        help="time each kernel of kfuse (as is) and torch.compile with torch.profiler instead of "
        "kfuse's profiler and print what each whole call spends outside its kernels; "
        "no --ab or --edit",
    )
    args = parser.parse_args()
    if args.torch_profiler and (args.ab or args.edit):
        parser.error("--torch-profiler measures kfuse as is: no --ab or --edit")
    variants: list[tuple[str, list[Any], str | None]] = [("as is", [], None)]
    variants += [(text, parse_settings(text), None) for text in args.ab]
    variants += [(f"edit {Path(path).name}", [], path) for path in args.edit]

    import torch
    from models import measure, registry
    from models.run import load_suite

    suite = load_suite()
    flush, _ = measure.l2_flusher(torch)
    table: list[tuple[str, float | None, list[str]]] = []
    requested = args.dtype
    for spec in args.cases:
        case, shape = registry.case_and_shape(spec)
        name = case.name
        args.dtype = requested or case.dtypes[0]  # what kfuse_run defines the case in
        torch.manual_seed(0)
        inputs = case.make_inputs(torch, shape, getattr(torch, args.dtype), "cuda")
        print(f"## {name} {list(shape)} {args.dtype}")
        tc_us = None
        if args.tc:
            tc_us = whole_call_us(
                torch, suite, torch_compiled(torch, measure, case, inputs), args, flush
            )
            print(f"  torch.compile: {tc_us:.1f} us")
        if args.torch_profiler:
            fd, _ = measure.definition(case, args.dtype)
            for label, call in (
                ("kfuse", functools.partial(fd.execute, inputs)),
                ("torch.compile", torch_compiled(torch, measure, case, inputs)),
            ):
                us = whole_call_us(torch, suite, call, args, flush)  # compiles first
                print_kernel_times(
                    label, us, torch_profiler_kernels(torch, call, flush, args.calls)
                )
            continue
        cells = []
        for label, entries, edit_path in variants:
            with settings(entries), source_edit(edit_path) as changed:
                us, check, kernels = kfuse_run(torch, measure, suite, case, inputs, args, flush)
            print(f"  kfuse ({label}): {us:.1f} us [{check[:60]}]")
            cells.append(f"{us:.1f}" if check == "ok" else check[:8])
            for (scheduler, kname, grid, block, registers), times in kernels.items():
                mark = " edited" if kname in changed else ""
                print(
                    f"    {statistics.median(times):8.1f} us  {scheduler:22s} {kname[:48]:48s} "
                    f"grid {grid} block {block} registers {registers}{mark}"
                )
        table.append((f"{name} {'x'.join(map(str, shape))}", tc_us, cells))
        sys.stdout.flush()
    if table:
        print(summary_table([label for label, _, _ in variants], table))


if __name__ == "__main__":
    main()
