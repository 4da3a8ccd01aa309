"""The on-disk cubin cache: hit, miss, corrupt entry, and 'off'."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from kfuse import _C
from kfuse.engine import compiler
from kfuse.errors import SchedulerError
from kfuse.runtime import kernel_cache
from kfuse.runtime.backends.cuda import CudaBackend, nvrtc_options

Compiles = list[tuple[str, str, tuple[str, ...]]]  # (name, arch, options) per NVRTC compile
SOURCE = 'extern "C" __global__ void k(float* p) { p[threadIdx.x] *= 2.0f; }\n'


@pytest.fixture
def counted_nvrtc(monkeypatch: pytest.MonkeyPatch) -> Compiles:
    """Each NVRTC compile's (name, arch, options)."""
    calls: Compiles = []
    real = _C.compile_to_cubin

    def counting(
        source: str, name: str, arch: str, options: list[str], headers: object = None
    ) -> bytes:
        calls.append((name, arch, tuple(options)))
        return real(source, name, arch, options, headers)

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
    options = " ".join(nvrtc_options())
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
    monkeypatch.setattr(compiler, "backend_for", lambda info: CudaBackend())
    gpu = SimpleNamespace(
        backend="cuda", device_index=0, device=SimpleNamespace(arch="sm_90", regs_per_block=65536)
    )
    compiler.KernelCompiler(_C.CompileParams()).compile(SOURCE, "k", gpu)
    cp = _C.CompileParams(maxrregcount=32, extra_options=["-lineinfo"])
    compiler.KernelCompiler(cp).compile(SOURCE, "k", gpu)
    cp.arch = "sm_80"
    compiler.KernelCompiler(cp).compile(SOURCE, "k", gpu)
    (_, arch0, plain), (_, arch1, limited), (_, arch2, _) = counted_nvrtc
    assert arch0 == arch1 == "sm_90" and arch2 == "sm_80"
    assert "--maxrregcount=32" not in plain
    assert "--maxrregcount=32" in limited and limited[-1] == "-lineinfo"
    assert len(entries(tmp_path)) == 3


def test_a_register_limit_replaces_the_launch_bounds() -> None:
    """NVRTC ignores --maxrregcount for a kernel with __launch_bounds__, so the spec of a
    kernel under a limit leaves them out; a limit no block of the kernel's size can have is
    refused, naming both numbers."""
    from kfuse.codegen.kernel import kernel_header

    bounded = kernel_header("k", ["float* p"], 256, min_blocks=2, cluster=2)
    assert (
        bounded[0]
        == 'extern "C" __global__ void __launch_bounds__(256, 2) __cluster_dims__(2, 1, 1) k('
    )
    unbounded = kernel_header("k", ["float* p"], 256, bounded=False, min_blocks=2, cluster=2)
    assert unbounded == [
        'extern "C" __global__ void __cluster_dims__(2, 1, 1) k(',
        "    float* p) {",
    ]
    compiler.check_register_limit(256, 255, 65536)  # 256 * 255 registers fit a block
    with pytest.raises(SchedulerError, match="maxrregcount = 255 for blocks of 512 threads"):
        compiler.check_register_limit(512, 255, 65536)


def test_a_register_limit_takes_the_launch_bounds_out_of_every_kernel() -> None:
    """Pointwise, reduction (grid: partials and finalize) and persistent kernels generated
    under CompileParams.maxrregcount have no __launch_bounds__; without a limit they do."""
    import numpy as np

    from kfuse import DataType, FusionDefinition
    from kfuse.runtime.info import build_runtime_info
    from kfuse.schedule.registry import scheduler_for
    from kfuse.schedule.types import SchedulerType

    def sum_rows(fd: FusionDefinition) -> None:
        fd.add_output(fd.ops.sum(fd.define_tensor(shape=[-1, -1], dtype=DataType.Float), dims=[1]))

    cases = [
        (
            SchedulerType.pointwise,
            lambda fd: fd.add_output(fd.ops.exp(fd.define_tensor(shape=[-1]))),
            np.ones(1000, np.float32),
        ),
        (SchedulerType.reduction, sum_rows, np.ones((4, 1 << 20), np.float32)),
        (SchedulerType.inner_persistent, sum_rows, np.ones((64, 1024), np.float32)),
    ]
    for scheduler_type, build, x in cases:
        with FusionDefinition() as fd:
            build(fd)
        info = build_runtime_info(fd.fusion, [x], device=None)
        scheduler = scheduler_for(scheduler_type)
        params = scheduler.heuristics(fd.fusion, info)
        assert all(
            "__launch_bounds__" in k.source for k in scheduler.kernels(fd.fusion, info, params)
        )
        params.cparams.maxrregcount = 32
        kernels = scheduler.kernels(fd.fusion, info, params)
        assert kernels and not any("__launch_bounds__" in k.source for k in kernels), scheduler_type
