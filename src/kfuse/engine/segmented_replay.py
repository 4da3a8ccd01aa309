"""The host fast path of a segmented fusion: one input signature's call planned once, replayed.

A SegmentedProgram's checked call checks every input and infers every shape (the parent's
RuntimeInfo), then derives each segment's RuntimeInfo, keys it and reads the intermediates'
layouts (kfuse.engine.segments). All of that depends only on the call's signature (each
array input's type, dtype, shape, strides, 16-byte alignment class and device; each scalar
input's Python type, and its value where an extent depends on it: kfuse.engine.signature),
but for the data pointers and the values of scalar inputs. So after a checked call the
executor records what it derived (SegmentTrace) and builds a SegmentedReplay of it, and a
later call with the same signature:

* checks that the call has that signature (replay_key), and each scalar input's value as the
  checked path does (kfuse.runtime.info.check_scalar: a value outside its dtype's range is
  an InputError there too);
* computes the values of the scalars its scalar inputs reach (kfuse.engine.fast_path's
  ScalarProgram), the only extents that may change; every other extent is the plan's;
* runs each segment's cached Program as a step chosen when the signature was planned
  (kfuse.engine.replay_steps), on numbered slots of the call's arrays: consecutive kernel
  segments that a PackedKernel packs through one kfuse._C.ReplayRun call
  (kfuse.engine.replay_runs: the intermediates only their kernels read pooled), and where
  such a run cannot take the call, each on its own: through its kfuse._C.FastCall on a GPU
  (made the way a KernelProgram's is, matching the segment's inputs, intermediates
  included), else through its PackedKernel (kfuse.engine.packed_kernel), or
  KernelProgram.run for kernels with stateful random ops; a library segment through its ops
  bound once (kfuse.schedule.expr_eval.BoundExprEval).
  Only what changes per call is done per call: no RuntimeInfo is made but where a
  Program's run reads one.

An intermediate whose layout is not the planned one (a library call's array at another
alignment class) makes that segment run through its checked SegmentStep.run, which keys and
compiles as on a first call, on the runner's RuntimeInfo made for it; so does a segment that
took its intermediates copied into their planned layouts. Everything that protects a call
inside the Programs (index checks, the CUDA graph capture guards, RNG state reserved per
launch, poisoning) runs as on the checked path.
Outputs a caller gives (execute's outputs=) are checked as the checked path checks them
(kfuse.engine.given_outputs, on the planned layouts at the call's pointers) and the results
copied into them. Not replayed (always the checked path): calls with pinned params, device=
or a PythonProfiler recording, fusions with aliased outputs, and fusions whose scalar inputs
reach anything but element-wise math (those an extent depends on excepted: their values are
in the key).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kfuse import switches
from kfuse.engine import given_outputs
from kfuse.engine.fast_path import ScalarProgram
from kfuse.engine.program import Program, SegmentedProgram
from kfuse.engine.replay_runs import KernelRun, grouped
from kfuse.engine.replay_steps import ReplayStep, replay_step
from kfuse.engine.segments import SegmentStep, copy_array
from kfuse.engine.signature import replay_key, shape_inputs
from kfuse.ir.layout_ops import allocation_order
from kfuse.ir.shapes import infer_added
from kfuse.ir.values import Scalar, TensorView, Val
from kfuse.runtime.arrays import ArrayLayout, current_stream, strided_view
from kfuse.runtime.autograd_note import note_requires_grad
from kfuse.runtime.info import RuntimeInfo, check_scalar


@dataclass
class SegmentTrace:
    """What a checked call of a SegmentedProgram derived: the RuntimeInfo its runner ran on
    (the folded fusion's where boundary views were folded) and, per segment in order, the
    SegmentStep, its Program cache entry and the RuntimeInfo that Program ran on."""

    info: RuntimeInfo | None = None
    steps: list[tuple[SegmentStep, tuple, RuntimeInfo]] = field(default_factory=list)


class _NotPlanned(Exception):
    """The call cannot be replayed (see the module docstring)."""


class SegmentedReplay:
    """One input signature's call of a SegmentedProgram, planned from a checked call's
    SegmentTrace (see the module docstring). It keeps no array of the call it was planned
    from: layouts, extents and Programs only."""

    def __init__(self, compiled: SegmentedProgram, parent: RuntimeInfo, trace: SegmentTrace):
        fusion = parent.fusion
        if fusion.output_aliases:
            raise _NotPlanned("aliased outputs")
        if trace.info is None:
            raise _NotPlanned("the runner recorded no call")
        # The scalar inputs an extent depends on are in the plan's key by value: fixed.
        scalars = ScalarProgram.of(fusion, parent.extents, shape_inputs(fusion))
        if scalars is None:
            raise _NotPlanned("a scalar input reaches a shape or an output")
        self.compiled = compiled
        runner, info = compiled.runner, trace.info
        self.fusion = info.fusion  # the runner's: the folded fusion where views were folded
        self.target = (info.framework, info.backend, info.device_index, info.device)
        # What a call checks of its inputs as build_runtime_info does: (position, Val, name)
        self.checked_inputs = [
            (k, v, f"input {k} ({v.name})")
            for k, v in enumerate(fusion.inputs)
            if isinstance(v, Scalar) or info.framework == "torch"
        ]
        extents = dict(info.extents)
        if runner.added:
            infer_added(runner.added, extents)
        self.extents = extents
        folded = compiled.folded
        origin = folded.origin if folded is not None else {v: v for v in extents}
        # The runner fusion's scalars that a scalar input changes -> the parent's Val.
        self.changing = {
            v: origin[v]
            for v in extents
            if isinstance(v, Scalar) and v in origin and scalars.slot(origin[v]) is not None
        }
        self.scalars = scalars if scalars.operands else None
        self.sources = _sources(info, parent, folded)
        self.steps, self.release, self.results = self._numbered(compiled, trace, parent)
        self.input_layouts = [
            (k, v, layout)
            for k, (v, (_, layout, _, _)) in enumerate(zip(self.fusion.inputs, self.sources))
            if isinstance(v, TensorView)
        ]
        # Consecutive kernel segments run by one C++ call each (kfuse.engine.replay_runs).
        result_slots = [slot for slot, _, _, _ in self.results]
        if switches.REPLAY_RUNS:
            self.units, self.unit_release = grouped(self.steps, self.release, result_slots, self)
        else:
            self.units, self.unit_release = list(self.steps), list(self.release)
        # What copy_array reads of a RuntimeInfo: the framework and the device.
        self.target_info = RuntimeInfo(self.fusion, [], {}, {}, *self.target)
        # What execute's outputs= is checked against (given_outputs.placed): the call's
        # fusion, its inputs' planned layouts and its outputs' shapes.
        self.call_fusion = fusion
        self.call_layouts = [
            (k, v, parent.layouts[v])
            for k, v in enumerate(fusion.inputs)
            if isinstance(v, TensorView)
        ]
        self.call_shapes: dict[Val, Any] = {o: parent.extents[o] for o in fusion.outputs}

    def _numbered(
        self, compiled: SegmentedProgram, trace: SegmentTrace, parent: RuntimeInfo
    ) -> tuple[list[ReplayStep], list[list[int]], list[tuple]]:
        """The steps, each reading and writing numbered slots: the runner fusion's inputs
        first, then each segment's outputs; per step the slots dropped after it (the
        runner's release: intermediates no later segment reads); per output of the fusion
        (its slot, whether the runner copies it (a fusion input, or one listed before),
        whether the copy keeps a stride_order's layout, the shape a folded reshape's output
        comes back in (SegmentedProgram.run) or None)."""
        runner = compiled.runner
        slots = {id(v): k for k, v in enumerate(self.fusion.inputs)}
        steps = []
        for step, entry, step_info in trace.steps:
            replayed = replay_step(step, entry, step_info, self, slots)
            for out in step.plan.outputs:
                slots[id(out)] = len(slots)
            replayed.outputs = [slots[id(out)] for out in step.plan.outputs]
            steps.append(replayed)
        self.width = len(slots)
        release = [[slots[key] for key in keys] for keys in runner.release]
        outputs = runner.segmented.fusion.outputs
        folded = compiled.folded
        results = [
            (
                slots[id(o)],
                id(o) in runner.fusion_inputs or any(o is p for p in outputs[:k]),
                allocation_order(o) is not None,
                tuple(parent.shape(user)) if folded is not None else None,
            )
            for k, (o, user) in enumerate(zip(outputs, parent.fusion.outputs, strict=True))
        ]
        return steps, release, results

    def __call__(self, inputs: list[Any], ptrs: list[int], stream: Any) -> list[Any]:
        """The call's outputs (inputs of this replay's signature; ptrs: their data
        pointers)."""
        for k, val, what in self.checked_inputs:
            if isinstance(val, Scalar):
                check_scalar(val, inputs[k], what)
            else:
                note_requires_grad(inputs[k], what)
        extents = self.extents
        if self.scalars is not None:
            values = dict(zip(self.scalars.operands, self.scalars(inputs), strict=True))
            extents = dict(extents)
            for v, old in self.changing.items():
                extents[v] = values[old]
        slots, pointers = self._slots(inputs, ptrs, extents)
        # Kernel segments launch on the framework's current stream, asked once a call, not by
        # each segment's FastCall; library segments run with no stream context unless one
        # was given, as on the checked path.
        launch_stream = stream
        if stream is None and self.target[2] >= 0:
            launch_stream = current_stream(self.target[0], self.target[2])
        for unit, release in zip(self.units, self.unit_release, strict=True):
            if not isinstance(unit, KernelRun):
                self._step(unit, slots, pointers, extents, launch_stream, stream)
            elif not unit(slots, pointers, extents, launch_stream):
                for step in unit.steps:  # off the run's plan: one by one
                    self._step(step, slots, pointers, extents, launch_stream, stream)
            for slot in release:
                slots[slot] = None
        results = []
        for slot, copied, ordered, shape in self.results:
            value = slots[slot]
            if copied:
                value = copy_array(self.target_info, value, stream, keep_layout=ordered)
            if shape is not None and tuple(value.shape) != shape:
                value = value.reshape(shape)
            results.append(value)
        return results

    def _step(
        self,
        step: ReplayStep,
        slots: list[Any],
        pointers: list[Any],
        extents: dict,
        launch_stream: Any,
        stream: Any,
    ) -> None:
        """Run one step, its outputs (and their data pointers where it knows them) written
        into the call's slots."""
        done = step.run(slots, pointers, extents, launch_stream if step.launches else stream)
        if done is None:  # off its plan, or never replayed
            done = self._checked(step, slots, pointers, extents, stream), None
        outs, out_ptrs = done
        for slot, a in zip(step.outputs, outs, strict=True):
            slots[slot] = a
        if out_ptrs is not None:
            for slot, ptr in zip(step.outputs, out_ptrs, strict=True):
                pointers[slot] = ptr

    def call_info(self, inputs: list[Any], ptrs: list[int]) -> RuntimeInfo:
        """The call's own RuntimeInfo, as far as outputs= is checked against it: the planned
        layouts of its inputs at this call's pointers, its outputs' shapes."""
        layouts = {v: _at(layout, ptrs[k]) for k, v, layout in self.call_layouts}
        return RuntimeInfo(self.call_fusion, inputs, layouts, self.call_shapes, *self.target)

    def _slots(
        self, inputs: list[Any], ptrs: list[int], extents: dict
    ) -> tuple[list[Any], list[Any]]:
        """The call's slots, the runner fusion's inputs filled in (arrays viewed where a
        reshape or slice was folded; scalars' values from the extents), and their data
        pointers (the replay key matched every other fact of their layouts)."""
        slots: list[Any] = [None] * self.width
        pointers: list[Any] = [None] * self.width
        for k, (position, layout, view, offset) in enumerate(self.sources):
            if position is None:
                slots[k] = extents[layout]
                continue
            array = inputs[position]
            slots[k] = array if view is None else strided_view(array, *view)
            pointers[k] = ptrs[position] + offset
        return slots, pointers

    def _checked(
        self, step: ReplayStep, slots: list[Any], pointers: list[Any], extents: dict, stream: Any
    ) -> list[Any]:
        """One segment's outputs through its checked SegmentStep.run, on the RuntimeInfo
        the runner's fusion runs on for this call (the planned layouts of its inputs at
        this call's data pointers)."""
        args = slots[: len(self.fusion.inputs)]
        layouts: dict[TensorView, ArrayLayout] = {
            v: _at(layout, pointers[k]) for k, v, layout in self.input_layouts
        }
        info = RuntimeInfo(self.fusion, args, layouts, extents, *self.target)
        env = {id(old): slots[slot] for slot, old in step.sources if slot >= 0}
        return step.step.run(info, extents, env, stream)


