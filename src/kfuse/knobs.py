"""The one module that reads kfuse's environment variables (``KFUSE_*``).

Everything else asks :func:`get`, which reads the environment on every call (cheap), so a
test or a long-running process sees changes. To add a knob: add a field to :class:`Knobs`,
read it in :meth:`Knobs.from_environ`, and describe it in :data:`ENVIRONMENT_VARIABLES` and
the README's table.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

# Every variable kfuse reads, with what it does (shown by ``python -m kfuse info``).
ENVIRONMENT_VARIABLES: dict[str, str] = {
    "KFUSE_CUDA_LIBRARY": "path of the libcuda.so.1 to load (default: the dynamic linker's)",
    "KFUSE_NVRTC_LIBRARY": "path of the libnvrtc.so to load (default: found by cuda.pathfinder)",
    "KFUSE_CUPTI_LIBRARY": "path of the libcupti.so the profiler loads (default: found by "
    "cuda.pathfinder)",
    "KFUSE_DEVICE": "'emulator' forces the host emulator (inputs must be host arrays)",
    "KFUSE_EMULATOR_PROFILE": "device the emulator pretends to be: h100 (default), h200, a100",
    "KFUSE_CACHE_DIR": "folder of the on-disk kernel caches (default ~/.cache/kfuse; 'off' "
    "disables them)",
    "KFUSE_PROGRAM_CACHE": "0 keeps canonical forms and compiled programs out of the disk "
    "cache: each new process canonicalizes a fusion and generates its kernels again before "
    "loading them from the cubin cache (default 1)",
    "KFUSE_POISON": "1 fills every new GPU output and scratch buffer with a poison pattern "
    "before its kernels run, so that an element no kernel writes shows "
    "(the emulator always does)",
    "KFUSE_DUMP": "compiler stages to write out as they run, comma-separated: canonicalize, "
    "partition, params, kernels, compile, program (or all)",
    "KFUSE_DUMP_DIR": "folder KFUSE_DUMP writes into (default ./kfuse-dump)",
    "KFUSE_PARALLEL_COMPILE": "0 compiles a segmented fusion's kernels one after another "
    "instead of in threads (default 1)",
    "KFUSE_SWITCHES": "kfuse.switches to set when kfuse is imported, comma-separated NAME=1 or "
    "NAME=0 (A/B runs and campaigns of a path that is off; an unknown name is an error)",
}


_TRUE = ("1", "on", "yes", "true")
_FALSE = ("0", "off", "no", "false")


def _path(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name, "").strip()
    return value or None


@dataclass(frozen=True)
class Knobs:
    """A snapshot of kfuse's settings from the environment."""

    cuda_library: str | None = None
    """``KFUSE_CUDA_LIBRARY``: the CUDA driver library to dlopen instead of libcuda.so.1."""
    nvrtc_library: str | None = None
    """``KFUSE_NVRTC_LIBRARY``: the NVRTC library to dlopen instead of cuda.pathfinder's."""
    cupti_library: str | None = None
    """``KFUSE_CUPTI_LIBRARY``: the CUPTI library PythonProfiler dlopens instead of
    cuda.pathfinder's."""

    device: str | None = None
    """``KFUSE_DEVICE``: ``emulator`` runs every fusion through the host emulator."""
    emulator_profile: str = "h100"
    """``KFUSE_EMULATOR_PROFILE``: the named DeviceDescription the emulator's heuristics use."""
    cache_dir: str | None = None
    """``KFUSE_CACHE_DIR``: where compiled kernels are cached on disk (``off``: nowhere)."""
    program_cache: bool = True
    """``KFUSE_PROGRAM_CACHE``: keep canonical forms and compiled programs on disk
    (kfuse.engine.canonical_store, kfuse.engine.program_store)."""
    poison: bool = False
    """``KFUSE_POISON``: fill new GPU outputs and workspaces with
    kfuse.runtime.arrays.POISON_BYTE."""
    dump: tuple[str, ...] = ()
    """``KFUSE_DUMP``: the compiler stages kfuse.engine.dump writes out (names as given,
    lowercase)."""
    dump_dir: str = "kfuse-dump"
    """``KFUSE_DUMP_DIR``: where they go."""
    parallel_compile: bool = True
    """``KFUSE_PARALLEL_COMPILE``: compile the kernels of a fusion's segments in threads
    (kfuse.engine.compile_batch)."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Knobs:
        """Read every knob from ``environ`` (default: ``os.environ``)."""
        env = os.environ if environ is None else environ
        return cls(
            cuda_library=_path(env, "KFUSE_CUDA_LIBRARY"),
            nvrtc_library=_path(env, "KFUSE_NVRTC_LIBRARY"),
            cupti_library=_path(env, "KFUSE_CUPTI_LIBRARY"),
            device=(_path(env, "KFUSE_DEVICE") or "").lower() or None,
            emulator_profile=(_path(env, "KFUSE_EMULATOR_PROFILE") or "h100").lower(),
            cache_dir=env.get("KFUSE_CACHE_DIR", "").strip() or None,
            program_cache=env.get("KFUSE_PROGRAM_CACHE", "").strip().lower() not in _FALSE,
            poison=env.get("KFUSE_POISON", "").strip().lower() not in ("", "0", "off", "no"),
            dump=tuple(
                name.strip().lower()
                for name in env.get("KFUSE_DUMP", "").split(",")
                if name.strip()
            ),
            dump_dir=_path(env, "KFUSE_DUMP_DIR") or "kfuse-dump",
            parallel_compile=env.get("KFUSE_PARALLEL_COMPILE", "").strip().lower() not in _FALSE,
        )


def switch_settings(environ: Mapping[str, str] | None = None) -> tuple[tuple[str, bool], ...]:
    """``KFUSE_SWITCHES`` ("A=1, B=0" -> (("A", True), ("B", False))): the kfuse.switches to
    set, read once when kfuse.switches is imported (not in Knobs, which every call reads);
    kfuse.switches checks the names. InputError naming what is malformed."""
    from kfuse.errors import InputError

    text = (os.environ if environ is None else environ).get("KFUSE_SWITCHES", "")
    out = []
    for item in text.split(","):
        if not item.strip():
            continue
        name, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not name or value.lower() not in _TRUE + _FALSE:
            raise InputError(
                f"KFUSE_SWITCHES: {item.strip()!r} is not NAME=1 or NAME=0 "
                "(comma-separated, e.g. OUTER_CLUSTERS=1)"
            )
        out.append((name, value.lower() in _TRUE))
    return tuple(out)


def get() -> Knobs:
    """The knobs as the environment sets them now."""
    return Knobs.from_environ()
