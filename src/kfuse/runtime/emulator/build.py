"""Build an emulated kernel: rewrite the CUDA source for the host compiler, append the launch
shim, compile it with g++ into a shared library linked with the emulator's runtime object
(through the precompiled header and runtime object of the cache folder, kfuse.runtime.emulator
.prebuilt), and cache the library on disk and in memory.
"""

from __future__ import annotations

import _ctypes
import ctypes
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path

from kfuse import knobs
from kfuse.errors import EmulatorError
from kfuse.runtime import disk_cache
from kfuse.runtime.bounded_cache import BoundedCache
from kfuse.runtime.emulator import prebuilt
from kfuse.runtime.runtime_header import runtime_header

HEADER_DIR = Path(__file__).resolve().parent
HEADERS = (prebuilt.PRELUDE, "cuda_emu.h", "emu_launch.h")

# -O1 keeps a kernel's compile near half a second while running it 5-10x faster than -O0.
# Strict aliasing is off because CUDA code reinterprets float arrays as float4 and the like.
CXX_FLAGS = (
    "-std=c++17",
    "-O1",
    "-shared",
    "-fPIC",
    "-fvisibility=hidden",
    "-fno-strict-aliasing",
    "-fno-threadsafe-statics",
    "-U_FORTIFY_SOURCE",
    "-DKFUSE_EMULATOR",
    "-w",
    "-pipe",
)

# Bumped whenever the exported entry points or the marker symbols change meaning.
_SHIM_ABI = 3
_SOURCE_NAME = "kernel.cu"
_ERROR_LINES = 20

_EXTERN_SHARED = re.compile(
    r"extern\s+__shared__\s+(?P<type>[^;{}\[\]]*?)\b(?P<name>[A-Za-z_]\w*)\s*\[\s*\]\s*;"
)
_ALIGN_SPEC = re.compile(r"__align__\s*\(\s*\d+\s*\)|alignas\s*\(\s*\d+\s*\)")


@dataclass(frozen=True)
class CompiledKernel:
    """A loaded kernel library and what it says about the kernel."""

    library: ctypes.CDLL
    path: Path
    param_sizes: tuple[int, ...]
    uses_fibers: bool


# Libraries loaded by this process, at most LOADED_KERNELS besides those that EmulatedKernels
# in use hold; a library nothing holds is closed (_load), so that a long run does not exhaust
# the process's memory mappings (kfuse.runtime.bounded_cache).
_memory_cache: BoundedCache[str, CompiledKernel] = BoundedCache()
_cache_lock = threading.Lock()
_building: dict[str, threading.Lock] = {}  # key -> the lock of its build under way
_prebuilt_lock = threading.Lock()
_compiler_invocations = 0
_compiler_ids: dict[str, str] = {}


def compiler_invocations() -> int:
    """How many times this process has run the host compiler (cache misses)."""
    return _compiler_invocations


def clear_memory_cache() -> None:
    """Forget the kernels loaded by this process (the disk cache stays)."""
    with _cache_lock:
        _memory_cache.clear()


def _compiler() -> str:
    # The emulation header relies on GCC (noipa, x86-64 asm): g++ it is.
    return "g++"


