"""kfuse's compiler: a definition to the Program that runs it, as a sequence of named stages.

    canonicalize  definition -> its canonical Fusion (kfuse.ir.canonicalize): the fusion
                  every later stage sees, the same for every spelling of one computation.
                  Once per definition, by FusionExecutorCache before any call: a call's
                  RuntimeInfo, and so its signature, is built on the canonical fusion
    partition     fusion + RuntimeInfo (one input signature) -> Partition: the scheduler
                  that takes the whole fusion, or that takes it with its boundary views
                  folded into its operands (kfuse.engine.boundary_views), or the segments it
                  splits into (kfuse.engine.segmenter)
    params        Partition -> the scheduler's parameters: its heuristics, or the caller's
                  pinned params (manual_execute)
    kernels       Partition + params -> the scheduler's GeneratedKernels (CUDA source, name,
                  launch configuration, operands, codegen spec); nothing compiles
    compile       GeneratedKernels -> KernelLaunches: each source compiled and loaded for
                  the call's device (NVRTC to a cubin, cached in memory and on disk by
                  source), or by the host emulator
    program       -> the Program the executor runs on every call with this signature:
                  KernelProgram, LibraryProgram (expr_eval), SegmentKernelsProgram (segments
                  merged into one program) or SegmentedProgram (segments run in turn)

A segmented Partition skips params, kernels and compile: each segment goes through the
stages itself (compile_segment), when the program stage merges them, or else on its first
run with a new signature (SegmentedRunner). Schedulers only decide and generate (partition,
params, kernels); this module compiles and assembles; kfuse.engine.executor caches the
Program per signature and runs it. KFUSE_DUMP names the stages to write out as they run
(kfuse.engine.dump).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kfuse.engine import compile_batch, dump
from kfuse.engine.boundary_views import (
    FoldedFusion,
    fold_boundary_views,
    folded_for_a_kernel,
    unfold_operands,
)
from kfuse.engine.operand_spans import check_operand_spans
from kfuse.engine.program import (
    KernelProgram,
    LibraryProgram,
    Program,
    SegmentedProgram,
    SegmentKernelsProgram,
)
from kfuse.engine.segment_kernels import merge_segments
from kfuse.engine.segmenter import SegmentedFusion, segment_fusion
from kfuse.engine.segments import SegmentedRunner
from kfuse.errors import SchedulerError
from kfuse.ir.canonicalize import canonical_fusion
from kfuse.ir.exprs import GatherOp, IndexSelectOp
from kfuse.ir.fusion import Fusion
from kfuse.ir.printer import fusion_to_python
from kfuse.runtime import profiling_hooks
from kfuse.runtime.backends import backend_for
from kfuse.runtime.info import EMULATOR, RuntimeInfo
from kfuse.runtime.launch import GeneratedKernel, KernelLaunch
from kfuse.schedule import rejection_reason, resolve_scheduler
from kfuse.schedule.registry import SCHEDULERS
from kfuse.schedule.types import Scheduler, SchedulerParams, SchedulerType

if TYPE_CHECKING:
    from kfuse._C import CompileParams


def compile_fusion(
    fusion: Fusion, info: RuntimeInfo, pinned: SchedulerParams | None, *, segment: bool
) -> Program:
    """The Program for `fusion` (stage_canonicalize's output, on which `info` was built) on
    the inputs `info` describes. pinned: the caller's parameters (their scheduler must take
    the whole fusion), or None for the heuristics'. segment: whether a fusion no single
    scheduler takes is split (False inside a segment)."""
    partition = stage_partition(fusion, info, pinned, segment=segment)
    if partition.segmented is not None:
        return stage_program(partition, None, [])  # each segment runs through the stages
    params = stage_params(partition, pinned)
    kernels = stage_kernels(partition, params)
    launches = stage_compile(partition, params, kernels)
    return stage_program(partition, params, launches)


def compile_segment(fusion: Fusion, info: RuntimeInfo) -> Program:
    """One segment's Program (a segmented program compiles each on its first run for a new
    signature, with a RuntimeInfo derived from the call's: kfuse.engine.segments). A segment
    is a part of a canonical fusion already: it starts at the partition stage."""
    return compile_fusion(fusion, info, None, segment=False)


def stage_canonicalize(definition: Fusion) -> Fusion:
    """Stage canonicalize. Input: a finalized definition. Output: its canonical Fusion (the
    definition itself when no rule changes it; computed once per definition)."""
    fusion = canonical_fusion(definition)
    dump.stage("canonicalize", fusion, lambda: fusion_to_python(fusion))
    return fusion


@dataclass
class Partition:
    """The partition stage's output: how the fusion is compiled for one input signature.

    fusion, info: the call's (canonical) fusion and RuntimeInfo. scheduler: the scheduler
    that takes the whole fusion (folded, where `folded` is set), or None when `segmented`
    splits it. folded: the fusion with its boundary views folded into its operands, which
    the scheduler or the segmenter works on instead of `fusion`. merged: the segments
    already compiled into one program, when partition had to compile them to choose (a
    folded cat's parts)."""

    fusion: Fusion
    info: RuntimeInfo
    scheduler: Scheduler | None = None
    folded: FoldedFusion | None = None
    segmented: SegmentedFusion | None = None
    merged: SegmentKernelsProgram | None = None

    @property
    def scheduled(self) -> tuple[Fusion, RuntimeInfo]:
        """(fusion, info) that the scheduler or the segmenter works on."""
        if self.folded is not None:
            return self.folded.fusion, self.folded.info
        return self.fusion, self.info

    def describe(self) -> str:
        """What KFUSE_DUMP=partition writes."""
        folded = ""
        if self.folded is not None:
            folded = f"; folded into the operands: {', '.join(self.folded.reshapes)}"
        if self.segmented is None:
            assert self.scheduler is not None
            return f"{self.scheduler.scheduler_type}: the whole fusion{folded}"
        segments = "\n".join(str(s) for s in self.segmented.describe())
        return f"{len(self.segmented.plans)} segments{folded}\n{segments}"


def stage_partition(
    fusion: Fusion, info: RuntimeInfo, pinned: SchedulerParams | None, *, segment: bool
) -> Partition:
    """Stage partition. Input: the canonical fusion, the call's RuntimeInfo, the pinned
    params if any. Output: the Partition, in this order of preference: one scheduler takes
    the fusion (the pinned params' scheduler: SchedulerError if it declines); else one
    kernel scheduler takes it with its boundary views folded, or (only where `segment`) its
    segments (kfuse.engine.segmenter) of the folded fusion, else of the fusion itself."""
    scheduler, reasons = _whole_fusion_scheduler(fusion, info, pinned, segment)
    folded_kernel = None
    if scheduler is not None and not scheduler.generates_kernels and segment and pinned is None:
        folded_kernel = _indexed_reads_folded(fusion, info)
    if folded_kernel is not None:
        partition = folded_kernel
    elif scheduler is not None:
        partition = Partition(fusion, info, scheduler)
    else:
        why = "no scheduler takes the whole fusion:\n  " + "\n  ".join(reasons)
        partition = (_folded_or_segmented if segment else _folded_segment)(fusion, info, why)
    dump.stage("partition", fusion, partition.describe)
    return partition


def _folded_segment(fusion: Fusion, info: RuntimeInfo, why: str) -> Partition:
    """A segment no scheduler takes as it is: the kernel scheduler's that takes it with its
    boundary reshapes folded, as the segmenter accepted it (boundary_views.
    folded_for_a_kernel), else SchedulerError with `why` (the segments' runner then copies
    an intermediate handed on in another layout into the planned one and asks again)."""
    found = folded_for_a_kernel(fusion, info)
    if found is None:
        raise SchedulerError(why)
    folded, taker = found
    return Partition(fusion, info, resolve_scheduler(taker), folded=folded)


def _folded_or_segmented(fusion: Fusion, info: RuntimeInfo, why: str) -> Partition:
    """No scheduler takes `fusion` as it is. Tried in turn: its boundary views folded, cats
    included (a cat's parts are outputs its kernels write into their windows), where one
    kernel scheduler takes the folded fusion, or its segments merge into one program; the
    views folded without the cats; then segments of the folded fusion (its boundary reshapes
    stay views, where as segments of their own they would be framework copies, and casts
    next to them would join those: a bf16 group norm cast its 102 MB input to fp32 there,
    0.31x torch.compile); then segments of the fusion itself. `why`: the schedulers'
    reasons for declining it whole."""
    folded = fold_boundary_views(fusion, info)
    taker = _taker(folded)
    if folded is not None and folded.has_cats and taker is None:
        # Parts of several sizes: the pointwise kernel computes the cat whole where its parts
        # are pointwise over the inputs (kfuse.codegen.domain.CatSelect), one kernel where
        # writing the parts into their windows takes one a size.
        whole = fold_boundary_views(fusion, info, cats=False)
        whole_taker = _taker(whole)
        if whole is not None and whole_taker is not None and whole_taker.generates_kernels:
            return Partition(fusion, info, whole_taker, folded=whole)
        segmented = segment_fusion(folded.fusion, folded.info, why)
        merged = merge_segments(segmented, folded.info, compile_segment)
        if merged is not None:
            return Partition(fusion, info, folded=folded, segmented=segmented, merged=merged)
    if folded is not None and folded.has_cats and not (taker and taker.generates_kernels):
        folded = fold_boundary_views(fusion, info, cats=False)
        taker = _taker(folded)
    if folded is not None:
        if taker is None:
            segmented = segment_fusion(folded.fusion, folded.info, why)
            return Partition(fusion, info, folded=folded, segmented=segmented)
        if taker.generates_kernels:
            return Partition(fusion, info, taker, folded=folded)
    return Partition(fusion, info, segmented=segment_fusion(fusion, info, why))


def _indexed_reads_folded(fusion: Fusion, info: RuntimeInfo) -> Partition | None:
    """A fusion of indexing ops and reshapes, which expr_eval takes whole (framework
    indexing, checked on the host), as one generated kernel where its boundary reshapes fold:
    an embedding over ids of any rank (flattened, rows read at them, reshaped back) is the
    pointwise kernel's indexed row load. None where no kernel scheduler takes it folded."""
    from kfuse.schedule.expr_eval import library_expr

    if library_expr(fusion) is not None or not any(
        isinstance(e, (IndexSelectOp, GatherOp)) for e in fusion.exprs
    ):
        return None
    folded = fold_boundary_views(fusion, info, cats=False)
    taker = _taker(folded)
    if taker is None or not taker.generates_kernels:
        return None
    return Partition(fusion, info, taker, folded=folded)


def _taker(folded: FoldedFusion | None) -> Scheduler | None:
    """The scheduler that takes the folded fusion whole, if any."""
    return None if folded is None else choose_scheduler(folded.fusion, folded.info)[0]


def choose_scheduler(fusion: Fusion, info: RuntimeInfo) -> tuple[Scheduler | None, list[str]]:
    """The first scheduler (registry order) that takes the whole fusion (or None), and the
    reasons of those before it that declined."""
    reasons: list[str] = []
    for candidate in SCHEDULERS:
        reason = rejection_reason(candidate, fusion, info)
        if reason is None:
            return candidate, reasons
        reasons.append(reason)
    return None, reasons


def _whole_fusion_scheduler(
    fusion: Fusion, info: RuntimeInfo, pinned: SchedulerParams | None, segment: bool
) -> tuple[Scheduler | None, list[str]]:
    """(the scheduler, the reasons of those that declined before it); the pinned params'
    scheduler if any."""
    if pinned is not None:
        pinned_scheduler = resolve_scheduler(pinned.scheduler_type)
        reason = rejection_reason(pinned_scheduler, fusion, info)
        if reason is not None:
            if choose_scheduler(fusion, info)[0] is None:
                reason += (
                    "\n  no single scheduler takes this fusion: it needs several "
                    "segments, which only fd.execute runs (fd.segments(inputs) "
                    "shows them)"
                )
            raise SchedulerError(f"manual_execute with {type(pinned).__name__}: {reason}")
        return pinned_scheduler, []
    return choose_scheduler(fusion, info)


def stage_params(partition: Partition, pinned: SchedulerParams | None) -> SchedulerParams:
    """Stage params. Input: a Partition whose scheduler takes the whole fusion, the pinned
    params if any. Output: the params its kernels are generated with (the pinned ones, else
    the scheduler's heuristics for the fusion it works on)."""
    scheduler = partition.scheduler
    assert scheduler is not None
    params = pinned if pinned is not None else scheduler.heuristics(*partition.scheduled)
    dump.stage("params", partition.fusion, lambda: f"{scheduler.scheduler_type}: {params}")
    return params


def stage_kernels(partition: Partition, params: SchedulerParams) -> list[GeneratedKernel]:
    """Stage kernels. Input: the Partition and its params. Output: the scheduler's
    GeneratedKernels, their operands mapped back onto the call's where the fusion was folded
    (none for a scheduler that generates no kernels: expr_eval runs library calls)."""
    scheduler = partition.scheduler
    assert scheduler is not None
    if not scheduler.generates_kernels:
        return []
    kernels = scheduler.kernels(*partition.scheduled, params)
    if partition.folded is not None:
        kernels = unfold_operands(partition.folded, kernels)
    dump.kernels(partition.fusion, kernels)
    return kernels


def stage_compile(
    partition: Partition, params: SchedulerParams, kernels: list[GeneratedKernel]
) -> list[KernelLaunch]:
    """Stage compile. Input: the generated kernels and the params (their CompileParams).
    Output: one KernelLaunch each, compiled and loaded for the call's device."""
    if not kernels:
        return []
    compiler = KernelCompiler(params.cparams)
    launches = [compiler.load(kernel, partition.info) for kernel in kernels]
    dump.compiled(partition.fusion, kernels, compiler.nvrtc_target(partition.info))
    return launches


def stage_program(
    partition: Partition, params: SchedulerParams | None, launches: list[KernelLaunch]
) -> Program:
    """Stage program. Input: the Partition, and for one scheduler its params and launches.
    Output: the Program: a segmented Partition's segments merged into one program where they
    are all generated kernels (kfuse.engine.segment_kernels, which compiles each segment
    through these stages), else run in turn by a SegmentedProgram."""
    scheduler, folded = partition.scheduler, partition.folded
    program: Program
    if partition.segmented is not None:
        program = _segments_program(partition, partition.segmented)
    elif scheduler is not None and not scheduler.generates_kernels:
        program = LibraryProgram(scheduler.scheduler_type, params, fusion=partition.fusion)
    else:
        assert scheduler is not None
        program = KernelProgram(scheduler.scheduler_type, params, launches)
        if folded is not None:
            program.folded = folded.reshapes
    if type(program) is KernelProgram:  # (merged segments: each checked as it was built)
        check_operand_spans(program, partition.info)
    dump.stage("program", partition.fusion, lambda: str(program))
    return program


def _segments_program(partition: Partition, segmented: SegmentedFusion) -> Program:
    """The segments as one program where they merge, else a SegmentedProgram."""
    folded = partition.folded
    merged = partition.merged
    if merged is None:
        merged = merge_segments(segmented, partition.scheduled[1], compile_segment)
    if merged is None:
        runner = SegmentedRunner(segmented, compile_segment)
        return SegmentedProgram(SchedulerType.none, None, runner=runner, folded=folded)
    if folded is not None:
        merged.launches = unfold_operands(folded, merged.launches)
        merged.folded, merged.origin = folded.reshapes, folded.origin
    return merged


class KernelCompiler:
    """The compile stage's compiler for the target of the call (GPU or emulator), timing
    each kernel for the profiler. On a GPU, `cparams` (the params' CompileParams) add their
    NVRTC options (maxrregcount, extra_options) and may name the architecture; the emulator
    has no registers to limit and ignores them."""

    def __init__(self, cparams: CompileParams) -> None:
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
        emulator's host compiler); inside compile_batch.deferred(), a PendingKernel the
        batch compiles later, with the other segments' kernels."""
        batch = compile_batch.current()
        if batch is not None:
            device = (info.backend, info.device_index, info.device.name)
            key = (source, name, *device, self.target_arch(info), self.options)
            return batch.defer(key, name, lambda: self._compile_now(source, name, info))
        started = profiling_hooks.clock()
        kernel = self._compile_now(source, name, info)
        profiling_hooks.kernel_compiled(name, profiling_hooks.clock() - started)
        return kernel

    def _compile_now(self, source: str, name: str, info: RuntimeInfo) -> Any:
        backend = backend_for(info)
        if info.backend == EMULATOR:
            kernel = backend.compile(source, name, info.device)
        else:
            kernel = backend.compile(
                source, name, info.device_index, self.target_arch(info), self.options
            )
        return kernel

    def target_arch(self, info: RuntimeInfo) -> str:
        """The architecture kernels compile for: the params' (CompileParams.arch), else the
        device's."""
        return self.arch or info.device.arch

    def nvrtc_target(self, info: RuntimeInfo) -> tuple[str, list[str]] | None:
        """(architecture, every NVRTC option) of this compiler's kernels on `info`'s device,
        or None on the emulator, which has no NVRTC compile (for KFUSE_DUMP=compile)."""
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
    "Partition",
    "check_register_limit",
    "choose_scheduler",
    "compile_fusion",
    "compile_segment",
    "stage_canonicalize",
    "stage_compile",
    "stage_kernels",
    "stage_params",
    "stage_partition",
    "stage_program",
]
