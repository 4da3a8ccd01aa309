"""The device-helper header that every generated kernel's source starts with."""

from __future__ import annotations

import functools
from pathlib import Path

# In this order: the second builds on the first's types and memory access.
_HEADER_PATHS = [
    Path(__file__).with_name("runtime") / name
    for name in ("kfuse_runtime.cuh", "kfuse_reductions.cuh")
]


@functools.cache
def runtime_header() -> str:
    """The text of kfuse_runtime.cuh then kfuse_reductions.cuh (read once per process)."""
    return "\n".join(path.read_text() for path in _HEADER_PATHS)
