"""The on-disk cubin cache: one file per (source, options, NVRTC version, arch).

Each file is a kfuse.runtime.disk_cache entry: its header names the key and the kernel it holds, and
both are checked (with the payload's size and SHA-256) before a cubin is used; a bad entry is
removed with a warning and rebuilt. Entries are written atomically.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from kfuse import knobs
from kfuse.runtime import disk_cache


def cache_key(*parts: str) -> str:
    """A hex digest naming an entry; include everything the cubin depends on."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def source_digest(source: str) -> str:
    """The SHA-256 of a kernel's source, which its entry's key and identity both take (the
    source itself is tens of kilobytes: hashed once)."""
    return hashlib.sha256(source.encode()).hexdigest()


def kernel_identity(
    source: str, name: str, arch: str, options: str, nvrtc: str, digest: str | None = None
) -> dict[str, str]:
    """What an entry must record to be the cubin asked for (`digest`: source_digest(source)
    where the caller has it)."""
    return {
        "source_sha256": digest or source_digest(source),
        "name": name,
        "arch": arch,
        "options": options,
        "nvrtc": nvrtc,
    }


def cache_dir(settings: knobs.Knobs | None = None) -> Path | None:
    """The cache folder, or None when the disk cache is off (KFUSE_CACHE_DIR=off); `settings`:
    the knobs the caller read already."""
    setting = (settings or knobs.get()).cache_dir
    if setting is not None and setting.lower() in ("off", "none", "0", ""):
        return None
    if setting:
        return Path(setting) / "cubin"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kfuse" / "cubin"


def load(key: str, identity: dict[str, str]) -> bytes | None:
    """The cached cubin, or None when there is none or the entry is bad (then removed)."""
    folder = cache_dir()
    return None if folder is None else disk_cache.read_entry(folder, key, identity)


def store(key: str, identity: dict[str, str], payload: bytes) -> None:
    """Write an entry atomically; a cache that cannot be written is skipped, not an error."""
    folder = cache_dir()
    if folder is not None:
        disk_cache.write_entry(folder, key, identity, payload)
