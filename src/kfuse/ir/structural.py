"""The structural op table: one row (StructuralInfo) per Expr class that moves, windows or
picks elements rather than computing new values (views, resizes, indexing ops).

A row holds the IR-level facts every layer asks of such an op, so that adding one is adding
a row here plus the per-concern handlers docs/guides/add-an-op.md lists (which
tests/test_structural_ops.py checks):
* `kind`: 'view' (each output element is an input element at a position the output's
  coordinates give alone: broadcast, expand, squeeze, permute, reshape), 'resize' (a window
  of the input, new elements filled or inputs joined: slice, pad, cat) or 'indexing' (the
  input read at positions another tensor holds: index_select, gather);
* the fd.ops spelling the printer writes (`method`, `arguments`);
* shape inference (`infer`, kfuse.ir.structural_shapes), which kfuse.ir.shapes runs;
* the reference evaluation (`reference`), a function of the array backend object the
  reference passes in, so that this layer imports none (as the op table's `reference=`);
* the flags the analyses ask: `keeps_axes`, `joins`, `fill_input`, `index_input`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kfuse.ir import structural_shapes as sh
from kfuse.ir.exprs import (
    BroadcastOp,
    CatOp,
    ExpandOp,
    Expr,
    GatherOp,
    IndexSelectOp,
    PadOp,
    PermuteOp,
    ReshapeOp,
    SliceOp,
    SqueezeOp,
)
from kfuse.ir.index_ops import check_positions, op_name, positions
from kfuse.ir.resize_ops import joined, padded, slice_ranges
from kfuse.ir.values import Val

KINDS = ("view", "resize", "indexing")

# (expr, its inputs' printed operands, a function printing a tuple of Scalars (None: -1)
# as a list) -> the fd.ops call's arguments.
Arguments = Callable[[Any, list[str], Callable[[tuple], str]], str]
# (backend, expr, per input its array or scalar value, the call's extents and values,
# full(shape, value) -> an array of the result's storage) -> the output array.
Reference = Callable[[Any, Any, list[Any], Mapping[Val, Any], Callable[..., Any]], Any]


@dataclass(frozen=True)
class StructuralInfo:
    """One structural op: see the module docstring."""

    cls: type[Expr]
    kind: str  # one of KINDS
    method: str  # the fd.ops method that builds it (gather's row: also take_along_axis)
    arguments: Arguments
    infer: Callable[[Any, Mapping[Val, Any], Mapping[Val, list[sh.Origin]]], sh.Inferred]
    reference: Reference
    # The printed method where the expr's attributes choose it (take_along_axis).
    method_of: Callable[[Any], str] | None = None
    # Each output axis is an input axis or a new broadcast one (a reshape regroups them).
    keeps_axes: bool = True
    # Every tensor input's elements reach the output (cat); otherwise only input 0's do.
    joins: bool = False
    # The input whose value fills the elements no input gives (pad's value).
    fill_input: int | None = None
    # The input holding the positions read along the indexed axis (index ops).
    index_input: int | None = None

    def __post_init__(self) -> None:
        assert self.kind in KINDS, self
        assert (self.kind == "indexing") == (self.index_input is not None), self

    @property
    def is_view(self) -> bool:
        """Moves no data: every output element is an input element (no fill, no bounds)."""
        return self.kind == "view"

    @property
    def reads_positions(self) -> bool:
        """Reads its input at positions an index tensor holds."""
        return self.index_input is not None

    @property
    def changes_extents(self) -> bool:
        """Windows, fills or joins: an output axis may be a new size, not an input's."""
        return self.kind == "resize"

    def printed_method(self, expr: Expr) -> str:
        return self.method if self.method_of is None else self.method_of(expr)

    def data_inputs(self, expr: Expr) -> tuple[Val, ...]:
        """The inputs whose elements reach the output (the others are sizes, bounds, a fill
        value or positions)."""
        return expr.inputs if self.joins else expr.inputs[:1]


# ---- printing ----
def _broadcast_args(e: BroadcastOp, a: list[str], ext: Callable[[tuple], str]) -> str:
    return f"{a[0]}, is_broadcast_dim={list(e.is_new_axis)}"


def _expand_args(e: ExpandOp, a: list[str], ext: Callable[[tuple], str]) -> str:
    return f"{a[0]}, shape={ext(e.extents)}"


def _squeeze_args(e: SqueezeOp, a: list[str], ext: Callable[[tuple], str]) -> str:
    # As nvFuser's printer, squeeze_expanded only where it is needed (True).
    expanded = ", squeeze_expanded=True" if e.expanded else ""
    return f"{a[0]}, dims={list(e.dims)}{expanded}"


def _permute_args(e: PermuteOp, a: list[str], ext: Callable[[tuple], str]) -> str:
    return f"{a[0]}, dims={list(e.perm)}"


def _reshape_args(e: ReshapeOp, a: list[str], ext: Callable[[tuple], str]) -> str:
    return f"{a[0]}, new_shape={ext(e.shape)}"


