"""What a reduction kernel computes, shared by the reduction and inner_persistent schedulers.

A reduction fusion is seen on one *reference domain*: the axes of its (first) reduction's input.
Its reduced axes D and kept axes K split every value of the fusion into three kinds:

* *loop* values live on the whole domain (rank R): the prologue that feeds the reductions,
  and, in a persistent kernel, full-size outputs computed from the held row;
* *reduced* values live on the kept axes (rank R - |D|, or rank R with the reduced axes
  broadcast, as keepdim makes them): reduction results and the epilogue computed from them;
* reduction results themselves, which the loop side may read again (broadcast back over D)
  only in a persistent kernel.

Every value is mapped onto the reference domain *by position*: a rank-R value's axis i is
reference axis i, a rank-(R - |D|) value's axis i is the i-th kept axis. Reduction results may
flow only through pointwise ops, casts, broadcasts that re-insert exactly the reduced axes, and
expands; anything else is a rejection reason. A generated value (full, iota, random numbers) on
the loop domain is a loop input with no memory, computed where it would be loaded
(kfuse.codegen.generated); on the kept axes it is not supported (another segment computes it).

The layout half (from the actual inputs) merges adjacent kept axes and adjacent reduced axes
that every operand walks contiguously, giving the canonical kernel domain (kept..., reduced):
kernels see every tensor operand with that rank, the reduced axis last.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

from kfuse.codegen.domain import DomainMap, GeneratedRead, Use, View, map_to_domain
from kfuse.codegen.layout import INT32_MAX, contiguous_strides, output_layout, ref_strides
from kfuse.codegen.softmax_fold import fold_pairs, softmax_pairs
from kfuse.ir.exprs import (
    BinaryOp,
    BroadcastOp,
    CastOp,
    ExpandOp,
    Expr,
    ReductionOp,
    ReshapeOp,
    SqueezeOp,
    TernaryOp,
    UnaryOp,
    WelfordOp,
)
from kfuse.ir.fusion import Fusion
from kfuse.ir.values import TensorView, Val

_POINTWISE = (UnaryOp, BinaryOp, TernaryOp, CastOp)


class PlanError(Exception):
    """The fusion does not fit a reduction kernel; the message is the reason."""


@dataclass(frozen=True)
class ReductionPlan:
    """The structure of a reduction fusion, independent of sizes.

    reductions: ReductionOp/WelfordOp exprs in topological order (and SoftmaxStatsOp for a
    folded softmax pair, kfuse.codegen.softmax_fold).
    reduced_axes / kept_axes: reference axes. stages[k]: the uses computing reduction k's
    input on the loop domain (earlier reduction results are leaves). loop_outputs: indices of
    outputs that live on the whole domain (persistent kernels only); full_map computes them.
    row_outputs: indices of outputs on the kept axes; epilogue computes them. loop_inputs: the
    fusion-input uses read on the loop domain (union over stages and loop outputs).
    dependent_inputs: some reduction input reads an earlier reduction result.
    """

    fusion: Fusion
    reductions: tuple[Expr, ...]
    ref_rank: int
    reduced_axes: tuple[int, ...]
    kept_axes: tuple[int, ...]
    stages: tuple[DomainMap, ...]
    full_map: DomainMap
    epilogue: DomainMap
    loop_inputs: tuple[Use, ...]
    output_views: tuple[View, ...]
    loop_outputs: tuple[int, ...]
    row_outputs: tuple[int, ...]
    dependent_inputs: bool

    @property
    def reference(self) -> TensorView:
        """The first reduction's input: its shape is the reference domain."""
        tv = self.reductions[0].inputs[0]
        assert isinstance(tv, TensorView)
        return tv

    @property
    def needs_persistence(self) -> bool:
        """True when un-reduced values are needed after a reduction."""
        return self.dependent_inputs or bool(self.loop_outputs)

    @property
    def scalars(self) -> list:
        """Non-constant Scalars any part reads, each once, in a fixed order."""
        seen: list = []
        for dm in (*self.stages, self.full_map, self.epilogue):
            for s in dm.scalars:
                if not any(s is t for t in seen):
                    seen.append(s)
        return seen

    def generated_read(self, use: Use) -> GeneratedRead | None:
        """How loop input `use` is computed where it is a generated value (GeneratedRead),
        else None: it is loaded from a fusion input."""
        for dm in (*self.stages, self.full_map):
            if use in dm.generated:
                return dm.generated[use]
        return None

    def reduction_outputs(self) -> dict[Val, tuple[int, int]]:
        """Each reduction result Val -> (reduction index, output position in its expr)."""
        return {o: (k, j) for k, r in enumerate(self.reductions) for j, o in enumerate(r.outputs)}


