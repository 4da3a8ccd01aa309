"""One segment of a replayed segmented call (kfuse.engine.segmented_replay), its work chosen
when the signature is planned, so that a replayed call pays only for what changes per call.

A replay keeps the call's values in numbered slots (the runner fusion's inputs first, then
each segment's outputs) with, per slot, the data pointer where it is known without asking
the array: a fusion input's (matched by the replay key) and a packed kernel's own output's.
Each step reads its arguments from those slots and returns its outputs, or None to have its
segment run through its checked SegmentStep.run instead, which keys and compiles as on a
first call:

* CheckedStep: a segment whose plan took its intermediates copied into their planned
  layouts, or whose Program a replay does not run (one that stores into an input);
* KernelStep: generated kernels, through their kfuse._C.FastCall on a GPU (which matches
  every input, intermediates included, in C++); else each intermediate input is matched to
  its planned layout (the array's type, dtype, shape, strides, alignment class and device;
  for a packed kernel's own output, allocated in that layout, its alignment class alone)
  and the kernels launched through their PackedKernel, or KernelProgram.run for kernels with
  stateful random ops (each launch reserves its seed and offset);
* LibraryStep: a library segment through its ops bound once (kfuse.schedule.expr_eval's
  BoundExprEval), or LibraryProgram.run where a scalar input changes an extent it reads.

Everything that protects a call inside them runs as on the checked path: index bounds
checks before a read, the CUDA graph capture refusals, RNG state reserved per launch.
"""

from __future__ import annotations

from typing import Any

from kfuse.engine.fast_path import fast_call_for
from kfuse.engine.packed_kernel import PackedKernel
from kfuse.engine.program import KernelProgram, LibraryProgram, Program
from kfuse.engine.segments import SegmentStep
from kfuse.engine.signature import array_spec, layout_key, spec_pointer
from kfuse.ir.values import TensorView, Val
from kfuse.runtime.arrays import ArrayLayout
from kfuse.runtime.info import RuntimeInfo

Outputs = tuple[list[Any], list[Any] | None]
"""A step's outputs and, where the step allocated them in their planned layouts, their data
pointers (None: not known)."""


class ReplayStep:
    """What every kind of step knows: its SegmentStep and Program, the extents it reads
    (those a scalar input changes taken from the call), and where its arguments are.
    `launches`: whether it launches kernels itself (then the replay passes it the stream
    to launch on, never None on a GPU); `fast`: a kernel segment's FastCall, if any."""

    launches = False
    fast: Any = None

    def __init__(
        self, step: SegmentStep, entry: tuple, info: RuntimeInfo, plan: Any, slots: dict[int, int]
    ) -> None:
        program, read, _ = entry
        self.step = step
        self.program: Program = program
        self.fusion = info.fusion
        self.target = plan.target
        # Extents it reads that a scalar input changes, and their values fixed by the plan.
        self.changing = [(new, old) for new, old in read if old in plan.changing]
        self.extents = {new: plan.extents[old] for new, old in read}
        # Per input: its slot (-1 for a scalar, whose value is the runner's extent `old`).
        self.sources = [
            (slots[id(old)] if isinstance(new, TensorView) else -1, old)
            for new, old, _ in step.inputs
        ]
        self.layouts = dict(info.layouts)
        # The slots its outputs go to (SegmentedReplay numbers them after planning it).
        self.outputs: list[int] = []

    def run(self, values: list[Any], pointers: list[Any], extents: dict, stream: Any) -> Any:
        """This call's Outputs, or None to run the segment checked."""
        raise NotImplementedError

    def args(self, values: list[Any], extents: dict) -> list[Any]:
        """The segment's inputs: arrays from their slots, scalars from the call's extents."""
        return [values[s] if s >= 0 else extents[old] for s, old in self.sources]

    def read(self, extents: dict) -> dict[Val, Any]:
        """The segment's extents for this call: the plan's, with this call's scalars."""
        if not self.changing:
            return self.extents
        read = dict(self.extents)
        for new, old in self.changing:
            read[new] = extents[old]
        return read

    def info(self, args: list[Any], layouts: dict, extents: dict) -> RuntimeInfo:
        """The segment's RuntimeInfo for this call, as its Program's run reads it."""
        return RuntimeInfo(self.fusion, args, layouts, self.read(extents), *self.target)


class CheckedStep(ReplayStep):
    """A segment that always runs through its checked SegmentStep.run."""

    def run(self, values: list[Any], pointers: list[Any], extents: dict, stream: Any) -> Any:
        return None