def _slice_args(e: SliceOp, a: list[str], ext: Callable[[tuple], str]) -> str:
    manual = ", manual_normalization=True" if e.manual else ""
    return (
        f"{a[0]}, start_indices={ext(e.starts)}, end_indices={ext(e.stops)}, "
        f"strides={list(e.steps)}{manual}"
    )


def _pad_args(e: PadOp, a: list[str], ext: Callable[[tuple], str]) -> str:
    widths = [w for lo, hi in zip(e.lows[::-1], e.highs[::-1]) for w in (lo, hi)]
    return f"{a[0]}, pad_widths={ext(tuple(widths))}, value={a[1]}"


def _cat_args(e: CatOp, a: list[str], ext: Callable[[tuple], str]) -> str:
    return f"[{', '.join(a)}], dim={e.dim}"


def _indexed_args(e: IndexSelectOp | GatherOp, a: list[str], ext: Callable[[tuple], str]) -> str:
    return f"{a[0]}, {a[1]}, dim={e.dim}"


# ---- reference evaluation ----
def _broadcast_ref(be: Any, e: BroadcastOp, args: list, shapes: Mapping, full: Any) -> Any:
    return be.expand_dims(args[0], tuple(i for i, b in enumerate(e.is_new_axis) if b))


def _expand_ref(be: Any, e: ExpandOp, args: list, shapes: Mapping, full: Any) -> Any:
    return be.broadcast_to(args[0], shapes[e.outputs[0]])


def _squeeze_ref(be: Any, e: SqueezeOp, args: list, shapes: Mapping, full: Any) -> Any:
    # An expanded axis (squeeze_expanded) holds one value at every position: its first
    # stands for it. Every other squeezed axis has size 1 (shape inference checked).
    a = args[0]
    first = tuple(slice(0, 1) if i in e.expanded else slice(None) for i in range(a.ndim))
    return be.squeeze(a[first] if e.expanded else a, e.dims)


def _permute_ref(be: Any, e: PermuteOp, args: list, shapes: Mapping, full: Any) -> Any:
    return be.permute(args[0], e.perm)


def _reshape_ref(be: Any, e: ReshapeOp, args: list, shapes: Mapping, full: Any) -> Any:
    return be.reshape(args[0], shapes[e.outputs[0]])


def _slice_ref(be: Any, e: SliceOp, args: list, shapes: Mapping, full: Any) -> Any:
    ranges = slice_ranges(e, shapes[e.inputs[0]], shapes)
    return args[0][tuple(slice(*r) for r in ranges)]


def _pad_ref(be: Any, e: PadOp, args: list, shapes: Mapping, full: Any) -> Any:
    return padded(e, args[0], shapes, args[1], full)


def _cat_ref(be: Any, e: CatOp, args: list, shapes: Mapping, full: Any) -> Any:
    return joined(e, args, full)


def _indexed_ref(
    be: Any, e: IndexSelectOp | GatherOp, args: list, shapes: Mapping, full: Any
) -> Any:
    a, index = args[0], args[1]
    check_positions(e, index, a.shape[e.dim])  # before any read
    return a[positions(e, a.shape, index, be.arange(a))]


_ROWS = (
    StructuralInfo(
        BroadcastOp, "view", "broadcast", _broadcast_args, sh.infer_broadcast, _broadcast_ref
    ),
    StructuralInfo(ExpandOp, "view", "expand", _expand_args, sh.infer_expand, _expand_ref),
    StructuralInfo(SqueezeOp, "view", "squeeze", _squeeze_args, sh.infer_squeeze, _squeeze_ref),
    StructuralInfo(PermuteOp, "view", "permute", _permute_args, sh.infer_permute, _permute_ref),
    StructuralInfo(
        ReshapeOp,
        "view",
        "reshape",
        _reshape_args,
        sh.infer_reshape,
        _reshape_ref,
        keeps_axes=False,
    ),
    StructuralInfo(SliceOp, "resize", "slice", _slice_args, sh.infer_slice, _slice_ref),
    StructuralInfo(PadOp, "resize", "pad", _pad_args, sh.infer_pad, _pad_ref, fill_input=1),
    StructuralInfo(CatOp, "resize", "cat", _cat_args, sh.infer_cat, _cat_ref, joins=True),
    StructuralInfo(
        IndexSelectOp,
        "indexing",
        "index_select",
        _indexed_args,
        sh.infer_indexed,
        _indexed_ref,
        index_input=1,
    ),
    StructuralInfo(
        GatherOp,
        "indexing",
        "gather",
        _indexed_args,
        sh.infer_indexed,
        _indexed_ref,
        method_of=op_name,
        index_input=1,
    ),
)

STRUCTURAL: dict[type[Expr], StructuralInfo] = {row.cls: row for row in _ROWS}
"""Every structural Expr class -> its row."""


def structural_info(expr: Expr) -> StructuralInfo | None:
    """The row of `expr`'s class, or None where it is not a structural op."""
    return STRUCTURAL.get(type(expr))


def structural_classes(*kinds: str) -> tuple[type[Expr], ...]:
    """The structural Expr classes of the given kinds (all where none is given), in the
    table's order: for the isinstance tests that ask a kind."""
    return tuple(c for c, row in STRUCTURAL.items() if not kinds or row.kind in kinds)