def _describe(expr: Expr) -> str:
    op = getattr(expr, "op", None) or type(expr).__name__
    return f"{expr.outputs[0].name} = {op} of {expr.inputs[0].name}"


def positional_view(val: TensorView, rank: int, kept: tuple[int, ...]) -> View:
    """A value's view of the reference domain by position (see the module docstring)."""
    if val.ndim == rank:
        return tuple(None if ax.is_broadcast else i for i, ax in enumerate(val.axes))
    if val.ndim == len(kept):
        return tuple(None if ax.is_broadcast else kept[i] for i, ax in enumerate(val.axes))
    raise PlanError(
        f"{val.name} has rank {val.ndim}, which is neither the reduction domain's "
        f"rank {rank} nor its reduced rank {len(kept)}"
    )


def plan_reductions(fusion: Fusion, fold_softmax: bool = False) -> ReductionPlan:
    """Analyse a fusion with reductions; raises PlanError with the reason it does not fit.
    fold_softmax: a softmax's max and sum of exponentials become one online accumulator
    (kfuse.codegen.softmax_fold; the reduction scheduler's plans, not the persistent ones')."""
    reds = tuple(e for e in fusion.exprs if isinstance(e, (ReductionOp, WelfordOp)))
    if not reds:
        raise PlanError("fusion has no reduction")
    for e in fusion.exprs:
        if isinstance(e, ReshapeOp):
            raise PlanError(
                f"fusion has a reshape ({e.outputs[0].name}), which reduction "
                "kernels do not generate"
            )
    ref, rank, dims = _common_reduction_axes(reds)
    kept = tuple(i for i in range(rank) if i not in dims)
    red_outs = {o for r in reds for o in r.outputs}
    dependent = _check_dependent_exprs(fusion, red_outs, rank, dims)
    stop_at = {o: positional_view(o, rank, kept) for o in red_outs}  # type: ignore[arg-type]
    pairs = softmax_pairs(fusion, reds) if fold_softmax else {}
    accumulated: tuple[Expr, ...] = fold_pairs(fusion, reds, pairs) if pairs else reds
    # A folded sum's input reads its max, but the accumulator reads only the max's input.
    dependent_inputs = any(r.inputs[0] in dependent for r in accumulated)

    output_views, loop_outputs, row_outputs = _place_outputs(fusion, ref, dims, kept)
    stages = tuple(
        map_to_domain(
            [(r.inputs[0], positional_view(cast(TensorView, r.inputs[0]), rank, kept))],
            rank,
            stop_at,
            generated_reads=True,
        )
        for r in accumulated
    )
    full_map = map_to_domain(
        [(fusion.outputs[k], output_views[k]) for k in loop_outputs],
        rank,
        stop_at,
        generated_reads=True,
    )
    epilogue = map_to_domain(
        [(fusion.outputs[k], output_views[k]) for k in row_outputs], rank, stop_at
    )
    loop_inputs: list[Use] = []
    for dm in (*stages, full_map):
        for u in dm.input_uses:
            if u not in loop_inputs:
                loop_inputs.append(u)
    return ReductionPlan(
        fusion,
        accumulated,
        rank,
        dims,
        kept,
        stages,
        full_map,
        epilogue,
        tuple(loop_inputs),
        tuple(output_views),
        tuple(loop_outputs),
        tuple(row_outputs),
        dependent_inputs,
    )


