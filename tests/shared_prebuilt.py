"""Private kernel caches that start with a copy of the session cache's prebuilt folder.

Every cache folder builds its own precompiled header and runtime object before its first
kernel (kfuse.runtime.emulator.prebuilt): about 0.9 CPU-seconds. Tests that give a module or
a test a cache of its own, to count or damage its entries, copy the session cache's folder in
instead, unless the prebuilt parts are what they test (test_emulator_prebuilt.py). A copy, not
a link: a test that damages a part damages its own.
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

import pytest

# The session's cache as the environment named it when pytest loaded the tests, before any
# test pointed KFUSE_CACHE_DIR at a private one.
_SESSION_CACHE_DIR = os.environ.get("KFUSE_CACHE_DIR")


@functools.cache
def _session_folder() -> Path | None:
    from kfuse.runtime.emulator import build

    with pytest.MonkeyPatch.context() as mp:
        if _SESSION_CACHE_DIR is None:
            mp.delenv("KFUSE_CACHE_DIR", raising=False)
        else:
            mp.setenv("KFUSE_CACHE_DIR", _SESSION_CACHE_DIR)
        directory = build.cache_dir()
    if directory is None:  # the session runs without a disk cache
        return None
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return build.prebuilt_folder(directory)


def seed(cache_root: Path) -> None:
    """Copy the session cache's prebuilt folder into the cache `cache_root` (a folder
    KFUSE_CACHE_DIR names), built first where the session's has none yet; nothing where the
    session has no usable cache (the private one then builds its own)."""
    folder = _session_folder()
    if folder is None:
        return
    copy = cache_root / "emulator" / folder.name
    copy.mkdir(parents=True, exist_ok=True)
    for part in folder.iterdir():
        if part.is_file() and not part.name.startswith("."):
            shutil.copyfile(part, copy / part.name)
