"""A segmented fusion whose segments are all generated kernels, compiled as one KernelProgram.

The segments are compiled when the fusion is (not on their first run, as SegmentedRunner
does), each on the RuntimeInfo the segmenter accepted it on (sub_fusion.synthetic_info): the
fusion inputs' layouts, and for each value one segment hands to another a contiguous,
aligned layout of its shape, which its workspace has. Their launches are then put in one
list, with every operand renamed to the whole fusion's:

* a segment's input or output that is a fusion input or output -> that input or output;
* a value passed between segments -> a workspace of its own (KernelProgram allocates the
  workspaces for each call, so the value lives as long as the call, as the runner's array did);
* a segment's own workspace -> a workspace index after those of the segments before it;
* a scalar -> the fusion's Scalar it stands for.

A segmented call ran the whole Python path on every call (inputs checked, the fusion's
shapes inferred, each segment's RuntimeInfo and key built): about 800 us on an H200's host
for a group norm whose two segments take 88 us of GPU time. As one KernelProgram, a cached
call takes the fast path like any other. Launches stay grouped by segment, so that the
profiler tags each segment as the runner did.

Not merged (None: the runner runs the segments): a segment that is not generated kernels
(expr_eval), an output that is an input or listed twice (copies the runner makes), or a
scalar operand whose value only the segmenter's added exprs compute.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import replace

from kfuse import switches
from kfuse.engine import compile_batch
from kfuse.engine.program import KernelProgram, Program, SegmentKernelsProgram
from kfuse.engine.segmenter import SegmentedFusion, SegmentPlan
from kfuse.engine.segments import added_exprs
from kfuse.ir.fusion import Fusion
from kfuse.ir.shapes import infer_added
from kfuse.ir.values import TensorView, Val
from kfuse.runtime.info import RuntimeInfo
from kfuse.runtime.launch import (
    GeneratedOperand,
    IndexCheckOperand,
    InputOperand,
    KernelLaunch,
    Operand,
    OutputOperand,
    RngStateOperand,
    ScalarOperand,
    WorkspaceOperand,
    workspace_bytes,
)
from kfuse.schedule.sub_fusion import synthetic_info
from kfuse.schedule.types import SchedulerType


def _moved(op: Operand, byte_offset: int) -> Operand:
    """`op` (an input, output or workspace operand) from `byte_offset` more bytes on."""
    if not byte_offset:
        return op
    if isinstance(op, WorkspaceOperand):
        return replace(op, offset=op.offset + byte_offset)
    assert isinstance(op, (InputOperand, OutputOperand))
    return replace(op, byte_offset=op.byte_offset + byte_offset)


class _NotMerged(Exception):
    """The segments cannot be one KernelProgram (see the module docstring)."""


def merge_segments(
    segmented: SegmentedFusion,
    info: RuntimeInfo,
    compile_segment: Callable[[Fusion, RuntimeInfo], Program],
) -> SegmentKernelsProgram | None:
    """The segments of `segmented` (for the call `info` describes) as one program, or None.
    Their kernels are generated one segment after another and compiled together, in threads
    (kfuse.engine.compile_batch)."""
    program: SegmentKernelsProgram | None = None
    with compile_batch.deferred():
        with contextlib.suppress(_NotMerged):
            program = _Merger(segmented, info, compile_segment).program()
    if program is not None:
        for launch in program.launches:
            launch.kernel = compile_batch.loaded(launch.kernel)
    return program


class _Merger:
    def __init__(
        self,
        segmented: SegmentedFusion,
        info: RuntimeInfo,
        compile_segment: Callable[[Fusion, RuntimeInfo], Program],
    ) -> None:
        fusion = segmented.fusion
        if segmented.copies or len({id(v) for v in fusion.outputs}) != len(fusion.outputs):
            raise _NotMerged
        self.segmented = segmented
        self.compile_segment = compile_segment
        self.input_position = {id(v): k for k, v in enumerate(fusion.inputs)}
        self.output_index = {id(v): k for k, v in enumerate(fusion.outputs)}
        added = added_exprs(segmented)
        # Values only the segmenter computes: the parent's shape inference does not give them
        # on a call, so no scalar operand may be one.
        self.added_values = {id(o) for e in added for o in e.outputs}
        self.extents = dict(info.extents)
        infer_added(added, self.extents)
        # (the segments' RuntimeInfos read the added values' extents too)
        self.info = replace(info, extents=self.extents)
        self.workspace: dict[int, int] = {}  # id(value passed between segments) -> index
        self.workspaces = 0

    def program(self) -> SegmentKernelsProgram:
        launches: list[KernelLaunch] = []
        groups: list[tuple[SchedulerType, int, RuntimeInfo]] = []
        read_before: set[int] = set()  # ids of the fusion inputs the previous segment read
        for plan in self.segmented.plans:
            segment_info = self._segment_info(plan)
            if switches.REREAD_REVERSED:
                warm = frozenset(
                    v
                    for v, parent in zip(plan.fusion.inputs, plan.inputs, strict=True)
                    if isinstance(v, TensorView) and id(parent) in read_before
                )
                segment_info = replace(segment_info, warm_inputs=warm)
            read_before = {id(p) for p in plan.inputs if id(p) in self.input_position}
            program = self.compile_segment(plan.fusion, segment_info)
            if type(program) is not KernelProgram:
                raise _NotMerged
            base = self.workspaces
            self.workspaces += len(workspace_bytes(program.launches))
            for launch in program.launches:
                operands = [self._operand(plan, op, base) for op in launch.operands]
                launches.append(replace(launch, operands=operands))
            # (the profiler reads its layouts and extents; the call's arrays are not kept)
            groups.append(
                (program.scheduler, len(program.launches), replace(segment_info, inputs=[]))
            )
        return SegmentKernelsProgram(
            SchedulerType.none, None, launches, segmented=self.segmented, groups=groups
        )

    def _segment_info(self, plan: SegmentPlan) -> RuntimeInfo:
        """The segment's RuntimeInfo: the one the segmenter accepted it on (fusion inputs
        with the call's layouts, the values passed between segments contiguous and aligned
        as a fresh allocation: a workspace here), the segmenter's added values included."""
        return synthetic_info(plan.fusion, plan.inputs, self.info, plan.outputs)

    def _operand(self, plan: SegmentPlan, op: Operand, base: int) -> Operand:
        if isinstance(op, InputOperand):
            # A byte offset here is a padded read's crop (a folded slice's is set by
            # unfold_operands, after this): kept, past whatever the parent's value is.
            value = self._value(plan.inputs[op.position], op.shape, op.strides)
            return _moved(value, op.byte_offset)
        if isinstance(op, OutputOperand):
            assert op.byte_offset == 0  # as for inputs: only unfold_operands sets one
            out = plan.outputs[op.index]
            if id(out) in self.output_index:  # an output that is also an input (a copy
                # segment's: kfuse.engine.segmenter) is written to the output
                return OutputOperand(self.output_index[id(out)], op.shape, op.strides)
            return self._value(out, op.shape, op.strides)
        if isinstance(op, WorkspaceOperand):
            return replace(op, index=op.index + base)
        if isinstance(op, (IndexCheckOperand, GeneratedOperand, RngStateOperand)):
            # the kernel's own flags; a generated read's sizes (no data); its generator state
            return op
        old = plan.origin[op.val]
        if id(old) in self.added_values:
            raise _NotMerged
        return ScalarOperand(old)  # type: ignore[arg-type]

    def _value(self, old: Val, shape: tuple[int, ...], strides: tuple[int, ...]) -> Operand:
        """The operand for parent value `old` seen through shape/strides."""
        if id(old) in self.input_position:
            return InputOperand(self.input_position[id(old)], shape, strides)
        if id(old) in self.output_index:
            return OutputOperand(self.output_index[id(old)], shape, strides)
        index = self.workspace.setdefault(id(old), self.workspaces)
        if index == self.workspaces:
            self.workspaces += 1
        assert isinstance(old, TensorView)
        nbytes = math.prod(self.extents[old]) * old.dtype.itemsize
        return WorkspaceOperand(index, 0, nbytes, shape, strides)
