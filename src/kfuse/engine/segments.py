"""Running a segmented fusion: its segments in dependency order, on one stream.

The executor checks a call's inputs and infers its shapes once, in the parent fusion's
RuntimeInfo. Each segment's RuntimeInfo is derived from that one here, and nothing is checked
or inferred again:

* inputs: the arrays of the fusion inputs and of the intermediates that earlier segments
  returned, and for scalar inputs the values of the parent's shape inference;
* layouts: a fusion input's is the parent's; an intermediate's is read from its array
  (layout_of), so that its real data pointer, and so its alignment class, is in the key;
* extents: the parent's, through SegmentPlan.origin (segment Val -> parent Val), with those of
  the values the segmenter added to the fusion (split reductions) inferred from them. A
  compile gets all of them; a cached call only those its Program reads
  (Program.extents_read).

Each segment caches its Programs by program_key of the derived info, which is the key that
build_runtime_info gives the same arrays (tests/test_segment_runtime.py): an intermediate
whose alignment class is not the one a kernel was compiled for (an allocator's offset) gets a
Program of its own. Intermediates are dropped as soon as the last segment reading them has
been launched (the frameworks' stream-ordered allocators make that safe on the GPU).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from kfuse.codegen.layout import allocated_strides
from kfuse.engine.program import Program
from kfuse.engine.segmenter import SegmentedFusion, SegmentPlan
from kfuse.engine.signature import program_key
from kfuse.errors import SchedulerError
from kfuse.ir.exprs import Expr
from kfuse.ir.fusion import Fusion
from kfuse.ir.layout_ops import allocation_order
from kfuse.ir.shapes import infer_added
from kfuse.ir.values import TensorView, Val
from kfuse.runtime import profiling_hooks
from kfuse.runtime.arrays import ArrayLayout, empty_like_framework, layout_of, stream_context
from kfuse.runtime.info import RuntimeInfo

CompileSegment = Callable[[Fusion, RuntimeInfo], Program]
"""Compiles one segment's fusion for a RuntimeInfo (kfuse.engine.compiler passes compile_fusion
without segmenting again)."""


class SegmentStep:
    """One segment: its RuntimeInfo derived from the parent call's, and its Programs by key."""

    def __init__(self, plan: SegmentPlan, parent_inputs: set[int], compile: CompileSegment):
        self.plan = plan
        self.compile = compile
        # (the segment's input, the parent Val it stands for, whether that is a fusion input:
        # then its layout is in the parent's RuntimeInfo already)
        self.inputs = [
            (new, old, id(old) in parent_inputs)
            for new, old in zip(plan.fusion.inputs, plan.inputs, strict=True)
        ]
        # program_key -> (Program, the (segment Val, parent Val) pairs of its extents_read,
        # the positions of the inputs it takes copied into their planned layouts)
        self.programs: dict[tuple, tuple[Program, list[tuple[Val, Val]], tuple[int, ...]]] = {}
        self.last: Program | None = None  # the Program of the last run
        self._lock = threading.Lock()

    def derive(self, parent: RuntimeInfo, extents: dict[Val, Any], env: dict[int, Any]) -> Any:
        """The segment's RuntimeInfo for this call, its extents left empty (run fills in
        those its Program reads). `extents`: the parent's (with the segmenter's values);
        `env`: parent Val id -> array, for the fusion inputs and the intermediates."""
        args: list[Any] = []
        layouts: dict[TensorView, ArrayLayout] = {}
        for new, old, from_parent in self.inputs:
            if isinstance(new, TensorView):
                array = env[id(old)]
                args.append(array)
                if from_parent:
                    layouts[new] = parent.layouts[old]  # type: ignore[index]
                else:
                    layouts[new] = layout_of(array, f"intermediate {old.name}")
            else:
                args.append(extents[old])
        return RuntimeInfo(
            self.plan.fusion,
            args,
            layouts,
            {},
            parent.framework,
            parent.backend,
            parent.device_index,
            parent.device,
        )

    def all_extents(self, extents: dict[Val, Any]) -> dict[Val, Any]:
        """Every extent of the segment's Vals (what its own infer_shapes would give)."""
        return {new: extents[old] for new, old in self.plan.origin.items()}

    def run(
        self,
        parent: RuntimeInfo,
        extents: dict[Val, Any],
        env: dict[int, Any],
        stream: Any,
        trace: Any = None,
    ) -> list[Any]:
        """The segment's outputs for this call (see derive for the arguments). `trace`: a
        kfuse.engine.segmented_replay.SegmentTrace to record the Program and RuntimeInfo
        the segment ran with in, for a replay of later calls."""
        with profiling_hooks.execution():  # its own frame: the segment's compile time
            info = self.derive(parent, extents, env)
            key = program_key(info, None)
            entry = self.programs.get(key)
            if entry is None:
                entry = self._compile_or_replan(info, extents, stream)
                with self._lock:
                    self.programs[key] = entry
            program, read, replanned = entry
            if replanned:
                info = self._as_planned(info, replanned, stream)
            info.extents = {new: extents[old] for new, old in read}
            self.last = program
            if trace is not None:
                trace.steps.append((self, entry, info))
            with profiling_hooks.segment(program.scheduler, info):  # tags its launches
                return program.run(info, stream)

    def _compile_or_replan(
        self, info: RuntimeInfo, extents: dict[Val, Any], stream: Any
    ) -> tuple[Program, list[tuple[Val, Val]], tuple[int, ...]]:
        """(the Program, its extents read, the positions of the intermediate inputs it
        takes copied into their planned layouts: see _as_planned)."""
        try:
            return (*self._compile(info, extents), ())
        except SchedulerError:
            replanned = self._off_plan(info)
            if not replanned:
                raise
        planned = self._as_planned(info, replanned, stream)
        return (*self._compile(planned, extents), replanned)

    def _off_plan(self, info: RuntimeInfo) -> tuple[int, ...]:
        """The positions of the intermediate inputs whose layout is not the one the
        segmenter accepted this segment for (kfuse.schedule.sub_fusion.synthetic_info:
        dense, row major or in their stride_order). A library segment may hand on another:
        torch.argsort of a column-major array returns a column-major one, and a reduction of
        it beside another over the other axes had no scheduler in that layout."""
        off = []
        for k, (new, old, from_parent) in enumerate(self.inputs):
            if from_parent or not isinstance(new, TensorView):
                continue
            assert isinstance(old, TensorView)
            lay = info.layouts[new]
            if lay.strides != allocated_strides(old, lay.shape):
                off.append(k)
        return tuple(off)

    def _as_planned(
        self, info: RuntimeInfo, positions: tuple[int, ...], stream: Any
    ) -> RuntimeInfo:
        """`info` with the intermediate inputs at `positions` copied into their planned
        layouts (one framework copy each)."""
        inputs, layouts = list(info.inputs), dict(info.layouts)
        for k in positions:
            new, old, _ = self.inputs[k]
            assert isinstance(new, TensorView) and isinstance(old, TensorView)
            inputs[k] = copy_array(info, inputs[k], stream, order=allocation_order(old))
            layouts[new] = layout_of(inputs[k], f"intermediate {old.name}")
        return dataclasses.replace(info, inputs=inputs, layouts=layouts)

    def _compile(
        self, info: RuntimeInfo, extents: dict[Val, Any]
    ) -> tuple[Program, list[tuple[Val, Val]]]:
        info.extents = self.all_extents(extents)
        started = profiling_hooks.clock()
        program = self.compile(self.plan.fusion, info)
        profiling_hooks.compiled(profiling_hooks.clock() - started)
        origin = self.plan.origin
        return program, [(v, origin[v]) for v in program.extents_read(self.plan.fusion)]


