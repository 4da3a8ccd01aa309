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


RUNTIME_HEADER_NAME = "kfuse_runtime.cuh"
"""The name a kernel's source #includes the runtime header by, where it is handed to NVRTC
as a header (kfuse.runtime.backends.cuda.nvrtc_program)."""


def with_header_included(source: str) -> tuple[str, str] | None:
    """(`source` with the runtime header it starts with replaced by an #include of
    RUNTIME_HEADER_NAME, the header's text), or None for a source that does not start with
    it. The lines after the header keep their text; each is one line earlier."""
    header = runtime_header()
    if not source.startswith(header):
        return None
    return f'#include "{RUNTIME_HEADER_NAME}"' + source[len(header) :], header
