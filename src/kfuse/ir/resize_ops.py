"""Ops that move an axis' bounds (nvFuser's resize ops): slice, pad and cat, built and
sized here.

`build_slice`, `build_pad` and `build_cat` are fd.ops' definition-time halves (checks, the
output's axes, the expr); `slice_ranges`, `pad_windows` and `cat_windows` their run-time
halves, what each axis takes for this call's extents and scalar values, shared by shape
inference, the reference, the framework's evaluation (kfuse.schedule.expr_eval) and the
operand views a slice of an input is read through (kfuse.engine.boundary_views).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from kfuse.dtypes import DataType
from kfuse.errors import DefinitionError, InputError
from kfuse.ir.builder import as_index, describe
from kfuse.ir.exprs import CatOp, PadOp, SizeOp, SliceOp
from kfuse.ir.values import Axis, Scalar, TensorView


def build_slice(
    b: Any,
    x: Any,
    starts: Sequence[Any],
    stops: Sequence[Any],
    steps: Sequence[Any] | None,
    manual: bool,
    op: str = "slice",
) -> TensorView:
    """fd.ops.slice through builder `b` (kfuse.ir.builder.Builder): the checks nvFuser's
    frontend makes (a constant start is >= 0, a constant stop is >= a constant start), steps
    of at least 1 (nvFuser takes only 1; kfuse any, as Python), and the sliced TensorView
    (`x` itself where no axis changes)."""
    v = b.tensor(x, op)
    for name, bounds in (("start_indices", starts), ("end_indices", stops)):
        if not isinstance(bounds, (list, tuple)) or len(bounds) != v.ndim:
            raise DefinitionError(
                f"{op}: {name} must be a list of {v.ndim} bounds (one per axis of "
                f"{describe(v)}), got {describe(bounds)}"
            )
    if steps is None:
        steps = [1] * v.ndim
    if not isinstance(steps, (list, tuple)) or len(steps) != v.ndim:
        raise DefinitionError(
            f"{op}: strides must be a list of {v.ndim} steps, got {describe(steps)}"
        )
    step_ints = tuple(as_index(s, op, f"stride of axis {i}") for i, s in enumerate(steps))
    for i, step in enumerate(step_ints):
        if step < 1:
            raise DefinitionError(f"{op}: the stride of axis {i} is {step}; strides are >= 1")
    start_vals = tuple(_bound(b, e, op, f"start of axis {i}") for i, e in enumerate(starts))
    stop_vals = tuple(_bound(b, e, op, f"end of axis {i}") for i, e in enumerate(stops))
    for i, (lo, hi) in enumerate(zip(start_vals, stop_vals)):
        if lo.is_constant and lo.value < 0:
            raise DefinitionError(f"{op}: the start of axis {i} is {lo.value}; starts are >= 0")
        if lo.is_constant and hi.is_constant and hi.value < lo.value:
            raise DefinitionError(f"{op}: axis {i} ends at {hi.value}, before its start {lo.value}")
    whole = [
        _whole(v, i, lo, hi, step, manual)
        for i, (lo, hi, step) in enumerate(zip(start_vals, stop_vals, step_ints))
    ]
    if all(whole):
        return v
    axes = [
        v.axes[i] if whole[i] else _sliced_axis(v, i, lo, hi, step, manual, op)
        for i, (lo, hi, step) in enumerate(zip(start_vals, stop_vals, step_ints))
    ]
    out = b.new_tensor(v.dtype, axes)
    scalars = tuple(dict.fromkeys(s for s in (*start_vals, *stop_vals) if not s.is_constant))
    b.add(
        SliceOp(
            inputs=(v, *scalars),
            outputs=(out,),
            starts=start_vals,
            stops=stop_vals,
            steps=step_ints,
            manual=bool(manual),
        )
    )
    return out


def build_select(b: Any, x: Any, index: Any, dim: Any, op: str = "select") -> TensorView:
    """fd.ops.select: `x` at position `index` (an int or Int Scalar, in [0, the axis' size),
    checked when the fusion runs) of axis `dim`, that axis removed: a slice of one element
    (manual_normalization) reshaped without it, so that a select of an input is read in
    place as any slice is."""
    v = b.tensor(x, op)
    (d,) = b.dims(v, [as_index(dim, op, "dim")], op)
    at = _bound(b, index, op, "index")
    if at.is_constant and at.value < 0:
        raise DefinitionError(f"{op}: the index is {at.value}; positions are >= 0")
    sizes = [b.size(v, i) for i in range(v.ndim)]
    starts = [at if i == d else 0 for i in range(v.ndim)]
    stops = [b.pointwise("add", [at, 1]) if i == d else n for i, n in enumerate(sizes)]
    one = build_slice(b, v, starts, stops, None, manual=True, op=op)
    shape = [
        1 if a.is_broadcast else a.extent if a.extent is not None else n
        for i, (a, n) in enumerate(zip(v.axes, sizes))
        if i != d
    ]
    return cast(TensorView, b.reshape(one, shape, op=op))


def _bound(b: Any, e: Any, op: str, what: str) -> Scalar:
    """A slice bound as an Int Scalar: an int becomes a constant, an integer Scalar of this
    definition is taken as it is."""
    if isinstance(e, Scalar):
        b.operand(e, op, what)
        if not e.dtype.is_integral:
            raise DefinitionError(f"{op}: the {what} {describe(e)} is not an integer")
        return e
    return b.constant(as_index(e, op, what), DataType.Int, op=op)


def _whole(v: TensorView, i: int, lo: Scalar, hi: Scalar, step: int, manual: bool) -> bool:
    """Whether the slice keeps axis i whole, as far as the definition tells: from 0 to its
    own size (fd.ops.size of that axis) or to a constant at least its known extent (exactly
    it under manual normalization, where a larger one is an error)."""
    if step != 1 or not (lo.is_constant and lo.value == 0):
        return False
    d = hi.definition
    if isinstance(d, SizeOp) and d.inputs[0] is v and d.dim == i:
        return True
    extent = v.axes[i].extent
    if not hi.is_constant or extent is None:
        return False
    return hi.value == extent or (hi.value > extent and not manual)


def _sliced_axis(
    v: TensorView, i: int, lo: Scalar, hi: Scalar, step: int, manual: bool, op: str
) -> Axis:
    """The output's axis i: its extent where the input's and the bounds are known; a
    broadcast axis stays one where the slice keeps its element."""
    axis = v.axes[i]
    known = lo.is_constant and hi.is_constant and axis.extent is not None
    if axis.is_broadcast and not known:
        raise DefinitionError(
            f"{op}: axis {i} of the input is a broadcast axis; its bounds must be constants"
        )
    if not known:
        return Axis(False, None)
    extent = int(axis.extent or 0)
    start, stop = _normalized(int(lo.value), int(hi.value), extent, manual)
    if not 0 <= start <= stop <= extent:  # only as given: manual normalization
        raise DefinitionError(
            f"{op}: axis {i} of size {extent} is asked for [{start}, {stop}) with "
            "manual_normalization; the bounds must satisfy 0 <= start <= end <= size"
        )
    n = len(range(start, stop, step))
    if axis.is_broadcast and n == 1:
        return Axis(True, 1)
    return Axis(False, n)


def _normalized(start: int, stop: int, extent: int, manual: bool) -> tuple[int, int]:
    """Python's (and nvFuser's) normalization of one axis' bounds, or the bounds as given
    under manual normalization (slice_ranges checks those)."""
    if manual:
        return start, stop
    start = start + extent if start < 0 else start
    stop = stop + extent if stop < 0 else stop
    start = min(max(start, 0), extent)
    stop = min(max(stop, start), extent)
    return start, stop


def slice_ranges(
    expr: SliceOp, in_shape: Sequence[int], values: Mapping[Any, Any]
) -> list[tuple[int, int, int]]:
    """(start, stop, step) of each axis for a call: the input's extents `in_shape`, the
    non-constant bounds' values from `values` (a call's extents: shape inference's,
    RuntimeInfo.extents). InputError for a bound with no value, and under manual
    normalization for bounds outside 0 <= start <= stop <= extent."""
    out = expr.outputs[0]
    ranges = []
    for i, (lo, hi, step, extent) in enumerate(zip(expr.starts, expr.stops, expr.steps, in_shape)):
        start, stop = (b.value if b.is_constant else values.get(b) for b in (lo, hi))
        if start is None or stop is None:
            raise InputError(f"slice to {out.name}: a bound of axis {i} has no value")
        start, stop = _normalized(int(start), int(stop), int(extent), expr.manual)
        if expr.manual and not 0 <= start <= stop <= extent:
            raise InputError(
                f"slice to {out.name} (manual_normalization): axis {i} of size {extent} "
                f"was asked for [{start}, {stop}); the bounds must satisfy "
                "0 <= start <= end <= size"
            )
        ranges.append((start, stop, step))
    return ranges


def sliced_shape(ranges: Sequence[tuple[int, int, int]]) -> tuple[int, ...]:
    """The extents `slice_ranges` leave."""
    return tuple(len(range(*r)) for r in ranges)


def build_pad(b: Any, x: Any, pad_widths: Sequence[Any], value: Any, op: str = "pad") -> TensorView:
    """fd.ops.pad through builder `b`: `pad_widths` as torch.nn.functional.pad orders them
    (the last axis' before and after, then the one before it, ...; at most two an axis,
    ints or Int Scalars, negative ones crop), `value` the new elements' (None: zero or
    False; a number or a Scalar of the tensor's kind, as nvFuser requires). `x` itself where
    every width is the constant 0."""
    v = b.tensor(x, op)
    if not isinstance(pad_widths, (list, tuple)) or len(pad_widths) % 2:
        raise DefinitionError(
            f"{op}: pad_widths must be a list of an even number of widths, got "
            f"{describe(pad_widths)}"
        )
    if len(pad_widths) > 2 * v.ndim:
        raise DefinitionError(
            f"{op}: {len(pad_widths)} pad widths for {describe(v)}: at most two an axis"
        )
    widths = [_bound(b, w, op, f"pad width {k}") for k, w in enumerate(pad_widths)]
    zero = b.constant(0, DataType.Int, op=op)
    lows, highs = [zero] * v.ndim, [zero] * v.ndim
    for k in range(len(widths) // 2):  # torch's order: the last axis first
        axis = v.ndim - 1 - k
        lows[axis], highs[axis] = widths[2 * k], widths[2 * k + 1]
    fill = _pad_value(b, v, value, op)
    if all(w.is_constant and w.value == 0 for w in (*lows, *highs)):
        return v
    axes = [_padded_axis(axis, lo, hi) for axis, lo, hi in zip(v.axes, lows, highs)]
    out = b.new_tensor(v.dtype, axes)
    scalars = tuple(dict.fromkeys(w for w in (*lows, *highs) if not w.is_constant))
    b.add(PadOp(inputs=(v, fill, *scalars), outputs=(out,), lows=tuple(lows), highs=tuple(highs)))
    return out


def _pad_value(b: Any, v: TensorView, value: Any, op: str) -> Scalar:
    """The pad value as a Scalar of v's dtype (a constant, or a Scalar of the same kind cast
    to it)."""
    if value is None:
        value = False if v.dtype is DataType.Bool else 0
    if not isinstance(value, Scalar):
        return b.constant(value, v.dtype, op=op)
    b.operand(value, op, 1)

    def kind(d: DataType) -> str:
        return "bool" if d is DataType.Bool else "float" if d.is_floating else "int"

    if kind(value.dtype) != kind(v.dtype):
        raise DefinitionError(
            f"{op}: the pad value {describe(value)} is not of the kind of {describe(v)} "
            "(nvFuser requires the tensor's dtype kind)"
        )
    return cast(Scalar, b.cast(value, v.dtype, op=op))


def _padded_axis(axis: Axis, lo: Scalar, hi: Scalar) -> Axis:
    """The output's axis: unchanged where both widths are 0, its extent where it and the
    widths are known."""
    if lo.is_constant and hi.is_constant:
        if lo.value == 0 and hi.value == 0:
            return axis
        if axis.extent is not None:
            return Axis(False, max(0, int(lo.value) + axis.extent + int(hi.value)))
    return Axis(False, None)


def pad_windows(
    expr: PadOp, in_shape: Sequence[int], values: Mapping[Any, Any]
) -> tuple[tuple[int, ...], tuple[slice, ...], tuple[slice, ...]]:
    """(the output's shape, where in it the input's kept elements go, which elements of the
    input those are) for a call; InputError where a crop leaves an axis a negative size."""
    out = expr.outputs[0]
    shape, dst, src = [], [], []
    for i, (lo_v, hi_v, n) in enumerate(zip(expr.lows, expr.highs, in_shape)):
        lo, hi = (int(w.value if w.is_constant else values[w]) for w in (lo_v, hi_v))
        size = lo + n + hi
        if size < 0:
            raise InputError(
                f"pad to {out.name}: axis {i} of size {n} padded by {lo} before and {hi} "
                f"after has size {size}"
            )
        first_src, first_dst = max(0, -lo), max(0, lo)
        kept = max(0, min(n - first_src, size - first_dst))
        shape.append(size)
        dst.append(slice(first_dst, first_dst + kept))
        src.append(slice(first_src, first_src + kept))
    return tuple(shape), tuple(dst), tuple(src)


def padded(expr: PadOp, a: Any, values: Mapping[Any, Any], fill: Any, full: Any) -> Any:
    """`a` (an array of the pad's input's shape) padded as `expr` pads: `full(shape, fill)`
    (the caller's array of that value: a framework's, the reference's storage), the kept
    part of `a` copied into its window."""
    shape, dst, src = pad_windows(expr, tuple(a.shape), values)
    out = full(shape, fill)
    out[dst] = a[src]
    return out


def joined(expr: CatOp, arrays: Sequence[Any], full: Any) -> Any:
    """`arrays` (one of each cat input's shape) joined as `expr` joins them, into
    `full(shape, 0)` (sizes checked first: cat_windows)."""
    shape, windows = cat_windows(expr, [tuple(a.shape) for a in arrays])
    out = full(shape, 0)
    for array, window in zip(arrays, windows):
        out[window] = array
    return out


def build_cat(b: Any, tensors: Any, dim: Any, manual_padding: bool, op: str = "cat") -> TensorView:
    """fd.ops.cat through builder `b`: tensors of one dtype and rank, `dim` among their axes
    (negative from the end); the one tensor itself when there is one."""
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise DefinitionError(f"{op}: tensors must be a non-empty list, got {describe(tensors)}")
    if manual_padding:
        raise DefinitionError(
            f"{op}: manual_padding=True (inputs already padded by fd.ops.pad) is not "
            "supported; pass the unpadded tensors"
        )
    vs = [b.tensor(t, op, k) for k, t in enumerate(tensors)]
    first = vs[0]
    for k, t in enumerate(vs[1:], 1):
        if t.dtype is not first.dtype:
            raise DefinitionError(
                f"{op}: tensor {k} {describe(t)} and tensor 0 {describe(first)} differ in "
                "dtype (cast them to one first)"
            )
        if t.ndim != first.ndim:
            raise DefinitionError(
                f"{op}: tensor {k} {describe(t)} and tensor 0 {describe(first)} differ in rank"
            )
    (d,) = b.dims(first, [as_index(dim, op, "dim")], op)
    if len(vs) == 1:
        return first
    axes = []
    for i in range(first.ndim):
        column = [t.axes[i] for t in vs]
        if i == d:
            sizes = [1 if a.is_broadcast else a.extent for a in column]
            total = None if None in sizes else sum(cast("list[int]", sizes))
            axes.append(Axis(False, total))
        elif all(a.is_broadcast for a in column):
            axes.append(Axis(True, 1))
        else:
            known = [a.extent for a in column if a.extent is not None and not a.is_broadcast]
            axes.append(Axis(False, known[0] if known else None))
    out = b.new_tensor(first.dtype, axes)
    b.add(CatOp(inputs=tuple(vs), outputs=(out,), dim=d))
    return out


def cat_windows(
    expr: CatOp, shapes: Sequence[Sequence[int]]
) -> tuple[tuple[int, ...], list[tuple[slice, ...]]]:
    """(the output's shape, where in it each input goes) for a call's input shapes;
    InputError where two inputs differ off the cat axis."""
    out, d = expr.outputs[0], expr.dim
    first = shapes[0]
    starts = [0]
    for k, shape in enumerate(shapes):
        for i, (n, m) in enumerate(zip(shape, first)):
            if i != d and n != m:
                raise InputError(
                    f"cat to {out.name} along axis {d}: axis {i} of {expr.inputs[k].name} has "
                    f"size {n} but {expr.inputs[0].name}'s has {m}"
                )
        starts.append(starts[-1] + shape[d])
    total = tuple(starts[-1] if i == d else n for i, n in enumerate(first))
    windows = [
        tuple(slice(starts[k], starts[k + 1]) if i == d else slice(None) for i in range(len(first)))
        for k in range(len(shapes))
    ]
    return total, windows
