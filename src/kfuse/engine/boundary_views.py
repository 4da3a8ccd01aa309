"""Reshapes and slices at a fusion's boundary that are views of this call's layouts, folded
into the operands of one kernel instead of being segments of their own.

A reshape of a fusion input whose runtime strides can describe the reshaped tensor (a split
of any axis, a merge of axes laid out one inside the other) needs no data movement: the
kernel reads the input through those strides. A reshape that makes a fusion output from a
value the kernel computes needs none either: the output is allocated contiguous in its own
shape, and a contiguous array is a view in every shape of its size, so the kernel writes the
reshape's input shape contiguously into it. `fold_boundary_views` builds the fusion without
those reshapes (the reshaped inputs become inputs, the outputs' reshape inputs become
outputs) and its RuntimeInfo, whose input layouts are the views; `unfold_operands` maps the
kernels generated for it back onto the call's own inputs, outputs and scalars, so the
Program runs on the call's RuntimeInfo as any other.

A slice of a fusion input is always a view: its first element's offset (the starts times
the strides) moves the data pointer, a step multiplies a stride. So is a slice of such a
view (a slice of a reshaped slice), and a slice of a permute of one (the permute's strides
are the view's, reordered); the permute itself stays in the kernel for its other readers.
A segment's inputs made by other segments are views of their arrays too, so a segment's
slices fold as an input's do (folded_for_a_kernel). The kernel reads the input
from there (`InputOperand.byte_offset`), and the view's alignment, which decides whether its
loads are vectors, is that of the moved pointer. The canonical form moves slices of
element-wise work onto the inputs first (kfuse.ir.canonical_rules), so that a slice of
computed values, which would need a copy, is rare.

Whether a reshape is a view is decided from the layout (strides are part of a Program's
signature): a reshape that is not one (a non-contiguous input whose merged axes do not nest)
is left in the fusion, which is then segmented as before (the reshape a framework copy).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, TypeVar

from kfuse.codegen.layout import contiguous_strides
from kfuse.ir.exprs import CatOp, Expr, PermuteOp, ReshapeOp, SliceOp, attribute_vals
from kfuse.ir.fusion import Fusion
from kfuse.ir.layout_ops import allocation_order
from kfuse.ir.resize_ops import slice_ranges, sliced_shape
from kfuse.ir.values import Scalar, TensorView, Val
from kfuse.runtime.arrays import ArrayLayout, strided_view
from kfuse.runtime.info import RuntimeInfo
from kfuse.runtime.launch import (
    GeneratedKernel,
    InputOperand,
    KernelLaunch,
    OutputOperand,
    ScalarOperand,
)
from kfuse.schedule.sub_fusion import build_sub_fusion
from kfuse.schedule.types import SchedulerType

K = TypeVar("K", GeneratedKernel, KernelLaunch)


def view_strides(
    shape: tuple[int, ...], strides: tuple[int, ...], new_shape: tuple[int, ...]
) -> tuple[int, ...] | None:
    """Strides that read an array of `shape`/`strides` as `new_shape` (the same elements in
    row-major order), or None when no strides can (the reshape needs a copy).

    The axes are walked innermost first in chunks that are contiguous with one another
    (each axis's stride is the next's times its extent; size-1 axes never break a chunk);
    every chunk must be covered exactly by consecutive axes of the new shape, which then
    step through it from the chunk's innermost stride."""
    if math.prod(shape) != math.prod(new_shape):
        return None
    if math.prod(shape) == 0 or not shape:
        return contiguous_strides(new_shape)  # no element is ever read through them
    out = [0] * len(new_shape)
    d_new = len(new_shape) - 1
    base = strides[-1]
    chunk = covered = 1
    for d in range(len(shape) - 1, -1, -1):
        chunk *= shape[d]
        if d > 0 and (shape[d - 1] == 1 or strides[d - 1] == chunk * base):
            continue  # axis d - 1 continues this chunk
        while d_new >= 0 and (covered < chunk or new_shape[d_new] == 1):
            out[d_new] = covered * base
            covered *= new_shape[d_new]
            d_new -= 1
        if covered != chunk:
            return None
        if d > 0:
            base, chunk, covered = strides[d - 1], 1, 1
    return tuple(out) if d_new < 0 else None