class SegmentedRunner:
    """The compiled form of a segmented fusion for one input signature."""

    def __init__(self, segmented: SegmentedFusion, compile: CompileSegment) -> None:
        self.segmented = segmented
        fusion = segmented.fusion
        inputs = {id(v) for v in fusion.inputs}
        self.fusion_inputs = inputs
        self.steps = [SegmentStep(plan, inputs, compile) for plan in segmented.plans]
        self.added = added_exprs(segmented)
        keep = {id(v) for v in fusion.outputs} | inputs
        last_use: dict[int, int] = {}
        for k, plan in enumerate(segmented.plans):
            for v in plan.inputs:
                last_use[id(v)] = k
        self.release: list[list[int]] = [[] for _ in segmented.plans]
        for k, plan in enumerate(segmented.plans):
            for v in plan.outputs:
                if id(v) not in keep:
                    self.release[last_use.get(id(v), k)].append(id(v))

    def __call__(self, info: RuntimeInfo, stream: int | None, trace: Any = None) -> list[Any]:
        """The fusion's outputs; `trace` (a SegmentTrace) records what each segment ran
        with (SegmentStep.run)."""
        fusion = self.segmented.fusion
        if trace is not None:
            trace.info = info
        extents = info.extents
        if self.added:
            extents = dict(extents)
            infer_added(self.added, extents)
        env: dict[int, Any] = {
            id(v): a
            for v, a in zip(fusion.inputs, info.inputs, strict=True)
            if isinstance(v, TensorView)
        }
        for step, release in zip(self.steps, self.release, strict=True):
            outs = step.run(info, extents, env, stream, trace)
            for v, a in zip(step.plan.outputs, outs, strict=True):
                env[id(v)] = a
            for key in release:
                del env[key]
        results: list[Any] = []
        handed_out: set[int] = set()
        for out in fusion.outputs:
            value = env[id(out)]
            if id(out) in self.fusion_inputs or id(out) in handed_out:
                # A stride_order's output repeated keeps its order in the copy.
                ordered = allocation_order(out) is not None
                value = copy_array(info, value, stream, keep_layout=ordered)
            handed_out.add(id(out))
            results.append(value)
        return results

    def cuda_source(self) -> str | None:
        """The kernels' sources of every segment's last run, in order."""
        sources = [step.last.cuda_source() for step in self.steps if step.last is not None]
        joined = "\n".join(s for s in sources if s)
        return joined or None


