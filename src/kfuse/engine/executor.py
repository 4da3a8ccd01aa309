"""FusionExecutorCache: input signature -> scheduler, params and compiled launches -> outputs.

A call's signature is everything a compiled launch depends on: each input's dtype, shape,
strides and 16-byte alignment class, the scalar inputs' types, and the target device. A
cached call only reads pointers, allocates outputs and launches. Kernels themselves are
cached by their source (backends), so different shapes with the same parameters and layout
class share one kernel.
"""

from __future__ import annotations

import threading
from typing import Any

from kfuse.engine import aliasing, canonical_store, given_outputs, output_views, program_store
from kfuse.engine.compiler import choose_scheduler, compile_fusion, stage_canonicalize
from kfuse.engine.fast_path import fast_call_for
from kfuse.engine.output_views import OutputViews
from kfuse.engine.program import KernelProgram, Program, SegmentedProgram, SegmentKernelsProgram
from kfuse.engine.segmented_replay import SegmentedReplays, SegmentTrace
from kfuse.engine.signature import layout_key, program_key
from kfuse.ir.fusion import Fusion
from kfuse.runtime import index_checks, profiling_hooks
from kfuse.runtime.info import RuntimeInfo, build_runtime_info
from kfuse.schedule.types import SchedulerParams, SchedulerType

SEEN_LAYOUTS = 64
"""Layouts an executor remembers having run once (see FusionExecutorCache._seen_layouts)."""


def _add_bounded(keys: dict[tuple, None], key: tuple, limit: int) -> None:
    """Add `key` to an insertion-ordered set, dropping the oldest key beyond `limit`."""
    keys[key] = None
    if len(keys) > limit:
        del keys[next(iter(keys))]


