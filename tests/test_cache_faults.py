"""Disk-cache faults never hang, crash or poison a run: each corruption of an entry (a FIFO, a
link to /dev/zero, a directory, bytes that are not UTF-8, another entry copied under its key,
a truncated file) is noticed, removed with a warning and rebuilt, and the results stay right;
a read-only cache is used without writing; concurrent writers leave a valid entry; no
temporary build folder is left behind.

Faults that used to hang (a FIFO) run in a subprocess with a timeout, so a regression fails
the test instead of hanging the suite."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest

import shared_prebuilt
from kfuse import _C
from kfuse.frontend import FusionDefinition
from kfuse.runtime.backends.cuda import CudaBackend, nvrtc_options
from kfuse.runtime.backends.emulator import EMULATOR_BACKEND
from kfuse.runtime.bounded_cache import BoundedCache
from kfuse.runtime.emulator import build

SOURCE = 'extern "C" __global__ void k(float* p) { p[threadIdx.x] *= 2.0f; }\n'
OTHER = 'extern "C" __global__ void k(float* p) { p[threadIdx.x] += 1.0f; }\n'


def unary(op: str) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1])
        fd.add_output(getattr(fd.ops, op)(x))
    return fd


X = np.linspace(-1, 1, 37, dtype=np.float32)
WANT = {"exp": np.exp(X), "neg": -X}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private disk cache (with a copy of the session's prebuilt folder: these tests damage
    kernel entries, not the prebuilt parts), and in-memory caches that start empty."""
    shared_prebuilt.seed(tmp_path)
    monkeypatch.setenv("KFUSE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(build, "_memory_cache", BoundedCache())
    monkeypatch.setattr(EMULATOR_BACKEND, "_kernels", BoundedCache())
    return tmp_path


def forget_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build, "_memory_cache", BoundedCache())
    monkeypatch.setattr(EMULATOR_BACKEND, "_kernels", BoundedCache())


def library_entry(cache: Path) -> tuple[Path, Path]:
    (lib,) = (cache / "emulator").glob("*.so")
    return lib, lib.with_suffix(".meta")


def run(op: str) -> None:
    (out,) = unary(op).execute([X])
    np.testing.assert_allclose(out, WANT[op], rtol=1e-6)


# ---- the emulator's library cache ------------------------------------------------------


def corrupt(kind: str, path: Path) -> None:
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev_zero":
        path.symlink_to("/dev/zero")
    elif kind == "directory":
        path.mkdir()
        (path / "inside").write_text("x")
    elif kind == "not_utf8":
        path.write_bytes(b'KFUSE-CACHE-ENTRY 2\n{"key": "\xff\xfe"}\n')
    elif kind == "truncated":
        path.write_bytes(b"\x7fELF\x02\x01")


def _corruptions() -> list:
    """Every (kind, part): the quick run damages each part and uses each kind once; the whole
    cross is CI's extended step (each case builds a cache folder's precompiled headers)."""
    quick = {("dev_zero", "so"), ("directory", "meta"), ("not_utf8", "meta"), ("truncated", "so")}
    return [
        pytest.param(kind, part, marks=() if (kind, part) in quick else (pytest.mark.extended,))
        for kind in ["dev_zero", "directory", "not_utf8", "truncated"]
        for part in ["so", "meta"]
    ]


@pytest.mark.parametrize(("kind", "part"), _corruptions())
def test_a_corrupt_library_entry_is_rebuilt(
    cache: Path, monkeypatch: pytest.MonkeyPatch, part: str, kind: str
) -> None:
    run("exp")
    lib, meta = library_entry(cache)
    corrupt(kind, lib if part == "so" else meta)
    forget_loaded(monkeypatch)
    with pytest.warns(RuntimeWarning, match="disk-cache entry .* it was removed"):
        run("exp")
    lib, meta = library_entry(cache)
    assert lib.is_file() and meta.is_file() and not lib.is_symlink()
    forget_loaded(monkeypatch)
    calls = build.compiler_invocations()
    run("exp")  # the rebuilt entry is used as it is
    assert build.compiler_invocations() == calls


def test_another_entry_copied_under_a_key_is_not_loaded(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Valid files of another kernel, checksum and all: once loaded without complaint, and
    the results were silently wrong."""
    run("exp")
    (exp_lib,) = (cache / "emulator").glob("*.so")
    run("neg")
    (neg_lib,) = [p for p in (cache / "emulator").glob("*.so") if p != exp_lib]
    # New files, not writes into the old ones: this process has the old library mapped,
    # and changing a mapped library's bytes in place crashes whoever runs it.
    for suffix in (".so", ".meta"):
        exp_lib.with_suffix(suffix).unlink()
        exp_lib.with_suffix(suffix).write_bytes(neg_lib.with_suffix(suffix).read_bytes())
    forget_loaded(monkeypatch)
    with pytest.warns(RuntimeWarning, match="another key"):
        run("exp")


def _in_a_subprocess(code: str, cache: Path, timeout: float = 240) -> str:
    env = {**os.environ, "KFUSE_CACHE_DIR": str(cache)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


RUN_EXP = """
    import numpy as np
    from kfuse.frontend import FusionDefinition
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.exp(fd.define_tensor(shape=[-1])))
    x = np.linspace(-1, 1, 37, dtype=np.float32)
    (out,) = fd.execute([x])
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-6)
    print("right")
