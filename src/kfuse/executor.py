"""FusionExecutorCache: input signature -> scheduler, params and compiled launches -> outputs.

A call's signature is everything a compiled launch depends on: each input's dtype, shape,
strides and 16-byte alignment class, the scalar inputs' types, and the target device. A
cached call only reads pointers, allocates outputs and launches. Kernels themselves are
cached by their source (backends), so different shapes with the same parameters and layout
class share one kernel.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

from kfuse import knobs, profiling_hooks
from kfuse.arrays import current_stream, empty_like_framework, poison
from kfuse.backends import backend_for
from kfuse.dtypes import DataType
from kfuse.errors import SchedulerError
from kfuse.fast_path import fast_call_for, layout_key
from kfuse.ir.fusion import Fusion
from kfuse.ir.values import TensorView
from kfuse.launch import KernelLaunch, workspace_bytes
from kfuse.runtime_info import EMULATOR, RuntimeInfo, build_runtime_info
from kfuse.schedule import rejection_reason, resolve_scheduler
from kfuse.schedule.registry import SCHEDULERS, scheduler_for
from kfuse.schedule.types import SchedulerType


@dataclass
class CompiledFusion:
    """What one input signature compiled to."""

    scheduler: SchedulerType  # SchedulerType.none for a segmented fusion
    params: Any
    launches: list[KernelLaunch]
    # Runs the call instead of `launches`: expr_eval's library calls, or a segmented fusion's
    # segments (kfuse.segmented_executor.SegmentedRunner).
    runner: Any = None


SEEN_LAYOUTS = 64
"""Layouts an executor remembers having run once (see FusionExecutorCache._seen_layouts)."""


def _add_bounded(keys: dict[tuple, None], key: tuple, limit: int) -> None:
    """Add `key` to an insertion-ordered set, dropping the oldest key beyond `limit`."""
    keys[key] = None
    if len(keys) > limit:
        del keys[next(iter(keys))]


class FusionExecutorCache:
    """Runs one Fusion, caching its compiled form per input signature."""

    def __init__(self, fusion: Fusion, *, segment: bool = True) -> None:
        self.fusion = fusion
        # Whether a fusion no single scheduler takes is split into segments (a segment's own
        # cache is created with segment=False, so it never splits again).
        self.segment = segment
        self._compiled: dict[tuple, CompiledFusion] = {}
        self._lock = threading.Lock()
        self.last_compiled: CompiledFusion | None = None
        # kfuse._C.FastCallCache of the layouts seen twice, created by the first call that can
        # take the host fast path (FusionExecution.execute tries it before anything else).
        self.fast_calls: Any = None
        # The layouts that have an entry there, in the cache's order of age (it keeps the
        # newest FastCallCache.MAX_ENTRIES): a layout that misses for a reason its entry
        # already checks on every call (another current CuPy device, a scalar value out of
        # its parameter's range) must not build, and add, the same entry again on every call.
        self._fast_layouts: dict[tuple, None] = {}
        # Layouts the checked path has run once (insertion-ordered, at most SEEN_LAYOUTS): a
        # FastCall is built on a layout's second checked call, so that callers whose shapes
        # change on every call neither pay for building one (a third of a miss) nor push
        # the layouts they do repeat out of the cache.
        self._seen_layouts: dict[tuple, None] = {}

    def execute(
        self,
        inputs: list[Any],
        *,
        stream: int | None = None,
        device: int | None = None,
        params: Any = None,
        try_fast: bool = True,
    ) -> list[Any]:
        """Run the fusion on `inputs`; `params` pins a scheduler's parameters exactly.
        try_fast=False: the caller already tried fast_calls on these inputs (and missed)."""
        # A PythonProfiler needs each call's RuntimeInfo, which the fast path skips.
        plain = params is None and device is None and profiling_hooks.active is None
        if plain and try_fast and self.fast_calls is not None:
            hit = self.fast_calls(inputs, stream)
            if hit is not None:
                self.last_compiled, outputs = hit
                return outputs
        with profiling_hooks.execution():  # no-ops unless a PythonProfiler is recording
            info = build_runtime_info(self.fusion, inputs, device=device)
            key = _signature(info, params)
            compiled = self._compiled.get(key)
            if compiled is None:
                started = profiling_hooks.clock()
                compiled = self._compile(info, params)
                profiling_hooks.compiled(profiling_hooks.clock() - started)
                with self._lock:
                    self._compiled[key] = compiled
            self.last_compiled = compiled
            with profiling_hooks.segment(compiled.scheduler, info):  # tags its launches
                if compiled.runner is not None:
                    return compiled.runner(info, stream)
                outputs = _run(compiled, info, stream)
            if plain:
                self._remember_fast_call(inputs, compiled, info)
            return outputs

    def _remember_fast_call(self, inputs: list[Any], compiled: CompiledFusion, info: Any) -> None:
        layout = layout_key(inputs, info)
        if layout is None or layout in self._fast_layouts:
            return
        with self._lock:
            first_time = layout not in self._seen_layouts
            if first_time:
                _add_bounded(self._seen_layouts, layout, SEEN_LAYOUTS)
        if first_time:
            return
        entry = fast_call_for(inputs, compiled, info, layout)
        if entry is None:
            return
        with self._lock:
            if layout in self._fast_layouts:  # another thread added it meanwhile
                return
            if self.fast_calls is None:
                from kfuse._C import FastCallCache

                self.fast_calls = FastCallCache()
            self.fast_calls.add(entry)  # which drops its oldest beyond MAX_ENTRIES, as here
            _add_bounded(self._fast_layouts, layout, self.fast_calls.MAX_ENTRIES)

    def segments(self, inputs: list[Any], *, device: int | None = None) -> list[Any]:
        """How the fusion runs for these inputs: a list of kfuse.schedule.segmenter.Segment
        (one when a single scheduler takes the whole fusion). A segmentation is cached for
        the input signature, so a later execute reuses it."""
        info = build_runtime_info(self.fusion, inputs, device=device)
        key = _signature(info, None)
        compiled = self._compiled.get(key)
        if compiled is None:
            scheduler, _ = self._pick(info)
            if scheduler is not None:
                return [_whole(self.fusion, scheduler.scheduler_type)]
            compiled = self._compile(info, None)
            with self._lock:
                self._compiled[key] = compiled
        segmented = getattr(compiled.runner, "segmented", None)
        if segmented is not None:
            return segmented.describe()
        return [_whole(self.fusion, compiled.scheduler)]

    def last_cuda_source(self) -> str | None:
        """The CUDA source of the last launch's kernel(s), or None before the first run."""
        if self.last_compiled is None:
            return None
        if hasattr(self.last_compiled.runner, "cuda_source"):
            return self.last_compiled.runner.cuda_source()
        if not self.last_compiled.launches:
            return None
        return "\n".join(launch.source for launch in self.last_compiled.launches)

    def _compile(self, info: RuntimeInfo, params: Any) -> CompiledFusion:
        if params is not None:
            scheduler = resolve_scheduler(params.scheduler_type)
            reason = rejection_reason(scheduler, self.fusion, info)
            if reason is not None:
                if self._pick(info)[0] is None:
                    reason += (
                        "\n  no single scheduler takes this fusion: it needs several "
                        "segments, which only fd.execute runs (fd.segments(inputs) "
                        "shows them)"
                    )
                raise SchedulerError(f"manual_execute with {type(params).__name__}: {reason}")
        else:
            scheduler, reasons = self._pick(info)
            if scheduler is None:
                why = "no scheduler takes the whole fusion:\n  " + "\n  ".join(reasons)
                if not self.segment:
                    raise SchedulerError(why)
                from kfuse.segmented_executor import compile_segmented

                runner = compile_segmented(self.fusion, info, why)
                return CompiledFusion(SchedulerType.none, None, [], runner)
            params = scheduler.heuristics(self.fusion, info)
        make_runner = getattr(scheduler, "runner", None)
        if make_runner is not None:
            return CompiledFusion(
                scheduler.scheduler_type, params, [], make_runner(self.fusion, info, params)
            )
        launches = build_launches(scheduler.scheduler_type, self.fusion, info, params)
        return CompiledFusion(scheduler.scheduler_type, params, launches)

    def _pick(self, info: RuntimeInfo) -> tuple[Any, list[str]]:
        """The first scheduler that takes the whole fusion (or None) and the rejections."""
        reasons: list[str] = []
        for candidate in SCHEDULERS:
            reason = rejection_reason(candidate, self.fusion, info)
            if reason is None:
                return candidate, reasons
            reasons.append(reason)
        return None, reasons


