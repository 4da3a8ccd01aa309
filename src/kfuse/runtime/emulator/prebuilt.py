"""What every emulated kernel's compile shares, built once per cache folder, compiler, flag set
and header text: a precompiled header (g++'s .gch) of the emulator's headers, and the runtime
object (the block scheduler, fibers, watchdog and launch of emu_launch.h) that every kernel
library links. A kernel's compile then parses none of the headers and generates only the
kernel: an empty kernel spent 0.16 s of its 0.45 s parsing the headers and 0.2 s generating
the runtime.

Every generated kernel's source also starts with kfuse's device runtime (runtime_header(),
1,500 lines of helpers); a second precompiled header, of a header holding the emulator's
headers and then that text, spares each kernel's compile parsing it (0.04 s of 0.24 s). A
kernel that starts with it includes that header instead of the emulator's and compiles the
rest of its source: the same text in the same order, so the same code.

Each translation unit starts with `#include "emu_prelude.h"`. g++ looks for
`emu_prelude.h.gch` in each include folder just before it looks for the header there, so the
prebuilt folder goes first on the include path and the header folder second: a PCH that g++
finds unusable (another compiler, other flags) is skipped and the text is parsed instead, with
the same result. Each file is written to a temporary name and renamed into place, so
concurrent builders (pytest-xdist workers sharing a cache folder) never see half of one.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import tempfile
from pathlib import Path

from kfuse.errors import EmulatorError
from kfuse.runtime import disk_cache

PRELUDE = "emu_prelude.h"
RUNTIME_OBJECT = "emu_runtime.o"
DEVICE_RUNTIME = "kf_device_runtime.h"
"""The header of the emulator's headers and kfuse's device runtime, in the prebuilt folder."""
_GCH = PRELUDE + ".gch"
DEVICE_RUNTIME_GCH = DEVICE_RUNTIME + ".gch"
_DEVICE_RUNTIME_START = f'#include "{PRELUDE}"\n'
# How each file starts: every PCH of g++, every ELF object, the device runtime's header.
_MAGIC = {
    _GCH: b"gpch",
    RUNTIME_OBJECT: b"\x7fELF",
    DEVICE_RUNTIME: _DEVICE_RUNTIME_START.encode(),
    DEVICE_RUNTIME_GCH: b"gpch",
}
_RUNTIME_UNIT = f'#define KF_EMU_RUNTIME 1\n#include "{PRELUDE}"\n'

# Flags that only matter to the link step: the PCH and the runtime object compile without them.
_LINK_ONLY = frozenset({"-shared", "-fuse-ld=gold"})


def device_runtime_text(device_runtime: str) -> str:
    """The text of DEVICE_RUNTIME: the emulator's headers, then the device runtime as the
    kernel's source has it (its lines numbered as there)."""
    return f'{_DEVICE_RUNTIME_START}#line 1 "kernel.cu"\n{device_runtime}'


def _folder_key(
    header_dir: Path, headers: tuple[str, ...], flags: tuple[str, ...], cxx_id: str, device: str
) -> str:
    h = hashlib.sha256()
    for part in (str(header_dir), cxx_id, "\0".join(flags), device):
        h.update(part.encode())
        h.update(b"\0\1\0")
    for name in headers:
        h.update((header_dir / name).read_bytes())
        h.update(b"\0\1\0")
    return h.hexdigest()[:16]