def _common_reduction_axes(
    reds: tuple[Expr, ...],
) -> tuple[TensorView, int, tuple[int, ...]]:
    """(the first reduction's input, its rank, the reduced axes), which every reduction
    must share: a PlanError names two that differ."""
    first = reds[0]
    ref = first.inputs[0]
    assert isinstance(ref, TensorView)
    rank, dims = ref.ndim, tuple(first.dims)  # type: ignore[attr-defined]
    for r in reds[1:]:
        r_rank = cast(TensorView, r.inputs[0]).ndim
        if r_rank != rank or tuple(r.dims) != dims:  # type: ignore[attr-defined]
            raise PlanError(
                f"reductions over different axes: {_describe(first)} reduces axes "
                f"{list(dims)} of a rank-{rank} tensor, {_describe(r)} reduces "
                f"{list(r.dims)} of a rank-{r_rank} tensor"  # type: ignore[attr-defined]
            )
    return ref, rank, dims


def _place_outputs(
    fusion: Fusion, ref: TensorView, dims: tuple[int, ...], kept: tuple[int, ...]
) -> tuple[list[View], list[int], list[int]]:
    """(each output's view of the reduction domain, the outputs of the reduced domain's
    shape (written from the loop), the outputs of the kept axes (written once per row))."""
    rank = ref.ndim
    output_views: list[View] = []
    loop_outputs, row_outputs = [], []
    for k, out in enumerate(fusion.outputs):
        view = positional_view(out, rank, kept)  # type: ignore[arg-type]
        output_views.append(view)
        if any(view[i] in dims for i in range(len(view)) if view[i] is not None):
            loop_outputs.append(k)
            continue
        # A row output is written once per row, so it must have every kept axis; a
        # smaller one (a broadcast input passed through, say) is another segment's.
        spanned = {a for a in view if a is not None}
        needed = {a for a in kept if not ref.axes[a].is_broadcast}
        if not needed <= spanned <= set(kept):
            raise PlanError(
                f"output {out.name} does not span the kept axes of the "
                "reduction; it is computed in a segment of its own"
            )
        row_outputs.append(k)
    return output_views, loop_outputs, row_outputs


def _check_dependent_exprs(fusion: Fusion, red_outs: set, rank: int, dims: tuple[int, ...]) -> set:
    """The Vals computed from reduction results; rejects ops that would move their axes."""
    dependent: set = set(red_outs)
    for e in fusion.exprs:
        if isinstance(e, (ReductionOp, WelfordOp)):
            continue
        if not any(v in dependent for v in e.inputs):
            continue
        if isinstance(e, BroadcastOp):
            out = cast(TensorView, e.outputs[0])
            if out.ndim != rank or tuple(i for i, b in enumerate(e.is_new_axis) if b) != dims:
                raise PlanError(
                    f"{_describe(e)} broadcasts a reduction result to axes "
                    f"{[i for i, b in enumerate(e.is_new_axis) if b]}, not to the "
                    f"reduced axes {list(dims)}"
                )
        elif isinstance(e, SqueezeOp):
            # Back from the keepdim'd shape (rank R, reduced axes broadcast) to the kept axes:
            # the same values by position.
            if cast(TensorView, e.inputs[0]).ndim != rank or tuple(e.dims) != dims:
                raise PlanError(
                    f"{_describe(e)} squeezes axes {list(e.dims)} of a value computed from "
                    f"a reduction result, not the reduced axes {list(dims)}"
                )
        elif not isinstance(e, (*_POINTWISE, ExpandOp)):
            raise PlanError(
                f"{_describe(e)}: {type(e).__name__} of a reduction result is not "
                "supported by reduction kernels"
            )
        dependent.update(e.outputs)
    return dependent


# ---------------------------------------------------------------------------------------------
# Layout: the actual strides, merged into the canonical (kept..., reduced) kernel domain.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Operand:
    """A tensor operand over the canonical domain: strides of the kept axes, then reduced.

    row_split: for a loop input whose strides do not walk the merged row in one stride (a
    per-channel weight of a group norm's row [C/G, H, W]: strides 1, 0, 0), the (extent,
    stride) of its own row sub-axes, outermost first (their extents multiply to the row's);
    the kernel decomposes the row index over them. Its red_stride is then the first non-zero
    one of those strides, so it counts as walking the row; it never reads the row in vectors.
    """

    data_ptr: int
    itemsize: int
    strides: tuple[int, ...]
    row_split: tuple[tuple[int, int], ...] = ()

    @property
    def red_stride(self) -> int:
        return self.strides[-1]

    def max_offset(self, sizes: tuple[int, ...]) -> int:
        """The largest element offset the kernel can reach through this operand."""
        if not self.row_split:
            return sum((n - 1) * abs(s) for n, s in zip(sizes, self.strides) if n > 0)
        kept = sum((n - 1) * abs(s) for n, s in zip(sizes[:-1], self.strides) if n > 0)
        return kept + sum((n - 1) * abs(s) for n, s in self.row_split if n > 0)

    @property
    def kept_strides(self) -> tuple[int, ...]:
        return self.strides[:-1]