@functools.cache
def _linker_flags(cxx: str) -> tuple[str, ...]:
    """-fuse-ld=gold where g++ can run gold: it links a kernel library in about 0.013 s of CPU
    where GNU ld takes 0.08 s, a quarter of a kernel's compile once the headers and the
    runtime are prebuilt; else g++'s default linker. Linking changes no arithmetic."""
    env = dict(os.environ, LC_ALL="C")
    try:
        proc = subprocess.run(
            [cxx, "-fuse-ld=gold", "-Wl,--version"],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
    except OSError:
        return ()
    return ("-fuse-ld=gold",) if proc.returncode == 0 and "GNU gold" in proc.stdout else ()


def cache_dir() -> Path | None:
    """Where compiled kernels are kept: $KFUSE_CACHE_DIR/emulator, else
    ~/.cache/kfuse/emulator; None when KFUSE_CACHE_DIR is "off"."""
    root = knobs.get().cache_dir
    if root is not None and root.lower() == "off":
        return None
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "kfuse"
    return base / "emulator"


def prebuilt_folder(directory: Path) -> Path | None:
    """The prebuilt folder (precompiled header with the device runtime, runtime object) that
    generated kernels compiled into the cache folder `directory` with the default flags
    share, built there first where missing; None where it cannot be built. A private cache
    can start from a copy of another cache's (the tests' private caches do)."""
    cxx = _compiler()
    return _shared_files(directory, CXX_FLAGS + _linker_flags(cxx), cxx, True)


def _shared_files(
    directory: Path, flags: tuple[str, ...], cxx: str, with_device_runtime: bool
) -> Path | None:
    """prebuilt.folder for kernels compiled with `flags` by `cxx` into `directory`, under one
    lock: threads building kernels at once build the shared files once."""
    with _prebuilt_lock:
        return prebuilt.folder(
            directory,
            HEADER_DIR,
            HEADERS,
            flags,
            cxx,
            _compiler_id(cxx),
            runtime_header(),
            with_device_runtime=with_device_runtime,
        )


def _compiler_id(cxx: str) -> str:
    cached = _compiler_ids.get(cxx)
    if cached is not None:
        return cached
    path = shutil.which(cxx)
    if path is None:
        raise EmulatorError(
            f"the host C++ compiler {cxx!r} was not found on PATH; the emulator needs g++"
        )
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout
    ident = f"{path}\n{out.splitlines()[0] if out else ''}"
    _compiler_ids[cxx] = ident
    return ident


def rewrite_extern_shared(source: str) -> str:
    """Turn each `extern __shared__ T name[];` into a pointer to the block's dynamic shared
    memory. Line structure is kept so compiler messages point at the caller's lines."""

    def replace(m: re.Match[str]) -> str:
        type_text = " ".join(_ALIGN_SPEC.sub(" ", m.group("type")).split())
        if not type_text:
            return m.group(0)
        name = m.group("name")
        newlines = "\n" * m.group(0).count("\n")
        return (
            f"{type_text}* const {name} = "
            f"reinterpret_cast<{type_text}*>(kf_emu_dyn_smem);{newlines}"
        )

    return _EXTERN_SHARED.sub(replace, source)


def translation_unit(source: str, kernel_name: str, device_runtime_included: bool = False) -> str:
    """The text g++ compiles: the emulator's headers (one include, which a precompiled header
    can stand for), the rewritten kernel source, the launch shim; linked with the runtime
    object (kfuse.runtime.emulator.prebuilt). With `device_runtime_included`, for a source
    that starts with the device runtime (starts_with_device_runtime): one include of the
    prebuilt header holding the emulator's headers and that text, then the rest of the source
    at its own line numbers."""
    first, text = prebuilt.PRELUDE, source
    if device_runtime_included:
        first, text = prebuilt.DEVICE_RUNTIME, source[len(runtime_header()) :]
    line = source.count("\n", 0, len(source) - len(text)) + 1
    return (
        f'#include "{first}"\n'
        f'#line {line} "{_SOURCE_NAME}"\n'
        f"{rewrite_extern_shared(text)}\n"
        '#line 1 "kf_emu_shim"\n'
        f"KF_EMU_KERNEL_ENTRY({kernel_name})\n"
    )


def starts_with_device_runtime(source: str) -> bool:
    """Whether `source` starts with the device runtime's whole lines (every generated
    kernel's does), which the prebuilt header can then stand for."""
    header = runtime_header()
    return header.endswith("\n") and source.startswith(header)


def _cache_key(source: str, kernel_name: str, flags: tuple[str, ...], cxx: str) -> str:
    h = hashlib.sha256()
    for part in (
        f"abi={_SHIM_ABI}",
        _compiler_id(cxx),
        "\0".join(flags),
        kernel_name,
        source,
        *((HEADER_DIR / name).read_text() for name in HEADERS),
    ):
        h.update(part.encode())
        h.update(b"\0\1\0")
    return h.hexdigest()[:40]


def _identity(source: str, kernel_name: str, flags: tuple[str, ...], cxx: str) -> dict[str, str]:
    """What a library entry must record to be the kernel asked for."""
    headers = hashlib.sha256("".join((HEADER_DIR / n).read_text() for n in HEADERS).encode())
    return {
        "source_sha256": hashlib.sha256(source.encode()).hexdigest(),
        "kernel": kernel_name,
        "flags": " ".join(flags),
        "compiler": _compiler_id(cxx),
        "abi": str(_SHIM_ABI),
        "headers_sha256": headers.hexdigest(),
    }


def _cached_library(directory: Path, key: str, identity: dict[str, str]) -> Path | None:
    """`<key>.so` when `<key>.meta` records this key and kernel and the library's size and
    checksum; None when there is no such entry or it is bad (then removed, with a warning)."""
    lib, meta = directory / f"{key}.so", directory / f"{key}.meta"
    try:
        head = disk_cache.read_file(meta)
        if head is None:
            return None
        header = disk_cache.check_header(head, key, identity)
        body = disk_cache.read_file(lib)
        if body is None:
            raise disk_cache.BadEntry("has no library")
        disk_cache.check_payload(body, header)
    except disk_cache.BadEntry as exc:
        disk_cache.discard(meta, str(exc), lib)
        return None
    return lib


def _format_compile_error(kernel_name: str, source: str, log: str) -> str:
    lines = log.splitlines()
    shown = "\n".join(lines[:_ERROR_LINES])
    if len(lines) > _ERROR_LINES:
        shown += f"\n... ({len(lines) - _ERROR_LINES} more lines)"
    msg = f"the host compiler rejected kernel {kernel_name!r}"
    undeclared = re.search(r"'([A-Za-z_]\w*)' was not declared in this scope", log)
    if undeclared:
        msg += (
            f": {undeclared.group(1)!r} is not defined (a CUDA built-in the emulator does "
            "not provide?)"
        )
    msg += f"\n{shown}"
    where = re.search(rf"^{re.escape(_SOURCE_NAME)}:(\d+):(?:\d+:)? (?:fatal )?error", log, re.M)
    if where:
        line = int(where.group(1))
        src = source.splitlines()
        lo, hi = max(1, line - 3), min(len(src), line + 3)
        width = len(str(hi))
        numbered = "\n".join(
            f"{'>' if i == line else ' '} {i:{width}d} | {src[i - 1]}" for i in range(lo, hi + 1)
        )
        msg += f"\n\nkernel source around line {line}:\n{numbered}"
    return msg


def _run_compiler(
    source: str,
    kernel_name: str,
    flags: tuple[str, ...],
    cxx: str,
    out: Path,
    shared: Path | None = None,
) -> None:
    """Compile the kernel into the library `out`, through the PCH and runtime object of the
    prebuilt folder `shared`; without one, or where that fails, from the headers' text and a
    runtime object of its own (and a failing `shared` is removed, so a damaged file there
    costs a compile, never a kernel)."""
    global _compiler_invocations
    with _cache_lock:
        _compiler_invocations += 1
    with tempfile.TemporaryDirectory(prefix="kfuse-emu-") as tmp:
        unit = Path(tmp) / "unit.cpp"
        unit.write_text(translation_unit(source, kernel_name))
        env = dict(os.environ, LC_ALL="C")

        def compile_with(runtime: Path, *include_dirs: Path) -> subprocess.CompletedProcess[str]:
            includes = [f"-I{d}" for d in include_dirs]
            cmd = [cxx, *flags, *includes, "-x", "c++", str(unit), "-x", "none", str(runtime)]
            cmd += ["-o", str(out)]
            return subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)

        proc = None
        if shared is not None:
            included = starts_with_device_runtime(source) and prebuilt.has_device_runtime(shared)
            if included:
                unit.write_text(translation_unit(source, kernel_name, device_runtime_included=True))
            proc = compile_with(shared / prebuilt.RUNTIME_OBJECT, shared, HEADER_DIR)
        if proc is None or proc.returncode != 0:
            unit.write_text(translation_unit(source, kernel_name))
            own = Path(tmp) / prebuilt.RUNTIME_OBJECT
            prebuilt.build_runtime(own, HEADER_DIR, flags, cxx)
            from_text = compile_with(own, HEADER_DIR)
            if shared is not None and from_text.returncode == 0:
                prebuilt.discard(shared)
            proc = from_text
    if proc.returncode != 0:
        raise EmulatorError(_format_compile_error(kernel_name, source, proc.stderr))