def _whole(fusion: Fusion, scheduler_type: SchedulerType) -> Any:
    from kfuse.schedule.segmenter import Segment

    return Segment(
        0,
        scheduler_type,
        tuple(v.name for v in fusion.inputs),
        tuple(v.name for v in fusion.outputs),
        tuple(str(e) for e in fusion.exprs),
        f"one scheduler ({scheduler_type.value}) takes the whole fusion",
        fusion,
    )


def build_launches(
    scheduler_type: SchedulerType, fusion: Fusion, info: RuntimeInfo, params: Any
) -> list[KernelLaunch]:
    """The launches a scheduler's params compile to (none for no_op)."""
    scheduler = scheduler_for(scheduler_type)
    if not hasattr(scheduler, "launches"):
        raise SchedulerError(f"the {scheduler_type.value} scheduler cannot generate kernels")
    return scheduler.launches(fusion, info, params, TargetCompiler(params.cparams))


class TargetCompiler:
    """Compiles a kernel for the target of the call it is given (GPU or emulator), timing it
    for the profiler, so schedulers only pass source and name. On a GPU, `cparams` (the
    params' CompileParams) add their NVRTC options (maxrregcount, extra_options) and may
    name the architecture; the emulator has no registers to limit and ignores them."""

    def __init__(self, cparams: Any) -> None:
        self.options: tuple[str, ...] = tuple(cparams.nvrtc_options())
        self.arch: str | None = cparams.arch
        self.maxrregcount: int | None = cparams.maxrregcount

    def compile(self, source: str, name: str, info: RuntimeInfo) -> Any:
        started = profiling_hooks.clock()
        backend = backend_for(info)
        if info.backend == EMULATOR:
            kernel = backend.compile(source, name, info.device)
        else:
            if self.maxrregcount is not None:
                source = without_launch_bounds(
                    source, self.maxrregcount, info.device.regs_per_block
                )
            kernel = backend.compile(
                source, name, info.device_index, self.arch or info.device.arch, self.options
            )
        profiling_hooks.kernel_compiled(name, profiling_hooks.clock() - started)
        return kernel


