"""Outputs the caller allocated: fd.execute(inputs, outputs=[...]).

Each given array must be exactly what the call would have allocated: the inputs' framework
and device, the output's dtype and shape, dense in the layout its kernel writes (row major,
or the order fd.ops.stride_order asked for) and 16-byte aligned (kernels store up to 16
bytes at a time at positions aligned as a fresh allocation is). Anything else is an
InputError naming the output: kfuse never copies into a non-conforming array behind the
caller's back, so `outputs=` always means "the kernel writes here".

No given output may share memory with an input or with another given output. A kernel's
threads read inputs and store outputs in no order among themselves, so an output over an
input's memory lets one thread overwrite a value another has yet to read; writing in place
is what fd.add_output(out, alias_input=inp) is for, where kfuse proves it safe.

All checks run before anything is launched, so a refused call writes nothing.

A cached layout's call makes the same checks in C++ (kfuse._C.FastCall.call_into, against
kfuse.engine.fast_path.given_outputs): there an array must match exactly (strides of size-1
axes included), and any that does not sends the call here, which accepts it or says why not.
"""

from __future__ import annotations

import math
from typing import Any

from kfuse.codegen.layout import allocated_strides
from kfuse.errors import InputError
from kfuse.ir.layout_ops import allocation_order
from kfuse.ir.values import TensorView
from kfuse.runtime.arrays import ArrayLayout, framework_of, layout_of, stream_context
from kfuse.runtime.info import RuntimeInfo

ALIGNMENT = 16
"""Bytes a given output's data pointer must be a multiple of (the widest vector store)."""


def placed(info: RuntimeInfo, outputs: Any, returned: tuple[int, ...] | None) -> dict[int, Any]:
    """The given arrays by fusion output position (the positions execute returns, in
    order), each checked; InputError naming the first that does not fit."""
    fusion = info.fusion
    if not isinstance(outputs, (list, tuple)):
        raise InputError(f"outputs must be a list of arrays, got {type(outputs).__name__}")
    positions = list(range(len(fusion.outputs))) if returned is None else list(returned)
    if len(outputs) != len(positions):
        raise InputError(
            f"outputs: the fusion returns {len(positions)} output(s), "
            f"but {len(outputs)} array(s) were given"
        )
    aliased = {out_pos for out_pos, _ in fusion.output_aliases}
    layouts: list[tuple[str, ArrayLayout]] = []
    given: dict[int, Any] = {}
    for k, (pos, array) in enumerate(zip(positions, outputs, strict=True)):
        out = fusion.outputs[pos]
        what = f"outputs[{k}] (output {out.name})"
        if pos in aliased:
            raise InputError(
                f"{what} is written into an input (fd.add_output(..., alias_input=)) and "
                "returned as that input: it cannot also be given in outputs="
            )
        lay = _checked_layout(info, out, array, what)
        for other_what, other in layouts:
            if _spans_meet(lay, other):
                raise InputError(f"{what} shares memory with {other_what}")
        layouts.append((what, lay))
        given[pos] = array
    for val, lay in info.layouts.items():
        for what, out_lay in layouts:
            if _spans_meet(out_lay, lay):
                raise InputError(
                    f"{what} shares memory with input {val.name}: the kernel's threads would "
                    "store into memory that others have yet to read. Give a separate array, "
                    "or write in place with fd.add_output(out, alias_input=inp)"
                )
    return given


def _checked_layout(info: RuntimeInfo, out: TensorView, array: Any, what: str) -> ArrayLayout:
    framework = framework_of(array)
    if framework != info.framework:
        raise InputError(
            f"{what} must be a {info.framework} array like the inputs, "
            f"got {type(array).__module__}.{type(array).__name__}"
        )
    lay = layout_of(array, what)
    if lay.device != info.device_index:
        where = "host memory" if info.device_index < 0 else f"cuda:{info.device_index}"
        got = "host memory" if lay.device < 0 else f"cuda:{lay.device}"
        raise InputError(f"{what} is in {got}; the call runs on {where}")
    if lay.dtype != out.dtype:
        raise InputError(f"{what} has dtype {lay.dtype.value}; the output is {out.dtype.value}")
    shape = tuple(info.shape(out))
    if lay.shape != shape:
        raise InputError(f"{what} has shape {lay.shape}; the output has shape {shape}")
    order, dense = allocation_order(out), allocated_strides(out, shape)
    # An axis of one element has no meaningful stride, nor has an empty array any (the
    # frameworks differ on them).
    strided = any(n > 1 and s != d for n, s, d in zip(shape, lay.strides, dense, strict=True))
    if strided and 0 not in shape:
        layout = "row major" if order is None else f"dense in stride order {list(order)}"
        raise InputError(
            f"{what} has strides {lay.strides} (in elements); the kernel writes it {layout}, "
            f"strides {dense}. Give a dense array (kfuse does not copy into a strided one)"
        )
    if math.prod(shape) and lay.data_ptr % ALIGNMENT:
        raise InputError(
            f"{what} starts at an address that is not a multiple of {ALIGNMENT} bytes "
            "(a view at an offset into a larger array); kernels store whole 16-byte "
            "vectors: give an array of its own"
        )
    return lay


def _spans_meet(a: ArrayLayout, b: ArrayLayout) -> bool:
    """Whether the memory two arrays span meets (on one device; empty arrays never do)."""
    if a.device != b.device or not math.prod(a.shape) or not math.prod(b.shape):
        return False
    (a_low, a_high), (b_low, b_high) = _span(a), _span(b)
    return a_low < b_high and b_low < a_high


def _span(lay: ArrayLayout) -> tuple[int, int]:
    size = lay.dtype.itemsize
    steps = [(n - 1) * s for n, s in zip(lay.shape, lay.strides, strict=True)]
    low = lay.data_ptr + size * sum(x for x in steps if x < 0)
    high = lay.data_ptr + size * (1 + sum(x for x in steps if x > 0))
    return low, high


def copied_into(
    info: RuntimeInfo, given: dict[int, Any], results: list[Any], stream: int | None
) -> list[Any]:
    """`results` (execute's returned arrays, made by a program that cannot write into the
    given ones: library calls, segments run one by one) copied into the given arrays with
    the framework's copy, on the call's stream; the given arrays, in order."""
    targets = list(given.values())
    with stream_context(info.framework, info.device_index, stream):
        for target, value in zip(targets, results, strict=True):
            if info.framework == "torch":
                target.copy_(value)
            elif info.framework == "cupy":
                import cupy

                cupy.copyto(target, value)
            else:
                import numpy

                numpy.copyto(target, value)
    return targets
