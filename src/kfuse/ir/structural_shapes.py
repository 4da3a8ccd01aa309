"""Shape inference of the structural ops (the rows of kfuse.ir.structural): each takes the
expr, the call's extents and values so far (`shapes`) and where each input axis took its
size (`origins`), and gives the output's extents and the origin of each of its axes, so
that an error about a size names the input to change. InputError where the call's sizes
do not fit the op."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, cast

from kfuse.errors import InputError
from kfuse.ir.exprs import (
    BroadcastOp,
    CatOp,
    ExpandOp,
    GatherOp,
    IndexSelectOp,
    PadOp,
    PermuteOp,
    ReshapeOp,
    SizeOp,
    SliceOp,
    SqueezeOp,
)
from kfuse.ir.index_ops import indexed_shape
from kfuse.ir.resize_ops import cat_windows, pad_windows, slice_ranges, sliced_shape
from kfuse.ir.values import Scalar, TensorView, Val


class Origin:
    """Where an extent came from, for error messages."""

    def __init__(self, text: str) -> None:
        self.text = text


Shapes = Mapping[Val, Any]
Origins = Mapping[Val, list[Origin]]
Inferred = tuple[tuple[int, ...], list[Origin]]


def value_of(v: Val, shapes: Shapes) -> Any:
    """A scalar's value on the call: a constant's own, else the one `shapes` holds."""
    if isinstance(v, Scalar) and v.is_constant:
        return v.value
    return shapes.get(v)


def _named(v: Val) -> str:
    """A scalar's name and, for a size, where it comes from."""
    d = v.definition
    return f"{v.name} (size {d.dim} of {d.inputs[0].name})" if isinstance(d, SizeOp) else v.name


def _operand(expr: Any, shapes: Shapes, origins: Origins) -> tuple[tuple[int, ...], list[Origin]]:
    tv = expr.inputs[0]
    return shapes[tv], origins.get(tv, [])


def _fresh(expr: Any, what: str) -> list[Origin]:
    out = expr.outputs[0]
    return [Origin(f"{what} to {out.name} axis {i}") for i in range(out.ndim)]


def infer_broadcast(expr: BroadcastOp, shapes: Shapes, origins: Origins) -> Inferred:
    shape, orig = _operand(expr, shapes, origins)
    it = iter(zip(shape, orig, strict=False))
    pairs = [
        (1, Origin(f"broadcast axis of {expr.outputs[0].name}")) if new else next(it)
        for new in expr.is_new_axis
    ]
    return tuple(p[0] for p in pairs), [p[1] for p in pairs]


def infer_expand(expr: ExpandOp, shapes: Shapes, origins: Origins) -> Inferred:
    """An expand's shape: each broadcast axis given an extent takes it; any other axis must
    be asked for its own size."""
    shape, orig = _operand(expr, shapes, origins)
    out, tv = expr.outputs[0], expr.inputs[0]
    new_shape, new_orig = list(shape), list(orig)
    for i, ext in enumerate(expr.extents):
        if ext is None:
            continue
        n = value_of(ext, shapes)
        if n is None or int(n) < 0:
            raise InputError(
                f"{out.name} = expand(...): extent {ext.name} of axis {i} is {n}, not a size"
            )
        if not cast(TensorView, tv).axes[i].is_broadcast:
            # Only broadcast axes expand; the size asked of any other must be its size.
            if int(n) != shape[i]:
                asked = str(int(n)) if ext.is_constant else f"{_named(ext)} = {int(n)}"
                raise InputError(
                    f"{out.name} = expand({tv.name}, ...): {orig[i].text} has "
                    f"size {shape[i]}, but axis {i} was asked to be {asked}"
                )
            continue
        new_shape[i] = int(n)
        new_orig[i] = Origin(f"expand extent {ext} of {out.name} axis {i}")
    return tuple(new_shape), new_orig


