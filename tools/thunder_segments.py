"""What kfuse makes of the fusion regions Thunder hands it, at the GPU check's full sizes,
without running a kernel: per step and region, the segments, their schedulers, the kernels'
launch configurations, the bytes each segment reads and writes, the framework copies, and
the least the region must move (its inputs read once, its outputs written once).

    /tmp/thunder-venv/bin/python tools/thunder_segments.py                 # every step
    /tmp/thunder-venv/bin/python tools/thunder_segments.py --steps rope,block
    ... --size emulator        # tools/thunder_check.py's sizes (quick, emulator) instead
    ... --size quick --host-reps 9    # and the host time of each region's cached execute
    python3 tools/thunder_segments.py --device cuda --host-reps 20   # on a GPU, for real

Thunder runs on CPU tensors (tools/thunder_emulator_shim.py) with fd.execute recorded, not
run: each call's definition and inputs are analysed (kfuse's compiler stages up to the
generated kernels, nothing compiled or launched), and it returns zero-filled outputs of the
shapes and dtypes kfuse infers, so that Thunder's torch ops between the regions (matrix
products, views) run at full size on the CPU and the backward gets its saved values. The
numbers are estimates from shapes and dtypes: a segment reads each tensor input once and
writes each output once (a persistent kernel that reads its input twice from L2 counts once),
a library segment's framework calls make every value they compute in full, and its gathers
read only what they return. With --device cuda the regions run for real on the GPU instead.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

MB = 1e6


@dataclass
class KernelRow:
    """One generated kernel's launch."""

    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int


@dataclass
class SegmentRow:
    """One segment: its scheduler, what it reads and writes, its kernels."""

    scheduler: str
    reads: int
    writes: int
    inputs: list[str]
    outputs: list[str]
    kernels: list[KernelRow] = field(default_factory=list)
    note: str = ""


@dataclass
class RegionRow:
    """One fd.execute of a region: the fusion's own least traffic, and its segments."""

    phase: str
    index: int
    exprs: int
    min_reads: int
    min_writes: int
    segments: list[SegmentRow]
    copies: list[str]
    folded: str = ""
    definition: str = ""

    @property
    def moved(self) -> int:
        return sum(s.reads + s.writes for s in self.segments) + self.copy_bytes

    copy_bytes: int = 0
    host_us: float = float("nan")  # HostTimer's median, library calls included
    library_us: float = float("nan")
    program: str = ""


def nbytes(shape: Any, dtype: Any) -> int:
    """Bytes of a dense tensor of `shape` and kfuse DataType `dtype` (0 for a scalar)."""
    from kfuse.dtypes import to_torch_dtype

    n = 1
    for s in shape:
        n *= int(s)
    return n * to_torch_dtype(dtype).itemsize


def _tensor_bytes(vals: Any, extents: dict[Any, Any]) -> int:
    from kfuse.ir.values import TensorView

    seen: set[int] = set()
    total = 0
    for v in vals:
        if isinstance(v, TensorView) and id(v) not in seen:
            seen.add(id(v))
            total += nbytes(extents[v], v.dtype)
    return total


def _kernel_rows(kernels: list[Any]) -> list[KernelRow]:
    return [KernelRow(k.name, k.grid, k.block, k.shared_mem) for k in kernels]


def _whole(partition: Any) -> list[KernelRow]:
    """The kernels of a partition one scheduler takes (none for a library call)."""
    from kfuse.engine.compiler import stage_kernels, stage_params

    params = stage_params(partition, None)
    return _kernel_rows(stage_kernels(partition, params))


def analyse(fusion: Any, inputs: list[Any], phase: str, index: int) -> RegionRow:
    """`fusion` (a FusionExecutorCache's canonical fusion) on `inputs`, as execute would
    compile it: partition, then each segment's scheduler and kernels."""
    from kfuse.engine.compiler import stage_partition
    from kfuse.ir.printer import fusion_to_python
    from kfuse.runtime.info import build_runtime_info

    info = build_runtime_info(fusion, inputs)
    region = RegionRow(
        phase,
        index,
        len(fusion.exprs),
        _tensor_bytes(fusion.inputs, info.extents),
        _tensor_bytes(fusion.outputs, info.extents),
        [],
        [],
        definition=fusion_to_python(fusion),
    )
    partition = stage_partition(fusion, info, None, segment=True)
    if partition.folded is not None:
        region.folded = ", ".join(partition.folded.reshapes)
    if partition.segmented is None:
        scheduler = partition.scheduler
        assert scheduler is not None
        row = SegmentRow(
            scheduler.scheduler_type.value,
            region.min_reads,
            region.min_writes,
            [v.name for v in fusion.inputs],
            [v.name for v in fusion.outputs],
            _whole(partition),
        )
        region.segments.append(row)
        return region
    region.segments.extend(_segment_rows(partition))
    seg_fusion, seg_info = partition.scheduled
    region.copies = [v.name for v in partition.segmented.copies]
    region.copy_bytes = 2 * _tensor_bytes(partition.segmented.copies, seg_info.extents)
    return region