@dataclass(frozen=True)
class FoldedFusion:
    """A fusion with its boundary reshapes folded into its operands (see the module
    docstring), and what maps its kernels back to the call: `input_positions[i]` is the
    call's input position that the folded fusion's input i reads; `origin` maps its Vals to
    the parent's; `reshapes` names the folded reshapes', slices' and cats' outputs;
    `input_offsets[i]` is the bytes from the call's array's first element to input i's (a
    slice's start; 0 for the others); `output_positions[k]` is the call's output that the
    folded fusion's output k is written into, `output_offsets[k]` the bytes from its first
    element (a cat's part's window)."""

    fusion: Fusion
    info: RuntimeInfo
    input_positions: tuple[int, ...]
    origin: dict[Val, Val]
    reshapes: tuple[str, ...]
    input_offsets: tuple[int, ...] = ()
    output_positions: tuple[int, ...] = ()
    output_offsets: tuple[int, ...] = ()

    def offset(self, i: int) -> int:
        """input_offsets[i] (0 where none was recorded)."""
        return self.input_offsets[i] if i < len(self.input_offsets) else 0

    @property
    def has_cats(self) -> bool:
        """Whether outputs of the folded fusion are parts of one call output (a cat's)."""
        return len(self.output_positions) > len(set(self.output_positions))


def fold_boundary_views(
    fusion: Fusion, info: RuntimeInfo, cats: bool = True
) -> FoldedFusion | None:
    """The fusion without the reshapes and slices of its inputs that are views of their
    layouts, the reshapes that make its outputs and (with `cats`) the cats that make them,
    whose parts the kernel writes into their windows of the output; None when there is none
    to fold or the folded fusion would not be a kernel's (an output that is an input, a
    reshape of an input straight to an output: expr_eval's work). A fusion whose folded cats
    no one kernel takes is folded again without them (kfuse.engine.compiler)."""
    positions = {v: k for k, v in enumerate(fusion.inputs)}
    in_views, folded = _foldable(fusion, info, positions, cats)
    if not folded or any(o in positions for o in fusion.outputs):
        return None
    kept = [e for e in fusion.exprs if e not in folded and isinstance(e.outputs[0], TensorView)]
    if not kept:
        return None
    new_outputs, output_positions, output_views = _folded_outputs(fusion, info, folded)
    read = {v for e in kept for v in _operands(e)}
    produced = {o for e in kept for o in e.outputs}
    tensor_inputs = [v for v in fusion.inputs if isinstance(v, TensorView) and v in read]
    # A view that an output's folded reshape passes on is an input too, read or not.
    tensor_inputs += [v for v in in_views if v in read or v in new_outputs]
    scalars = [v for v in _ordered(kept) if isinstance(v, Scalar) and v not in produced]
    sub, origin = build_sub_fusion(kept, [*tensor_inputs, *scalars], new_outputs, fusion)
    sources = [_viewed_input(v, positions) for v in tensor_inputs]
    layouts = {
        new: (in_views[old] if old in in_views else info.layouts[old])  # type: ignore[index]
        for new, old in zip(sub.inputs, tensor_inputs)
    }
    extents = {new: info.extents[old] for new, old in origin.items()}
    sub_info = RuntimeInfo(
        sub,
        [extents[v] for v in sub.inputs],
        layouts,  # type: ignore[arg-type]
        extents,
        info.framework,
        info.backend,
        info.device_index,
        info.device,
        {
            sub.outputs[k]: view
            for k, view in (*output_views.items(), *_windows_kept(info, new_outputs))
        },  # type: ignore[misc]
    )
    names = tuple(e.outputs[0].name for e in fusion.exprs if e in folded)
    # The tensor inputs come first in sub.inputs, one for each source.
    offsets = tuple(
        layouts[new].data_ptr - info.layouts[src].data_ptr  # type: ignore[index]
        for new, src in zip(sub.inputs, sources)
    )
    return FoldedFusion(
        sub,
        sub_info,
        tuple(positions[v] for v in sources),
        origin,
        names,
        offsets,
        output_positions,
        tuple(output_views[k][1] if k in output_views else 0 for k in range(len(new_outputs))),
    )