def infer_squeeze(expr: SqueezeOp, shapes: Shapes, origins: Origins) -> Inferred:
    """A squeezed axis the definition did not know to be of size 1 (a symbolic one) must be
    1 on this call: removing an axis of another size would drop its other elements, so the
    call stops here, before anything is compiled or launched for it. An expanded axis that
    squeeze_expanded removes may have any size."""
    shape, orig = _operand(expr, shapes, origins)
    tv = expr.inputs[0]
    for d in expr.dims:
        if d not in expr.expanded and shape[d] != 1:
            raise InputError(
                f"{expr.outputs[0].name} = squeeze({tv.name}, dims={list(expr.dims)}): axis {d} "
                f"of {tv.name} has size {shape[d]} (from {orig[d].text}); only an axis of "
                "size 1 can be squeezed"
            )
    keep = [i for i in range(len(shape)) if i not in expr.dims]
    return tuple(shape[i] for i in keep), [orig[i] for i in keep]


def infer_permute(expr: PermuteOp, shapes: Shapes, origins: Origins) -> Inferred:
    shape, orig = _operand(expr, shapes, origins)
    return tuple(shape[p] for p in expr.perm), [orig[p] for p in expr.perm]


def infer_reshape(expr: ReshapeOp, shapes: Shapes, origins: Origins) -> Inferred:
    shape = shapes[expr.inputs[0]]
    out = cast(TensorView, expr.outputs[0])
    total = math.prod(shape)
    entries = [value_of(s, shapes) for s in expr.shape]
    if any(e is None for e in entries):
        raise InputError(f"reshape to {out.name}: a shape entry has no value")
    entries = [int(e) for e in entries]
    known = math.prod(e for e in entries if e != -1)
    if -1 in entries:
        if known == 0 or total % known:
            raise InputError(
                f"reshape of {expr.inputs[0].name} with shape {shape} "
                f"({total} elements) to {entries}: the sizes do not divide"
            )
        entries[entries.index(-1)] = total // known
    elif known != total:
        raise InputError(
            f"reshape of {expr.inputs[0].name} with shape {shape} ({total} "
            f"elements) to {tuple(entries)} ({known} elements)"
        )
    for i, (axis, n) in enumerate(zip(out.axes, entries, strict=False)):
        if axis.is_broadcast and n != 1:
            raise InputError(f"reshape to {out.name}: axis {i} must be 1, got {n}")
    return tuple(entries), _fresh(expr, "reshape")


def infer_slice(expr: SliceOp, shapes: Shapes, origins: Origins) -> Inferred:
    shape, orig = _operand(expr, shapes, origins)
    ranges = slice_ranges(expr, shape, shapes)
    out = expr.outputs[0]
    return sliced_shape(ranges), [
        o if r == (0, n, 1) else Origin(f"slice to {out.name} axis {i}")
        for i, (o, r, n) in enumerate(zip(orig, ranges, shape))
    ]


def infer_pad(expr: PadOp, shapes: Shapes, origins: Origins) -> Inferred:
    shape, _, _ = pad_windows(expr, shapes[expr.inputs[0]], shapes)
    return shape, _fresh(expr, "pad")


def infer_cat(expr: CatOp, shapes: Shapes, origins: Origins) -> Inferred:
    shape, _ = cat_windows(expr, [shapes[t] for t in expr.inputs])
    _, orig = _operand(expr, shapes, origins)
    out = expr.outputs[0]
    return shape, [
        Origin(f"cat to {out.name} axis {i}") if i == expr.dim else o for i, o in enumerate(orig)
    ]


def infer_indexed(expr: IndexSelectOp | GatherOp, shapes: Shapes, origins: Origins) -> Inferred:
    """Where each axis of an index_select's or gather's output takes its size: the index's
    axis (a gather's are all the index's, take_along_axis's off the indexed one those of
    the larger), else the tensor's; so that an error about it names the input to change (a
    cross entropy's [N, 1] targets given as [N, 2], squeezed later)."""
    shape = indexed_shape(expr, shapes)
    arg, index = expr.inputs
    if isinstance(expr, IndexSelectOp):
        orig = [origins[index][0] if i == expr.dim else o for i, o in enumerate(origins[arg])]
    else:
        orig = [
            origins[arg][i]
            if expr.broadcast and i != expr.dim and shapes[index][i] == 1
            else origins[index][i]
            for i in range(len(shapes[index]))
        ]
    return shape, orig
