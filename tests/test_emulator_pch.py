"""The emulator's precompiled header: built once in a cache folder and shared by the kernels
compiled there; a damaged one (not a PCH, cut short, a FIFO in its place) never costs a
kernel or hangs a compile, and is built again; kernels compiled through it compute what
kernels compiled from the headers' text do."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from kfuse.runtime.bounded_cache import BoundedCache
from kfuse.runtime.emulator import build, pch

DOUBLE = 'extern "C" __global__ void k(float* p) { p[threadIdx.x] *= 2.0f; }\n'
PLUS_ONE = 'extern "C" __global__ void k(float* p) { p[threadIdx.x] += 1.0f; }\n'
NEGATE = 'extern "C" __global__ void k(float* p) { p[threadIdx.x] = -p[threadIdx.x]; }\n'


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private disk cache, and an in-memory cache that starts empty."""
    monkeypatch.setenv("KFUSE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(build, "_memory_cache", BoundedCache())
    return tmp_path


def launch(source: str) -> np.ndarray:
    """Run kernel `k` of `source` on one block of 8 threads over 1..8."""
    kernel = build.load_kernel(source, "k")
    data = np.arange(1, 9, dtype=np.float32)
    pointer = ctypes.c_void_p(data.ctypes.data)
    argv = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.pointer(pointer), ctypes.c_void_p))
    grid, block = (ctypes.c_uint * 3)(1, 1, 1), (ctypes.c_uint * 3)(8, 1, 1)
    err = ctypes.create_string_buffer(256)
    bad = ctypes.c_ulonglong(0)
    rc = kernel.library.kf_emu_launch(
        grid, block, 0, 1, argv, 0, 0, 0, 0.0, err, len(err), ctypes.byref(bad)
    )
    assert rc == 0, err.value
    return data


def pch_files(cache: Path) -> list[Path]:
    return sorted((cache / "emulator").glob(f"pch-*/{pch.PRELUDE}.gch"))


def test_kernels_of_one_cache_share_one_precompiled_header(cache: Path) -> None:
    np.testing.assert_array_equal(launch(DOUBLE), 2 * np.arange(1, 9))
    (gch,) = pch_files(cache)
    built = gch.stat().st_mtime_ns
    np.testing.assert_array_equal(launch(PLUS_ONE), np.arange(2, 10))
    assert pch_files(cache) == [gch] and gch.stat().st_mtime_ns == built


def test_a_kernel_compiles_the_same_without_a_usable_cache(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KFUSE_CACHE_DIR", "off")
    np.testing.assert_array_equal(launch(DOUBLE), 2 * np.arange(1, 9))
    assert not (cache / "emulator").exists()


@pytest.mark.parametrize("damage", ["not_a_pch", "cut_short"])
def test_a_damaged_precompiled_header_is_built_again(
    cache: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    launch(DOUBLE)
    (gch,) = pch_files(cache)
    whole = gch.read_bytes()
    gch.write_bytes(b"not a PCH" if damage == "not_a_pch" else whole[:100_000])
    monkeypatch.setattr(build, "_memory_cache", BoundedCache())
    # Not a PCH: noticed before the compile; cut short: g++ fails through it, the kernel is
    # compiled from the headers' text, and the PCH removed.
    with pytest.warns(RuntimeWarning, match="precompiled header"):
        np.testing.assert_array_equal(launch(PLUS_ONE), np.arange(2, 10))
    np.testing.assert_array_equal(launch(NEGATE), -np.arange(1, 9))
    (gch,) = pch_files(cache)
    assert gch.read_bytes()[:4] == b"gpch" and len(gch.read_bytes()) > 100_000


def test_a_fifo_in_place_of_the_precompiled_header_does_not_block(tmp_path: Path) -> None:
    # In a subprocess with a timeout: a regression would hang g++ on the FIFO.
    script = textwrap.dedent(
        f"""
        import os, sys, warnings
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_emulator_pch import DOUBLE, PLUS_ONE, launch, pch_files
        from kfuse.runtime.emulator import build
        from kfuse.runtime.bounded_cache import BoundedCache
        launch(DOUBLE)
        (gch,) = pch_files(Path(os.environ["KFUSE_CACHE_DIR"]))
        gch.unlink()
        os.mkfifo(gch)
        build._memory_cache = BoundedCache()
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            out = launch(PLUS_ONE)
        assert list(out) == list(range(2, 10)), out
        assert gch.is_file()
        """
    )
    env = dict(os.environ, KFUSE_CACHE_DIR=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