def _sources(info: RuntimeInfo, parent: RuntimeInfo, folded: Any) -> list[tuple]:
    """Per input of the runner's fusion (`info`'s): (the call's input position, its planned
    layout, where a reshape or slice was folded the view of the call's array it is (shape,
    strides, elements offset), bytes from the call's data pointer); (None, the Val, None, 0)
    for a scalar, whose value is an extent."""
    sources: list[tuple] = []
    for k, v in enumerate(info.fusion.inputs):
        if not isinstance(v, TensorView):
            sources.append((None, v, None, 0))
            continue
        position = folded.input_positions[k] if folded is not None else k
        layout = info.layouts[v]
        call = parent.layouts[parent.fusion.inputs[position]]  # type: ignore[index]
        offset = folded.offset(k) if folded is not None else 0
        view = None
        if layout.shape != call.shape or layout.strides != call.strides or offset:
            view = (layout.shape, layout.strides, offset // call.dtype.itemsize)
        sources.append((position, layout, view, offset))
    return sources


def _at(layout: ArrayLayout, data_ptr: int) -> ArrayLayout:
    """`layout` at another data pointer (of an array that matched it otherwise)."""
    return ArrayLayout(
        layout.framework, layout.dtype, layout.shape, layout.strides, data_ptr, layout.device
    )


class SegmentedReplays:
    """A SegmentedProgram executor's replays by signature, newest kept (at most MAX_ENTRIES,
    as many as kfuse._C.FastCallCache keeps), with how many calls they took (`hits`)."""

    MAX_ENTRIES = 16  # as kfuse._C.FastCallCache's: 10 sizes in turn (nvFuser's dynamic runs) fit

    def __init__(self, fusion: Any) -> None:
        self.fusion_inputs = list(fusion.inputs)
        self.sized = shape_inputs(fusion)
        self.entries: dict[tuple, SegmentedReplay] = {}
        self.hits = 0

    def __len__(self) -> int:
        return len(self.entries)

    def key(self, inputs: Any) -> Any:
        """replay_key of `inputs` for this fusion."""
        return replay_key(inputs, self.fusion_inputs, self.sized)

    def __call__(
        self, keyed: Any, inputs: Any, stream: Any, outputs: Any = None
    ) -> tuple[Program, list[Any]] | None:
        """(the SegmentedProgram, its outputs) for a call of a planned signature, or None.
        `keyed`: key(inputs), which the executor keeps for planning the call on a miss.
        `outputs`: execute's outputs=, checked as the checked path checks them (an
        InputError before anything runs), the results copied into them as it copies."""
        if keyed is None:
            return None
        replay = self.entries.get(keyed[0])
        if replay is None:
            return None
        inputs, ptrs = list(inputs), keyed[1]
        if outputs is None:
            results = replay(inputs, ptrs, stream)
        else:
            info = replay.call_info(inputs, ptrs)
            given = given_outputs.placed(info, outputs, None)
            results = given_outputs.copied_into(info, given, replay(inputs, ptrs, stream), stream)
        self.hits += 1
        return replay.compiled, results

    def add(self, key: tuple, compiled: Any, parent: RuntimeInfo, trace: SegmentTrace) -> None:
        """Plan the call `trace` recorded under `key`, unless it cannot be replayed."""
        try:
            replay = SegmentedReplay(compiled, parent, trace)
        except _NotPlanned:
            return
        self.entries[key] = replay
        if len(self.entries) > self.MAX_ENTRIES:
            del self.entries[next(iter(self.entries))]


__all__ = ["SegmentTrace", "SegmentedReplay", "SegmentedReplays"]
