"""kfuse's compiler: the stages one fusion goes through for one input signature.

    0. canonicalize  once per definition, before any RuntimeInfo is built on it
                   (kfuse.ir.canonicalize, by FusionExecutorCache and the public
                   scheduling API): the fusion the stages below see, the same for every
                   spelling of one computation
    fusion + RuntimeInfo (the call's inputs, as layouts, on a device)
      1. choose    the first scheduler (registry order) that takes the whole fusion, or none:
                   then the first that takes it with the reshapes at its boundary that are
                   views of this call's layouts folded into its operands (one kernel,
                   kfuse.engine.boundary_views), else the segmenter splits it (the
                   folded fusion where there was a fold), and each segment goes through
                   these stages (compile_segment): all at once into one KernelProgram when
                   they are all generated kernels (kfuse.engine.segment_kernels), else each when it
                   first runs with a new signature (SegmentedRunner)
      2. params    the scheduler's heuristics, or the caller's params (manual_execute)
      3. kernels   the scheduler generates its kernels: GeneratedKernel (CUDA source, name,
                   launch configuration, operands, the codegen spec); nothing compiles
      4. compile   each kernel's source to a loaded kernel: NVRTC to a cubin for the
                   device (cached in memory and on disk by source), or the host emulator
      5. program   a Program the executor runs on every call with this signature:
                   KernelProgram (SegmentKernelsProgram for merged segments), LibraryProgram
                   (expr_eval) or SegmentedProgram

Schedulers only decide and generate (stages 1-3); this module compiles and assembles
(stages 4-5); kfuse.engine.executor caches the Program per signature and runs it. KFUSE_DUMP names
stages to write out as they run (kfuse.engine.dump).
"""

from __future__ import annotations

from typing import Any

from kfuse.engine import dump
from kfuse.engine.boundary_views import FoldedFusion, fold_boundary_views, unfold_operands
from kfuse.engine.program import KernelProgram, LibraryProgram, Program, SegmentedProgram
from kfuse.engine.segment_kernels import merge_segments
from kfuse.engine.segmenter import segment_fusion
from kfuse.engine.segments import SegmentedRunner
from kfuse.errors import SchedulerError
from kfuse.ir.fusion import Fusion
from kfuse.runtime import profiling_hooks
from kfuse.runtime.backends import backend_for
from kfuse.runtime.info import EMULATOR, RuntimeInfo
from kfuse.runtime.launch import GeneratedKernel, KernelLaunch
from kfuse.schedule import rejection_reason, resolve_scheduler
from kfuse.schedule.registry import SCHEDULERS
from kfuse.schedule.types import SchedulerType


def compile_fusion(fusion: Fusion, info: RuntimeInfo, params: Any, *, segment: bool) -> Program:
    """The Program for `fusion` on the inputs `info` describes. params: the caller's pinned
    parameters (their scheduler must take the whole fusion), or None for the heuristics'.
    segment: whether a fusion no single scheduler takes is split (False inside a segment)."""
    scheduler, reasons = _chosen(fusion, info, params, segment)
    if scheduler is None:
        folded = fold_boundary_views(fusion, info)
        taker = None if folded is None else choose_scheduler(folded.fusion, folded.info)[0]
        if folded is not None and folded.has_cats and taker is None:
            # A cat's parts as outputs where kernels write them all: one, or segments that
            # merge into one program (their kernels write the parts into their windows).
            program = _segmented(fusion, info, reasons, folded)
            if not isinstance(program, SegmentedProgram):
                return program
        if folded is not None and folded.has_cats and not (taker and taker.generates_kernels):
            folded = fold_boundary_views(fusion, info, cats=False)
            taker = None if folded is None else choose_scheduler(folded.fusion, folded.info)[0]
        if folded is not None:
            if taker is None:
                return _segmented(fusion, info, reasons, folded)
            if taker.generates_kernels:
                return _folded_kernel(taker, fusion, info, folded)
        return _segmented(fusion, info, reasons)
    if params is None:
        params = scheduler.heuristics(fusion, info)
    dump.stage("params", fusion, lambda: f"{scheduler.scheduler_type.value}: {params}")
    if not scheduler.generates_kernels:
        return LibraryProgram(scheduler.scheduler_type, params, fusion=fusion)
    return _kernel_program(scheduler, params, fusion, info, scheduler.kernels(fusion, info, params))


def _kernel_program(
    scheduler: Any, params: Any, fusion: Fusion, info: RuntimeInfo, kernels: list[GeneratedKernel]
) -> KernelProgram:
    """Stages 4 and 5 for `kernels`, which run on the call `info` describes."""
    dump.generated(fusion, kernels)
    compiler = KernelCompiler(params.cparams)
    launches = [compiler.load(kernel, info) for kernel in kernels]
    dump.binaries(fusion, kernels, compiler.nvrtc_target(info))
    return KernelProgram(scheduler.scheduler_type, params, launches)


def choose_scheduler(fusion: Fusion, info: RuntimeInfo) -> tuple[Any, list[str]]:
    """Stage 1: the first scheduler that takes the whole fusion (or None), and the reasons
    of those before it that declined."""
    reasons: list[str] = []
    for candidate in SCHEDULERS:
        reason = rejection_reason(candidate, fusion, info)
        if reason is None:
            return candidate, reasons
        reasons.append(reason)
    return None, reasons