def added_exprs(segmented: SegmentedFusion) -> list[Expr]:
    """The exprs computing values the segmenter added (split_reductions), which the parent's
    shape inference does not know, in execution order."""
    fusion = segmented.fusion
    known = {id(v) for v in fusion.inputs} | {id(o) for e in fusion.exprs for o in e.outputs}
    added: dict[int, Expr] = {}
    for plan in segmented.plans:
        for e in plan.exprs:
            if any(id(o) not in known for o in e.outputs):
                added.setdefault(id(e), e)
    return list(added.values())


def copy_array(
    info: RuntimeInfo,
    a: Any,
    stream: int | None,
    keep_layout: bool = False,
    order: tuple[int, ...] | None = None,
) -> Any:
    """A new contiguous copy of `a` with its framework, on `stream` (None: the framework's
    current stream) for GPU arrays; with `keep_layout` a dense `a`'s strides are kept; with
    `order`, stored in that stride order (kfuse.runtime.arrays.empty_like_framework)."""
    with stream_context(info.framework, info.device_index, stream):
        if order is not None:
            lay = layout_of(a, "an intermediate")
            out = empty_like_framework(
                info.framework, lay.shape, lay.dtype, info.device_index, order=order
            )
            out[...] = a
            return out
        if info.framework == "torch":
            import torch

            keep = torch.preserve_format if keep_layout else torch.contiguous_format
            return a.clone(memory_format=keep)
        if info.framework == "cupy":
            import cupy

            return cupy.array(a, copy=True, order="K" if keep_layout else "C")
    import numpy

    return numpy.array(a, copy=True, order="K" if keep_layout else "C")
