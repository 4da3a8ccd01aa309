"""Every output operand of a kernel lies inside its output: checked once a program is built,
before any of its kernels runs.

A kernel writes its outputs through their operands' own sizes, strides and byte offsets
(kfuse.runtime.launch), worked out by the schedulers and by the folding of reshapes and cats
into operands (kfuse.engine.boundary_views). A mistake there writes memory the output does
not own: a GPU campaign met a cat's window written through another window's row stride, whose
rows reached past the output's end (on the host emulator, out of the allocation and a crash).
Such an operand now stops the call with a KfuseError naming it, before anything is written.

An operand's span is the bytes from its byte offset plus its lowest element offset to its
highest element's last byte; an output's array is dense in its own shape (a fresh allocation,
an array the caller gave, or an input it aliases: kfuse.engine.given_outputs and
kfuse.engine.aliasing accept only those). The check reads a program built for one signature
(layouts and sizes), so a cached call pays nothing for it.

Input operands are not checked so: a padded read's operand describes the window the kernel
indexes, larger than the input, and the kernel loads only inside the input. Nor are the
outputs of a segment that are windows of a larger array (RuntimeInfo.output_views): their
array is the call's, which the folded fusion's own program is checked against. A program of
segments merged into one (kfuse.engine.segment_kernels) is not checked again: each segment's
program was as it was built, and in the merged one an output operand may be read (a later
segment reads a value that is also a fusion output from the output's array, a pad's window
around it included).
"""

from __future__ import annotations

import math
from typing import Any

from kfuse.errors import KfuseError
from kfuse.ir.values import TensorView
from kfuse.runtime.info import RuntimeInfo
from kfuse.runtime.launch import OutputOperand


def element_span(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, int] | None:
    """(lowest, highest) element offset a view of `shape`/`strides` reaches, or None when it
    has no element."""
    if any(n == 0 for n in shape):
        return None
    low = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    high = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0)
    return low, high


def check_operand_spans(program: Any, info: RuntimeInfo) -> None:
    """KfuseError where an output operand of `program`'s launches (a KernelProgram's, whose
    output operands are the outputs its kernels write) reaches outside its output on the
    call `info` describes; see the module docstring."""
    fusion = info.fusion
    for launch in program.launches:
        for op in launch.operands:
            if not isinstance(op, OutputOperand):
                continue
            view = element_span(op.shape, op.strides)
            if view is None:
                continue
            out = fusion.outputs[op.index]
            assert isinstance(out, TensorView)
            if out in info.output_views:
                continue  # a window of an array this call does not see: checked by its caller
            itemsize = out.dtype.itemsize
            size = math.prod(info.shape(out)) * itemsize
            low = op.byte_offset + view[0] * itemsize
            high = op.byte_offset + (view[1] + 1) * itemsize
            if low < 0 or high > size:
                raise KfuseError(
                    f"internal error (a kfuse bug; please report it with the fusion): kernel "
                    f"{launch.name} would write output {op.index} ({out.name}) through sizes "
                    f"{op.shape} and strides {op.strides} from byte {op.byte_offset}, bytes "
                    f"[{low}, {high}) of an output of {size}; nothing was launched"
                )
