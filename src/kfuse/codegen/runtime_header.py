"""The device-helper header that every generated kernel's source starts with."""

from __future__ import annotations

import functools
from pathlib import Path

_HEADER_PATH = Path(__file__).with_name("runtime") / "kfuse_runtime.cuh"


@functools.cache
def runtime_header() -> str:
    """The text of kfuse_runtime.cuh (read once per process)."""
    return _HEADER_PATH.read_text()
