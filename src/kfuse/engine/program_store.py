"""The program store: a fusion's KernelProgram for one input signature, kept on disk, so that
the first call of a fusion in a new process (or of a new definition of a fusion already run)
skips the compiler's partition, params and kernels stages, code generation most of all, and
only loads its kernels.

An entry is found by a key over everything a Program is a function of:

* the package's code: every file of the installed kfuse package by path, size and
  modification time (package_fingerprint, once per process);
* the canonical fusion's structure (Fusion.structure, which names nothing);
* the call's signature (kfuse.engine.signature.program_key: target, each input's dtype,
  shape, strides and alignment class, the scalars an extent depends on) and the device's
  whole description (or the emulator profile's);
* the NVRTC version on a GPU (the compile stage keeps the variant of a kernel that spills
  less, so a program depends on what NVRTC makes of its kernels);
* the settings of kfuse.switches, which tests and A/B runs change in a running process.

Anything else that steers the compiler inside a running process (a test's or a tool's patch
of a heuristic) is not in the key: those turn the store off (KFUSE_PROGRAM_CACHE=0), as the
test suite does but for the tests of this module, and tools/kernel_times.py does.

Only a KernelProgram of one scheduler is kept: not a LibraryProgram, a SegmentedProgram or
merged segments (SegmentKernelsProgram), which hold the fusion's segments. Its kernels are
kept as their names and sources and, on a GPU, their cubins as the cubin cache held them
(checked there when read, and here by the entry's checksum), so that a load reads one file
and hashes no kernel source; on the emulator, or where a cubin was missing, they load
through the compile stage (the loaded kernels in memory, the cubin cache, NVRTC). A loaded
program gets the output-operand check of a new one
(kfuse.engine.operand_spans). Entries are kfuse.runtime.disk_cache entries (a checked
header, atomic writes) in the folder `program` of the cache; one that does not load back
(truncated, corrupt, a format this code does not read) is removed with a warning and the
program is compiled again. The payload is a pickle: the store is as trusted as the cubin
and emulator caches beside it, whose entries run as code.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import os
import pickle
import sys
from pathlib import Path
from typing import Any

from kfuse import knobs, switches
from kfuse.engine.operand_spans import check_operand_spans
from kfuse.engine.program import KernelProgram, Program
from kfuse.ir.canonicalize import STRUCTURE_KEY
from kfuse.ir.fusion import Fusion
from kfuse.ir.values import Val
from kfuse.runtime import disk_cache, kernel_cache
from kfuse.runtime.index_checks import IndexChecks
from kfuse.runtime.info import EMULATOR, RuntimeInfo
from kfuse.runtime.runtime_header import runtime_header

FORMAT = "kfuse-program 1"
"""The entries' format; a change of what a stored program holds must change it (the package
fingerprint changes with any edit anyway: this names the format in each entry's identity)."""

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
"""The kfuse package's folder, whose files package_fingerprint reads."""

_fingerprint: str | None = None

DIGEST_KEY = "_program_store_digest"
"""Where a canonical fusion keeps fusion_digest's value (kept with a stored canonical form:
kfuse.engine.canonical_store)."""


class _NotStorable(Exception):
    """A program holding something the store does not keep (a Val outside the fusion, the
    fusion itself)."""


def folder(name: str = "program") -> Path | None:
    """Where entries live, the folder `name` beside the cubin cache's (`program`; the
    canonical forms' `canonical`: kfuse.engine.canonical_store); None when the store is off:
    the disk cache off, KFUSE_PROGRAM_CACHE off, or a stage dumped (KFUSE_DUMP wants the
    stages to run)."""
    settings = knobs.get()
    if not settings.program_cache or settings.dump:
        return None
    environ = os.environ
    return _folder(settings, environ.get("XDG_CACHE_HOME"), environ.get("HOME"), name)


@functools.lru_cache(maxsize=16)
def _folder(settings: knobs.Knobs, xdg: str | None, home: str | None, name: str) -> Path | None:
    """folder()'s Path for these settings and this environment (built once: a first call
    asks twice, and pathlib's joins cost microseconds)."""
    cubins = kernel_cache.cache_dir(settings)
    return None if cubins is None else cubins.parent / name