def _foldable(
    fusion: Fusion, info: RuntimeInfo, positions: dict, cats: bool
) -> tuple[dict[TensorView, ArrayLayout], set[Expr]]:
    """(the folded views of inputs with their layouts, every expr folded): slices of
    inputs, reshapes of inputs or of those views where their strides allow, reshapes and
    (with `cats`) cats that make outputs."""
    outputs = set(fusion.outputs)
    consumed = {v for e in fusion.exprs for v in e.inputs}
    in_views: dict[TensorView, ArrayLayout] = {}
    folded: set[Expr] = set()
    written = _written_elsewhere(fusion)
    for e in fusion.exprs:
        if (
            cats
            and isinstance(e, CatOp)
            and e.outputs[0] not in info.output_views  # a window itself: written as it is
            and _foldable_cat(e, fusion, positions, consumed, written)
        ):
            folded.add(e)
            written.update(e.inputs)
        if isinstance(e, SliceOp) and e.outputs[0] not in outputs:
            of = _view_of(e.inputs[0], positions, in_views, info)
            if of is not None:
                in_views[e.outputs[0]] = _sliced_layout(e, of, info)  # type: ignore[index]
                folded.add(e)
        if not isinstance(e, ReshapeOp):
            continue
        src, dst = e.inputs[0], e.outputs[0]
        assert isinstance(src, TensorView) and isinstance(dst, TensorView)
        if (src in positions or src in in_views) and dst not in outputs:
            # Of an input, or of a view folded already (a slice of an input, reshaped).
            of = in_views[src] if src in in_views else info.layouts[src]  # type: ignore[index]
            layout = _view_layout(of, info.shape(dst))
            if layout is not None:
                in_views[dst] = layout
                folded.add(e)
        elif (
            dst in outputs
            and dst not in info.output_views  # a window: its reshape's input is not dense
            # A window's reshape (a segment's cat part that a later segment reads reshaped):
            # folded, the value would be written twice, and the window's strides, which
            # RuntimeInfo keys by value, would be used for the reshaped output too (a
            # campaign met one written with a cat's row stride into an array of a seventh of
            # the span).
            and src not in info.output_views
            and src not in positions
            and fusion.outputs.count(dst) == 1
            and dst not in consumed  # another expression reads the reshaped value
            # The input is written in the output's place row major: a stride order of either
            # would put its elements elsewhere (a reshape of a column-major output came out
            # in column-major order)
            and allocation_order(src) is None
            and allocation_order(dst) is None
        ):
            folded.add(e)
    return in_views, folded


def _foldable_cat(e: CatOp, fusion: Fusion, positions: dict, consumed: set, written: set) -> bool:
    """Whether a cat's parts can be the kernel's outputs, written into their windows of the
    cat's output: it makes one output and nothing else reads it, and its parts are distinct
    values the kernel computes or views of inputs it copies (not inputs themselves, nor
    values written elsewhere: `written`, _written_elsewhere's and the parts of the cats
    folded before it)."""
    out, parts = e.outputs[0], e.inputs
    return (
        sum(o is out for o in fusion.outputs) == 1
        and out not in consumed
        and len(set(parts)) == len(parts)
        and all(p not in positions and p not in written for p in parts)
    )


def _written_elsewhere(fusion: Fusion) -> set[Val]:
    """The values the folded fusion may write as outputs other than a cat's parts: every
    output and the input of every reshape that makes one (folded, it is written in the
    output's place). A cat's part must be none of these nor another folded cat's part: the
    folded fusion's outputs are then distinct values, and each part's strides and window
    (RuntimeInfo's output views, keyed by the value) are its own. A campaign met
    cat([not(a), b]) beside cat([not(a), c]): canonicalization makes the two not(a) one value,
    and its second window's strides were written through for both."""
    written: set[Val] = set(fusion.outputs)
    for o in fusion.outputs:
        if isinstance(o.definition, ReshapeOp):
            written.add(o.definition.inputs[0])
    return written