class KernelStep(ReplayStep):
    """Generated kernels: a FastCall on a GPU, else a PackedKernel or KernelProgram.run."""

    launches = True

    def __init__(
        self, step: SegmentStep, entry: tuple, info: RuntimeInfo, plan: Any, slots: dict[int, int]
    ) -> None:
        super().__init__(step, entry, info, plan, slots)
        # Per array input: (position, slot, the layout planned for an intermediate, or None
        # for a fusion input, which the replay key matched).
        self.arrays: list[tuple[int, int, tuple | None]] = []
        for k, ((new, _, from_parent), (slot, _)) in enumerate(zip(step.inputs, self.sources)):
            if not isinstance(new, TensorView):
                continue
            spec = None
            if not from_parent:
                found = array_spec(info.inputs[k])
                assert found is not None
                spec = found[0]
            self.arrays.append((k, slot, spec))
        program = self.program
        assert isinstance(program, KernelProgram)
        full = RuntimeInfo(
            info.fusion,
            info.inputs,
            info.layouts,
            step.all_extents(plan.extents),
            *self.target,
        )
        self.fast = self.packed = None
        if info.device_index >= 0 and (layout := layout_key(info.inputs, full)) is not None:
            self.fast = fast_call_for(info.inputs, program, full, layout)
        if PackedKernel.packs(program):
            self.packed = PackedKernel(program, full, {new for new, _ in self.changing})

    def run(self, values: list[Any], pointers: list[Any], extents: dict, stream: Any) -> Any:
        if self.fast is not None:
            hit = self.fast(self.args(values, extents), stream)
            if hit is not None:
                self.step.last = self.program
                return hit[1], None
        ptrs = [0] * len(self.sources)
        for k, slot, spec in self.arrays:
            ptr = pointers[slot]
            if spec is None:  # a fusion input
                ptrs[k] = ptr
            elif ptr is not None:  # a packed kernel's output, in its planned layout
                if ptr & 15 != spec[4]:
                    return None
                ptrs[k] = ptr
            else:
                ptr = spec_pointer(values[slot], spec)
                if ptr is None:  # off its plan: the checked run
                    return None
                ptrs[k] = ptr
        self.step.last = self.program
        if self.packed is not None:
            return self.packed(ptrs, self.read(extents), stream)
        layouts = {
            new: _at(self.layouts[new], ptrs[k])  # type: ignore[index]
            for k, (new, _, _) in enumerate(self.step.inputs)
            if isinstance(new, TensorView)
        }
        info = self.info(self.args(values, extents), layouts, extents)
        return self.program.run(info, stream), None


class LibraryStep(ReplayStep):
    """Library calls: their ops bound once, or LibraryProgram.run."""

    def __init__(
        self, step: SegmentStep, entry: tuple, info: RuntimeInfo, plan: Any, slots: dict[int, int]
    ) -> None:
        super().__init__(step, entry, info, plan, slots)
        from kfuse.schedule.expr_eval import BoundExprEval

        program = self.program
        assert isinstance(program, LibraryProgram) and program.fusion is not None
        self.bound = None
        if not self.changing:  # every extent it reads is the plan's
            self.bound = BoundExprEval(program.fusion, self.info([], {}, {}))

    def run(self, values: list[Any], pointers: list[Any], extents: dict, stream: Any) -> Any:
        args = self.args(values, extents)
        self.step.last = self.program
        if self.bound is not None:
            return self.bound(args, stream), None
        return self.program.run(self.info(args, {}, extents), stream), None


def replay_step(
    step: SegmentStep, entry: tuple, info: RuntimeInfo, plan: Any, slots: dict[int, int]
) -> ReplayStep:
    """The step that replays `step`, which ran `entry` (its Program cache entry) on `info`
    in the call `plan` (a SegmentedReplay) is planned from; `slots`: parent Val id -> slot."""
    program, _, replanned = entry
    if not replanned and type(program) is KernelProgram and not program.in_place:
        return KernelStep(step, entry, info, plan, slots)
    if not replanned and isinstance(program, LibraryProgram):
        return LibraryStep(step, entry, info, plan, slots)
    return CheckedStep(step, entry, info, plan, slots)


def _at(layout: ArrayLayout, data_ptr: int) -> ArrayLayout:
    """`layout` at another data pointer (of an array that matched it otherwise)."""
    return ArrayLayout(
        layout.framework, layout.dtype, layout.shape, layout.strides, data_ptr, layout.device
    )


__all__ = ["CheckedStep", "KernelStep", "LibraryStep", "ReplayStep", "replay_step"]