@dataclass(frozen=True)
class ReductionLayout:
    """One call's operands over the canonical domain: sizes = (*kept_sizes, red_size)."""

    sizes: tuple[int, ...]
    loop: tuple[Operand, ...]  # plan.loop_inputs
    row: tuple[Operand, ...]  # plan.epilogue.input_uses
    outputs: tuple[Operand, ...]  # fusion outputs

    @property
    def rank(self) -> int:
        return len(self.sizes)

    @property
    def red_size(self) -> int:
        return self.sizes[-1]

    @property
    def kept_sizes(self) -> tuple[int, ...]:
        return self.sizes[:-1]

    @property
    def n_rows(self) -> int:
        return math.prod(self.kept_sizes)

    def needs_int64(self) -> bool:
        """True when an offset or element count does not fit int32."""
        if self.n_rows * self.red_size > INT32_MAX:
            return True
        return any(
            op.max_offset(self.sizes) > INT32_MAX for op in self.loop + self.row + self.outputs
        )


def reduction_layout(
    plan: ReductionPlan,
    info: object,
    output_ptrs: list[int] | None = None,
    *,
    split_rows: bool = False,
) -> ReductionLayout:
    """The operands of this call on the canonical domain. Raises PlanError when the reduced
    axes cannot be merged into one (non-adjacent, or strided differently per operand).
    split_rows: a loop input that alone does not merge them is read through sub-axes of its
    own (Operand.row_split) instead, if every other operand merges them (the kernel's
    generator decomposes the row index: the inner persistent kernel's does)."""
    rank = plan.ref_rank
    ref_shape = tuple(info.shape(plan.reference))  # type: ignore[attr-defined]
    for r in plan.reductions[1:]:
        shape = tuple(info.shape(r.inputs[0]))  # type: ignore[attr-defined]
        if shape != ref_shape:
            raise PlanError(
                f"reduction inputs have different shapes ({r.inputs[0].name} is "
                f"{shape}, {plan.reference.name} is {ref_shape})"
            )
    for out, view in zip(plan.fusion.outputs, plan.output_views):
        want = tuple(1 if a is None else ref_shape[a] for a in view)
        if tuple(info.shape(out)) != want:  # type: ignore[attr-defined]
            raise PlanError(
                f"output {out.name} has shape {info.shape(out)}, which does not "  # type: ignore[attr-defined]
                f"match the reduction domain {ref_shape}"
            )
        # Kernels write an output from the domain's points: those of its row, or for an
        # output along the reduced axes, every point. One that broadcasts an empty axis of
        # those would have elements no point writes.
        along_row = any(a in view for a in plan.reduced_axes)
        axes = plan.kept_axes + (plan.reduced_axes if along_row else ())
        empty = [a for a in axes if ref_shape[a] == 0 and a not in view]
        if empty and math.prod(want) > 0:
            raise PlanError(
                f"output {out.name} has {math.prod(want)} element(s), but the "
                f"reduction domain {ref_shape} is empty along axis {empty[0]}, "
                "which it broadcasts; it is computed in a segment of its own"
            )

    def input_operand(use: Use) -> tuple[int, int, tuple[int, ...]]:
        if plan.generated_read(use) is not None:  # no memory: its own contiguous strides
            own = contiguous_strides(tuple(info.shape(use.val)))  # type: ignore[attr-defined]
            return 0, use.val.dtype.itemsize, ref_strides(use.view, own, rank)
        lay = info.layouts[use.val]  # type: ignore[attr-defined]
        return lay.data_ptr, use.val.dtype.itemsize, ref_strides(use.view, lay.strides, rank)

    raw = [input_operand(u) for u in plan.loop_inputs]
    raw += [input_operand(u) for u in plan.epilogue.input_uses]
    for k, (out, view) in enumerate(zip(plan.fusion.outputs, plan.output_views)):
        strides, offset = output_layout(info, out)
        ptr = (256 if output_ptrs is None else output_ptrs[k]) + offset
        raw.append((ptr, out.dtype.itemsize, ref_strides(view, strides, rank)))
    kept_sizes, kept_strides = _merge(plan.kept_axes, ref_shape, [s for _, _, s in raw])
    n_loop, n_row = len(plan.loop_inputs), len(plan.epilogue.input_uses)
    split = _split_operands(plan, ref_shape, [s for _, _, s in raw], n_loop) if split_rows else {}
    merged = [s for k, (_, _, s) in enumerate(raw) if k not in split]
    red_sizes, merged_red = _merge(plan.reduced_axes, ref_shape, merged)
    regular = iter(merged_red)
    red_strides = [
        [next(s for _, s in split[k] if s != 0)] if k in split else next(regular)
        for k in range(len(raw))
    ]
    if len(red_sizes) != 1:
        raise PlanError(
            f"the reduced axes {list(plan.reduced_axes)} of {plan.reference.name} "
            f"(shape {ref_shape}) are not one contiguous block in memory; reductions "
            "over non-adjacent or differently strided axes are not supported"
        )
    operands = tuple(
        Operand(p, size, tuple(ks) + tuple(rs), split.get(k, ()))
        for k, ((p, size, _), ks, rs) in enumerate(zip(raw, kept_strides, red_strides))
    )
    return ReductionLayout(
        tuple(kept_sizes) + tuple(red_sizes),
        operands[:n_loop],
        operands[n_loop : n_loop + n_row],
        operands[n_loop + n_row :],
    )


