"""A kernel that offers ptxas a fallback for when its first compile spills.

Some code generation choices cut instructions at the cost of registers, and whether ptxas then
spills depends on more than a scheduler can see (which values it converts once and keeps).
The inner persistent kernels' rows that are exactly their threads' slots drop their row-end
tests (ReductionKernelSpec.full_slots): the dropout + layer norm forward [8192, 8192] bf16 went
from 1784 to 872 SASS instructions and 125.0 to 110.0 us on an H200; but the softmax backward
[4096, 16384], whose two held bf16 inputs ptxas then kept as floats for both passes, spilled
48 bytes a thread under its 64-register bound and went from 93.1 to 109.7 us.

Such a kernel writes its choice between `#ifndef KF_SPILL_FALLBACK` and `#else` (the fallback
after it, to `#endif`). The CUDA backend compiles it as written; where the cubin then has a
stack frame (local memory: cubin_info.frame_bytes), it compiles it again with
KF_SPILL_FALLBACK defined and takes the one that costs less (prefer_fallback): the
fallback's tests take registers and instructions too (a kernel drawing random numbers spilled
more with them, and another took 2184 instructions to avoid an 8-byte frame at 1264). The
kernel's name and arguments are the same either way; the host emulator compiles the first
choice.
"""

from __future__ import annotations

from kfuse.runtime.backends import cubin_info

MARKER = "KF_SPILL_FALLBACK"
_CHOICE = f"#ifndef {MARKER}"

STACK_BYTE_COST = 50
"""A byte of a thread's stack frame, in instructions, in prefer_fallback's cost. Read from
the suite's kernels that offer a fallback (sm_90, 2026-12-07): the softmax backward
[4096, 16384] bf16 ran 93.1 us with its fallback (0 bytes, 472 instructions) against 109.7
as written (48 bytes, 344): a byte costs more than 2.7 instructions; the RMS norm backwards
(8 bytes, 552 and 584 instructions, fallbacks 120 and 112 more) have run with their
fallbacks since that choice (above 15 keeps them); the dropout + RMS norm forward drawing
its mask (8 bytes at 1264 as written, the fallback 2184) wants the written one (below 115)."""


def cost(cubin: bytes) -> int:
    """A compiled choice's cost: its instructions plus STACK_BYTE_COST per byte of frame."""
    return cubin_info.instructions(cubin) + STACK_BYTE_COST * cubin_info.frame_bytes(cubin)


def prefer_fallback(written: bytes, fallback: bytes) -> bool:
    """Whether the fallback's cubin costs less than the written choice's."""
    return cost(fallback) < cost(written)


def offers_fallback(source: str) -> bool:
    """Whether `source` has a choice to take back where it spills."""
    return _CHOICE in source


def chose_fallback(source: str) -> bool:
    """Whether `source` is a fallback_source (fitted_compile returns the source it compiled)."""
    return f"#define {MARKER} 1\n" in source


def fallback_source(source: str) -> str:
    """`source` with its fallback chosen: MARKER defined just before its first choice (after
    the runtime header's include, which NVRTC's precompiled header needs unchanged)."""
    at = source.index(_CHOICE)
    return f"{source[:at]}#define {MARKER} 1\n{source[at:]}"