def _compile_into(
    directory: Path,
    source: str,
    kernel_name: str,
    flags: tuple[str, ...],
    cxx: str,
    key: str,
    identity: dict[str, str],
) -> Path:
    """Build `<key>.so` in the cache folder, then its `<key>.meta`; each written atomically."""
    fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f".{key}.", suffix=".so.tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    lib = directory / f"{key}.so"
    try:
        shared = _shared_files(directory, flags, cxx, starts_with_device_runtime(source))
        _run_compiler(source, kernel_name, flags, cxx, tmp, shared)
        body = tmp.read_bytes()
        disk_cache.clear_the_way(lib)
        os.replace(tmp, lib)
    finally:
        tmp.unlink(missing_ok=True)
    disk_cache.write_atomically(directory / f"{key}.meta", disk_cache.header(key, identity, body))
    return lib


def _build_and_load(
    source: str, kernel_name: str, flags: tuple[str, ...], cxx: str, key: str
) -> CompiledKernel:
    identity = _identity(source, kernel_name, flags, cxx)
    directory = cache_dir()
    if directory is not None:
        try:
            directory.mkdir(parents=True, exist_ok=True)
            lib = _cached_library(directory, key, identity)
            if lib is None:
                lib = _compile_into(directory, source, kernel_name, flags, cxx, key, identity)
            return _load(lib)
        except OSError as e:
            warnings.warn(
                f"kfuse.runtime.emulator: cache directory {directory} is not usable ({e}); "
                "compiling into a temporary directory",
                stacklevel=4,
            )
    # No usable cache: build in a folder of this call's own, removed once the library is
    # loaded (a loaded library stays mapped after its file is gone).
    with tempfile.TemporaryDirectory(prefix="kfuse-emu-") as tmp:
        lib = Path(tmp) / f"{key}.so"
        _run_compiler(source, kernel_name, flags, cxx, lib)
        return _load(lib)


