"""How the inner_outer_persistent scheduler sees a fusion: a *row side* and a *column side*.

A normalization's backward reduces the same values two ways: over each row (for dx: the
row sums that the row's gradient needs again) and over the rows (for dweight, dbias: one sum
per column). The first is an inner persistent kernel's job; the second reduces the kept
axes of that kernel. Both read the same data, so one pass does both: each thread sums the
column values of the rows it walks (it holds the same columns of every row), writes one
partial per block, and a small finalize kernel combines the partials per column.

The split is made on the IR, as two sub-fusions with the parent's Vals mapped onto them:

* row side (`main`): every expr but the column side's, with the parent's inputs (same
  order), the parent's other outputs, then each column reduction's input as an extra output
  (full size; the kernel accumulates it instead of storing it);
* column side (`columns`): the column reductions (over exactly the row side's kept axes)
  and the pointwise ops from their results to the column outputs (a cast to bf16, say);
  its inputs are the column reductions' inputs, then the Scalars the ops read.

Rows are the row side's reduction domain; columns are its reduced axes, which are the column
side's kept axes, so both number a column the same way (reduction_layout merges both into
one axis, checked by the scheduler).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from kfuse.ir.exprs import BinaryOp, CastOp, Expr, ReductionOp, TernaryOp, UnaryOp, WelfordOp
from kfuse.ir.fusion import Fusion
from kfuse.ir.values import Scalar, TensorView, Val
from kfuse.schedule.sub_fusion import build_sub_fusion
from kfuse.schedule.types import Rejection

COLUMN_OPS = ("sum", "max", "min")
"""Column reductions a block's partial can be combined for (prod too, but no norm has one)."""

_POINTWISE = (UnaryOp, BinaryOp, TernaryOp, CastOp)


@dataclass(frozen=True)
class InnerOuterSplit:
    """A fusion as a row side and a column side (see the module docstring).

    main_outputs[i]: the parent output index of main.outputs[i] for its first
    len(main_outputs) outputs; the rest are the column reductions' inputs, in the order of
    columns.inputs. column_outputs[i]: the parent output index of columns.outputs[i].
    parent_vals: id of a sub-fusion Val -> the parent Val it stands for (inputs, Scalars).
    """

    fusion: Fusion
    main: Fusion
    columns: Fusion
    main_outputs: tuple[int, ...]
    column_outputs: tuple[int, ...]
    column_inputs: tuple[TensorView, ...]  # parent Vals: the column reductions' inputs
    parent_vals: dict[int, Val]

    @property
    def accumulated(self) -> tuple[int, ...]:
        """The main outputs the kernel accumulates per column instead of storing."""
        first = len(self.main_outputs)
        return tuple(range(first, first + len(self.column_inputs)))


def split_inner_outer(fusion: Fusion) -> InnerOuterSplit:
    """The split of `fusion`; Rejection with the reason when it has no such shape."""
    reds = [e for e in fusion.exprs if isinstance(e, (ReductionOp, WelfordOp))]
    groups: dict[tuple[int, tuple[int, ...]], list[Expr]] = {}
    for r in reds:
        rank = cast(TensorView, r.inputs[0]).ndim
        groups.setdefault((rank, tuple(r.dims)), []).append(r)
    if len(groups) != 2:
        raise Rejection(
            "inner_outer_persistent takes fusions with reductions over two sets of axes "
            f"(over the rows and over the columns); this one has {len(groups)}"
        )
    (rank_a, dims_a), (rank_b, dims_b) = groups
    if rank_a != rank_b or set(dims_a) & set(dims_b) or len(dims_a) + len(dims_b) != rank_a:
        raise Rejection(
            f"the reductions over axes {list(dims_a)} (rank {rank_a}) and {list(dims_b)} "
            f"(rank {rank_b}) are not over complementary axes of one domain"
        )
    sides = {key: _column_side(fusion, group) for key, group in groups.items()}
    candidates = [key for key, side in sides.items() if side is not None]
    if not candidates:
        raise Rejection(
            "neither set of reductions only feeds outputs through pointwise ops (a column "
            "reduction's results must not be used again by the rest of the fusion, and its "
            "input must span every column)"
        )
    # Both could be the column side (a row sum and a column sum of one input): the rows are
    # then the reductions over the last axis.
    inner_last = [key for key in candidates if rank_a - 1 not in key[1]]
    outer_key = inner_last[0] if inner_last else candidates[0]
    column_exprs = cast("list[Expr]", sides[outer_key])
    return _build(fusion, groups[outer_key], column_exprs)