def _chosen(fusion: Fusion, info: RuntimeInfo, params: Any, segment: bool) -> tuple[Any, list[str]]:
    """(the scheduler, the reasons of those that declined before it); the pinned params'
    scheduler if any."""
    if params is not None:
        scheduler = resolve_scheduler(params.scheduler_type)
        reason = rejection_reason(scheduler, fusion, info)
        if reason is not None:
            if choose_scheduler(fusion, info)[0] is None:
                reason += (
                    "\n  no single scheduler takes this fusion: it needs several "
                    "segments, which only fd.execute runs (fd.segments(inputs) "
                    "shows them)"
                )
            raise SchedulerError(f"manual_execute with {type(params).__name__}: {reason}")
        return scheduler, []
    scheduler, reasons = choose_scheduler(fusion, info)
    if scheduler is None and not segment:
        raise SchedulerError("no scheduler takes the whole fusion:\n  " + "\n  ".join(reasons))
    return scheduler, reasons


def _folded_kernel(
    scheduler: Any, fusion: Fusion, info: RuntimeInfo, folded: FoldedFusion
) -> Program:
    """The kernels of `scheduler`, which takes the fusion once its boundary reshapes that are
    views of this call's layouts are folded into its operands (kfuse.engine.boundary_views)."""
    params = scheduler.heuristics(folded.fusion, folded.info)
    dump.stage("params", fusion, lambda: f"{scheduler.scheduler_type.value}: {params}")
    kernels = scheduler.kernels(folded.fusion, folded.info, params)
    program = _kernel_program(scheduler, params, fusion, info, unfold_operands(folded, kernels))
    program.folded = folded.reshapes
    return program


def _segmented(
    fusion: Fusion, info: RuntimeInfo, reasons: list[str], folded: FoldedFusion | None = None
) -> Program:
    """The fusion in segments; with `folded`, the folded fusion's: its boundary reshapes are
    then views of the call's arrays, where as segments of their own they would be framework
    copies (expr_eval copies what it hands on), and casts next to them would join those
    segments (a bf16 group norm cast its 102 MB input to fp32 there, read it back twice as
    fp32, and copied its output once more: 0.31x torch.compile)."""
    why = "no scheduler takes the whole fusion:\n  " + "\n  ".join(reasons)
    if folded is not None:
        fusion, info = folded.fusion, folded.info
    segmented = segment_fusion(fusion, info, why)
    dump.stage("segments", fusion, lambda: "\n".join(str(s) for s in segmented.describe()))
    merged = merge_segments(segmented, info, compile_segment)
    if merged is None:
        runner = SegmentedRunner(segmented, compile_segment)
        return SegmentedProgram(SchedulerType.none, None, runner=runner, folded=folded)
    if folded is not None:
        merged.launches = unfold_operands(folded, merged.launches)
        merged.folded, merged.origin = folded.reshapes, folded.origin
    return merged


def compile_segment(fusion: Fusion, info: RuntimeInfo) -> Program:
    """One segment's Program (a segmented program compiles each on its first run for a new
    signature, with a RuntimeInfo derived from the call's: kfuse.engine.segments)."""
    return compile_fusion(fusion, info, None, segment=False)


class KernelCompiler:
    """Stage 4: compiles generated kernels for the target of the call (GPU or emulator),
    timing each for the profiler. On a GPU, `cparams` (the params' CompileParams) add their
    NVRTC options (maxrregcount, extra_options) and may name the architecture; the emulator
    has no registers to limit and ignores them."""

    def __init__(self, cparams: Any) -> None:
        self.options: tuple[str, ...] = tuple(cparams.nvrtc_options())
        self.arch: str | None = cparams.arch
        self.maxrregcount: int | None = cparams.maxrregcount

    def load(self, kernel: GeneratedKernel, info: RuntimeInfo) -> KernelLaunch:
        """The launch of `kernel`, compiled and loaded for this call's device."""
        if info.backend != EMULATOR and self.maxrregcount is not None:
            check_register_limit(kernel.threads, self.maxrregcount, info.device.regs_per_block)
        return kernel.loaded(self.compile(kernel.source, kernel.name, info))

    def compile(self, source: str, name: str, info: RuntimeInfo) -> Any:
        """The loaded kernel `name` of `source` (memory cache, disk cache, then NVRTC or the
        emulator's host compiler)."""
        started = profiling_hooks.clock()
        backend = backend_for(info)
        if info.backend == EMULATOR:
            kernel = backend.compile(source, name, info.device)
        else:
            kernel = backend.compile(
                source, name, info.device_index, self.target_arch(info), self.options
            )
        profiling_hooks.kernel_compiled(name, profiling_hooks.clock() - started)
        return kernel

    def target_arch(self, info: RuntimeInfo) -> str:
        """The architecture kernels compile for: the params' (CompileParams.arch), else the
        device's."""
        return self.arch or info.device.arch

    def nvrtc_target(self, info: RuntimeInfo) -> tuple[str, list[str]] | None:
        """(architecture, every NVRTC option) of this compiler's kernels on `info`'s device,
        or None on the emulator, which has no NVRTC compile (for KFUSE_DUMP=ptx,sass)."""
        if info.backend == EMULATOR:
            return None
        from kfuse.runtime.backends.cuda import nvrtc_options

        return self.target_arch(info), nvrtc_options(self.options)


def check_register_limit(threads: int, maxrregcount: int, regs_per_block: int) -> None:
    """SchedulerError when a block of `threads` threads could not get `maxrregcount`
    registers each (CompileParams.maxrregcount)."""
    if threads * maxrregcount > regs_per_block:
        raise SchedulerError(
            f"CompileParams.maxrregcount = {maxrregcount} for blocks of {threads} threads "
            f"needs {threads * maxrregcount} registers a block; the device gives a block at "
            f"most {regs_per_block}"
        )


__all__ = [
    "KernelCompiler",
    "check_register_limit",
    "choose_scheduler",
    "compile_fusion",
    "compile_segment",
]