def _segment_rows(partition: Any) -> list[SegmentRow]:
    """Each segment of a segmented partition: derived as the SegmentedRunner derives it,
    with empty arrays standing for the intermediates, then partitioned alone."""
    import torch

    from kfuse.dtypes import to_torch_dtype
    from kfuse.engine.compiler import compile_segment, stage_partition
    from kfuse.engine.segments import SegmentedRunner
    from kfuse.ir.shapes import infer_added
    from kfuse.ir.values import TensorView

    parent_fusion, parent_info = partition.scheduled
    runner = SegmentedRunner(partition.segmented, compile_segment)
    extents = dict(parent_info.extents)
    if runner.added:
        infer_added(runner.added, extents)
    env = {
        id(v): a
        for v, a in zip(parent_fusion.inputs, parent_info.inputs, strict=True)
        if isinstance(v, TensorView)
    }
    arrays = [a for a in parent_info.inputs if isinstance(a, torch.Tensor)]
    device = arrays[0].device if arrays else "cpu"  # intermediates where the call's inputs are
    rows = []
    for step in runner.steps:
        plan = step.plan
        info = step.derive(parent_info, extents, env)
        info.extents = step.all_extents(extents)
        seg_partition = stage_partition(plan.fusion, info, None, segment=False)
        row = SegmentRow(
            plan.scheduler.value,
            _kernel_reads(plan.fusion, step.all_extents(extents)),
            _tensor_bytes(plan.outputs, extents),
            [v.name for v in plan.inputs],
            [v.name for v in plan.outputs],
            _whole(seg_partition),
        )
        if not row.kernels:
            row.reads, row.writes = _library_traffic(plan.exprs, extents)
            row.note = "library: " + "; ".join(type(e).__name__ for e in plan.exprs)
        rows.append(row)
        for v in plan.outputs:
            env[id(v)] = torch.empty(extents[v], dtype=to_torch_dtype(v.dtype), device=device)
    return rows


def _kernel_reads(fusion: Any, extents: dict[Any, Any]) -> int:
    """Bytes a kernel segment reads: each tensor input once, but one that only gathers read
    (an indexed read) only the elements they return."""
    from kfuse.ir.values import TensorView

    total = 0
    for v in fusion.inputs:
        if not isinstance(v, TensorView):
            continue
        uses = [(e, k) for e in fusion.exprs for k, u in enumerate(e.inputs) if u is v]
        if uses and all(type(e).__name__ in INDEXED and k == 0 for e, k in uses):
            total += sum(nbytes(extents[e.outputs[0]], e.outputs[0].dtype) for e, _ in uses)
        else:
            total += nbytes(extents[v], v.dtype)
    return total


VIEWS = ("ReshapeOp", "SqueezeOp", "BroadcastOp", "ExpandOp", "PermuteOp", "SliceOp")
"""Library exprs the framework runs as views of their input (no traffic; a slice or permute
a later op reads strided)."""
INDEXED = ("GatherOp", "IndexSelectOp")
"""Library exprs that read only the elements they return (and their index)."""


def _library_traffic(exprs: Any, extents: dict[Any, Any]) -> tuple[int, int]:
    """(bytes read, bytes written) of a library segment run as framework calls, one call an
    expr: every value it computes is a new tensor made in full."""
    from kfuse.ir.values import TensorView

    reads = writes = 0
    for e in exprs:
        name = type(e).__name__
        if name in VIEWS:
            continue
        outs = [o for o in e.outputs if isinstance(o, TensorView)]
        writes += _tensor_bytes(outs, extents)
        if name in INDEXED:
            reads += _tensor_bytes(outs, extents) + _tensor_bytes(e.inputs[1:], extents)
        else:
            reads += _tensor_bytes(e.inputs, extents)
    return reads, writes


