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
KF_SPILL_FALLBACK defined and takes that where its stack frame is smaller (the fallback's
tests take registers too: a kernel drawing random numbers spilled more with them). The
kernel's name and arguments are the same either way; the host emulator compiles the first
choice.
"""

from __future__ import annotations

MARKER = "KF_SPILL_FALLBACK"
_CHOICE = f"#ifndef {MARKER}"


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
