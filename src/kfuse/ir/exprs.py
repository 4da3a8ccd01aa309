"""Exprs of the Fusion IR: one frozen class per kind, each with `inputs` and `outputs` tuples.

Attributes beyond inputs/outputs are listed in each class' `ATTRS` (used by printing and by
structural equality). Scalars an Expr needs (ExpandOp extents, ReshapeOp shape entries,
SliceOp bounds, PadOp widths) are also among its `inputs`, after the tensor, so the expr list is
topologically ordered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from kfuse.dtypes import DataType
from kfuse.ir.ops import OPS
from kfuse.ir.values import Scalar, TensorView, Val


@dataclass(frozen=True, eq=False, kw_only=True)
class Expr:
    """Base class: `inputs` and `outputs` are tuples of Vals."""

    inputs: tuple[Val, ...]
    outputs: tuple[Val, ...]
    ATTRS: ClassVar[tuple[str, ...]] = ()

    @property
    def input(self) -> Val:
        """The first input (the tensor for single-tensor ops)."""
        return self.inputs[0]

    @property
    def output(self) -> Val:
        """The first output."""
        return self.outputs[0]

    def attributes(self) -> dict[str, Any]:
        """This expr's attributes by name (excluding inputs and outputs)."""
        return {name: getattr(self, name) for name in self.ATTRS}

    def _math(self) -> str:
        args = ", ".join(_operand(v) for v in self.inputs)
        attrs = ", ".join(f"{k}={_attr(v)}" for k, v in self.attributes().items())
        return f"{type(self).__name__}({args}{', ' if attrs else ''}{attrs})"

    def __str__(self) -> str:
        outs = ", ".join(str(v) for v in self.outputs)
        return f"{outs} = {self._math()}"


def _operand(v: Val) -> str:
    if isinstance(v, Scalar) and v.is_constant:
        return repr(v.value)
    return v.name


