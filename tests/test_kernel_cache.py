"""The on-disk cubin cache: hit, miss, corrupt entry, and 'off'."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from kfuse import _C, executor, kernel_cache
from kfuse.backends.cuda import NVRTC_OPTIONS, CudaBackend
from kfuse.errors import SchedulerError

Compiles = list[tuple[str, str, tuple[str, ...]]]  # (name, arch, options) per NVRTC compile
SOURCE = 'extern "C" __global__ void k(float* p) { p[threadIdx.x] *= 2.0f; }\n'


@pytest.fixture
def counted_nvrtc(monkeypatch: pytest.MonkeyPatch) -> Compiles:
    """Each NVRTC compile's (name, arch, options)."""
    calls: Compiles = []
    real = _C.compile_to_cubin

    def counting(source: str, name: str, arch: str, options: list[str]) -> bytes:
        calls.append((name, arch, tuple(options)))
        return real(source, name, arch, options)

    monkeypatch.setattr(_C, "compile_to_cubin", counting)
    return calls


def entries(folder: Path) -> list[Path]:
    return [p for p in (folder / "cubin").iterdir() if not p.name.startswith(".")]


def test_miss_then_hit_across_processes_worth_of_backends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counted_nvrtc: Compiles
) -> None:
    monkeypatch.setenv("KFUSE_CACHE_DIR", str(tmp_path))
    CudaBackend().compile(SOURCE, "k", 0, "sm_90")
    assert len(counted_nvrtc) == 1 and len(entries(tmp_path)) == 1
    second = CudaBackend().compile(SOURCE, "k", 0, "sm_90")  # a fresh in-memory cache
    assert len(counted_nvrtc) == 1, "the second compile must come from disk"
    assert second.name == "k"
    CudaBackend().compile(SOURCE, "k", 0, "sm_80")  # another arch is another entry
    assert len(counted_nvrtc) == 2 and len(entries(tmp_path)) == 2


def test_corrupt_entry_is_ignored_and_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counted_nvrtc: Compiles
) -> None:
    monkeypatch.setenv("KFUSE_CACHE_DIR", str(tmp_path))
    CudaBackend().compile(SOURCE, "k", 0, "sm_90")
    (entry,) = entries(tmp_path)
    version = ".".join(str(v) for v in _C.nvrtc_version())
    options = " ".join(NVRTC_OPTIONS)
    identity = kernel_cache.kernel_identity(SOURCE, "k", "sm_90", options, version)
    good = kernel_cache.load(entry.name, identity)
    assert good is not None and good[:4] == b"\x7fELF"
    blob = bytearray(entry.read_bytes())
    blob[-10] ^= 0xFF  # flip bits in the payload: the integrity hash no longer matches
    entry.write_bytes(bytes(blob))
    with pytest.warns(RuntimeWarning, match="checksum"):
        CudaBackend().compile(SOURCE, "k", 0, "sm_90")
    assert len(counted_nvrtc) == 2
    assert kernel_cache.load(entry.name, identity) == good, (
        "the rebuilt entry replaced the corrupt one"
    )
    entry.write_bytes(b"garbage")
    with pytest.warns(RuntimeWarning, match="not a kfuse cache entry"):
        assert kernel_cache.load(entry.name, identity) is None
    assert not entry.exists(), "the bad entry is removed"


def test_cache_off_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KFUSE_CACHE_DIR", "off")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    CudaBackend().compile(SOURCE, "k", 0, "sm_90")
    assert not any(tmp_path.rglob("*"))


def test_key_covers_every_input_of_the_cubin() -> None:
    base = ("src", "name", "sm_90", "-O3", "13.0")
    keys = {kernel_cache.cache_key(*base)}
    for i in range(len(base)):
        changed = list(base)
        changed[i] += "x"
        keys.add(kernel_cache.cache_key(*changed))
    assert len(keys) == len(base) + 1


def test_compile_params_reach_nvrtc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counted_nvrtc: Compiles
) -> None:
    """A fusion's HeuristicParams.cparams: maxrregcount and extra_options are NVRTC options,
    arch overrides the device's; kernels differing only in them are different entries."""
    monkeypatch.setenv("KFUSE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(executor, "backend_for", lambda info: CudaBackend())
    gpu = SimpleNamespace(
        backend="cuda", device_index=0, device=SimpleNamespace(arch="sm_90", regs_per_block=65536)
    )
    executor.TargetCompiler(_C.CompileParams()).compile(SOURCE, "k", gpu)
    cp = _C.CompileParams(maxrregcount=32, extra_options=["-lineinfo"])
    executor.TargetCompiler(cp).compile(SOURCE, "k", gpu)
    cp.arch = "sm_80"
    executor.TargetCompiler(cp).compile(SOURCE, "k", gpu)
    (_, arch0, plain), (_, arch1, limited), (_, arch2, _) = counted_nvrtc
    assert arch0 == arch1 == "sm_90" and arch2 == "sm_80"
    assert "--maxrregcount=32" not in plain
    assert "--maxrregcount=32" in limited and limited[-1] == "-lineinfo"
    assert len(entries(tmp_path)) == 3


def test_a_register_limit_replaces_the_launch_bounds() -> None:
    """NVRTC ignores --maxrregcount for a kernel with __launch_bounds__, so a limit removes
    them; a limit no block of the kernel's size can have is refused, naming both numbers."""
    bounded = 'extern "C" __global__ void __launch_bounds__(256, 2) k(float* p) {}\n'
    assert (
        executor.without_launch_bounds(bounded, 64, 65536)
        == 'extern "C" __global__ void k(float* p) {}\n'
    )
    executor.without_launch_bounds(bounded, 255, 65536)  # 256 * 255 registers fit a block
    with pytest.raises(SchedulerError, match="maxrregcount = 255 for blocks of 512 threads"):
        executor.without_launch_bounds(bounded.replace("256, 2", "512"), 255, 65536)