def package_fingerprint() -> str:
    """A digest of the kfuse package's files (path, size, modification time; its version is
    in __init__.py) and the Python version: any edit or reinstall changes it. Computed once
    per process (about a millisecond)."""
    global _fingerprint
    if _fingerprint is None:
        digest = hashlib.sha256(f"{sys.version_info[:2]}".encode())
        for directory, subdirs, files in os.walk(PACKAGE_ROOT):
            subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
            for name in sorted(files):
                path = os.path.join(directory, name)
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                relative = os.path.relpath(path, PACKAGE_ROOT)
                digest.update(f"{relative}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
        _fingerprint = digest.hexdigest()
    return _fingerprint


def _switch_settings() -> str:
    return repr(sorted(switches.settings().items()))


def fusion_digest(fusion: Fusion) -> str:
    """The canonical fusion's structure, hashed once per fusion (a canonical fusion does not
    change once built); "" where an attribute does not pickle (nothing is stored then)."""
    cached = fusion.__dict__.get(DIGEST_KEY)
    if cached is None:
        # pickled, not repr'd: equal bytes are equal structures, whatever an attribute's repr
        structure = fusion.__dict__.get(STRUCTURE_KEY) or fusion.structure()
        try:
            cached = hashlib.sha256(pickle.dumps(structure, protocol=5)).hexdigest()
        except (pickle.PicklingError, TypeError, AttributeError):
            cached = ""
        fusion.__dict__[DIGEST_KEY] = cached
    return cached


def _fusion_vals(fusion: Fusion) -> list[Val]:
    """The Vals a stored program may name, in an order fixed by the fusion's structure."""
    cached = fusion.__dict__.get("_program_store_vals")
    if cached is None:
        cached = [*fusion.inputs, *(o for e in fusion.exprs for o in e.outputs)]
        fusion.__dict__["_program_store_vals"] = cached
    return cached


def entry_key(fusion: Fusion, info: RuntimeInfo, signature: tuple) -> str | None:
    """The key of the program of canonical `fusion` for the call `info` describes, whose
    kfuse.engine.signature.program_key is `signature` (see the module docstring); None for a
    fusion the store cannot name."""
    digest = fusion_digest(fusion)
    if not digest:
        return None
    nvrtc = ""
    if info.backend != EMULATOR:
        from kfuse import _C

        nvrtc = ".".join(str(v) for v in _C.nvrtc_version())
    return kernel_cache.cache_key(
        FORMAT,
        package_fingerprint(),
        digest,
        repr(signature),
        repr(info.device),
        nvrtc,
        _switch_settings(),
    )


def _identity() -> dict[str, str]:
    return {"format": FORMAT}


class _Pickler(pickle.Pickler):
    """Pickles a KernelProgram with the fusion's Vals as their positions in _fusion_vals and
    the C++ params as their to_dict(); refuses the fusion itself."""

    def __init__(self, file: io.BytesIO, vals: dict[int, int]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._vals = vals

    def persistent_id(self, obj: Any) -> Any:
        from kfuse import _C

        if isinstance(obj, Val):
            position = self._vals.get(id(obj))
            if position is None:
                raise _NotStorable(f"{obj} is not a value of the fusion")
            return ("val", position)
        if isinstance(obj, IndexChecks):
            return ("index_checks", obj.reads)  # its flags are made on the first launch
        if isinstance(obj, _C.HeuristicParams):
            return ("heuristic_params", obj.to_dict())
        if isinstance(obj, _C.CompileParams):
            return ("compile_params", obj.to_dict())
        if isinstance(obj, _C.LaunchParams):
            return ("launch_params", obj.to_dict())
        if isinstance(obj, Fusion):
            raise _NotStorable("it holds a fusion")
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, vals: list[Val]) -> None:
        super().__init__(file)
        self._vals = vals

    def persistent_load(self, pid: Any) -> Any:
        from kfuse import _C

        kind, value = pid
        if kind == "val":
            return self._vals[value]
        if kind == "index_checks":
            return IndexChecks(value)
        if kind == "heuristic_params":
            return _C.HeuristicParams.from_dict(value)
        if kind == "compile_params":
            return _C.CompileParams.from_dict(value)
        if kind == "launch_params":
            return _C.LaunchParams.from_dict(value)
        raise pickle.UnpicklingError(f"unknown persistent id {kind!r}")


def save(fusion: Fusion, info: RuntimeInfo, signature: tuple, program: Program) -> None:
    """Keep `program` (compiled for `info`, whose program_key is `signature`) where it is a
    KernelProgram the store keeps; a program it cannot keep, or a cache it cannot write, is
    skipped."""
    if type(program) is not KernelProgram or program.params is None:
        return
    place = folder()
    if place is None:
        return
    key = entry_key(fusion, info, signature)
    if key is None:
        return
    # Each kernel as its source (the runtime header every source starts with left out: it is
    # most of the bytes, and the same for every kernel of this build) and name, not loaded,
    # and on a GPU its cubin, which the load then needs no other entry for.
    header = runtime_header()
    kept = dataclasses.replace(
        program,
        launches=[
            dataclasses.replace(launch, kernel=None, source=launch.source.removeprefix(header))
            for launch in program.launches
        ],
    )
    headed = [launch.source.startswith(header) for launch in program.launches]
    buffer = io.BytesIO()
    vals = {id(v): k for k, v in enumerate(_fusion_vals(fusion))}
    try:
        _Pickler(buffer, vals).dump((kept, headed, _cubins(program, info)))
    except (_NotStorable, pickle.PicklingError, TypeError, AttributeError):
        return
    disk_cache.write_entry(place, key, _identity(), buffer.getvalue())


def _cubins(program: KernelProgram, info: RuntimeInfo) -> list[bytes] | None:
    """The cubin of each launch of `program` from the cubin cache, or None on the emulator or
    where one is missing (the load then compiles through the caches)."""
    if info.backend == EMULATOR:
        return None
    from kfuse.engine.compiler import KernelCompiler
    from kfuse.runtime.backends.cuda import CUDA_BACKEND

    assert program.params is not None
    compiler = KernelCompiler(program.params.cparams)
    arch = compiler.target_arch(info)
    cubins = []
    for launch in program.launches:
        cubin = CUDA_BACKEND.cached_cubin(launch.source, launch.name, arch, compiler.options)
        if cubin is None:
            return None
        cubins.append(cubin)
    return cubins


def load(fusion: Fusion, info: RuntimeInfo, signature: tuple) -> KernelProgram | None:
    """The stored program of `fusion` for this call, its kernels loaded, or None (nothing
    stored, the store off, or a bad entry: removed)."""
    place = folder()
    if place is None:
        return None
    key = entry_key(fusion, info, signature)
    if key is None:
        return None
    return disk_cache.load_entry(
        place, key, _identity(), lambda payload: _from_payload(payload, fusion, info)
    )


def _from_payload(payload: bytes, fusion: Fusion, info: RuntimeInfo) -> KernelProgram:
    """The program an entry's payload holds, its kernels loaded; raises where it does not
    hold one."""
    program, headed, cubins = _Unpickler(io.BytesIO(payload), _fusion_vals(fusion)).load()
    if type(program) is not KernelProgram or len(headed) != len(program.launches):
        raise pickle.UnpicklingError(f"it holds a {type(program).__name__}")
    if cubins is not None and len(cubins) != len(program.launches):
        raise pickle.UnpicklingError("its cubins are not one a launch")
    return _loaded(program, headed, cubins, info)


def _loaded(
    program: KernelProgram, headed: list[bool], cubins: list[bytes] | None, info: RuntimeInfo
) -> KernelProgram:
    """`program` with each launch's source whole again (`headed`: those that start with the
    runtime header) and its kernel loaded: from its cubin (`cubins`, on a GPU), else compiled
    through the caches; checked as a new program is."""
    from kfuse import _C
    from kfuse.engine.compiler import KernelCompiler

    assert program.params is not None
    compiler = KernelCompiler(program.params.cparams)
    header = runtime_header()
    launches = []
    for k, (launch, whole) in enumerate(zip(program.launches, headed, strict=True)):
        source = header + launch.source if whole else launch.source
        if cubins is not None and info.backend != EMULATOR:
            kernel = _C.Kernel(cubins[k], launch.name, info.device_index)
        else:
            kernel = compiler.compile(source, launch.name, info)
        launches.append(dataclasses.replace(launch, kernel=kernel, source=source))
    program.launches = launches
    check_operand_spans(program, info)
    return program


__all__ = ["FORMAT", "entry_key", "folder", "load", "package_fingerprint", "save"]
