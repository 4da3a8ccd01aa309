"""Entries of kfuse's on-disk caches (cubins, emulator libraries), verified before use.

Every entry carries a header: the key it was written under, the identity of what it holds
(for a kernel: its source's hash, its name, compile options and target), and its payload's
size and SHA-256. A read checks all of them against the request, so a truncated, corrupt or
foreign entry (another key's files copied here) is never used. Reads never block and are
bounded: only regular files are opened (O_NONBLOCK, not following links), at most
MAX_ENTRY_BYTES. Any bad entry (unreadable, foreign, truncated, a directory, a FIFO, a link) is
removed with one warning and the caller builds it again; writes are atomic (a temporary file,
then a rename), so concurrent writers never leave half an entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

MAX_ENTRY_BYTES = 512 << 20
"""The largest entry read (a cubin or library is far smaller; a link to /dev/zero is not)."""

_MAGIC = b"KFUSE-CACHE-ENTRY 2\n"


class BadEntry(Exception):
    """An entry that cannot be used; its message says why."""


def read_file(path: Path, limit: int = MAX_ENTRY_BYTES) -> bytes | None:
    """The bytes of `path`, None when there is no such file. BadEntry when it is not a
    regular file (a directory, FIFO, device or symbolic link), is larger than `limit`, or
    cannot be read."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except (FileNotFoundError, NotADirectoryError):  # no entry (or no folder for one)
        return None
    except OSError as exc:  # ELOOP: a link; EISDIR; EACCES
        raise BadEntry(f"cannot be opened ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BadEntry("is not a regular file")
        if info.st_size > limit:
            raise BadEntry(f"has {info.st_size} bytes, more than any entry")
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise BadEntry("grew past the size of any entry while it was read")
        return b"".join(chunks)
    except OSError as exc:
        raise BadEntry(f"cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)


def header(key: str, identity: dict[str, str], payload: bytes) -> bytes:
    """An entry's header: its key, its identity, and its payload's size and SHA-256 (a file
    of its own where the payload must stay a file of its own, as a shared library does)."""
    fields = {
        "key": key,
        "identity": identity,
        "size": len(payload),
        "sha256": hashlib.sha256(payload).hexdigest(),
    }
    return _MAGIC + json.dumps(fields, sort_keys=True).encode() + b"\n"


def pack(key: str, identity: dict[str, str], payload: bytes) -> bytes:
    """An entry in one file: its header, then the payload."""
    return header(key, identity, payload) + payload


def unpack(blob: bytes, key: str, identity: dict[str, str]) -> bytes:
    """The payload of entry `blob`, checked against the request; BadEntry otherwise."""
    header = check_header(blob, key, identity)
    payload = blob[blob.index(b"\n", len(_MAGIC)) + 1 :]
    check_payload(payload, header)
    return payload


def check_header(blob: bytes, key: str, identity: dict[str, str]) -> dict[str, Any]:
    """The header of an entry (or a header file), checked against the key and identity."""
    if not blob.startswith(_MAGIC) or b"\n" not in blob[len(_MAGIC) :]:
        raise BadEntry("is not a kfuse cache entry of this version")
    line = blob[len(_MAGIC) : blob.index(b"\n", len(_MAGIC))]
    try:
        header = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise BadEntry("has an unreadable header") from None
    if not isinstance(header, dict) or header.get("key") != key:
        raise BadEntry(f"was written for another key ({_short(header)})")
    if header.get("identity") != identity:
        raise BadEntry("holds another kernel than the one asked for")
    if not isinstance(header.get("size"), int) or not isinstance(header.get("sha256"), str):
        raise BadEntry("has an incomplete header")
    return header


def check_payload(payload: bytes, header: dict[str, Any]) -> None:
    """BadEntry unless `payload` has the size and SHA-256 the header records."""
    if len(payload) != header["size"]:
        raise BadEntry(f"is truncated ({len(payload)} of {header['size']} bytes)")
    if hashlib.sha256(payload).hexdigest() != header["sha256"]:
        raise BadEntry("does not match its checksum")


def _short(header: Any) -> str:
    key = header.get("key") if isinstance(header, dict) else None
    return f"{key[:12]}..." if isinstance(key, str) else "none"


def discard(path: Path, why: str, *companions: Path) -> None:
    """Remove a bad entry (whatever it is: a file, a link, a FIFO, a directory) and the other
    files of the same entry, warning once; what cannot be removed is left (the caller
    rebuilds, and writes over it)."""
    for p in (path, *companions):
        try:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink(missing_ok=True)
        except OSError:
            pass
    warnings.warn(
        f"kfuse: the disk-cache entry {path} {why}; it was removed and is built again",
        RuntimeWarning,
        stacklevel=3,
    )


def write_atomically(path: Path, data: bytes) -> None:
    """Write `path` through a temporary file and a rename; something other than a regular
    file in the way (a directory, a FIFO, a link) is removed first."""
    clear_the_way(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_entry(folder: Path, key: str, identity: dict[str, str]) -> bytes | None:
    """The payload of the one-file entry `key` in `folder`, checked against the request, or
    None when there is none or it is bad (then removed, with a warning)."""
    path = folder / key
    try:
        blob = read_file(path)
        return None if blob is None else unpack(blob, key, identity)
    except BadEntry as exc:
        discard(path, str(exc))
        return None


def load_entry(
    folder: Path, key: str, identity: dict[str, str], decode: Callable[[bytes], T]
) -> T | None:
    """`decode` of read_entry's payload, or None: no entry, a bad one, or one `decode`
    raises on (any exception: the entry does not load back; removed, with a warning)."""
    payload = read_entry(folder, key, identity)
    if payload is None:
        return None
    try:
        return decode(payload)
    except Exception as exc:  # noqa: BLE001 - any entry that does not load is a bad entry
        discard(folder / key, f"does not load back ({type(exc).__name__}: {exc})")
        return None


def write_entry(folder: Path, key: str, identity: dict[str, str], payload: bytes) -> None:
    """Write the one-file entry `key` into `folder` atomically (the folder made first); a
    cache that cannot be written is skipped, not an error."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_atomically(folder / key, pack(key, identity, payload))
    except OSError:
        return


def clear_the_way(path: Path) -> None:
    """Remove whatever is at `path` unless it is a regular file (a rename onto a directory
    fails, and would keep failing on every later run)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(info.st_mode):
        discard(path, "was not a regular file")