def _windows_kept(info: RuntimeInfo, outputs: list[Val]) -> list[tuple[int, Any]]:
    """(k, view) of each of `outputs` that the call writes into a window of a larger array
    already (RuntimeInfo.output_views: a segment's part of a cat that the whole fusion
    folded), so that the folded segment's kernel writes it through the window's strides. Its
    offset stays the caller's to add, as for a segment compiled unfolded: a merged program
    adds it with the whole fusion's folded cat (unfold_operands)."""
    views: dict[Any, tuple[tuple[int, ...], int]] = info.output_views
    return [(k, views[o]) for k, o in enumerate(outputs) if o in views]


def _folded_outputs(
    fusion: Fusion, info: RuntimeInfo, folded: set[Expr]
) -> tuple[list[Val], tuple[int, ...], dict[int, tuple[tuple[int, ...], int]]]:
    """(the folded fusion's outputs, the call's output each is, the (strides, byte offset)
    of those written into part of one): a folded reshape's input for its output, a folded
    cat's parts for its output, the others as they are."""
    outs: list[Val] = []
    at: list[int] = []
    views: dict[int, tuple[tuple[int, ...], int]] = {}
    for k, o in enumerate(fusion.outputs):
        e = o.definition
        if isinstance(e, CatOp) and e in folded:
            shape = info.shape(o)  # type: ignore[arg-type]
            strides = contiguous_strides(shape)
            start = 0
            for part in e.inputs:
                views[len(outs)] = (strides, start * strides[e.dim] * o.dtype.itemsize)
                outs.append(part)
                at.append(k)
                start += info.shape(part)[e.dim]  # type: ignore[arg-type]
            continue
        outs.append(e.inputs[0] if e in folded else o)  # type: ignore[union-attr]
        at.append(k)
    return outs, tuple(at), views


def unfold_operands(folded: FoldedFusion, kernels: list[K]) -> list[K]:
    """`kernels` (GeneratedKernels or KernelLaunches) made for the folded fusion, reading the
    call's own inputs (the same data, through the strides already in their operands) and its
    own scalars; outputs keep their indices."""

    def operand(op: Any) -> Any:
        if isinstance(op, InputOperand):
            return dataclasses.replace(
                op,
                position=folded.input_positions[op.position],
                byte_offset=op.byte_offset + folded.offset(op.position),
            )
        if isinstance(op, OutputOperand) and folded.output_positions:
            return dataclasses.replace(
                op,
                index=folded.output_positions[op.index],
                byte_offset=op.byte_offset + folded.output_offsets[op.index],
            )
        if isinstance(op, ScalarOperand):
            return ScalarOperand(folded.origin[op.val])  # type: ignore[arg-type]
        return op

    return [dataclasses.replace(k, operands=[operand(op) for op in k.operands]) for k in kernels]


