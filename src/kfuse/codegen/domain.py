"""Map every value a kernel computes onto one iteration domain.

A generated kernel walks one *reference domain* (the axes of a reference tensor). Every value
it needs is described by a `Use`: the Val plus a *view*, which says, for each axis of the Val,
which reference axis indexes it (or None: the axis is broadcast, index 0). Walking the fusion
backwards from the outputs assigns views through broadcasts, expands, squeezes and permutes,
so that a fusion input read through a permute becomes a kernel operand whose strides are
simply re-ordered, and an intermediate consumed through two different views is computed at
both (pointwise work is cheap to recompute; memory traffic is not).

Reduction kernels use the same machinery: their reference domain is the reduction's input
domain, and `ReductionOp` maps its output's axes to the kept reference axes.

Pointwise kernels also read index ops and pads of their inputs (`kernel_reads`): the op's
output is then a leaf, an operand read from its tensor. An index op's (index_select, gather,
take_along_axis) at the reference coordinates on every axis but the indexed one, where the
index's element at the same coordinates gives the position (`IndexedRead`); a pad's at the
coordinates less the low widths, the pad value outside the tensor (`PaddedRead`). They
also compute a cat along an axis (`CatSelect`): each element the part its coordinate falls
in, whose uses carry the part (`Use.part`) and whose leaves are read as windows of the cat's
output (`PartRead`), only where that part is selected. A generated value (full, iota:
kfuse.ir.generated) is a leaf too, with no tensor at all: computed from the element's linear
index in its own shape (`GeneratedRead`, kfuse.codegen.generated). The reduction kernels
(reduction, persistent, outer persistent, inner-outer) read generated values on their loop
domain too (`generated_reads`), where they would load an input; elsewhere a generated value
is UnsupportedExpr (the segmenter gives it a segment of its own).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from kfuse.ir.exprs import (
    BinaryOp,
    BroadcastOp,
    CastOp,
    CatOp,
    ExpandOp,
    Expr,
    GatherOp,
    GeneratedOp,
    IndexSelectOp,
    PadOp,
    PermuteOp,
    ReductionOp,
    SqueezeOp,
    TernaryOp,
    UnaryOp,
    WelfordOp,
)
from kfuse.ir.generated import GENERATORS
from kfuse.ir.structural import structural_info
from kfuse.ir.values import Scalar, TensorView, Val

View = tuple  # tuple[int | None, ...]: per Val axis, the reference axis or None


class UnsupportedExpr(Exception):
    """An expr the kernel being planned cannot contain (the scheduler turns it into a reason)."""


@dataclass(frozen=True)
class PartOf:
    """Part `index` of a cat the kernel computes (CatSelect) at view `view` (its output's):
    the part's values are its own uses, evaluated only at the coordinates that select it."""

    cat: CatOp
    index: int
    view: View

    @property
    def axis(self) -> int:
        """The reference axis of the cat's axis."""
        return cast(int, self.view[self.cat.dim])


@dataclass(frozen=True)
class Use:
    """A Val evaluated at a view of the reference domain (inside a cat's part: `part`)."""

    val: Val
    view: View
    part: PartOf | None = None

    def __repr__(self) -> str:
        return f"{self.val.name}@{self.view}"


@dataclass(frozen=True)
class IndexedRead:
    """An index op's output read by the kernel straight from the op's tensor (a fusion input):
    along every axis but `expr.dim` at the coordinates `table_view` gives (None: coordinate
    0, the indexed axis among them), along that one at the position the index's element holds
    (`index`, the index's use: a kernel operand loaded before this one)."""

    expr: IndexSelectOp | GatherOp
    table_view: View
    index: Use

    @property
    def table(self) -> TensorView:
        return cast(TensorView, self.expr.inputs[0])


@dataclass(frozen=True)
class PaddedRead:
    """A pad's output read by the kernel straight from the padded tensor (a fusion input):
    at the output's coordinates less each axis' low width, where that is an element of the
    tensor, else the pad value (`fill`, a Scalar: a constant, or one of the kernel's scalar
    parameters)."""

    expr: PadOp

    @property
    def tensor(self) -> TensorView:
        return cast(TensorView, self.expr.inputs[0])

    @property
    def fill(self) -> Scalar:
        return cast(Scalar, self.expr.inputs[1])


@dataclass(frozen=True)
class GeneratedRead:
    """A generated value's output read by the kernel: computed from the element's linear
    index in the value's own shape and the op's parameters (Scalars: constants, or kernel
    scalar parameters)."""

    expr: GeneratedOp


@dataclass(frozen=True)
class PartRead:
    """A fusion input read inside a cat's part (`part`): at the coordinates of the cat's
    output less the part's offset along the cat's axis (its window there), where that part is
    selected; elsewhere the load is skipped and `fill` (zero) stands in, which no selected
    value reads."""

    tensor: TensorView
    part: PartOf

    @property
    def fill(self) -> Scalar:
        dtype = self.tensor.dtype
        zero = False if dtype.is_boolean else 0 if dtype.is_integral else 0.0
        return Scalar("part_fill", self.tensor.dtype, zero)


@dataclass(frozen=True)
class CatSelect:
    """A cat along `expr.dim` computed by the kernel: reference axis `axis` is the cat's, and
    `guards[p]` is an input (an index into DomainMap.input_uses) read inside part p with a
    window along that axis, whose window check selects the part; None for at most one part
    that reads none (a full: a pad of a computed value, kfuse.ir.canonical_pads), which is
    then the part selected where no other's window holds."""

    expr: CatOp
    axis: int
    guards: tuple[int | None, ...]

    @property
    def default(self) -> int:
        """The part selected where no checked part's window holds: the one with no guard,
        else the last (the windows tile the axis, so the last needs no check)."""
        return self.guards.index(None) if None in self.guards else len(self.guards) - 1

    @property
    def checked(self) -> list[tuple[int, int]]:
        """(part, guard) of every part but the default, in order."""
        return [(p, k) for p, k in enumerate(self.guards) if k is not None and p != self.default]


@dataclass
class DomainMap:
    """The result of mapping a set of outputs onto a reference domain.

    uses: every (Val, view) needed, producers before consumers.
    input_uses: the uses of fusion tensor inputs (each becomes a kernel operand), and of index
    ops' outputs read from their tensors (`indexed`), each after its index's use.
    scalars: the non-constant Scalars read (each becomes a kernel parameter).
    indexed: the input uses that are indexed reads, with how they read.
    padded: the input uses that are padded reads, or reads inside a cat's part.
    generated: the input uses that are generated reads.
    cats: the uses of cats the kernel computes, with how each selects its part.
    """

    ref_rank: int
    uses: list[Use] = field(default_factory=list)
    input_uses: list[Use] = field(default_factory=list)
    scalars: list[Scalar] = field(default_factory=list)
    indexed: dict[Use, IndexedRead] = field(default_factory=dict)
    padded: dict[Use, PaddedRead | PartRead] = field(default_factory=dict)
    generated: dict[Use, GeneratedRead] = field(default_factory=dict)
    cats: dict[Use, CatSelect] = field(default_factory=dict)


def padded_read_of(expr: Expr) -> bool:
    """Whether a kernel reads `expr`'s output inside it (map_to_domain's kernel_reads): a pad
    of a fusion input."""
    return isinstance(expr, PadOp) and expr.inputs[0].definition is None


def indexed_read_of(expr: Expr) -> bool:
    """Whether a kernel reads `expr`'s output inside it (map_to_domain's indexed_reads): an
    index_select, gather or take_along_axis whose tensor and index are fusion inputs."""
    row = structural_info(expr)
    return (
        row is not None and row.reads_positions and all(v.definition is None for v in expr.inputs)
    )


def _indexed_read(expr: IndexSelectOp | GatherOp, out_view: View) -> IndexedRead:
    """How an index op's output at `out_view` is read (IndexedRead): its tensor on the output's
    coordinates but for the indexed axis (a gather's index is no larger than the tensor off
    that axis, take_along_axis broadcasts an axis of size 1: the scheduler gives an axis of
    size 1 stride 0), its index on the indexed output axis (index_select) or on all of them."""
    table, index = cast(tuple[TensorView, TensorView], expr.inputs)
    d = expr.dim
    table_view = tuple(
        None if i == d or ax.is_broadcast else out_view[i] for i, ax in enumerate(table.axes)
    )
    if isinstance(expr, IndexSelectOp):
        index_view: View = (None if index.axes[0].is_broadcast else out_view[d],)
    else:
        index_view = tuple(None if ax.is_broadcast else r for ax, r in zip(index.axes, out_view))
    return IndexedRead(expr, table_view, Use(index, index_view))


def _broadcast_view(expr: BroadcastOp, tensor: TensorView, out_view: View) -> View:
    return tuple(r for r, new in zip(out_view, expr.is_new_axis) if not new)


def _expand_view(expr: ExpandOp, tensor: TensorView, out_view: View) -> View:
    return tuple(None if ax.is_broadcast else r for ax, r in zip(tensor.axes, out_view))


def _squeeze_view(expr: SqueezeOp, tensor: TensorView, out_view: View) -> View:
    rest = iter(out_view)
    return tuple(None if i in expr.dims else next(rest) for i in range(tensor.ndim))


def _permute_view(expr: PermuteOp, tensor: TensorView, out_view: View) -> View:
    view: list[int | None] = [None] * tensor.ndim
    for i, src in enumerate(expr.perm):
        view[src] = out_view[i]
    return tuple(view)


VIEW_OPERANDS: dict[type[Expr], Callable[[Any, TensorView, View], View]] = {
    BroadcastOp: _broadcast_view,
    ExpandOp: _expand_view,
    SqueezeOp: _squeeze_view,
    PermuteOp: _permute_view,
}
"""The view ops (kfuse.ir.structural's kind 'view') a kernel maps through: the view at which
the tensor input is read when the output is at a view. A reshape regroups axes: its own
kernels handle it."""


def operand_views(expr: Expr, out_view: View) -> list[View | None]:
    """The view at which each input of `expr` is read when its output is at `out_view`.

    Scalars get None. Raises UnsupportedExpr for exprs that do not keep a one-to-one element
    mapping (reshape, reductions are handled by their own kernels).
    """
    if isinstance(expr, (UnaryOp, BinaryOp, TernaryOp, CastOp)):
        views: list[View | None] = []
        for v in expr.inputs:
            if isinstance(v, TensorView):
                views.append(
                    tuple(None if ax.is_broadcast else r for ax, r in zip(v.axes, out_view))
                )
            else:
                views.append(None)
        return views
    if isinstance(expr, GeneratedOp):
        raise UnsupportedExpr(
            f"{expr.op} {expr.outputs[0].name}: a generated value is computed only where a "
            "kernel would load an input (a pointwise kernel, a reduction's loop domain)"
        )
    tensor = expr.inputs[0]
    assert isinstance(tensor, TensorView)
    view_of = VIEW_OPERANDS.get(type(expr))
    if view_of is not None:
        return [view_of(expr, tensor, out_view)] + [None] * (len(expr.inputs) - 1)
    if isinstance(expr, (IndexSelectOp, GatherOp, PadOp)):
        raise UnsupportedExpr(
            f"{type(expr).__name__} {expr.outputs[0].name}: only pointwise kernels read index "
            "ops and pads, and only those of the kernel's inputs"
        )
    raise UnsupportedExpr(f"{type(expr).__name__} changes the element mapping")


def reduction_input_view(
    expr: ReductionOp | WelfordOp, out_view: View, reduction_axes: tuple[int, ...]
) -> View:
    """The view of a reduction's input: kept axes follow the output, reduced axes take the
    reference's reduction axes in order."""
    tensor = expr.inputs[0]
    assert isinstance(tensor, TensorView)
    kept = iter(out_view)
    reduced = iter(reduction_axes)
    return tuple(next(reduced) if i in expr.dims else next(kept) for i in range(tensor.ndim))


def map_to_domain(
    outputs: list[tuple[Val, View]],
    ref_rank: int,
    stop_at: dict[Val, View] | None = None,
    *,
    kernel_reads: bool = False,
    generated_reads: bool = False,
) -> DomainMap:
    """Collect every Use needed to compute `outputs` (each a Val with its view).

    `stop_at` lists Vals that are produced elsewhere (e.g. reduction results inside a
    persistent kernel): they are leaves here, like fusion inputs, but not kernel operands.
    `kernel_reads`: index ops and pads of fusion inputs are leaves read from their tensors
    (IndexedRead, PaddedRead; pointwise kernels), and generated values leaves computed
    (GeneratedRead), where otherwise they raise UnsupportedExpr. `generated_reads`: generated
    values alone are such leaves (the reduction kernels' loop domain).
    """
    stop_at = stop_at or {}
    result = DomainMap(ref_rank)
    seen: set[Use] = set()
    scalar_ids: set[int] = set()

    def visit(val: Val, view: View, part: PartOf | None = None) -> None:
        use = Use(val, view, part)
        if use in seen:
            return
        if isinstance(val, Scalar):
            if not val.is_constant and id(val) not in scalar_ids:
                scalar_ids.add(id(val))
                result.scalars.append(val)
            return
        seen.add(use)
        if part is not None:
            _read_in_part(use, part, val in stop_at, result)
        if val in stop_at or val.definition is None:
            if val.definition is None:
                result.input_uses.append(use)
            result.uses.append(use)
            return
        expr = val.definition
        if isinstance(expr, (ReductionOp, WelfordOp)):
            raise UnsupportedExpr(f"{type(expr).__name__} needs a reduction kernel")
        if kernel_reads and isinstance(expr, CatOp):
            if part is not None:
                raise UnsupportedExpr(f"cat {val.name}: a cat inside a cat's part")
            if view[expr.dim] is None:
                raise UnsupportedExpr(f"cat {val.name}: its axis is broadcast")
            for index, v in enumerate(expr.inputs):  # each part at the cat's coordinates
                visit(v, view, PartOf(expr, index, view))
            result.cats[use] = CatSelect(expr, view[expr.dim], ())
            result.uses.append(use)
            return
        if kernel_reads and indexed_read_of(expr):
            read = _indexed_read(cast(IndexSelectOp | GatherOp, expr), view)
            visit(read.index.val, read.index.view)  # loaded before the read that needs it
            result.indexed[use] = read
            result.input_uses.append(use)
            result.uses.append(use)
            return
        if kernel_reads and _computed_leaf(expr, use, result, visit):
            return
        if generated_reads and isinstance(expr, GeneratedOp):
            _computed_leaf(expr, use, result, visit)
            return
        in_views = operand_views(expr, view)
        if not isinstance(expr, (UnaryOp, BinaryOp, TernaryOp, CastOp)):
            # Only the tensor operand carries data; extents of expand/broadcast are shapes.
            visit(expr.inputs[0], cast(View, in_views[0]), part)  # a tensor's view
        else:
            for inp, in_view in zip(expr.inputs, in_views):
                visit(inp, () if in_view is None else in_view, part)
        result.uses.append(use)

    for val, view in outputs:
        visit(val, view)
    result.cats = {use: _guarded(use, select, result) for use, select in result.cats.items()}
    return result


def _computed_leaf(expr: Expr, use: Use, result: DomainMap, visit: Any) -> bool:
    """Record `use` as a leaf the kernel computes where `expr` is a pad of a fusion input
    (PaddedRead) or a generated value (GeneratedRead), their scalars visited as parameters;
    False for any other expr."""
    if padded_read_of(expr):
        padded = PaddedRead(cast(PadOp, expr))
        visit(padded.fill, ())  # a parameter, where it is not a constant
        result.padded[use] = padded
    elif isinstance(expr, GeneratedOp):
        for p in expr.params:
            visit(p, ())  # a parameter, where it is not a constant
        result.generated[use] = GeneratedRead(expr)
    else:
        return False
    result.input_uses.append(use)
    result.uses.append(use)
    return True


def _read_in_part(use: Use, part: PartOf, stopped: bool, result: DomainMap) -> None:
    """Record `use` (inside `part`) as a PartRead where it is a fusion input. A value made
    elsewhere (`stopped`), read in place (an indexed or padded read) or generated from its
    index (which would be the cat's, not the part's) has no window of the cat to be read
    from: UnsupportedExpr. A full is the same at every index: computed where it is."""
    expr = use.val.definition
    in_place = expr is not None and (
        indexed_read_of(expr)
        or padded_read_of(expr)
        or (isinstance(expr, GeneratedOp) and GENERATORS[expr.op].uses_index)
    )
    if stopped or in_place:
        raise UnsupportedExpr(
            f"cat {part.cat.outputs[0].name}: its part {part.index} reads {use.val.name}, "
            "which the kernel cannot read from a window of the cat"
        )
    if expr is None:
        result.padded[use] = PartRead(cast(TensorView, use.val), part)


def _guarded(cat: Use, select: CatSelect, domain: DomainMap) -> CatSelect:
    """`select` (the cat's, used as `cat`) with its guards: per part, its first input read
    with a window along the cat's axis. A part with none (every value it reads is the same
    all along that axis) gives no check that selects it: UnsupportedExpr."""
    guards: list[int | None] = []
    for index in range(len(select.expr.inputs)):
        part = PartOf(select.expr, index, cat.view)
        k = next(
            (
                k
                for k, u in enumerate(domain.input_uses)
                if u.part == part and select.axis in u.view and u not in domain.generated
            ),
            None,
        )
        if k is None and None in guards:
            raise UnsupportedExpr(
                f"cat {select.expr.outputs[0].name}: its parts {guards.index(None)} and "
                f"{index} read no input along the cat's axis"
            )
        guards.append(k)
    return CatSelect(select.expr, select.axis, tuple(guards))
