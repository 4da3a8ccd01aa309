"""The device-helper header that every generated kernel's source starts with."""

from __future__ import annotations

import functools
from pathlib import Path

# In this order: each part builds on those before it (kf_base.cuh lists them).
_HEADER_PATHS = [
    Path(__file__).with_name("runtime") / name
    for name in (
        "kf_base.cuh",
        "kf_types.cuh",
        "kf_cast.cuh",
        "kf_math.cuh",
        "kf_memory.cuh",
        "kf_reductions.cuh",
    )
]


@functools.cache
def runtime_header() -> str:
    """The text of the runtime's parts, in order (read once per process)."""
    return "\n".join(path.read_text() for path in _HEADER_PATHS)
