"""What the emulator's kernel compiles share (kfuse.runtime.emulator.prebuilt): the
precompiled headers and the runtime object are built once in a cache folder and used by every
kernel compiled there; a damaged one (other bytes, cut short, a FIFO in its place) never costs
a kernel or hangs a compile, and is built again; kernels linked with the shared runtime compute
what kernels compiled without a cache do, and only a kernel that calls a barrier or a warp
collective asks for fibers. A kernel that starts with kfuse's device runtime, as every
generated one does, includes the precompiled header holding it and keeps its line numbers."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from kfuse.errors import EmulatorError
from kfuse.runtime.bounded_cache import BoundedCache
from kfuse.runtime.emulator import build, prebuilt
from kfuse.runtime.runtime_header import runtime_header

DOUBLE = 'extern "C" __global__ void k(float* p) { p[threadIdx.x] *= 2.0f; }\n'
PLUS_ONE = 'extern "C" __global__ void k(float* p) { p[threadIdx.x] += 1.0f; }\n'
NEGATE = 'extern "C" __global__ void k(float* p) { p[threadIdx.x] = -p[threadIdx.x]; }\n'
# Each thread takes its neighbour's value: right only if the barrier holds every thread until
# all have read (fiber mode).
ROTATE = """extern "C" __global__ void k(float* p) {
    float v = p[(threadIdx.x + 1) % blockDim.x];
    __syncthreads();
    p[threadIdx.x] = v;
}
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private disk cache, and an in-memory cache that starts empty."""
    monkeypatch.setenv("KFUSE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(build, "_memory_cache", BoundedCache())
    return tmp_path


def launch(source: str) -> np.ndarray:
    """Run kernel `k` of `source` on one block of 8 threads over 1..8."""
    kernel = build.load_kernel(source, "k")
    assert kernel.uses_fibers == ("__syncthreads" in source.removeprefix(runtime_header()))
    data = np.arange(1, 9, dtype=np.float32)
    pointer = ctypes.c_void_p(data.ctypes.data)
    argv = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.pointer(pointer), ctypes.c_void_p))
    grid, block = (ctypes.c_uint * 3)(1, 1, 1), (ctypes.c_uint * 3)(8, 1, 1)
    err = ctypes.create_string_buffer(256)
    bad = ctypes.c_ulonglong(0)
    rc = kernel.library.kf_emu_launch(
        grid,
        block,
        0,
        1,
        argv,
        kernel.uses_fibers,
        1 << 40,
        1 << 16,
        0.0,
        err,
        len(err),
        ctypes.byref(bad),
    )
    assert rc == 0, err.value
    return data


PARTS = {
    "pch": f"{prebuilt.PRELUDE}.gch",
    "runtime": prebuilt.RUNTIME_OBJECT,
    "device-pch": prebuilt.DEVICE_RUNTIME_GCH,
}


def generated(source: str) -> str:
    """`source` after the device runtime, as a generated kernel's source is."""
    return runtime_header() + source


def part_files(cache: Path, part: str) -> list[Path]:
    return sorted((cache / "emulator").glob(f"prebuilt-*/{PARTS[part]}"))


def test_kernels_of_one_cache_share_one_prebuilt_folder(cache: Path) -> None:
    np.testing.assert_array_equal(launch(DOUBLE), 2 * np.arange(1, 9))
    built = {part: part_files(cache, part) for part in ("pch", "runtime")}
    assert all(len(files) == 1 for files in built.values()), built
    stamps = {part: files[0].stat().st_mtime_ns for part, files in built.items()}
    np.testing.assert_array_equal(launch(PLUS_ONE), np.arange(2, 10))
    np.testing.assert_array_equal(launch(ROTATE), np.roll(np.arange(1, 9), -1))
    for part, files in built.items():
        assert part_files(cache, part) == files
        assert files[0].stat().st_mtime_ns == stamps[part]