def _load(path: Path) -> CompiledKernel:
    library = ctypes.CDLL(str(path))
    # Closed once nothing holds it (ctypes never closes a library itself). A library loaded
    # again meanwhile has its own handle count: the other stays mapped.
    weakref.finalize(library, _ctypes.dlclose, library._handle).atexit = False
    count = library.kf_emu_param_count()
    sizes = (ctypes.c_longlong * max(count, 1))()
    library.kf_emu_param_sizes(sizes)
    launch = library.kf_emu_launch
    launch.restype = ctypes.c_int
    launch.argtypes = [
        ctypes.POINTER(ctypes.c_uint),
        ctypes.POINTER(ctypes.c_uint),
        ctypes.c_ulonglong,
        ctypes.c_uint,
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_int,
        ctypes.c_longlong,
        ctypes.c_longlong,
        ctypes.c_double,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.POINTER(ctypes.c_ulonglong),
    ]
    uses_fibers = any(
        hasattr(library, marker)
        for marker in (
            "kf_emu_uses_fibers_barrier",
            "kf_emu_uses_fibers_warp",
            "kf_emu_uses_fibers_cluster",
        )
    )
    return CompiledKernel(library, path, tuple(sizes[i] for i in range(count)), uses_fibers)


def _names_a_call(source: str, name: str) -> bool:
    """Whether the identifier `name` stands in `source` as a whole word followed by `(`. The
    pattern starts with the name, so that the regex engine scans for it as a literal; one that
    starts with \\b tries each of a generated source's 60,000 positions (2.5 ms a kernel)."""
    for match in re.finditer(rf"{name}\s*\(", source):
        before = source[match.start() - 1] if match.start() else " "
        if not (before.isalnum() or before == "_"):
            return True
    return False


def load_kernel(source: str, kernel_name: str, extra_flags: tuple[str, ...] = ()) -> CompiledKernel:
    """Compile (or fetch from the caches) the emulated kernel `kernel_name` of `source`."""
    if not re.fullmatch(r"[A-Za-z_]\w*", kernel_name):
        raise EmulatorError(f"kernel name {kernel_name!r} is not a C identifier")
    if not _names_a_call(source, kernel_name):
        raise EmulatorError(f"kernel {kernel_name!r} is not defined in the given source")
    cxx = _compiler()
    flags = CXX_FLAGS + _linker_flags(cxx) + tuple(extra_flags)
    key = _cache_key(source, kernel_name, flags, cxx)
    with _cache_lock:
        hit = _memory_cache.get(key)
        if hit is not None:
            return hit
        building = _building.setdefault(key, threading.Lock())
    # One build per kernel at a time, and kernels of their own in parallel (the kernels of a
    # segmented fusion compile in threads: kfuse.engine.compile_batch).
    try:
        with building:
            hit = _memory_cache.get(key)  # built by another thread meanwhile
            if hit is None:
                hit = _build_and_load(source, kernel_name, flags, cxx, key)
                _memory_cache.put(key, hit)
    finally:
        with _cache_lock:
            _building.pop(key, None)
    return hit
