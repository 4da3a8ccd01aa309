"""Outputs written into an input's storage: fd.add_output(out, alias_input=inp).

A call writes each aliased output into its input in one of two ways:

* in place: the fusion's one kernel stores the output straight into the input's memory.
  Only where no element of the input is read after its new value is stored: a single
  pointwise kernel, the input read only through element-wise ops whose results all have the
  input's shape (so the thread that stores element i has read the input's element i, and
  nobody else reads it), the input laid out as the kernel writes outputs (row-major,
  16-byte aligned). The Adam step is such a fusion: one kernel reads four arrays and writes
  three.
* staged: the program computes the output into a new array like any other and, after every
  kernel and segment of the call has run, it is copied into the input with the framework's
  copy (which keeps the input's strides). So a segment that reads the input (a reduction
  over it, say) always sees its old values.

The aliased outputs that were not also added as ordinary outputs are not returned; one that
was is returned as the input itself (it holds the result).
"""

from __future__ import annotations

import math
from typing import Any

from kfuse.codegen.layout import contiguous_strides
from kfuse.engine.program import KernelProgram, Program
from kfuse.errors import InputError
from kfuse.ir.exprs import BinaryOp, CastOp, TernaryOp, UnaryOp
from kfuse.ir.fusion import Fusion
from kfuse.ir.layout_ops import allocation_order
from kfuse.ir.values import TensorView
from kfuse.runtime.arrays import framework_of, layout_of, stream_context
from kfuse.runtime.info import RuntimeInfo
from kfuse.schedule.types import SchedulerType

_ELEMENTWISE = (UnaryOp, BinaryOp, TernaryOp, CastOp)


def returned_positions(fusion: Fusion) -> tuple[int, ...] | None:
    """The output positions execute returns, or None when it returns every output."""
    if not fusion.hidden_outputs:
        return None
    hidden = set(fusion.hidden_outputs)
    return tuple(k for k in range(len(fusion.outputs)) if k not in hidden)


def check_targets(info: RuntimeInfo) -> None:
    """InputError unless every aliased input can take its output: same shape, writable, and
    no two of its elements at one address (an expanded or broadcast view)."""
    fusion = info.fusion
    for out_pos, in_pos in fusion.output_aliases:
        inp = fusion.inputs[in_pos]
        out = fusion.outputs[out_pos]
        assert isinstance(inp, TensorView)
        array = info.inputs[in_pos]
        what = f"input {in_pos} ({inp.name}), which receives output {out.name},"
        if info.shape(out) != info.shape(inp):
            raise InputError(
                f"{what} has shape {info.shape(inp)} but the output has {info.shape(out)}"
            )
        layout = info.layouts[inp]
        if any(s == 0 and n > 1 for s, n in zip(layout.strides, layout.shape, strict=True)):
            raise InputError(
                f"{what} is an expanded (broadcast) view with strides {layout.strides}: its "
                "elements share memory, so it cannot be written"
            )
        if framework_of(array) == "numpy" and not array.flags.writeable:
            raise InputError(f"{what} is a read-only NumPy array")


def mark_in_place(program: Program, info: RuntimeInfo) -> None:
    """Set program.in_place to the aliases its kernel may store straight into the input
    (see the module's docstring); the others stay staged. `info` is the call the program
    was compiled for: its layouts are those of every call that finds it cached."""
    fusion = info.fusion
    if type(program) is not KernelProgram or not fusion.output_aliases:
        return
    if program.scheduler is not SchedulerType.pointwise or len(program.launches) != 1:
        return
    if program.folded or info.output_views:
        return
    program.in_place = tuple(
        (out_pos, in_pos)
        for out_pos, in_pos in fusion.output_aliases
        # An output stored in a stride order is written in that order: not the input's.
        if allocation_order(fusion.outputs[out_pos]) is None
        and _storable_in_place(info, fusion.inputs[in_pos])  # type: ignore[arg-type]
    )


def _storable_in_place(info: RuntimeInfo, inp: TensorView) -> bool:
    fusion = info.fusion
    shape = info.shape(inp)
    layout = info.layouts[inp]
    if layout.alignment < 16 or any(info.shape(o) != shape for o in fusion.outputs):
        return False
    if any(s != c and n > 1 for s, c, n in zip(layout.strides, contiguous_strides(shape), shape)):
        return False
    reached = {id(inp)}
    for expr in fusion.exprs:
        if not any(id(v) in reached for v in expr.inputs):
            continue
        if not isinstance(expr, _ELEMENTWISE):
            return False
        for o in expr.outputs:
            if isinstance(o, TensorView) and info.shape(o) != shape:
                return False
            reached.add(id(o))
    return True


def finish(info: RuntimeInfo, outputs: list[Any], stream: int | None) -> list[Any]:
    """After the call's program has run: copy each aliased output not stored in place into
    its input, and return what execute returns."""
    fusion = info.fusion
    for out_pos, in_pos in fusion.output_aliases:
        target = info.inputs[in_pos]
        value = outputs[out_pos]
        if value is not target:
            _write_into(info, target, value, stream)
        outputs[out_pos] = target
    returned = returned_positions(fusion)
    if returned is None:
        return outputs
    return [outputs[k] for k in returned]


def _write_into(info: RuntimeInfo, target: Any, value: Any, stream: int | None) -> None:
    from kfuse.engine.segments import copy_array

    if _overlap(target, value):  # a view of the input (a library call's), copied first
        value = copy_array(info, value, stream)
    with stream_context(info.framework, info.device_index, stream):
        framework = framework_of(target)
        if framework == "torch":
            target.copy_(value)
        elif framework == "cupy":
            import cupy

            cupy.copyto(target, value)
        else:
            import numpy

            numpy.copyto(target, value)


def _overlap(a: Any, b: Any) -> bool:
    """Whether the memory spans of two arrays meet."""
    spans = []
    for array in (a, b):
        lay = layout_of(array, "an aliased output")
        if math.prod(lay.shape) == 0:
            return False
        itemsize = lay.dtype.itemsize
        low = lay.data_ptr + itemsize * sum(
            (n - 1) * s for n, s in zip(lay.shape, lay.strides, strict=True) if s < 0
        )
        high = lay.data_ptr + itemsize * (
            1 + sum((n - 1) * s for n, s in zip(lay.shape, lay.strides, strict=True) if s > 0)
        )
        spans.append((low, high))
    (a_low, a_high), (b_low, b_high) = spans
    return a_low < b_high and b_low < a_high