def test_a_kernel_compiles_the_same_without_a_usable_cache(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KFUSE_CACHE_DIR", "off")
    np.testing.assert_array_equal(launch(DOUBLE), 2 * np.arange(1, 9))
    np.testing.assert_array_equal(launch(ROTATE), np.roll(np.arange(1, 9), -1))
    assert not (cache / "emulator").exists()


def test_a_generated_kernel_includes_the_device_runtimes_pch(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the device runtime's PCH is built for generated kernels; they compute what the
    same sources compiled from their text (no cache) do."""
    clamp = 'extern "C" __global__ void k(float* p) { p[threadIdx.x] = kf::maximum(p[0], 4.0f); }\n'
    np.testing.assert_array_equal(launch(generated(clamp)), np.full(8, 4))
    np.testing.assert_array_equal(launch(generated(ROTATE)), np.roll(np.arange(1, 9), -1))
    assert len(part_files(cache, "device-pch")) == 1 and not part_files(cache, "pch")
    (header,) = (cache / "emulator").glob(f"prebuilt-*/{prebuilt.DEVICE_RUNTIME}")
    assert header.read_text().endswith(runtime_header())
    monkeypatch.setenv("KFUSE_CACHE_DIR", "off")
    monkeypatch.setattr(build, "_memory_cache", BoundedCache())
    np.testing.assert_array_equal(launch(generated(clamp)), np.full(8, 4))


def test_a_generated_kernels_compile_error_names_its_own_line(cache: Path) -> None:
    source = generated('extern "C" __global__ void k(float* p) {\n  p[0] = no_such_thing;\n}\n')
    line = runtime_header().count("\n") + 2
    with pytest.raises(EmulatorError, match="'no_such_thing' is not defined") as caught:
        build.load_kernel(source, "k")
    assert f"kernel source around line {line}:" in str(caught.value)
    assert f"> {line} |   p[0] = no_such_thing;" in str(caught.value)


def _damages() -> list:
    """Every (part, damage): the quick run damages each part once, both ways of damage
    met; the whole cross is CI's extended step (each case builds the prebuilt parts twice)."""
    quick = {("pch", "cut_short"), ("runtime", "other_bytes"), ("device-pch", "cut_short")}
    return [
        pytest.param(part, damage, marks=() if (part, damage) in quick else (pytest.mark.extended,))
        for part in ["pch", "runtime", "device-pch"]
        for damage in ["other_bytes", "cut_short"]
    ]


@pytest.mark.parametrize(("part", "damage"), _damages())
def test_a_damaged_prebuilt_part_is_built_again(
    cache: Path, monkeypatch: pytest.MonkeyPatch, part: str, damage: str
) -> None:
    source = generated if part == "device-pch" else str
    launch(source(DOUBLE))
    (path,) = part_files(cache, part)
    whole = path.read_bytes()
    path.write_bytes(b"other bytes" if damage == "other_bytes" else whole[: len(whole) // 3])
    monkeypatch.setattr(build, "_memory_cache", BoundedCache())
    # Other bytes: noticed before the compile; cut short: g++ fails through it, the kernel is
    # compiled from the headers' text with a runtime of its own, and the part removed.
    with pytest.warns(RuntimeWarning, match="prebuilt part"):
        np.testing.assert_array_equal(launch(source(PLUS_ONE)), np.arange(2, 10))
    np.testing.assert_array_equal(launch(source(NEGATE)), -np.arange(1, 9))
    (path,) = part_files(cache, part)
    assert path.read_bytes()[:4] == whole[:4] and len(path.read_bytes()) > len(whole) // 2


def test_a_fifo_in_place_of_the_precompiled_header_does_not_block(tmp_path: Path) -> None:
    # In a subprocess with a timeout: a regression would hang g++ on the FIFO.
    script = textwrap.dedent(
        f"""
        import os, sys, warnings
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_emulator_prebuilt import DOUBLE, PLUS_ONE, launch, part_files
        from kfuse.runtime.emulator import build
        from kfuse.runtime.bounded_cache import BoundedCache
        launch(DOUBLE)
        (gch,) = part_files(Path(os.environ["KFUSE_CACHE_DIR"]), "pch")
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
