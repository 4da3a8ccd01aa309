"""The segmenter: split a fusion that no single scheduler takes into the fewest segments it
can find that each have an accepting scheduler.

Every tensor-producing expr starts as its own group (scalar exprs and SizeOps are no groups:
their values come from the parent's shape inference on the host and reach the segments as
scalar inputs). Pairs of groups are then merged, in a fixed order, while the merged group's
sub-fusion is accepted by some scheduler for the actual inputs and the group graph stays
acyclic: producer -> consumer pairs first, then groups sharing an input, then any pair.
Each merge restarts the scan, so the result does not depend on dict or set ordering.

A merge never makes a library segment (expr_eval) of a gather that a kernel reads on its own:
the framework's indexing is checked on the host, waiting for the GPU every call, where a
generated gather checks its positions on the device. A group no scheduler takes as it is may
still be a kernel's with its boundary reshapes folded into its operands (a reshape of another
segment's output is a view of it: kfuse.engine.boundary_views.folded_for_a_kernel).

Pointwise values computed from what segments read anyway (fusion inputs, library ops' outputs
and slices of them, reduction results, fusion outputs) are forwarded: their exprs join no
group, and every segment that reads such a value computes it again. Otherwise the segment
producing it would write it out at full size and its consumers read it back: a softmax over
axis 0 wrote exp(x - max) as fp32 (two bytes of x became four written and four read again)
between its max and its sum; a bf16 batch norm wrote its input once more as fp32. Where some
scheduler refuses an expr with the values it recomputes, forwarding falls back to casts and
broadcasts of fusion inputs alone, then to none.

A segment is a Fusion of its own (cloned exprs; inputs are the fusion inputs it reads, the
intermediates other segments produce and every non-constant Scalar it uses; outputs are the
values used outside it or that are fusion outputs), compiled like any fusion. Each of its Vals
remembers the parent Val it is a clone of (SegmentPlan.origin), so that the runtime gives a
segment the layouts and extents of the parent call's instead of checking and inferring them
again (kfuse.engine.segments). Fusion outputs that are fusion inputs unchanged are copied by
the framework.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, cast

from kfuse.engine.boundary_views import folded_for_a_kernel
from kfuse.errors import SchedulerError
from kfuse.ir.exprs import (
    LIBRARY_EXPRS,
    BinaryOp,
    BroadcastOp,
    CastOp,
    ExpandOp,
    Expr,
    GatherOp,
    IndexSelectOp,
    PermuteOp,
    ReductionOp,
    SliceOp,
    TernaryOp,
    UnaryOp,
    WelfordOp,
    is_tensor_expr,
)
from kfuse.ir.fusion import Fusion
from kfuse.ir.layout_ops import boundary_inputs
from kfuse.ir.values import Scalar, TensorView, Val
from kfuse.runtime.info import RuntimeInfo
from kfuse.schedule.axis_runs import axis_runs, reduction_order
from kfuse.schedule.sub_fusion import build_sub_fusion, synthetic_info
from kfuse.schedule.types import SchedulerType
from kfuse.schedule.welford_split import welford_in_two_stages


@dataclass(frozen=True)
class Segment:
    """A readable description of one segment (what fd.segments returns).

    index: position in execution order. scheduler: the SchedulerType that takes it.
    inputs / outputs: names of the values in the parent fusion. exprs: the parent's exprs it
    computes, printed. reason: why the fusion was split (the whole fusion's rejections), or
    why this segment exists. fusion: the segment's own Fusion (None for copies).
    """

    index: int
    scheduler: SchedulerType
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    exprs: tuple[str, ...]
    reason: str
    fusion: Fusion | None = field(default=None, repr=False, compare=False)

    @property
    def is_library(self) -> bool:
        """A library segment: its ops run as calls of the inputs' framework (matmul, topk,
        flash attention, ...: the expr_eval scheduler), not as generated kernels."""
        return self.scheduler is SchedulerType.expr_eval

    def __repr__(self) -> str:
        n = len(self.exprs)
        what = f"{n} expr{'s' if n != 1 else ''}" if n else "copy"
        return (
            f"Segment({self.index}, {self.scheduler.value}: "
            f"{', '.join(self.inputs) or '-'} -> {', '.join(self.outputs)}, {what})"
        )


@dataclass
class SegmentPlan:
    """One segment as the executor runs it: `fusion` with `inputs`/`outputs` (parent Vals,
    in the order of fusion.inputs / fusion.outputs). `origin`: every input of `fusion` and
    every output of its exprs -> the parent Val it is a clone of (one of the parent fusion's,
    or a value the segmenter added to it, see split_reductions)."""

    scheduler: SchedulerType
    fusion: Fusion
    exprs: tuple[Expr, ...]
    inputs: tuple[Val, ...]
    outputs: tuple[TensorView, ...]
    origin: dict[Val, Val] = field(default_factory=dict, repr=False)


@dataclass
class SegmentedFusion:
    """A fusion split into segments, in dependency order."""

    fusion: Fusion
    plans: list[SegmentPlan]
    copies: list[TensorView]  # fusion outputs that are fusion inputs unchanged
    reason: str

    def describe(self, origin: dict[Val, Val] | None = None) -> list[Segment]:
        """The segments as Segment descriptions (copies last); values named as `origin`
        maps them (a folded fusion's Vals -> the user's fusion's, boundary_views)."""
        origin = origin or {}

        def names(vals: Any) -> tuple[str, ...]:
            return tuple(origin.get(v, v).name for v in vals)

        out = []
        for i, p in enumerate(self.plans):
            out.append(
                Segment(
                    i,
                    p.scheduler,
                    names(p.inputs),
                    names(p.outputs),
                    tuple(str(e) for e in p.exprs),
                    self.reason,
                    p.fusion,
                )
            )
        for v in self.copies:
            (name,) = names((v,))
            out.append(
                Segment(
                    len(out),
                    SchedulerType.expr_eval,
                    (name,),
                    (name,),
                    (),
                    f"output {name} is input {name} unchanged: copied by the framework",
                )
            )
        return out


def segment_fusion(fusion: Fusion, info: RuntimeInfo, reason: str) -> SegmentedFusion:
    """Split `fusion` for the call `info` describes; `reason` says why it was split.

    Raises SchedulerError when an expr on its own has no scheduler.
    """
    return _Segmenter(fusion, info).run(reason)


# What the segmenter forwards, most first: every pointwise value computed from values that
# are materialized anyway; casts and broadcasts of fusion inputs; nothing.
FORWARD_POINTWISE, FORWARD_INPUT_CASTS, FORWARD_NOTHING = 2, 1, 0

_POINTWISE = (UnaryOp, BinaryOp, TernaryOp, CastOp, BroadcastOp, ExpandOp)


class _Segmenter:
    def __init__(
        self,
        fusion: Fusion,
        info: RuntimeInfo,
        split_all: frozenset[int] | set[int] = frozenset(),
        forward: int = FORWARD_POINTWISE,
    ) -> None:
        self.fusion = fusion
        self.info = info
        self.split_all = frozenset(split_all)
        self.forward = forward
        # id of each expr split_reductions made -> id of the fusion's expr it came from: a
        # made expr that no scheduler takes marks its origin for splitting one axis at a time
        # (made exprs are new objects on every run, so their own ids would never match again).
        self.origin: dict[int, int] = {}
        self.exprs = split_reductions(
            [e for e in fusion.exprs if is_tensor_expr(e)], info, self.split_all, self.origin
        )
        self.output_ids = {id(v) for v in fusion.outputs}
        self.producer = {id(o): i for i, e in enumerate(self.exprs) for o in e.outputs}
        self.forwarded = self._forwardable()
        # forwarded expr producing each forwarded value (for _with_forwarded)
        self.forwarded_producer = {id(o): i for i in self.forwarded for o in self.exprs[i].outputs}
        # A forwarded value comes with every segment reading it: depend on (and share) what it
        # is computed from instead.
        sources = [self._sources(i) for i in range(len(self.exprs))]
        self.deps = [sorted(producers) for producers, _ in sources]
        self.input_ids = [tensors for _, tensors in sources]
        # forwarded expr -> the groupable exprs that compute it again (through other ones)
        self.recomputed_by: dict[int, set[int]] = {i: set() for i in self.forwarded}
        for i in range(len(self.exprs)):
            if i not in self.forwarded:
                for j in self._forwarded_closure(i):
                    self.recomputed_by[j].add(i)
        self._accepted: dict[frozenset[int], tuple[SchedulerType | None, str]] = {}

    def _forwardable(self) -> frozenset[int]:
        """The exprs whose values each reading segment computes again (see the module
        docstring): never one whose value is a fusion output."""
        if self.forward == FORWARD_NOTHING:
            return frozenset()
        inputs = {id(v) for v in self.fusion.inputs}
        # A library op's outputs are in memory as the inputs are: a cast or a slice of one is
        # computed again by each segment reading it, not a framework cast or a copy made by
        # the library segment (its outputs are new arrays) before the kernel after it.
        library = {id(o) for e in self.exprs if isinstance(e, LIBRARY_EXPRS) for o in e.outputs}
        leaves = inputs | library
        materialized = {
            id(o) for e in self.exprs if isinstance(e, (ReductionOp, WelfordOp)) for o in e.outputs
        } | self.output_ids
        # A segment_set's input is materialized by the segment computing it and read by the
        # segment_set's own: never computed again there.
        bounds = {id(v) for v in boundary_inputs(self.fusion)}
        out: set[int] = set()
        full: set[int] = set()  # forwarded exprs computed from some fusion input
        roots: dict[int, set[TensorView]] = {}  # what a full forwarded expr reads, in the end
        for i, e in enumerate(self.exprs):
            if any(id(o) in self.output_ids or id(o) in bounds for o in e.outputs):
                continue
            tensors = [v for v in e.inputs if isinstance(v, TensorView)]
            if isinstance(e, SliceOp) and id(e.inputs[0]) in library:
                # A view, read in place (kfuse.engine.boundary_views): what is computed from
                # it is computed from the library's output.
                roots[i] = {cast(TensorView, e.inputs[0])}
                full.add(i)
                out.add(i)
                continue
            if self.forward == FORWARD_POINTWISE:
                if not isinstance(e, _POINTWISE) or not tensors:
                    continue
                if not all(
                    id(v) in leaves or id(v) in materialized or self.producer.get(id(v)) in out
                    for v in tensors
                ):
                    continue
                # A value of statistics alone (the mean from a Welford's partial results) is
                # small: one segment computes it and writes it; only its broadcast and
                # expand, which are indexing, are forwarded. What comes from a fusion input is
                # computed again.
                if any(id(v) in leaves or self.producer.get(id(v)) in full for v in tensors):
                    roots[i] = set().union(
                        *(roots.get(self.producer.get(id(v), -1), {v}) for v in tensors)
                    )
                    if self._cheaper_to_compute_again(e.outputs[0], roots[i]):
                        full.add(i)
                        out.add(i)
                elif isinstance(e, (BroadcastOp, ExpandOp)):
                    out.add(i)
            elif isinstance(e, ExpandOp) or (
                isinstance(e, (CastOp, BroadcastOp)) and len(e.inputs) == len(tensors) == 1
            ):
                (v,) = tensors
                if id(v) in leaves or self.producer.get(id(v)) in out:
                    out.add(i)
        return frozenset(out)

    def _cheaper_to_compute_again(self, value: Val, roots: set[TensorView]) -> bool:
        """Whether the segments reading `value` do better to compute it again from `roots`.
        Written by a segment of its own (r bytes of roots read, v written) and read by two
        (a reduction and the normalization after it), it moves r + 3v bytes; computed again
        by both, 2r: no more where r <= 3v. An fp32 exp(x - max) of a bf16 x: r = 2 bytes an
        element against v = 4."""

        def size(v: Val) -> int:
            return math.prod(self.info.shape(cast(TensorView, v))) * v.dtype.itemsize

        return sum(size(r) for r in roots) <= 3 * size(value)

    def _sources(self, i: int) -> tuple[set[int], frozenset[int]]:
        """(the groupable exprs expr `i` reads from, the ids of the tensors it reads), both
        through the forwarded exprs it computes again: their own inputs instead of them."""
        producers: set[int] = set()
        tensors: set[int] = set()
        for k in (i, *self._forwarded_closure(i)):
            for v in self.exprs[k].inputs:
                j = self.producer.get(id(v))
                if j in self.forwarded:
                    continue
                if j is not None:
                    producers.add(j)
                if isinstance(v, TensorView):
                    tensors.add(id(v))
        return producers, frozenset(tensors)

    # ---- the search ----
    def run(self, reason: str) -> SegmentedFusion:
        groups = [frozenset([i]) for i in range(len(self.exprs)) if i not in self.forwarded]
        for g in groups:
            scheduler, why = self.accept(g)
            e = self.exprs[min(g)]
            if (
                scheduler is None
                and isinstance(e, (ReductionOp, WelfordOp))
                and len(e.dims) > 1
                and self.origin.get(id(e), id(e)) not in self.split_all
            ):
                # Adjacent axes that are not one block in memory (a strided view): reduce
                # them one axis at a time instead.
                split = {self.origin.get(id(e), id(e))} | self.split_all
                return _Segmenter(
                    self.fusion, self.info, split_all=split, forward=self.forward
                ).run(reason)
            if scheduler is None and self.forwarded:
                # Some scheduler refuses the expr with the values it computes again: forward
                # less (in the end nothing, where each expr is accepted on its own).
                return _Segmenter(
                    self.fusion, self.info, split_all=self.split_all, forward=self.forward - 1
                ).run(reason)
            if scheduler is None:
                raise SchedulerError(
                    f"{str(self.exprs[min(g)])}: no scheduler takes this "
                    f"expr even on its own:\n  {why}"
                )
        while True:
            pair = self._next_merge(groups)
            if pair is None:
                break
            a, b = pair
            groups = [g for g in groups if g is not a and g is not b] + [a | b]
        ordered = self._topological(groups)
        plans = [self._plan(g) for g in ordered]
        produced = {id(o) for e in self.exprs for o in e.outputs}
        copies = list(dict.fromkeys(v for v in self.fusion.outputs if id(v) not in produced))
        # A folded cat's part that is a view of an input, beside parts no one kernel computes
        # with it (a reduction's), is copied into its window by a pointwise kernel of its
        # own, as the kernel writing the other parts would where they have its size: the
        # segments then merge into one program, where a framework copy would leave the cat
        # to run between kernels.
        windowed = [p for v in copies if (p := self._window_copy(v)) is not None]
        copies = [v for v in copies if all(v is not p.inputs[0] for p in windowed)]
        return SegmentedFusion(self.fusion, plans + windowed, copies, reason)

    def _window_copy(self, v: TensorView) -> SegmentPlan | None:
        """A pointwise segment writing input `v` into its window of a folded cat's output, or
        None where `v` has no window or no pointwise kernel copies it."""
        from kfuse.schedule import rejection_reason
        from kfuse.schedule.registry import scheduler_for

        if v not in self.info.output_views:
            return None
        sub, origin = build_sub_fusion([], [v], [v], self.fusion)
        pointwise = scheduler_for(SchedulerType.pointwise)
        info = synthetic_info(sub, [v], self.info, [v])
        if rejection_reason(pointwise, sub, info) is not None:
            return None
        return SegmentPlan(SchedulerType.pointwise, sub, (), (v,), (v,), origin)

    def _next_merge(self, groups: list[frozenset[int]]) -> tuple | None:
        groups = sorted(groups, key=min)
        owner = {i: g for g in groups for i in g}
        succ: dict[frozenset[int], set[frozenset[int]]] = {g: set() for g in groups}
        for g in groups:
            for i in g:
                for d in self.deps[i]:
                    if owner[d] is not g:
                        succ[owner[d]].add(g)
        edges = [(a, b) for a in groups for b in groups if b in succ[a]]
        unlinked = [
            (a, b)
            for ai, a in enumerate(groups)
            for b in groups[ai + 1 :]
            if b not in succ[a] and a not in succ[b]
        ]
        siblings = [p for p in unlinked if self._share_input(*p)]
        others = [p for p in unlinked if not self._share_input(*p)]
        for a, b in edges + siblings + others:
            if self._keeps_acyclic(a, b, succ) and self._merges(a, b):
                return a, b
        return None

    def _merges(self, a: frozenset[int], b: frozenset[int]) -> bool:
        """Whether a | b is accepted, and not as a library segment taking a gather that a
        kernel reads on its own: the framework's indexing checks its positions on the host,
        waiting for the GPU every call (an embedding over 2-D ids followed by a reshape), where
        a generated gather checks them on the device."""
        merged = self.accept(a | b)[0]
        if merged is None:
            return False
        if merged is not SchedulerType.expr_eval:
            return True
        return not any(self._generated_gather(g) for g in (a, b))

    def _generated_gather(self, members: frozenset[int]) -> bool:
        taker = self.accept(members)[0]
        return (
            taker is not None
            and taker is not SchedulerType.expr_eval
            and any(isinstance(self.exprs[i], (IndexSelectOp, GatherOp)) for i in members)
        )

    def _share_input(self, a: frozenset[int], b: frozenset[int]) -> bool:
        ins_a = frozenset().union(*(self.input_ids[i] for i in a))
        return any(ins_a & self.input_ids[i] for i in b)

    @staticmethod
    def _keeps_acyclic(
        a: frozenset[int], b: frozenset[int], succ: dict[frozenset[int], set[frozenset[int]]]
    ) -> bool:
        """No path between a and b through a third group (it would become a cycle)."""
        for src, dst in ((a, b), (b, a)):
            stack = [g for g in succ[src] if g is not dst]
            seen: set[int] = set()
            while stack:
                g = stack.pop()
                if g is dst:
                    return False
                if id(g) in seen:
                    continue
                seen.add(id(g))
                stack.extend(succ[g])
        return True

    def _topological(self, groups: list[frozenset[int]]) -> list[frozenset[int]]:
        owner = {i: g for g in groups for i in g}
        preds = {g: {owner[d] for i in g for d in self.deps[i]} - {g} for g in groups}
        done: list[frozenset[int]] = []
        left = sorted(groups, key=min)
        while left:
            g = next(g for g in left if preds[g] <= set(done))
            done.append(g)
            left.remove(g)
        return done

    # ---- acceptance ----
    def accept(self, members: frozenset[int]) -> tuple[SchedulerType | None, str]:
        """The first scheduler that takes the group's sub-fusion (cached per group)."""
        if members not in self._accepted:
            from kfuse.schedule import rejection_reason
            from kfuse.schedule.registry import SCHEDULERS

            plan = self._plan(members, scheduler=SchedulerType.none)
            info = synthetic_info(plan.fusion, plan.inputs, self.info, plan.outputs)
            reasons = []
            result: tuple[SchedulerType | None, str] = (None, "")
            for s in SCHEDULERS:
                why = rejection_reason(s, plan.fusion, info)
                if why is None:
                    result = (s.scheduler_type, "")
                    break
                reasons.append(why)
            else:
                folded = folded_for_a_kernel(plan.fusion, info)
                result = (None if folded is None else folded[1], "\n  ".join(reasons))
            self._accepted[members] = result
        return self._accepted[members]

    def _forwarded_closure(self, *members: int) -> set[int]:
        """The forwarded exprs that `members` read from, directly or through other ones."""
        needed: set[int] = set()
        stack = list(members)
        while stack:
            for v in self.exprs[stack.pop()].inputs:
                j = self.forwarded_producer.get(id(v))
                if j is not None and j not in needed:
                    needed.add(j)
                    stack.append(j)
        return needed

    def _with_forwarded(self, members: frozenset[int]) -> list[int]:
        """`members` and the forwarded exprs they read from, in fusion order."""
        return sorted(set(members) | self._forwarded_closure(*members))

    def _plan(self, members: frozenset[int], scheduler: SchedulerType | None = None) -> SegmentPlan:
        exprs = [self.exprs[i] for i in self._with_forwarded(members)]
        inside = {id(o) for e in exprs for o in e.outputs}
        inputs: list[Val] = []
        for e in exprs:
            for v in e.inputs:
                if isinstance(v, Scalar) and v.is_constant:
                    continue
                if id(v) not in inside and all(v is not u for u in inputs):
                    inputs.append(v)
        # Read by another group, or by a forwarded expr that another group computes again.
        used_outside = {
            id(v)
            for i, e in enumerate(self.exprs)
            if i not in members
            and (i not in self.forwarded or not self.recomputed_by[i] <= members)
            for v in e.inputs
        }
        # Forwarded values are computed again wherever they are read, never passed on.
        outputs = [
            o
            for i in sorted(members)
            for o in self.exprs[i].outputs
            if id(o) in used_outside or id(o) in self.output_ids
        ]
        if scheduler is None:
            scheduler = self.accept(members)[0]
        sub, origin = build_sub_fusion(exprs, inputs, outputs, self.fusion)
        return SegmentPlan(
            cast(SchedulerType, scheduler),  # the group was accepted
            sub,
            tuple(exprs),
            tuple(inputs),
            tuple(cast("list[TensorView]", outputs)),
            origin,
        )


def split_reductions(
    exprs: list[Expr],
    info: RuntimeInfo,
    one_axis_at_a_time: frozenset[int] = frozenset(),
    origin: dict[int, int] | None = None,
) -> list[Expr]:
    """Replace each sum/prod/max/min over several separate runs of axes (dims [0, 2] of a
    rank-3 tensor) by a chain of reductions, one per run, in kfuse.schedule.axis_runs'
    reduction_order (the innermost run first unless it is short).

    No kernel reduces non-adjacent axes at once, but the ops are associative, so reducing one
    run after the other gives the same result (up to floating-point order). The chain's
    intermediates get their extents in `info` so that segments can be planned around them.
    Reductions listed (by id) in `one_axis_at_a_time` are split into one axis per step.
    `origin`, when given, gets the id of every expr made here -> the id of the expr in `exprs`
    it replaces.
    """
    out: list[Expr] = []
    origin = {} if origin is None else origin
    for e in exprs:
        made = len(out)
        _split_one(e, info, one_axis_at_a_time, out)
        for new in out[made:]:
            if new is not e:
                origin[id(new)] = origin.get(id(e), id(e))
    return out


def _split_one(
    e: Expr, info: RuntimeInfo, one_axis_at_a_time: frozenset[int], out: list[Expr]
) -> None:
    """Append to `out` what split_reductions replaces `e` with (`e` itself where nothing)."""
    if isinstance(e, WelfordOp) and (len(axis_runs(e.dims)) > 1 or id(e) in one_axis_at_a_time):
        staged = (
            None
            if id(e) in one_axis_at_a_time
            else welford_in_two_stages(e, axis_runs(e.dims), info)
        )
        # The second stage's sums may span several runs themselves: split them too.
        out += split_reductions(staged, info) if staged else _welford_over_trailing_axes(e, info)
        return
    runs = axis_runs(e.dims) if isinstance(e, ReductionOp) else []
    if id(e) in one_axis_at_a_time:
        runs = [(d,) for d in sorted(cast(ReductionOp, e).dims)]
    if len(runs) < 2:
        out.append(e)
        return
    red = cast(ReductionOp, e)  # runs are only made for reductions
    current = cast(TensorView, red.inputs[0])
    shape = list(info.shape(current))
    alive = list(range(len(shape)))  # the input's axes that `current` still has, in order
    order = reduction_order(runs, shape)
    for k, run in enumerate(order):
        dims = tuple(alive.index(d) for d in run)
        if k == len(order) - 1:
            result = e.outputs[0]
        else:
            axes = tuple(ax for i, ax in enumerate(current.axes) if i not in dims)
            result = TensorView(f"{e.outputs[0].name}_part{k}", red.dtype, axes)
            info.extents[result] = tuple(
                n for i, n in enumerate(info.shape(current)) if i not in dims
            )
        out.append(dataclasses.replace(red, inputs=(current,), outputs=(result,), dims=dims))
        alive = [d for d in alive if d not in run]
        current = result  # type: ignore[assignment]


def _welford_over_trailing_axes(e: WelfordOp, info: RuntimeInfo) -> list[Expr]:
    """Welford statistics do not chain like sums, so a Welford over axes that are not one block
    in memory, where kfuse.schedule.welford_split does not apply (an empty extent; one axis at
    a time asked for), reads a permuted copy (kept axes first, reduced axes last), which a
    pointwise segment writes contiguously; the reduced axes are then the innermost block."""
    x: TensorView = e.inputs[0]  # type: ignore[assignment]
    kept = [i for i in range(x.ndim) if i not in e.dims]
    perm = tuple(kept + sorted(e.dims))
    shape = info.shape(x)
    moved = TensorView(f"{x.name}_moved", x.dtype, tuple(x.axes[p] for p in perm))
    info.extents[moved] = tuple(shape[p] for p in perm)
    permute = PermuteOp(inputs=(x,), outputs=(moved,), perm=perm)
    trailing = tuple(range(len(kept), x.ndim))
    return [permute, dataclasses.replace(e, inputs=(moved,), dims=trailing)]