def _attr(v: Any) -> str:
    if isinstance(v, tuple):
        return "(" + ", ".join(_attr(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, Val):
        return _operand(v)
    return repr(v)


@dataclass(frozen=True, eq=False, kw_only=True)
class UnaryOp(Expr):
    """out = op(in); `op` is a name from kfuse.ir.ops.OPS with arity 1."""

    op: str
    ATTRS: ClassVar[tuple[str, ...]] = ("op",)

    def _math(self) -> str:
        return f"{self.op}({_operand(self.inputs[0])})"


@dataclass(frozen=True, eq=False, kw_only=True)
class BinaryOp(Expr):
    """out = op(lhs, rhs); operands are TensorViews of equal rank or Scalars."""

    op: str
    ATTRS: ClassVar[tuple[str, ...]] = ("op",)

    def _math(self) -> str:
        a, b = (_operand(v) for v in self.inputs)
        infix = OPS[self.op].infix
        if infix:
            return f"{a} {infix} {b}"
        return f"{self.op}({a}, {b})"


@dataclass(frozen=True, eq=False, kw_only=True)
class TernaryOp(Expr):
    """out = op(a, b, c) for where(cond, x, y), clamp(x, lo, hi), lerp(start, end, weight)."""

    op: str
    ATTRS: ClassVar[tuple[str, ...]] = ("op",)

    def _math(self) -> str:
        return f"{self.op}({', '.join(_operand(v) for v in self.inputs)})"


@dataclass(frozen=True, eq=False, kw_only=True)
class CastOp(Expr):
    """out = (dtype) in; works on TensorViews and Scalars."""

    dtype: DataType
    ATTRS: ClassVar[tuple[str, ...]] = ("dtype",)

    def _math(self) -> str:
        return f"cast<{self.dtype.value}>({_operand(self.inputs[0])})"


@dataclass(frozen=True, eq=False, kw_only=True)
class SegmentSetOp(CastOp):
    """out = in, computed in a segment other than the one producing `in`: a segment
    boundary the user asks for (fd.ops.segment_set). A cast to the input's own dtype, so
    that every layer that computes casts computes it; the segmenter and the schedulers read
    the class (kfuse.ir.layout_ops)."""

    def _math(self) -> str:
        return f"segment_set({_operand(self.inputs[0])})"


@dataclass(frozen=True, eq=False, kw_only=True)
class StrideOrderOp(CastOp):
    """out = in, allocated in the memory order `order` where `out` is a fusion output
    (fd.ops.stride_order; order[i] is the rank of axis i's stride, 0 the fastest, nvFuser's
    convention). A cast to the input's own dtype elsewhere."""

    order: tuple[int, ...]
    ATTRS: ClassVar[tuple[str, ...]] = ("dtype", "order")

    def _math(self) -> str:
        return f"stride_order({_operand(self.inputs[0])}, {list(self.order)})"


@dataclass(frozen=True, eq=False, kw_only=True)
class BroadcastOp(Expr):
    """Insert broadcast axes: the output has len(is_new_axis) axes; positions marked True are
    new broadcast axes, the input's axes fill the False positions in order."""

    is_new_axis: tuple[bool, ...]
    ATTRS: ClassVar[tuple[str, ...]] = ("is_new_axis",)


@dataclass(frozen=True, eq=False, kw_only=True)
class ExpandOp(Expr):
    """Expand broadcast axes: extents[i] is None (axis kept as is) or the Scalar extent that
    broadcast axis i takes. The output axis is then a non-broadcast axis whose data is read
    with stride 0 from the input. inputs = (tensor, *the non-None extents in axis order)."""

    extents: tuple[Scalar | None, ...]
    ATTRS: ClassVar[tuple[str, ...]] = ("extents",)


@dataclass(frozen=True, eq=False, kw_only=True)
class SqueezeOp(Expr):
    """Remove the listed axes (sorted). Each is a broadcast axis of the input; or an axis of
    size 1 whose size the definition does not fix (a symbolic one: shape inference checks
    per call that it is 1, as nvFuser checks when it concretizes); or one of `expanded`,
    a broadcast axis an expand gave an extent, removed whatever that extent
    (fd.ops.squeeze's squeeze_expanded: its values are the same all along it)."""

    dims: tuple[int, ...]
    expanded: tuple[int, ...] = ()
    ATTRS: ClassVar[tuple[str, ...]] = ("dims", "expanded")


@dataclass(frozen=True, eq=False, kw_only=True)
class PermuteOp(Expr):
    """out axis i = in axis perm[i] (torch.permute's convention)."""

    perm: tuple[int, ...]
    ATTRS: ClassVar[tuple[str, ...]] = ("perm",)


@dataclass(frozen=True, eq=False, kw_only=True)
class ReshapeOp(Expr):
    """Row-major reshape to `shape`: Int Scalars, at most one of them the constant -1 (inferred
    from the element count). inputs = (tensor, *the non-constant Scalars of shape)."""

    shape: tuple[Scalar, ...]
    ATTRS: ClassVar[tuple[str, ...]] = ("shape",)


@dataclass(frozen=True, eq=False, kw_only=True)
class SliceOp(Expr):
    """Every step-th element of [start, stop) along each axis (Python's slicing, step >= 1).
    starts and stops are Int Scalars (constants or values of the call), steps ints. Unless
    `manual`, each bound is normalized at run time as Python and nvFuser do: a negative one
    counts from the axis' end, then both are clamped to [0, extent] and the stop to at least
    the start (kfuse.ir.resize_ops.slice_ranges). `manual` (nvFuser's manual_normalization) takes
    them as given; a call whose bounds are not 0 <= start <= stop <= extent is an
    InputError. inputs = (tensor, *the non-constant Scalars of starts and stops)."""

    starts: tuple[Scalar, ...]
    stops: tuple[Scalar, ...]
    steps: tuple[int, ...]
    manual: bool
    ATTRS: ClassVar[tuple[str, ...]] = ("starts", "stops", "steps", "manual")


@dataclass(frozen=True, eq=False, kw_only=True)
class PadOp(Expr):
    """Each axis widened by lows[i] elements before it and highs[i] after it (Int Scalars;
    negative ones crop), the new elements `value`: out[j] = x[j - low] where that is an
    element of x, else value. inputs = (tensor, value (a Scalar of the tensor's dtype), *the
    non-constant Scalars of lows and highs)."""

    lows: tuple[Scalar, ...]
    highs: tuple[Scalar, ...]
    ATTRS: ClassVar[tuple[str, ...]] = ("lows", "highs")


@dataclass(frozen=True, eq=False, kw_only=True)
class CatOp(Expr):
    """The input tensors (one dtype, one rank) one after another along axis `dim`; every
    other axis has one extent in all of them."""

    dim: int
    ATTRS: ClassVar[tuple[str, ...]] = ("dim",)


@dataclass(frozen=True, eq=False, kw_only=True)
class IndexSelectOp(Expr):
    """inputs = (tensor, index): the tensor along axis `dim` at the positions the 1-D
    integer index holds, each in [0, the axis' size) (checked per call)."""

    dim: int
    ATTRS: ClassVar[tuple[str, ...]] = ("dim",)


@dataclass(frozen=True, eq=False, kw_only=True)
class GatherOp(Expr):
    """inputs = (tensor, index) of one rank: out[..., j, ...] = tensor[..., index[..., j,
    ...], ...] along axis `dim`. The other axes are the index's, each no larger than the
    tensor's (torch.gather), or with `broadcast` the two broadcast together
    (take_along_axis). Positions are in [0, the axis' size) (checked per call)."""

    dim: int
    broadcast: bool
    ATTRS: ClassVar[tuple[str, ...]] = ("dim", "broadcast")


@dataclass(frozen=True, eq=False, kw_only=True)
class GeneratedOp(Expr):
    """A tensor made from no tensor (a factory): each element is the generator `op` (a row of
    kfuse.ir.generated.GENERATORS) of the element's linear index in `shape`, row-major, and
    of the Scalars `params` (full's value; iota's start and step). `shape`: Int Scalars, a
    constant 1 making a broadcast axis. inputs = the non-constant Scalars of shape and
    params, in that order."""

    op: str
    shape: tuple[Scalar, ...]
    params: tuple[Scalar, ...]
    dtype: DataType
    ATTRS: ClassVar[tuple[str, ...]] = ("op", "shape", "params", "dtype")


@dataclass(frozen=True, eq=False, kw_only=True)
class ReductionOp(Expr):
    """Reduce `dims` (sorted, input axis indices) away with op in sum|prod|max|min.

    The input, output and accumulation dtype are all `dtype` (the frontend casts first).
    Empty reductions give the identity: 0, 1, -inf/lowest, +inf/highest. max/min propagate NaN.
    """

    op: str
    dims: tuple[int, ...]
    dtype: DataType
    ATTRS: ClassVar[tuple[str, ...]] = ("op", "dims", "dtype")


@dataclass(frozen=True, eq=False, kw_only=True)
class WelfordOp(Expr):
    """Welford reduction of `dims`: outputs (avg, m2, count), all with the reduced shape.

    avg and m2 (sum of squared deviations from the mean) have the input's floating dtype,
    count is Int. When the reduced extent is 0, avg and m2 are NaN and count 0.
    """

    dims: tuple[int, ...]
    ATTRS: ClassVar[tuple[str, ...]] = ("dims",)


@dataclass(frozen=True, eq=False, kw_only=True)
class ScanOp(Expr):
    """An inclusive scan along axis `dim`: out[..., j, ...] = in[..., 0, ...] op ... op
    in[..., j, ...], with op "sum", "prod", "max" or "min" (fd.ops.cumsum, cumprod, cummax,
    cummin: nvFuser's scan). The output has the input's shape and dtype (nvFuser's rule: no
    promotion); Half and BFloat16 are accumulated in float and each element rounded once
    (torch's), integers wrap around, max and min propagate NaN. An empty axis gives an
    empty output. kfuse.ir.scan_ops builds it."""

    op: str
    dim: int
    ATTRS: ClassVar[tuple[str, ...]] = ("op", "dim")


@dataclass(frozen=True, eq=False, kw_only=True)
class SizeOp(Expr):
    """out (Int Scalar) = extent of axis `dim` of the input TensorView."""

    dim: int
    ATTRS: ClassVar[tuple[str, ...]] = ("dim",)


@dataclass(frozen=True, eq=False, kw_only=True)
class MatmulOp(Expr):
    """out = a @ b with torch.matmul semantics for operands of rank >= 2: a [..., n, k],
    b [..., k, m] -> [batch..., n, m], the batch axes right-aligned and broadcast. Both
    operands and the output have one floating dtype. Run by a library (expr_eval), never
    generated."""

    ATTRS: ClassVar[tuple[str, ...]] = ()

    def _math(self) -> str:
        a, b = (_operand(v) for v in self.inputs)
        return f"matmul({a}, {b})"


@dataclass(frozen=True, eq=False, kw_only=True)
class LinearOp(Expr):
    """out = x @ w.T (+ bias), torch.nn.functional.linear: x [..., k], w [m, k], bias [m]
    (optional, the third input) -> [..., m]. One floating dtype throughout. Run by a library
    (expr_eval), never generated."""

    ATTRS: ClassVar[tuple[str, ...]] = ()

    def _math(self) -> str:
        return f"linear({', '.join(_operand(v) for v in self.inputs)})"


@dataclass(frozen=True, eq=False, kw_only=True)
class TopKOp(Expr):
    """outputs (values, indices): the k largest (smallest unless `largest`) elements of the
    input along axis `dim` and their positions there (Int), torch.topk. inputs = (tensor, k),
    k an Int Scalar (0 <= k <= the axis' size, checked per call). With `sorted` the k come in
    order (largest first when `largest`); without, in an order the library picks. Run by a
    library (expr_eval), never generated."""

    dim: int
    largest: bool
    sorted: bool
    ATTRS: ClassVar[tuple[str, ...]] = ("dim", "largest", "sorted")


@dataclass(frozen=True, eq=False, kw_only=True)
class ArgsortOp(Expr):
    """out (Int) = the positions that sort the input along axis `dim` (torch.argsort):
    ascending unless `descending`, NaN counted as the largest value; with `stable`, equal
    elements keep their order. Run by a library (expr_eval), never generated."""

    dim: int
    descending: bool
    stable: bool
    ATTRS: ClassVar[tuple[str, ...]] = ("dim", "descending", "stable")


@dataclass(frozen=True, eq=False, kw_only=True)
class ScatterOp(Expr):
    """Out-of-place torch.scatter: out = a copy of self, then out[..., index[i], ...] =
    src[i] along axis `dim` for every position i of the index (inputs = (self, index, src),
    src a tensor at least the index's size on every axis, or a Scalar of self's dtype).
    Where the index repeats a position, which of the values written there lands is left
    to the library, as in torch and nvFuser. Run by a library (expr_eval)."""

    dim: int
    ATTRS: ClassVar[tuple[str, ...]] = ("dim",)


@dataclass(frozen=True, eq=False, kw_only=True)
class SdpaFwdOp(Expr):
    """Flash attention's forward, nvFuser's sdpfa_fwd: inputs = (query, key, value[, bias]
    [, mask], dropout_p, is_causal[, scale]) ([N*, H, L, E], [N*, H, S, E], [N*, H, S, Ev],
    N* one or more batch axes; bias of the query's dtype and a Bool mask of its rank, each
    broadcast to the scores [N*, H, L, S]; the Scalars Double, Bool, Double), outputs
    (output [N*, H, L, Ev] of the query's dtype, logsumexp [N*, H, L] Float, philox_seed [2]
    and philox_offset [] Int: the 64-bit words of the dropout generator's state, which
    sdpfa_bwd takes back). The bias is added to the scaled scores, and where the mask is
    false the score is -inf. `has_scale`, `has_bias`, `has_mask`: whether each is given
    (the scale else 1/sqrt(E)). Run by torch's attention kernels (expr_eval)."""

    has_scale: bool
    has_bias: bool = False
    has_mask: bool = False
    ATTRS: ClassVar[tuple[str, ...]] = ("has_scale", "has_bias", "has_mask")


@dataclass(frozen=True, eq=False, kw_only=True)
class SdpaBwdOp(Expr):
    """Flash attention's backward, nvFuser's sdpfa_bwd: inputs = (grad_output, query, key,
    value, output, logsumexp, philox_seed, philox_offset, dropout_p, is_causal[, scale]),
    outputs (grad_query, grad_key, grad_value), each of its operand's shape and dtype (one
    or more batch axes, as the forward's). No bias or mask, as in nvFuser. Run by torch's
    flash attention backward (expr_eval)."""

    has_scale: bool
    ATTRS: ClassVar[tuple[str, ...]] = ("has_scale",)


@dataclass(frozen=True, eq=False, kw_only=True)
class GroupedMmOp(Expr):
    """torch._grouped_mm: inputs = (mat1, mat2, offsets), offsets a 1-D integer tensor of
    the g groups' cumulative ends along the axis the groups split. mat1 [m, k] @ mat2 [k, n]
    -> [g, m, n] (the groups split k); mat1 [m, k] @ mat2 [g, k, n] -> [m, n] (they split the
    rows m, group i's rows times matrix i); mat1 [g, m, k] @ mat2 [k, n] -> [m, n] (they
    split the columns n). Offsets rise and end at most at the split axis' size; elements
    no group covers are not defined (torch leaves them unwritten). `dtype`: the output's.
    Run by a library (expr_eval)."""

    dtype: DataType
    ATTRS: ClassVar[tuple[str, ...]] = ("dtype",)


EXPR_CLASSES: tuple[type[Expr], ...] = (
    UnaryOp,
    BinaryOp,
    TernaryOp,
    CastOp,
    SegmentSetOp,
    StrideOrderOp,
    BroadcastOp,
    ExpandOp,
    SqueezeOp,
    PermuteOp,
    ReshapeOp,
    SliceOp,
    PadOp,
    CatOp,
    IndexSelectOp,
    GatherOp,
    GeneratedOp,
    ReductionOp,
    WelfordOp,
    ScanOp,
    SizeOp,
    MatmulOp,
    LinearOp,
    TopKOp,
    ArgsortOp,
    ScatterOp,
    SdpaFwdOp,
    SdpaBwdOp,
    GroupedMmOp,
)
POINTWISE_EXPRS = (UnaryOp, BinaryOp, TernaryOp, CastOp, SegmentSetOp, StrideOrderOp)
GENERATED_EXPRS = (GeneratedOp,)
"""Exprs with no tensor input whose elements are a function of their coordinates (factories;
kfuse.ir.generated)."""
LIBRARY_EXPRS = (
    MatmulOp,
    LinearOp,
    TopKOp,
    ArgsortOp,
    ScatterOp,
    SdpaFwdOp,
    SdpaBwdOp,
    GroupedMmOp,
)
"""Exprs kfuse does not generate code for: they run through the inputs' framework library."""


def attribute_vals(expr: Expr) -> list[Val]:
    """The Vals an expr holds in its attributes (expand extents, reshape shapes, slice
    bounds, pad widths), in order; they are among its inputs too where not constant."""
    return [v for x in expr.attributes().values() for v in _vals_in(x)]


def with_attribute_vals(expr: Expr, f: Any) -> dict[str, Any]:
    """The attributes of `expr` that hold Vals, each with every Val v replaced by f(v)
    (for dataclasses.replace: an expr rebuilt over other Vals)."""

    def mapped(x: Any) -> Any:
        if isinstance(x, tuple):
            return tuple(mapped(y) for y in x)
        return f(x) if isinstance(x, Val) else x

    return {name: mapped(x) for name, x in expr.attributes().items() if _vals_in(x)}


def _vals_in(x: Any) -> list[Val]:
    """The Vals an attribute value holds (nested tuples walked), in order."""
    if isinstance(x, tuple):
        return [v for y in x for v in _vals_in(y)]
    return [x] if isinstance(x, Val) else []


def is_tensor_expr(expr: Expr) -> bool:
    """True when the expr produces a TensorView (scalar arithmetic and SizeOp do not)."""
    return isinstance(expr.outputs[0], TensorView)
