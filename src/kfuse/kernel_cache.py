"""The on-disk cubin cache: one file per (source, options, NVRTC version, arch).

Entries carry a SHA-256 of their payload and are written atomically (temporary file, then
rename), so a crash or a concurrent writer never leaves a half-written entry behind, and a
corrupt entry is detected, ignored and rebuilt.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from kfuse import knobs

_MAGIC = b"KFUSECUBIN1\n"


def cache_key(*parts: str) -> str:
    """A hex digest naming an entry; include everything the cubin depends on."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def cache_dir() -> Path | None:
    """The cache folder, or None when the disk cache is off (KFUSE_CACHE_DIR=off)."""
    setting = knobs.get().cache_dir
    if setting is not None and setting.lower() in ("off", "none", "0", ""):
        return None
    if setting:
        return Path(setting) / "cubin"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kfuse" / "cubin"


def load(key: str) -> bytes | None:
    """The cached payload, or None when missing or corrupt."""
    folder = cache_dir()
    if folder is None:
        return None
    try:
        blob = (folder / key).read_bytes()
    except OSError:
        return None
    if not blob.startswith(_MAGIC) or len(blob) < len(_MAGIC) + 64:
        return None
    digest = blob[len(_MAGIC):len(_MAGIC) + 64].decode("ascii", "replace")
    payload = blob[len(_MAGIC) + 64:]
    if hashlib.sha256(payload).hexdigest() != digest:
        return None
    return payload


def store(key: str, payload: bytes) -> None:
    """Write an entry atomically; a cache that cannot be written is skipped, not an error."""
    folder = cache_dir()
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + hashlib.sha256(payload).hexdigest().encode() + payload)
        os.replace(tmp, folder / key)
    except OSError:
        return
