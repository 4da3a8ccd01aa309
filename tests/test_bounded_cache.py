"""The caches of loaded kernels keep at most a fixed number, and a kernel nothing holds is
unloaded: a long run (a campaign worker compiled about 11,000 emulated kernels) must not
exhaust the process's memory mappings."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pytest

import shared_prebuilt
from gpu_support import requires_gpu
from kfuse.runtime.bounded_cache import BoundedCache
from kfuse.runtime.emulator import EmulatedKernel, build


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    shared_prebuilt.seed(tmp_path / "cache")
    monkeypatch.setenv("KFUSE_CACHE_DIR", str(tmp_path / "cache"))
    yield


def test_the_least_recently_used_entry_goes_first() -> None:
    cache: BoundedCache[str, int] = BoundedCache(limit=2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # now more recent than b
    cache.put("c", 3)
    assert cache.get("b") is None and cache.get("a") == 1 and cache.get("c") == 3
    assert len(cache) == 2


def _mapped_libraries(folder: Path) -> set[str]:
    """The shared libraries under `folder` this process has mapped."""
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if line.rstrip().endswith(".so")}
    return {p for p in paths if p.startswith(str(folder))}


KERNEL = r"""
extern "C" __global__ void add_{k}(float* x) {{ x[threadIdx.x] += {k}.0f; }}
"""


def test_emulated_kernels_nothing_holds_are_closed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(build, "_memory_cache", BoundedCache(limit=3))
    held = []
    for k in range(12):
        kernel = EmulatedKernel(KERNEL.format(k=k), f"add_{k}")
        x = np.zeros(4, np.float32)
        kernel.launch(1, 4, 0, [x])
        assert x.tolist() == [float(k)] * 4
        if k < 2:
            held.append(kernel)  # in use: stays loaded, whatever the cache drops
    gc.collect()
    loaded = _mapped_libraries(tmp_path)
    # The two held and the cache's three most recent; the other seven were closed.
    assert len(loaded) == 5, loaded
    x = np.zeros(4, np.float32)
    held[1].launch(1, 4, 0, [x])  # still runs
    assert x.tolist() == [1.0] * 4
    # A kernel closed before is loaded again (from the disk cache) when needed.
    again = EmulatedKernel(KERNEL.format(k=4), "add_4")
    again.launch(1, 4, 0, [x])
    assert x.tolist() == [5.0] * 4


@pytest.mark.gpu
@requires_gpu
def test_cuda_kernels_dropped_from_the_cache_still_run_where_held(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kernels the backend's cache dropped stay loaded while their Programs hold them, and
    one that nothing holds is loaded again when a new definition needs it."""
    torch = pytest.importorskip("torch")
    from kfuse import FusionDefinition
    from kfuse.runtime.backends import cuda

    monkeypatch.setattr(cuda.CUDA_BACKEND, "_kernels", BoundedCache(limit=2))
    x = torch.arange(1000, dtype=torch.float32, device="cuda")
    definitions = []
    for k in range(6):
        with FusionDefinition() as fd:
            t = fd.define_tensor(shape=[-1])
            fd.add_output(fd.ops.add(t, float(k)))
        (out,) = fd.execute([x])
        assert torch.equal(out, x + k)
        definitions.append(fd)
    for k, fd in enumerate(definitions):  # their Programs kept the kernels loaded
        (out,) = fd.execute([x])
        assert torch.equal(out, x + k)
    del definitions
    gc.collect()
    with FusionDefinition() as fd:  # the same kernel as the first: loaded again
        t = fd.define_tensor(shape=[-1])
        fd.add_output(fd.ops.add(t, 0.0))
    (out,) = fd.execute([x])
    assert torch.equal(out, x)