def _column_side(fusion: Fusion, group: list[Expr]) -> list[Expr] | None:
    """The exprs from these reductions to the outputs (the reductions first), or None when
    they are not a column side: Welford or an op partials cannot combine, a result used by
    anything but pointwise ops on the way to outputs, or those ops reading other tensors."""
    if any(not isinstance(r, ReductionOp) or r.op not in COLUMN_OPS for r in group):
        return None
    for r in group:
        # A column is one of the row side's reduced axes: a column reduction's input must
        # span them all. One broadcast along a kept axis (a row sum broadcast back, say)
        # has a column side of extent 1 where the rows have many columns.
        src = cast(TensorView, r.inputs[0])
        reduced = cast(ReductionOp, r).dims
        if any(a.is_broadcast for k, a in enumerate(src.axes) if k not in reduced):
            return None
    side: list[Expr] = list(group)
    inside = {id(o) for r in group for o in r.outputs}
    for e in fusion.exprs:
        if e in group or not any(id(v) in inside for v in e.inputs):
            continue
        if not isinstance(e, _POINTWISE):
            return None
        for v in e.inputs:
            if isinstance(v, TensorView) and id(v) not in inside:
                return None
        side.append(e)
        inside.update(id(o) for o in e.outputs)
    outputs = {id(o) for o in fusion.outputs}
    for e in fusion.exprs:
        if e in side:
            continue
        if any(id(v) in inside for v in e.inputs):
            return None  # the rest of the fusion reads a column value
    # Every column value ends in an output (dead ones were pruned by Fusion.finalize).
    produced = [o for e in side for o in e.outputs]
    if not any(id(o) in outputs for o in produced):
        return None
    return side


def _build(fusion: Fusion, group: list[Expr], column_exprs: list[Expr]) -> InnerOuterSplit:
    column_ids = {id(e) for e in column_exprs}
    main_exprs = [e for e in fusion.exprs if id(e) not in column_ids]
    if not any(isinstance(e, (ReductionOp, WelfordOp)) for e in main_exprs):
        raise Rejection("no reduction over the rows")
    produced = {id(o) for e in column_exprs for o in e.outputs}
    main_outputs = tuple(k for k, o in enumerate(fusion.outputs) if id(o) not in produced)
    column_outputs = tuple(k for k, o in enumerate(fusion.outputs) if id(o) in produced)
    column_inputs: list[TensorView] = []
    for r in group:
        src = cast(TensorView, r.inputs[0])
        if all(src is not v for v in column_inputs):
            column_inputs.append(src)
    scalars: list[Val] = []
    for e in column_exprs:
        for v in e.inputs:
            if isinstance(v, Scalar) and not v.is_constant and all(v is not s for s in scalars):
                scalars.append(v)
    main, main_origin = build_sub_fusion(
        main_exprs,
        list(fusion.inputs),
        [fusion.outputs[k] for k in main_outputs] + list[Val](column_inputs),
        fusion,
    )
    columns, column_origin = build_sub_fusion(
        column_exprs,
        [*column_inputs, *scalars],
        [fusion.outputs[k] for k in column_outputs],
        fusion,
    )
    parent_vals = {id(v): old for v, old in [*main_origin.items(), *column_origin.items()]}
    return InnerOuterSplit(
        fusion,
        main,
        columns,
        main_outputs,
        column_outputs,
        tuple(column_inputs),
        parent_vals,
    )


__all__ = ["InnerOuterSplit", "split_inner_outer"]
