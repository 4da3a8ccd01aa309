"""Program: what the compiler makes of a fusion for one input signature, and how it runs.

Three kinds, one interface (`run(info, stream)` -> the output arrays):

* KernelProgram: generated kernels (pointwise, reduction, inner_persistent; none for no_op):
  allocate the outputs and any workspace, fill in the pointers, launch in order;
* LibraryProgram: expr_eval's ops (matmul, linear, reshape) as calls of the inputs'
  framework;
* SegmentedProgram: a fusion no single scheduler takes, as segments run in dependency order
  (kfuse.engine.segments).

`scheduler`, `params` and `launches` are there for every kind (launches empty but for
KernelProgram), so the profiler, the fast path and `fd.last_scheduler()` read one shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kfuse import knobs
from kfuse.dtypes import DataType
from kfuse.ir.fusion import Fusion
from kfuse.ir.layout_ops import allocation_order
from kfuse.ir.values import TensorView, Val
from kfuse.runtime import profiling_hooks
from kfuse.runtime.arrays import current_stream, empty_like_framework, poison
from kfuse.runtime.index_checks import raise_for
from kfuse.runtime.info import EMULATOR, RuntimeInfo
from kfuse.runtime.launch import KernelLaunch, ScalarOperand, index_checks_of, pooled_workspaces
from kfuse.schedule.types import SchedulerParams, SchedulerType


@dataclass
class Program:
    """The compiled form of a fusion for one input signature."""

    scheduler: SchedulerType  # SchedulerType.none for a segmented fusion
    params: SchedulerParams | None  # None for a segmented fusion
    launches: list[KernelLaunch] = field(default_factory=list)

    def run(self, info: RuntimeInfo, stream: int | None) -> list[Any]:
        """One call: the fusion's outputs, new arrays of the inputs' framework."""
        raise NotImplementedError

    def cuda_source(self) -> str | None:
        """The CUDA sources of the kernels it launches (None when it launches none)."""
        return "\n".join(launch.source for launch in self.launches) or None

    def schedulers(self) -> list[SchedulerType]:
        """The scheduler of each segment it runs, in order (one for an unsegmented fusion)."""
        return [self.scheduler]

    def extents_read(self, fusion: Fusion) -> list[Val]:
        """The Vals of `fusion` whose entries of info.extents `run` reads, and the profiler
        with it (the outputs' shapes): here every Val shape inference gives one. A segment's
        RuntimeInfo carries these only on a cached call (kfuse.engine.segments)."""
        return [*fusion.inputs, *(o for e in fusion.exprs for o in e.outputs)]

    def __str__(self) -> str:
        lines = [f"{type(self).__name__}: {self.scheduler.value}", f"  params: {self.params}"]
        for launch in self.launches:
            lines.append(
                f"  kernel {launch.name}: grid {launch.grid} block {launch.block} "
                f"shared memory {launch.shared_mem} B, {len(launch.operands)} operands"
            )
        return "\n".join(lines)


@dataclass
class KernelProgram(Program):
    """Generated kernels, launched in order on the caller's stream. folded: the names of
    the reshapes, slices and cats folded into their operands (kfuse.engine.boundary_views),
    if any."""

    folded: tuple[str, ...] = ()
    # (output position, input position): outputs its kernel stores straight into an input's
    # memory (fd.add_output(..., alias_input=): kfuse.engine.aliasing.mark_in_place).
    in_place: tuple[tuple[int, int], ...] = ()

    def __str__(self) -> str:
        text = super().__str__()
        if self.folded:
            text += (
                f"\n  reshapes, slices and cats folded into the operands: {', '.join(self.folded)}"
            )
        return text

    def extents_read(self, fusion: Fusion) -> list[Val]:
        # The outputs' shapes (to allocate them) and the values of scalar operands.
        scalars = [
            op.val for ka in self.launches for op in ka.operands if isinstance(op, ScalarOperand)
        ]
        return [*fusion.outputs, *dict.fromkeys(scalars)]

    def run(
        self, info: RuntimeInfo, stream: int | None, given: dict[int, Any] | None = None
    ) -> list[Any]:
        """`given`: arrays the caller allocated, by output position (checked by
        kfuse.engine.given_outputs), which the kernels write instead of new ones."""
        fusion = info.fusion
        # An output stored in place is its input's array, neither allocated nor poisoned.
        in_place = dict(self.in_place)
        given = given or {}
        outputs = [
            info.inputs[in_place[k]]
            if k in in_place
            else given[k]
            if k in given
            else _allocate(info, out)
            for k, out in enumerate(fusion.outputs)
        ]
        # With poison on, an element that no kernel writes shows as wrong instead of as
        # whatever the memory held before (on the GPU, often the right values of an earlier
        # call).
        poisoned = info.backend == EMULATOR or knobs.get().poison
        if poisoned:
            for k, array in enumerate(outputs):
                if k not in in_place:
                    poison(array)
        if not self.launches:
            return outputs
        input_ptrs = [0] * len(fusion.inputs)
        for pos, val in enumerate(fusion.inputs):
            if isinstance(val, TensorView):
                input_ptrs[pos] = info.layouts[val].data_ptr
        output_ptrs = [_data_ptr(a) for a in outputs]
        if stream is None:
            on_gpu = info.device_index >= 0
            stream = current_stream(info.framework, info.device_index) if on_gpu else 0
        # Workspaces (grid reductions' partials) live for this call only, all in one
        # allocation (kfuse.runtime.launch.pooled_workspaces); 8-byte elements keep every
        # framework's allocation aligned for any accumulator type.
        size, offsets = pooled_workspaces(self.launches)
        workspace_ptrs: list[int] = []
        if offsets:
            pool = empty_like_framework(
                info.framework, (size // 8,), DataType.Double, info.device_index, what="workspaces"
            )
            if poisoned:
                poison(pool)
            base = _data_ptr(pool)
            workspace_ptrs = [base + offset for offset in offsets]
        self._launch(self.launches, info, stream, (input_ptrs, output_ptrs, workspace_ptrs))
        # A position outside its axis that a finished launch recorded (all of them on the
        # emulator; on a GPU, the next call finds those still running: index_checks).
        checks = index_checks_of(self.launches)
        if checks:
            raise_for(checks)
        return outputs

    def _launch(
        self,
        launches: list[KernelLaunch],
        info: RuntimeInfo,
        stream: int | None,
        pointers: tuple[list[int], list[int], list[int]],
    ) -> None:
        inputs, outputs, workspaces = pointers
        target = (info.framework, info.device_index)
        for launch in launches:
            args = launch.arguments(inputs, outputs, info.extents, workspaces, target)
            launch.kernel.launch(launch.grid, launch.block, launch.shared_mem, stream, args)


@dataclass
class SegmentKernelsProgram(KernelProgram):
    """A segmented fusion whose segments are all generated kernels, as one KernelProgram
    (kfuse.engine.segment_kernels): the values segments pass on live in workspaces, and a
    cached call takes the fast path. `segmented`: the SegmentedFusion (for segments());
    `groups`: each segment's (scheduler, number of launches, RuntimeInfo as compiled), in
    order, so that the profiler tags each segment's launches as SegmentedRunner's would be."""

    segmented: Any = None
    groups: list[tuple[SchedulerType, int, RuntimeInfo]] = field(default_factory=list)
    origin: dict[Val, Val] | None = None  # a folded fusion's Vals -> the user's (names)

    def segments(self) -> list[Any]:
        """The segments (kfuse.engine.segmenter.Segment), in execution order."""
        return self.segmented.describe(self.origin)

    def schedulers(self) -> list[SchedulerType]:
        return [scheduler for scheduler, _, _ in self.groups]

    def _launch(
        self,
        launches: list[KernelLaunch],
        info: RuntimeInfo,
        stream: int | None,
        pointers: tuple[list[int], list[int], list[int]],
    ) -> None:
        start = 0
        for scheduler, count, segment_info in self.groups:
            with profiling_hooks.segment(scheduler, segment_info):
                super()._launch(launches[start : start + count], info, stream, pointers)
            start += count

    def __str__(self) -> str:
        lines = [f"SegmentKernelsProgram: {len(self.groups)} segments as one program"]
        start = 0
        for k, (scheduler, count, _) in enumerate(self.groups):
            lines.append(f"  segment {k}: {scheduler.value}")
            for launch in self.launches[start : start + count]:
                lines.append(
                    f"    kernel {launch.name}: grid {launch.grid} block {launch.block} "
                    f"shared memory {launch.shared_mem} B, {len(launch.operands)} operands"
                )
            start += count
        if self.folded:
            folded = ", ".join(self.folded)
            lines.append(f"  reshapes, slices and cats folded into the operands: {folded}")
        return "\n".join(lines)


@dataclass
class LibraryProgram(Program):
    """expr_eval: the fusion's ops as library calls of the inputs' framework."""

    fusion: Fusion | None = None

    def run(self, info: RuntimeInfo, stream: int | None) -> list[Any]:
        from kfuse.schedule.expr_eval import run_expr_eval

        assert self.fusion is not None
        return run_expr_eval(self.fusion, info, stream)


@dataclass
class SegmentedProgram(Program):
    """Segments in dependency order, each with a RuntimeInfo derived from the call's; a
    segment compiles on its first run with a new signature (kfuse.engine.segments)."""

    runner: Any = None  # kfuse.engine.segments.SegmentedRunner
    # kfuse.engine.boundary_views.FoldedFusion: the runner runs the fusion with its
    # boundary reshapes folded, on views of the call's arrays (None: the fusion itself)
    folded: Any = None

    def run(self, info: RuntimeInfo, stream: int | None, trace: Any = None) -> list[Any]:
        """`trace`: a kfuse.engine.segmented_replay.SegmentTrace to record the call in."""
        if self.folded is None:
            return self.runner(info, stream, trace)
        from kfuse.engine.boundary_views import folded_call

        outputs = self.runner(folded_call(self.folded, info), stream, trace)
        # An output whose reshape was folded comes back in the reshape input's shape, a new
        # contiguous array, of which the output's shape is a view.
        return [
            a if tuple(a.shape) == info.shape(out) else a.reshape(info.shape(out))
            for a, out in zip(outputs, info.fusion.outputs, strict=True)
        ]

    def cuda_source(self) -> str | None:
        return self.runner.cuda_source()

    def segments(self) -> list[Any]:
        """The segments (kfuse.engine.segmenter.Segment), in execution order."""
        return self.runner.segmented.describe(self.folded.origin if self.folded else None)

    def schedulers(self) -> list[SchedulerType]:
        return [segment.scheduler for segment in self.segments()]

    def __str__(self) -> str:
        segments = self.segments()
        steps = self.runner.steps
        lines = [f"SegmentedProgram: {len(segments)} segments"]
        for segment in segments:
            lines.append(f"  segment {segment.index}: {segment.scheduler.value}")
            if segment.index >= len(steps):  # an output that is an input: copied
                lines.append(f"    {segment.reason}")
                continue
            program = steps[segment.index].last
            if program is not None:  # compiled on the segment's first run
                lines += [f"    {line}" for line in str(program).splitlines()]
        return "\n".join(lines)


def _allocate(info: RuntimeInfo, out: TensorView) -> Any:
    # An output of fd.ops.stride_order is stored in its order, as its kernels write it
    # (kfuse.codegen.layout.output_layout).
    return empty_like_framework(
        info.framework,
        info.shape(out),
        out.dtype,
        info.device_index,
        what=f"output {out.name}",
        order=allocation_order(out),
    )


def _data_ptr(array: Any) -> int:
    from kfuse.runtime.arrays import layout_of

    if type(array).__module__ == "numpy":
        return int(array.ctypes.data)
    return layout_of(array, "output").data_ptr
