"""Sub-fusions: a part of a fusion (a segment, a side of the inner_outer scheduler) as a Fusion
of its own, and the RuntimeInfo that decides on it before its intermediates exist. The
segmenter (kfuse.engine.segmenter) and the schedulers that split their work into kernels
(kfuse.schedule.inner_outer) both build them."""

from __future__ import annotations

import dataclasses
from typing import Any

from kfuse.codegen import contraction
from kfuse.codegen.precision import low_values
from kfuse.dtypes import DataType
from kfuse.ir.exprs import CastOp, Expr, StrideOrderOp, with_attribute_vals
from kfuse.ir.fusion import Fusion
from kfuse.ir.values import Scalar, TensorView, Val
from kfuse.runtime.arrays import ArrayLayout
from kfuse.runtime.info import RuntimeInfo


def build_sub_fusion(
    exprs: list[Expr], inputs: list[Val], outputs: list[Val], parent: Fusion
) -> tuple[Fusion, dict[Val, Val]]:
    """A new Fusion computing `outputs` from `inputs` with clones of `exprs`, and the origin of
    its Vals: each of its inputs and of its exprs' outputs -> the Val of `exprs` it clones.

    Fusion tensor inputs keep their contiguity and stride order; intermediates become plain
    tensor inputs with the same axes and dtype; constants are shared.
    """
    sub = Fusion()
    mapping: dict[int, Val] = {}
    cloned_from: dict[int, Val] = {}
    parent_inputs = {id(v) for v in parent.inputs}

    def clone(v: Val, is_input: bool) -> Val:
        name, serial = sub.next_name("T" if isinstance(v, TensorView) else "S")
        if isinstance(v, TensorView):
            new: Val = TensorView(name, v.dtype, v.axes, is_input=is_input, serial=serial)
            if id(v) in parent_inputs:
                new.contiguity, new.stride_order = v.contiguity, v.stride_order  # type: ignore
        else:
            new = Scalar(name, v.dtype, None, is_input=is_input, serial=serial)
        mapping[id(v)] = new
        cloned_from[id(new)] = v
        return new

    def ref(v: Any) -> Any:
        if v is None or (isinstance(v, Scalar) and v.is_constant):
            return v
        return mapping[id(v)]

    for v in inputs:
        sub.inputs.append(clone(v, True))
    parent_outputs = {id(v) for v in parent.outputs}
    for e in exprs:
        changes = with_attribute_vals(e, ref)
        new_inputs = tuple(ref(v) for v in e.inputs)
        new_outputs = tuple(clone(o, False) for o in e.outputs)
        if isinstance(e, StrideOrderOp) and id(e.outputs[0]) not in parent_outputs:
            # A stride order places only the parent's outputs: an intermediate passed
            # between segments is a row-major array, as every reader takes it.
            e = CastOp(inputs=e.inputs, outputs=e.outputs, dtype=e.dtype)
        sub.register_expr(dataclasses.replace(e, inputs=new_inputs, outputs=new_outputs, **changes))
    sub.outputs = [mapping[id(o)] for o in outputs]  # type: ignore[misc]
    low = _low_values(parent)
    sub.rounded_outputs = tuple(
        k for k, o in enumerate(outputs) if id(o) in low and o.dtype is not DataType.BFloat16
    )
    sub.finalize()
    sub.rounded_products = contraction.parent_rounded(sub, parent, cloned_from)
    # Only what survived finalize's pruning: the Vals the sub-fusion's shape inference knows.
    live = [*sub.inputs, *(o for e in sub.exprs for o in e.outputs)]
    return sub, {v: cloned_from[id(v)] for v in live}


def _low_values(fusion: Fusion) -> frozenset[int]:
    """kfuse.codegen.precision.low_values of a parent fusion, computed once: the segmenter
    builds many candidate segments of one fusion (a parent is not changed once scheduling
    starts)."""
    cached = getattr(fusion, "_segmenter_low_values", None)
    if cached is None:
        cached = low_values(fusion)
        fusion._segmenter_low_values = cached  # type: ignore[attr-defined]
    return cached


def synthetic_info(
    fusion: Fusion,
    parent_inputs: Any,
    info: RuntimeInfo,
    parent_outputs: Any = (),
    *,
    read_windows: bool = True,
) -> RuntimeInfo:
    """A RuntimeInfo for deciding on a sub-fusion (a segment, a side of inner_outer) before
    its intermediates exist: `parent_inputs` are the parent Vals its inputs stand for; fusion
    inputs keep their real layouts, intermediates are contiguous, freshly allocated arrays.
    `parent_outputs` (those its outputs stand for) carry the parent's output views: a
    segment writes a folded cat's part into its window as the whole fusion would.

    read_windows: an input that is such a part is read from its window of the cat's output,
    where the segment that computed it wrote it (its strides are the output's, its first
    element at the window's offset), not from an array of its own. A segment reading the part
    as a contiguous array read the wrong elements of the output: sum(x) beside cat([x, -x])
    summed x and -x. False where the inputs are not read from memory (inner_outer's column
    side gets its inputs as the row kernel's accumulated values)."""
    from kfuse.codegen.layout import allocated_strides

    parent_layouts = {id(v): lay for v, lay in info.layouts.items()}
    args: list[Any] = []
    layouts: dict[TensorView, ArrayLayout] = {}
    for new, old in zip(fusion.inputs, parent_inputs, strict=True):
        if isinstance(old, TensorView):
            shape = info.shape(old)
            lay = parent_layouts.get(id(old))
            if lay is None:
                # A fresh allocation: aligned (any 256-byte boundary aligns every vector).
                # (a parent output stored in its stride_order's order is read so)
                strides, data_ptr = allocated_strides(old, shape), 256
                if read_windows and old in info.output_views:
                    strides, offset = info.output_views[old]
                    data_ptr += offset
                lay = ArrayLayout(
                    info.framework, old.dtype, shape, strides, data_ptr, info.device_index
                )
            layouts[new] = lay  # type: ignore[index]
            args.append(shape)
        else:
            args.append(info.extents[old])
    extents = fusion.infer_shapes(args)
    views = {
        new: info.output_views[old]
        for new, old in zip(fusion.outputs, parent_outputs)
        if old in info.output_views
    }
    return RuntimeInfo(
        fusion,
        args,
        layouts,
        extents,
        info.framework,
        info.backend,
        info.device_index,
        info.device,
        views,  # type: ignore[arg-type]
    )