def _usable(path: Path) -> bool:
    """Whether `path` looks like what it should be: a regular file (g++ would block reading a
    FIFO left in its place) that starts as its kind does. Anything else there is removed, so
    that it is built again (g++ silently skips a file that is no PCH, and would parse the
    headers for every kernel from then on)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    magic = _MAGIC[path.name]
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return False
    except OSError:  # a link, a directory
        disk_cache.clear_the_way(path)
        return False
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
        head = os.read(fd, len(magic)) if regular else b""
    finally:
        os.close(fd)
    if head == magic:
        return True
    disk_cache.discard(path, "was not a prebuilt part of the emulator's compiles")
    return False


def _compile(
    out: Path, header_dir: Path, flags: tuple[str, ...], cxx: str, kind: list[str], unit: str
) -> subprocess.CompletedProcess[str]:
    compile_flags = [f for f in flags if f not in _LINK_ONLY]
    cmd = [cxx, *compile_flags, f"-I{header_dir}", *kind, unit, "-o", str(out)]
    env = dict(os.environ, LC_ALL="C")
    return subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)


def build_runtime(out: Path, header_dir: Path, flags: tuple[str, ...], cxx: str) -> None:
    """Compile the runtime object into `out`; EmulatorError with g++'s messages when it fails
    (flags g++ rejects, a broken header)."""
    with tempfile.TemporaryDirectory(prefix="kfuse-emu-") as tmp:
        unit = Path(tmp) / "runtime.cpp"
        unit.write_text(_RUNTIME_UNIT)
        proc = _compile(out, header_dir, flags, cxx, ["-c", "-x", "c++"], str(unit))
    if proc.returncode != 0:
        lines = proc.stderr.splitlines()
        shown = "\n".join(lines[:20])
        raise EmulatorError(f"the host compiler rejected the emulator's runtime\n{shown}")


def _build_into(
    folder: Path, name: str, header_dir: Path, flags: tuple[str, ...], cxx: str, device: str
) -> None:
    fd, tmp_name = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        if name == RUNTIME_OBJECT:
            build_runtime(tmp, header_dir, flags, cxx)
        elif name == DEVICE_RUNTIME:
            tmp.write_text(device_runtime_text(device))
        else:
            header = str(
                folder / DEVICE_RUNTIME if name == DEVICE_RUNTIME_GCH else header_dir / PRELUDE
            )
            if _compile(tmp, header_dir, flags, cxx, ["-x", "c++-header"], header).returncode:
                return
        os.replace(tmp, folder / name)
    except EmulatorError:
        return  # the kernel's own compile, from the headers' text, reports it
    finally:
        tmp.unlink(missing_ok=True)


def folder(
    cache: Path,
    header_dir: Path,
    headers: tuple[str, ...],
    flags: tuple[str, ...],
    cxx: str,
    cxx_id: str,
    device_runtime: str,
    with_device_runtime: bool,
) -> Path | None:
    """The folder under `cache` holding the runtime object and, when g++ could build it, the
    PCH the kernel asking includes first (with `with_device_runtime`, DEVICE_RUNTIME's, made
    of `device_runtime`; else the emulator headers'), for these headers, flags, compiler and
    device runtime, built first where missing: a folder whose kernels are all generated never
    builds the emulator headers' own. None when the runtime object cannot be built there (a
    read-only cache): then each kernel compiles the runtime itself, as it always did."""
    key = _folder_key(header_dir, headers, flags, cxx_id, device_runtime)
    where = cache / f"prebuilt-{key}"
    # The device runtime's header before its PCH, which is built from it.
    pch = [DEVICE_RUNTIME, DEVICE_RUNTIME_GCH] if with_device_runtime else [_GCH]
    try:
        for name in [RUNTIME_OBJECT, *pch]:
            if not _usable(where / name):
                where.mkdir(parents=True, exist_ok=True)
                _build_into(where, name, header_dir, flags, cxx, device_runtime)
        return where if _usable(where / RUNTIME_OBJECT) else None
    except OSError:
        return None


def has_device_runtime(where: Path) -> bool:
    """Whether the folder `where` has the device runtime's header and its PCH: a kernel that
    starts with the device runtime then includes DEVICE_RUNTIME in place of that text."""
    return _usable(where / DEVICE_RUNTIME) and _usable(where / DEVICE_RUNTIME_GCH)


def discard(where: Path) -> None:
    """Remove prebuilt parts g++ failed with (a damaged file): the next kernel builds them
    again."""
    for name in (_GCH, RUNTIME_OBJECT, DEVICE_RUNTIME_GCH, DEVICE_RUNTIME):
        disk_cache.discard(where / name, "was a prebuilt part g++ could not use")