def folded_call(folded: FoldedFusion, info: RuntimeInfo) -> RuntimeInfo:
    """The folded fusion's RuntimeInfo for the call `info` describes (one whose signature is
    the one `folded` was built for): its inputs the call's arrays, viewed through the folded
    layouts' strides where a reshape was folded; the layouts those of `folded`, at this
    call's data pointers; the extents the call's. A segmented folded fusion runs on it."""
    inputs: list[Any] = []
    layouts: dict[TensorView, ArrayLayout] = {}
    for k, new in enumerate(folded.fusion.inputs):
        if not isinstance(new, TensorView):
            inputs.append(info.extents[folded.origin[new]])
            continue
        position = folded.input_positions[k]
        array = info.inputs[position]
        view = folded.info.layouts[new]
        call = info.layouts[info.fusion.inputs[position]]  # type: ignore[index]
        offset = folded.offset(k)
        if view.shape != call.shape or view.strides != call.strides or offset:
            array = strided_view(array, view.shape, view.strides, offset // call.dtype.itemsize)
        inputs.append(array)
        layouts[new] = dataclasses.replace(view, data_ptr=call.data_ptr + offset)
    return RuntimeInfo(
        folded.fusion,
        inputs,
        layouts,
        {new: info.extents[old] for new, old in folded.origin.items()},
        info.framework,
        info.backend,
        info.device_index,
        info.device,
    )


def _viewed_input(v: Val, positions: dict) -> Val:
    """The fusion input a folded view (a chain of slices and reshapes) reads, or v itself
    where it is an input."""
    while v not in positions:
        v = v.definition.inputs[0]  # type: ignore[union-attr]
    return v


def _view_of(
    v: Val, positions: dict, in_views: dict[TensorView, ArrayLayout], info: RuntimeInfo
) -> ArrayLayout | None:
    """The layout through which a slice of `v` is a view of a call's array: v's own where v
    is an input or a folded view, the permuted layout of one where v permutes it; None for
    a value the kernel computes. A permute stays in the kernel for its other readers; a
    slice of it reads the array directly (Thunder's RoPE slices the halves of q and k after
    their [b, s, h, d] -> [b, h, s, d] permute, and a slice of the kernel's permute is
    computed work no kernel generates)."""
    if v in in_views:
        return in_views[v]  # type: ignore[index]
    if v in positions:
        return info.layouts[v]  # type: ignore[index]
    e = v.definition
    if isinstance(e, PermuteOp):
        of = _view_of(e.inputs[0], positions, in_views, info)
        if of is not None:
            return dataclasses.replace(
                of,
                shape=tuple(of.shape[a] for a in e.perm),
                strides=tuple(of.strides[a] for a in e.perm),
            )
    return None


def _sliced_layout(e: SliceOp, layout: ArrayLayout, info: RuntimeInfo) -> ArrayLayout:
    """The layout of a slice of `layout` (a fusion input's, or a view of one) as a view of
    the call's array: the pointer moved to the first element it keeps, each stride times its
    step."""
    ranges = slice_ranges(e, layout.shape, info.extents)
    shape = sliced_shape(ranges)
    if 0 in shape:  # nothing is read: the pointer stays where the array is
        return dataclasses.replace(layout, shape=shape, strides=contiguous_strides(shape))
    first = sum(start * stride for (start, _, _), stride in zip(ranges, layout.strides))
    return dataclasses.replace(
        layout,
        shape=shape,
        strides=tuple(stride * step for (_, _, step), stride in zip(ranges, layout.strides)),
        data_ptr=layout.data_ptr + first * layout.dtype.itemsize,
    )


def _view_layout(layout: ArrayLayout, shape: tuple[int, ...]) -> ArrayLayout | None:
    strides = view_strides(layout.shape, layout.strides, tuple(shape))
    if strides is None:
        return None
    return dataclasses.replace(layout, shape=tuple(shape), strides=strides)


def _operands(e: Expr) -> list[Val]:
    """Every Val an expr reads: its inputs and the Scalars of its attributes (expand extents,
    reshape shapes, slice bounds: exprs.attribute_vals), which build_sub_fusion maps too."""
    vals = [*e.inputs, *attribute_vals(e)]
    return [v for v in vals if not (isinstance(v, Scalar) and v.is_constant)]


def _ordered(exprs: list[Expr]) -> list[Val]:
    """The Vals `exprs` read, each once, in order of first use."""
    return list(dict.fromkeys(v for e in exprs for v in _operands(e)))


def folded_for_a_kernel(
    fusion: Fusion, info: RuntimeInfo
) -> tuple[FoldedFusion, SchedulerType] | None:
    """The fusion with its boundary reshapes folded into its operands and the first kernel
    scheduler (registry order) that takes it so, or None: how a segment that no scheduler
    takes as it is runs. A segment's inputs that other segments produce are allocated
    contiguous, so a reshape of one is a view: an embedding's rows, gathered by one kernel,
    are read in the ids' shape by the reduction after it, where a reshape segment of its own
    would have made the gather a host-checked framework index (a synchronization a call).
    The segmenter accepts a group so; the compiler compiles it so."""
    from kfuse.schedule import rejection_reason
    from kfuse.schedule.registry import SCHEDULERS

    if not any(isinstance(e, (ReshapeOp, SliceOp)) for e in fusion.exprs):
        return None
    folded = fold_boundary_views(fusion, info, cats=False)
    if folded is None:
        return None
    for s in SCHEDULERS:
        if s.generates_kernels and rejection_reason(s, folded.fusion, folded.info) is None:
            return folded, s.scheduler_type
    return None