class FusionExecutorCache:
    """Runs one Fusion, caching its compiled form per input signature."""

    def __init__(self, fusion: Fusion, views: bool = True) -> None:
        # The compiler's first stage runs here, once per definition, not in compile_fusion:
        # every call's RuntimeInfo (its layouts and extents, keyed by the fusion's Vals) and
        # so its signature are built on the canonical fusion, before any Program is looked
        # up. It is a function of the definition alone, so the Programs below are cached by
        # input signature only, and compile_fusion takes it as it is.
        # (or read back from the disk, where an earlier process kept it: canonical_store)
        self.definition = fusion
        stored = canonical_store.load(fusion)
        if stored is None:
            self.fusion = stage_canonicalize(fusion)
            canonical_store.save(fusion, self.fusion)
        else:
            self.fusion = stored
        # Outputs that are views of other outputs (kfuse.engine.output_views): the fusion
        # compiled is the core without them, and every call's results are assembled. The
        # whole fusion runs where a call gives outputs= or pins params (`whole`).
        self.views: OutputViews | None = None
        self._whole: FusionExecutorCache | None = None
        planned = output_views.plan(self.fusion) if views else None
        if planned is not None:
            self.fusion, self.views = planned
        self._compiled: dict[tuple, Program] = {}
        self._lock = threading.Lock()
        # The Program of the last call (kfuse.engine.program: scheduler, params, launches).
        self.last_compiled: Program | None = None
        # kfuse._C.FastCallCache of the layouts seen twice, created by the first call that can
        # take the host fast path (FusionExecution.execute tries it before anything else).
        self.fast_calls: Any = None
        # The layouts that have an entry there, in the cache's order of age (it keeps the
        # newest FastCallCache.MAX_ENTRIES): a layout that misses for a reason its entry
        # already checks on every call (another current CuPy device, a scalar value out of
        # its parameter's range) must not build, and add, the same entry again on every call.
        self._fast_layouts: dict[tuple, None] = {}
        # The output positions execute returns (None: all), for the fast path's results: the
        # outputs written into inputs are not returned (kfuse.engine.aliasing).
        self.returned = aliasing.returned_positions(self.fusion)
        # Layouts the checked path has run once (insertion-ordered, at most SEEN_LAYOUTS): a
        # FastCall is built on a layout's second checked call, so that callers whose shapes
        # change on every call neither pay for building one (a third of a miss) nor push
        # the layouts they do repeat out of the cache.
        self._seen_layouts: dict[tuple, None] = {}
        # A SegmentedProgram's calls replayed per signature (kfuse.engine.segmented_replay),
        # planned on a signature's second checked call, as a FastCall is; `replays.hits`
        # counts the calls they took.
        self.replays = SegmentedReplays(self.fusion)
        self._seen_segmented: dict[tuple, None] = {}

    def execute(
        self,
        inputs: list[Any],
        *,
        stream: int | None = None,
        device: Any = None,
        params: SchedulerParams | None = None,
        try_fast: bool = True,
        outputs: Any = None,
    ) -> list[Any]:
        """Run the fusion on `inputs`; `params` pins a scheduler's parameters exactly.
        try_fast=False: the caller already tried fast_calls on these inputs (and missed).
        outputs: arrays to write the returned outputs into (kfuse.engine.given_outputs)."""
        if self.views is not None and (outputs is not None or params is not None):
            return self._run_whole(inputs, stream, device, params, outputs)
        # A PythonProfiler needs each call's RuntimeInfo, which the fast path skips.
        # An earlier call's kernel may have read a position outside its axis (found without
        # waiting for the GPU: kfuse.runtime.index_checks): this call reports it.
        index_checks.raise_pending()
        plain = params is None and device is None and profiling_hooks.active is None
        if plain and try_fast and self.fast_calls is not None:
            if outputs is None:
                hit = self.fast_calls(inputs, stream)
            else:  # taken where each given output fits exactly (engine.fast_path)
                hit = self.fast_calls.call_into(inputs, outputs, stream)
            if hit is not None:
                self.last_compiled, outputs = hit
                index_checks.raise_pending()
                return self.shown(outputs)
        keyed = None  # the replay key, computed once a call where there are replays
        if plain and self.replays:
            keyed = self.replays.key(inputs)
            replayed = self.replays(keyed, inputs, stream, outputs)
            if replayed is not None:
                self.last_compiled, results = replayed
                index_checks.raise_pending()
                return self._viewed(results)
        with profiling_hooks.execution():  # no-ops unless a PythonProfiler is recording
            info = build_runtime_info(self.fusion, inputs, device=device)
            if self.fusion.output_aliases:
                aliasing.check_targets(info)
            given = None if outputs is None else given_outputs.placed(info, outputs, self.returned)
            key = program_key(info, params)
            compiled = self._compiled.get(key)
            if compiled is None:
                started = profiling_hooks.clock()
                compiled = self._compile(info, params, key)
                aliasing.mark_in_place(compiled, info)
                profiling_hooks.compiled(profiling_hooks.clock() - started)
                with self._lock:
                    self._compiled[key] = compiled
            self.last_compiled = compiled
            # Generated kernels store into the given arrays; library calls and segments run
            # one by one return arrays of their own, copied into the given ones at the end.
            direct = given is not None and isinstance(compiled, KernelProgram)
            trace = None
            if plain and isinstance(compiled, SegmentedProgram):
                trace = self._replay_trace(inputs, keyed)
            with profiling_hooks.segment(compiled.scheduler, info):  # tags its launches
                if direct:
                    assert isinstance(compiled, KernelProgram)
                    results = compiled.run(info, stream, given)
                elif trace is not None:
                    assert isinstance(compiled, SegmentedProgram)
                    results = compiled.run(info, stream, trace[1])
                else:
                    results = compiled.run(info, stream)
            if plain and isinstance(compiled, KernelProgram):  # the others never take it
                self._remember_fast_call(inputs, compiled, info)
            if trace is not None:
                with self._lock:
                    self.replays.add(trace[0], compiled, info, trace[1])
            if self.fusion.output_aliases:
                results = aliasing.finish(info, results, stream)
            if given is not None and not direct:
                return given_outputs.copied_into(info, given, results, stream)
            return self._viewed(results)

    def shown(self, outputs: list[Any]) -> list[Any]:
        """What execute returns of a fast call's outputs: all but those written into inputs
        and not also added as ordinary outputs (kfuse.engine.aliasing), with the outputs
        made as views of others (kfuse.engine.output_views)."""
        if self.returned is not None:
            return [outputs[k] for k in self.returned]
        views = self.views  # read here, not through _viewed: every fast-path hit returns here
        return outputs if views is None else views.assembled(outputs)

    def _viewed(self, results: list[Any]) -> list[Any]:
        """The core fusion's results with the outputs made as views among them."""
        return results if self.views is None else self.views.assembled(results)

    def _run_whole(
        self, inputs: list[Any], stream: Any, device: Any, params: Any, outputs: Any
    ) -> list[Any]:
        """A call that the whole fusion runs (`whole`), its Program this one's last."""
        whole = self.whole()
        results = whole.execute(
            inputs, stream=stream, device=device, params=params, outputs=outputs
        )
        self.last_compiled = whole.last_compiled
        return results

    def whole(self) -> FusionExecutorCache:
        """The executor of the whole fusion, no output made as a view: what runs a call
        given outputs= (each given array is written by the kernels) or pinned params."""
        if self._whole is None:
            with self._lock:
                if self._whole is None:
                    self._whole = FusionExecutorCache(self.definition, views=False)
        return self._whole

    def _remember_fast_call(self, inputs: list[Any], compiled: Program, info: Any) -> None:
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

    def _replay_trace(self, inputs: list[Any], keyed: Any) -> tuple[tuple, SegmentTrace] | None:
        """(the replay key, a SegmentTrace to record the call in) on a signature's second
        checked call of a SegmentedProgram, else None: as with FastCalls, callers whose
        shapes change on every call do not pay for plans they never replay. `keyed`: the
        key execute computed when it looked for a replay (None: not computed)."""
        if keyed is None:
            keyed = self.replays.key(inputs)
        if keyed is None:
            return None
        with self._lock:
            first_time = keyed[0] not in self._seen_segmented
            if first_time:
                _add_bounded(self._seen_segmented, keyed[0], SEEN_LAYOUTS)
        return None if first_time else (keyed[0], SegmentTrace())

    def segments(self, inputs: list[Any], *, device: Any = None) -> list[Any]:
        """How the fusion runs for these inputs: a list of kfuse.engine.segmenter.Segment
        (one when a single scheduler takes the whole fusion). A segmentation is cached for
        the input signature, so a later execute reuses it."""
        info = build_runtime_info(self.fusion, inputs, device=device)
        key = program_key(info, None)
        compiled = self._compiled.get(key)
        if compiled is None:
            scheduler, _ = choose_scheduler(self.fusion, info)
            if scheduler is not None:
                return [_whole(self.fusion, scheduler.scheduler_type)]
            compiled = self._compile(info, None, key)
            with self._lock:
                self._compiled[key] = compiled
        if isinstance(compiled, (SegmentedProgram, SegmentKernelsProgram)):
            return compiled.segments()
        folded = compiled.folded if isinstance(compiled, KernelProgram) else ()
        return [_whole(self.fusion, compiled.scheduler, folded)]

    def last_cuda_source(self) -> str | None:
        """The CUDA source of the last launch's kernel(s), or None before the first run."""
        if self.last_compiled is None:
            return None
        return self.last_compiled.cuda_source()

    def _compile(self, info: RuntimeInfo, params: SchedulerParams | None, key: tuple) -> Program:
        """The Program for the signature `key` (program_key(info, params)): from the program
        store where it keeps one (the heuristics' programs only), else compiled (and kept)."""
        if params is not None:
            return compile_fusion(self.fusion, info, params, segment=True)
        stored = program_store.load(self.fusion, info, key)
        if stored is not None:
            return stored
        compiled = compile_fusion(self.fusion, info, None, segment=True)
        program_store.save(self.fusion, info, key, compiled)
        return compiled


def _whole(fusion: Fusion, scheduler_type: SchedulerType, folded: tuple[str, ...] = ()) -> Any:
    from kfuse.engine.segmenter import Segment

    reason = f"one scheduler ({scheduler_type.value}) takes the whole fusion"
    if folded:
        reason += (
            f", its reshapes, slices and cats {', '.join(folded)} folded into the kernel's "
            "operands (views of this call's layouts)"
        )
    return Segment(
        0,
        scheduler_type,
        tuple(v.name for v in fusion.inputs),
        tuple(v.name for v in fusion.outputs),
        tuple(str(e) for e in fusion.exprs),
        reason,
        fusion,
    )


__all__ = ["FusionExecutorCache"]