def _split_operands(
    plan: ReductionPlan, shape: tuple[int, ...], strides: list[tuple[int, ...]], n_loop: int
) -> dict[int, tuple[tuple[int, int], ...]]:
    """Loop inputs (indices < n_loop) whose strides alone do not merge the reduced axes into
    one -> their own row sub-axes; {} unless every such operand is a loop input broadcast
    along part of the row (a weight: the values that vary along all of it, read in vectors,
    must merge, so a layout that makes them jump is still a rejection) and some operand
    merges them."""
    own = [_merge(plan.reduced_axes, shape, [s]) for s in strides]
    apart = [k for k, (sizes, _) in enumerate(own) if len(sizes) > 1]
    if not apart or len(apart) == len(strides):
        return {}
    if any(k >= n_loop or 0 not in own[k][1][0] for k in apart):
        return {}
    return {k: tuple(zip(own[k][0], own[k][1][0])) for k in apart}


def _merge(
    axes: tuple[int, ...], shape: tuple[int, ...], strides: list[tuple[int, ...]]
) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 axes of `axes` and merge neighbours every operand walks contiguously.
    Always returns at least one axis (size 1, stride 0 when there is none)."""
    keep = [a for a in axes if shape[a] != 1]
    if any(shape[a] == 0 for a in axes):
        keep = [a for a in axes if shape[a] == 0][:1]  # an empty group: one empty axis
    sizes: list[int] = []
    out: list[list[int]] = [[] for _ in strides]
    for a in keep:
        if sizes and all(o[-1] == s[a] * shape[a] for o, s in zip(out, strides)):
            sizes[-1] *= shape[a]
            for o, s in zip(out, strides):
                o[-1] = s[a]
            continue
        sizes.append(shape[a])
        for o, s in zip(out, strides):
            o.append(s[a])
    if not sizes:
        sizes = [1]
        out = [[0] for _ in strides]
    return sizes, out


def vector_ok(op: Operand, axis: int, vector: int, sizes: tuple[int, ...]) -> bool:
    """Whether `op` can be read along canonical `axis` in aligned vectors of `vector`."""
    if op.strides[axis] != 1 or (op.row_split and axis == len(op.strides) - 1):
        return False
    if vector == 1:
        return True
    if op.data_ptr % min(16, vector * op.itemsize) != 0:
        return False
    return all(s % vector == 0 for i, s in enumerate(op.strides) if i != axis and sizes[i] != 1)
