"""Positions outside their axis, found by the kernels that read them: reported as an
InputError without waiting for the GPU, and never a read outside a tensor.

A kernel with indexed reads (kfuse.codegen.indexed) checks each position it reads. One outside
its axis writes its value into two words of host memory mapped into the GPU's address space
(pinned memory of the call's framework: torch's or CuPy's; a NumPy array on the host emulator),
the words of that read, which are part of the kernel's last argument: the value, then a 1. The
kernel goes on with NaN (0 for integers and Bool) at that position: no trap, so the CUDA
context stays usable, and no host synchronization, so a call costs what it would without the
check.

The host reads those words (a load from host memory, no CUDA call) after it launches the
kernel and at the start of every later call of any fusion (`raise_pending`): whichever finds
them written raises the InputError, naming the op, the axis, the position and the extent, and
clears them. On the host emulator the kernel has run by then, so the call that read the
position raises. On a GPU a kernel still running when its call returns is found by the next
call: that call raises, and the earlier call's outputs hold NaN where the position was read.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

from kfuse.errors import InputError
from kfuse.ir.exprs import GatherOp, IndexSelectOp
from kfuse.ir.index_ops import op_name
from kfuse.runtime.capture import refuse_under_capture

_ARMED: weakref.WeakSet[IndexChecks] = weakref.WeakSet()
"""Every IndexChecks whose flags exist (raise_pending reads them all)."""
_ANY_ARMED = False
"""Whether any flags were ever made: the check a call of a fusion without indexed reads pays
(a global's truth, tens of nanoseconds; the WeakSet's length costs several times that)."""


def describe_read(expr: IndexSelectOp | GatherOp) -> str:
    """How an error names an indexed read: the op and its axis (not its Vals, which in a
    segment are the segment's, not the definition's), as kfuse.ir.index_ops.check_positions
    names one on the framework's path."""
    return f"{op_name(expr)} along axis {expr.dim}"


class IndexChecks:
    """The flags of one kernel's indexed reads: `reads[k]` is (how an error names it, the
    extent of its axis) for the kernel's input k that is one, None for the others; the flags
    themselves, two words an input of mapped host memory, are made once per framework and
    device, on the first launch there."""

    def __init__(self, reads: tuple[tuple[str, int] | None, ...]) -> None:
        self.reads = reads
        # (framework, device) -> (the array that owns the words, a NumPy view of them)
        self._flags: dict[tuple[str, int], tuple[Any, Any]] = {}

    def pointer(self, framework: str, device: int) -> int:
        """The address of the flags a launch on `device` (-1: the emulator) of arrays of
        `framework` writes, made zero the first time."""
        key = (framework, device)
        if key not in self._flags:
            # Pinned host memory is allocated by the framework's host allocator, not on
            # the stream: kfuse makes none while a capture is recording.
            reads = ", ".join(read[0] for read in self.reads if read is not None)
            refuse_under_capture(
                framework,
                device,
                f"the kernel of {reads} reports a position outside its axis through pinned "
                "host memory, which kfuse allocates on the kernel's first launch on a device "
                "and never while a capture records",
                "Run the fusion once on this device before capturing (the warm-up run that "
                "torch.cuda.graph's documentation asks for does it); later captures and "
                "replays use that memory, and the next kfuse call after a replay reports "
                "any position outside its axis",
            )
            global _ANY_ARMED
            self._flags[key] = _mapped_words(2 * len(self.reads), framework, device)
            _ARMED.add(self)
            _ANY_ARMED = True
        owner, _ = self._flags[key]
        return _address(owner)

    def reads_outside(self) -> list[str]:
        """What every position outside its axis that a launch has recorded says (none while
        none has), its flags cleared for the next launch."""
        found = []
        for _, words in self._flags.values():
            for k, read in enumerate(self.reads):
                if read is None or int(words[2 * k + 1]) != 1:
                    continue  # not a read, or none (or one whose value is not there yet)
                value = int(words[2 * k])
                words[2 * k : 2 * k + 2] = 0
                value = value - (1 << 64) if value >= 1 << 63 else value
                what, extent = read
                found.append(
                    f"{what}: an index holds {value}, outside the axis (size {extent}); "
                    f"positions are in [0, {extent}). The kernel read no element there: the "
                    "call that read it gave NaN (0 for integers and Bool) at that position"
                )
        return found


def raise_for(checks: Iterable[IndexChecks]) -> None:
    """InputError for the positions outside their axes that launches of `checks` recorded,
    naming the first, after every one's flags are cleared: a call whose reads found several
    (a gather and a take_along_axis of one bad index) raises once, and no later call raises
    again for what it did not read."""
    found = [message for c in checks for message in c.reads_outside()]
    if not found:
        return
    more = len(found) - 1
    raise InputError(
        found[0] + (f" ({more} more read{'s' * (more > 1)} outside an axis too)" if more else "")
    )


def raise_pending() -> None:
    """Raise the InputError of any position outside its axis that a kernel recorded since
    the last check (raise_for over every kernel's flags); nothing when none did."""
    if not _ANY_ARMED:
        return
    raise_for(list(_ARMED))


def _mapped_words(n: int, framework: str, device: int) -> tuple[Any, Any]:
    """`n` zeroed 64-bit words the GPU can write and the host read without a CUDA call:
    (the framework's array owning them, a NumPy view). Pinned host memory is mapped into
    every device's unified address space at the address the host sees."""
    import numpy

    if device < 0:
        words = numpy.zeros(n, numpy.uint64)
        return words, words
    if framework == "torch":
        import torch

        owner = torch.zeros(n, dtype=torch.int64, pin_memory=True)
        return owner, owner.numpy().view(numpy.uint64)
    if framework == "cupy":
        import cupyx

        words = cupyx.zeros_pinned((n,), dtype=numpy.uint64)
        return words, words
    raise InputError(f"indexed reads on the GPU need torch or CuPy arrays, not {framework}")


def _address(owner: Any) -> int:
    if hasattr(owner, "data_ptr"):  # torch
        return int(owner.data_ptr())
    return int(owner.ctypes.data)