_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\((\d+)(?:,\s*\d+)?\)\s*")


def without_launch_bounds(source: str, maxrregcount: int, regs_per_block: int) -> str:
    """The kernel source with its __launch_bounds__ removed, so that NVRTC's --maxrregcount
    decides the registers: NVRTC does not apply --maxrregcount to a kernel that has launch
    bounds (a kernel bounded to 128 threads kept 40 to 48 registers under --maxrregcount=32;
    without the bounds it took 32). SchedulerError when a block of the kernel's threads
    could not get that many registers each."""

    def check(match: re.Match[str]) -> str:
        threads = int(match.group(1))
        if threads * maxrregcount > regs_per_block:
            raise SchedulerError(
                f"CompileParams.maxrregcount = {maxrregcount} for blocks of "
                f"{threads} threads needs {threads * maxrregcount} registers "
                f"a block; the device gives a block at most {regs_per_block}"
            )
        return ""

    return _LAUNCH_BOUNDS.sub(check, source)


def _signature(info: RuntimeInfo, params: Any) -> tuple:
    parts: list[Any] = [info.backend, info.device_index, info.framework]
    for val, arg in zip(info.fusion.inputs, info.inputs):
        if isinstance(val, TensorView):
            lay = info.layouts[val]
            parts.append((lay.dtype, lay.shape, lay.strides, lay.data_ptr % 16))
        else:
            parts.append(type(arg))
    if params is not None:
        parts.append(("params", type(params).__name__, hash(params)))
    return tuple(parts)


def _run(compiled: CompiledFusion, info: RuntimeInfo, stream: int | None) -> list[Any]:
    fusion = info.fusion
    outputs = [_allocate(info, out) for out in fusion.outputs]
    # With poison on, an element that no kernel writes shows as wrong instead of as whatever
    # the memory held before (on the GPU, often the right values of an earlier call).
    poisoned = info.backend == EMULATOR or knobs.get().poison
    if poisoned:
        for array in outputs:
            poison(array)
    if not compiled.launches:
        return outputs
    input_ptrs = [0] * len(fusion.inputs)
    for pos, val in enumerate(fusion.inputs):
        if isinstance(val, TensorView):
            input_ptrs[pos] = info.layouts[val].data_ptr
    output_ptrs = [_data_ptr(a) for a in outputs]
    if stream is None:
        stream = current_stream(info.framework, info.device_index) if info.device_index >= 0 else 0
    # Workspaces (grid reductions' partials) live for this call only; 8-byte elements keep
    # every framework's allocation aligned for any accumulator type.
    workspaces = [
        empty_like_framework(
            info.framework, (-(-n // 8),), DataType.Double, info.device_index, what=f"workspace {k}"
        )
        for k, n in enumerate(workspace_bytes(compiled.launches))
    ]
    if poisoned:
        for array in workspaces:
            poison(array)
    workspace_ptrs = [_data_ptr(w) for w in workspaces]
    for launch in compiled.launches:
        args = launch.arguments(input_ptrs, output_ptrs, info.extents, workspace_ptrs)
        launch.kernel.launch(launch.grid, launch.block, launch.shared_mem, stream, args)
    return outputs


def _allocate(info: RuntimeInfo, out: TensorView) -> Any:
    return empty_like_framework(
        info.framework, info.shape(out), out.dtype, info.device_index, what=f"output {out.name}"
    )


def _data_ptr(array: Any) -> int:
    from kfuse.arrays import layout_of

    if type(array).__module__ == "numpy":
        return int(array.ctypes.data)

    return layout_of(array, "output").data_ptr


__all__ = ["FusionExecutorCache", "build_launches"]