class HostTimer:
    """kfuse's host time of a cached fd.execute. On a GPU (--device cuda): the time until
    execute returns (its launches enqueued), the GPU idle before each call. On the emulator:
    the call run for real with the emulator's kernel launches and its output poisoning made
    no-ops, the time inside library calls
    (expr_eval: framework ops, computing in full on the CPU where a GPU would only enqueue
    them) measured apart, to be taken off. The emulator never takes the GPU's C++ fast path,
    so this is the checked path's time (a KernelProgram on a GPU takes the fast path from
    its second call with one layout; a SegmentedProgram never does)."""

    def __init__(self, reps: int, on_gpu: bool) -> None:
        self.reps = reps
        self.on_gpu = on_gpu
        self.library_s = 0.0
        if not on_gpu:
            self._stub_the_emulator()

    def _stub_the_emulator(self) -> None:
        import kfuse.engine.program as program
        import kfuse.runtime.arrays as arrays
        import kfuse.schedule.expr_eval as expr_eval
        from kfuse.runtime.emulator import EmulatedKernel

        EmulatedKernel.launch = lambda *args, **kwargs: None  # type: ignore[method-assign]
        program.poison = lambda array: None  # type: ignore[attr-defined]
        # Zero-filled allocations: a library call after a kernel that never ran must read
        # valid positions (a gather's index); zeroing counts in the time, small at the
        # sizes this is run at (--size quick: large CPU buffers would time the CPU allocator).
        real_empty = arrays._empty

        def zeroed(*args: Any) -> Any:
            return real_empty(*args).zero_()

        arrays._empty = zeroed  # type: ignore[assignment]
        # Checked and replayed library segments both run their ops through a BoundExprEval
        # (the replay binds its segments once; run_expr_eval binds on every call).
        real_library = expr_eval.BoundExprEval.__call__
        timer = self

        def timed_library(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return real_library(*args, **kwargs)
            finally:
                timer.library_s += time.perf_counter() - started

        expr_eval.BoundExprEval.__call__ = timed_library  # type: ignore[method-assign]

    def measure(self, execute: Any, fd: Any, inputs: list[Any]) -> tuple[float, float, str]:
        """(median host microseconds a call, library microseconds a call, the Program's
        kind) after two calls that compile and cache."""
        for _ in range(2):
            execute(fd, inputs)
        totals, libraries = [], []
        # Python's cycle collector runs when Thunder's allocations trigger it, whoever calls:
        # kept out of kfuse's time.
        gc.collect()
        gc.disable()
        try:
            for _ in range(self.reps):
                self.library_s = 0.0
                if self.on_gpu:  # the GPU idle: the time is the host's until execute returns
                    import torch

                    torch.cuda.synchronize()
                started = time.perf_counter()
                execute(fd, inputs)
                totals.append(time.perf_counter() - started)
                libraries.append(self.library_s)
        finally:
            gc.enable()
        order = sorted(range(self.reps), key=lambda k: totals[k])
        mid = order[self.reps // 2]
        kind = type(fd._executor().last_compiled).__name__
        return totals[mid] * 1e6, libraries[mid] * 1e6, kind


class Recorder:
    """Replaces kfuse's FusionDefinition.execute: each call is analysed (and with a HostTimer
    timed), and answered with zero-filled outputs of the inferred shapes."""

    def __init__(self, timer: HostTimer | None = None, on_gpu: bool = False) -> None:
        import kfuse.nvfuser_direct as nvfuser_direct

        self.on_gpu = on_gpu
        self.phase = "forward"
        self.regions: list[RegionRow] = []
        self.errors: list[str] = []
        self.timer = timer
        self.real_execute = getattr(
            nvfuser_direct.FusionDefinition,
            "_real_execute",
            nvfuser_direct.FusionDefinition.execute,
        )
        nvfuser_direct.FusionDefinition._real_execute = self.real_execute  # type: ignore[attr-defined]
        recorder = self

        def recorded(fd: Any, inputs: Any, **kwargs: Any) -> list[Any]:
            return recorder.call(fd, list(inputs))

        nvfuser_direct.FusionDefinition.execute = recorded  # type: ignore[method-assign]

    def call(self, fd: Any, inputs: list[Any]) -> list[Any]:
        import torch

        from kfuse.dtypes import to_torch_dtype

        executor = fd._executor()
        fusion = executor.fusion
        index = sum(r.phase == self.phase for r in self.regions)
        try:
            self.regions.append(analyse(fusion, inputs, self.phase, index))
            if self.timer is not None:
                region = self.regions[-1]
                region.host_us, region.library_us, region.program = self.timer.measure(
                    self.real_execute, fd, inputs
                )
        except Exception as exc:  # reported with the step, the others still analysed
            self.errors.append(f"{self.phase} region {index}: {type(exc).__name__}: {exc}")
        if self.on_gpu:
            return self.real_execute(fd, inputs)  # Thunder goes on with the real values
        extents = fusion.infer_shapes(inputs)
        outputs = [
            torch.zeros(extents[out], dtype=to_torch_dtype(out.dtype)) for out in fusion.outputs
        ]
        return executor.shown(outputs)  # the returned ones, views of others among them


def record_step(
    thunder: Any, recorder: Recorder, name: str, size: Any, dtype: Any, device: str = "cpu"
) -> None:
    """Thunder's forward and backward of step `name`, every region recorded."""
    import torch
    from thunder.executors.nvfuserex import nvfuserex
    from thunder_steps import make_case

    torch.manual_seed(0)
    case = make_case(name, size, dtype, device)
    jitted = thunder.jit(case.fn, executors=[nvfuserex], **case.options)
    recorder.phase = "forward"
    out = jitted(*case.args)
    if not case.inplace:
        recorder.phase = "backward"
        out.backward()


def print_region(r: RegionRow, verbose: bool) -> None:
    least = r.min_reads + r.min_writes
    ratio = r.moved / least if least else float("nan")
    print(
        f"  {r.phase} region {r.index}: {r.exprs} exprs, {len(r.segments)} segment(s); "
        f"least {least / MB:.1f} MB (reads {r.min_reads / MB:.1f}, writes "
        f"{r.min_writes / MB:.1f}); segments move {r.moved / MB:.1f} MB ({ratio:.2f}x)"
    )
    if r.program:
        host = r.host_us - r.library_us
        print(
            f"    host {host:.0f} us a cached call ({r.program}; library calls "
            f"{r.library_us:.0f} us on the CPU, taken off)"
        )
    if r.folded:
        print(f"    folded into operands: {r.folded}")
    if r.copies:
        copied = ", ".join(r.copies)
        print(f"    framework copies of outputs: {copied} ({r.copy_bytes / MB:.1f} MB)")
    for k, s in enumerate(r.segments):
        print(
            f"    [{k}] {s.scheduler:<14} reads {s.reads / MB:8.1f} MB  writes "
            f"{s.writes / MB:8.1f} MB  in {','.join(s.inputs)} -> out {','.join(s.outputs)}"
        )
        if s.note:
            print(f"        {s.note}")
        for kern in s.kernels:
            print(
                f"        kernel {kern.name}: grid {kern.grid} block {kern.block} "
                f"smem {kern.shared_mem} B"
            )
    if verbose:
        print("    " + r.definition.replace("\n", "\n    "))


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", default="", help="comma-separated steps (default: all)")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--size", choices=("full", "quick", "emulator"), default="full")
    parser.add_argument(
        "--host-reps",
        type=int,
        default=0,
        help="also time kfuse's host path of each region's cached execute (median of N)",
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="cpu: the emulator, nothing launched; cuda: Thunder runs for real on the GPU "
        "(with --host-reps the host time of each region's cached execute)",
    )
    parser.add_argument("--verbose", action="store_true", help="print each region's fusion")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    from thunder_check import import_thunder

    on_gpu = args.device == "cuda"
    thunder = import_thunder(emulator=not on_gpu)
    import torch
    from thunder_check import _sizes
    from thunder_steps import STEPS

    size = _sizes(args.size)
    dtype = getattr(torch, args.dtype)
    failures = 0
    for name in [s for s in args.steps.split(",") if s] or STEPS:
        timer = HostTimer(args.host_reps, on_gpu) if args.host_reps else None
        recorder = Recorder(timer, on_gpu)
        print(f"{name} ({args.dtype}, {args.size}: {size})", flush=True)
        try:
            record_step(thunder, recorder, name, size, dtype, args.device)
        except Exception as exc:
            recorder.errors.append(f"the step: {type(exc).__name__}: {str(exc)[:300]}")
        total = sum(r.moved for r in recorder.regions)
        least = sum(r.min_reads + r.min_writes for r in recorder.regions)
        segments = sum(len(r.segments) for r in recorder.regions)
        kernels = sum(len(s.kernels) for r in recorder.regions for s in r.segments)
        print(
            f"  {len(recorder.regions)} regions, {segments} segments, {kernels} kernels; "
            f"segments move {total / MB:.1f} MB, regions' least {least / MB:.1f} MB"
        )
        for r in recorder.regions:
            print_region(r, args.verbose)
        for e in recorder.errors:
            print(f"  ERROR {e}")
        failures += bool(recorder.errors)
        sys.stdout.flush()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