"""


@pytest.mark.parametrize("part", ["so", "meta"])
def test_a_fifo_in_the_cache_does_not_block(cache: Path, part: str) -> None:
    """A FIFO at an entry's path made every later run block forever in open(). The entry is
    built here; the run that meets the FIFO is a process of its own, with a timeout."""
    run("exp")
    lib, meta = library_entry(cache)
    corrupt("fifo", lib if part == "so" else meta)
    out = _in_a_subprocess(RUN_EXP, cache)
    assert "right" in out and "it was removed" in out


def test_no_build_folder_is_left_behind_without_a_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KFUSE_CACHE_DIR", "off")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR is read again
    forget_loaded(monkeypatch)
    run("exp")
    run("neg")
    assert not list(tmp_path.iterdir()), list(tmp_path.iterdir())


def test_a_read_only_cache_is_used_without_writing(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run("exp")
    folder = cache / "emulator"
    folder.chmod(0o555)
    if os.geteuid() == 0:
        # Root writes into read-only folders: what the kernel refuses everyone else is
        # refused here where kfuse creates files (every new file in the cache folder is made
        # by tempfile.mkstemp, then renamed into place).
        import tempfile

        create = tempfile.mkstemp

        def refused(*args: object, dir: object = None, **kwargs: object) -> object:
            if dir is not None and Path(str(dir)).resolve() == folder.resolve():
                raise PermissionError(13, "Permission denied", str(dir))
            return create(*args, dir=dir, **kwargs)  # type: ignore[call-overload]

        monkeypatch.setattr(tempfile, "mkstemp", refused)
    try:
        forget_loaded(monkeypatch)
        calls = build.compiler_invocations()
        run("exp")  # a hit: read, not written
        assert build.compiler_invocations() == calls
        with pytest.warns(UserWarning, match="not usable"):
            run("neg")  # a miss that cannot be stored: built elsewhere, with one warning
        assert not list(folder.glob(".*.tmp")), "no temporary file is left behind"
    finally:
        folder.chmod(0o755)


def test_a_cache_folder_that_cannot_exist_is_worked_around(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KFUSE_CACHE_DIR below a file: nothing can be created there (as root too)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setenv("KFUSE_CACHE_DIR", str(blocker / "cache"))
    forget_loaded(monkeypatch)
    with pytest.warns(UserWarning, match="not usable"):
        run("exp")
    CudaBackend().compile(SOURCE, "k", 0, "sm_90")  # the cubin cache skips it silently


# ---- the cubin cache ---------------------------------------------------------------------


def cubin_entry(cache: Path) -> Path:
    (entry,) = [p for p in (cache / "cubin").iterdir() if not p.name.startswith(".")]
    return entry


@pytest.mark.parametrize("kind", ["dev_zero", "directory", "not_utf8", "truncated"])
def test_a_corrupt_cubin_entry_is_rebuilt(cache: Path, kind: str) -> None:
    CudaBackend().compile(SOURCE, "k", 0, "sm_90")
    entry = cubin_entry(cache)
    first = entry.read_bytes()
    corrupt(kind, entry)
    with pytest.warns(RuntimeWarning, match="it was removed"):
        CudaBackend().compile(SOURCE, "k", 0, "sm_90")
    assert cubin_entry(cache).read_bytes() == first


def test_another_cubin_copied_under_a_key_is_not_loaded(cache: Path) -> None:
    CudaBackend().compile(SOURCE, "k", 0, "sm_90")
    entry = cubin_entry(cache)
    mine = entry.read_bytes()
    CudaBackend().compile(OTHER, "k", 0, "sm_90")
    (other_entry,) = [
        p for p in (cache / "cubin").iterdir() if p != entry and not p.name.startswith(".")
    ]
    entry.write_bytes(other_entry.read_bytes())
    with pytest.warns(RuntimeWarning, match="another key"):
        CudaBackend().compile(SOURCE, "k", 0, "sm_90")
    assert entry.read_bytes() == mine, "rebuilt from its own source"


def test_a_fifo_cubin_entry_does_not_block(tmp_path: Path) -> None:
    code = f"""
        from kfuse.runtime.backends.cuda import CudaBackend
        CudaBackend().compile({SOURCE!r}, "k", 0, "sm_90")
        print("compiled")
    """
    _in_a_subprocess(code, tmp_path)
    entry = cubin_entry(tmp_path)
    corrupt("fifo", entry)
    assert "compiled" in _in_a_subprocess(code, tmp_path)


def test_concurrent_writers_leave_a_valid_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = f"""
        from kfuse.runtime.backends.cuda import CudaBackend
        for _ in range(5):
            CudaBackend().compile({SOURCE!r}, "k", 0, "sm_90")
        print("compiled")
    """
    env = {**os.environ, "KFUSE_CACHE_DIR": str(tmp_path)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    assert not any("removed" in o for o in outputs), outputs
    version = ".".join(str(v) for v in _C.nvrtc_version())
    from kfuse.runtime import kernel_cache

    monkeypatch.setenv("KFUSE_CACHE_DIR", str(tmp_path))
    options = " ".join(nvrtc_options())
    identity = kernel_cache.kernel_identity(SOURCE, "k", "sm_90", options, version)
    entry = cubin_entry(tmp_path)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kernel_cache.load(entry.name, identity)[:4] == b"\x7fELF"
