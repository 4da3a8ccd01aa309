"""The CUDA backend: NVRTC to a cubin for the device's exact architecture, cached in memory
and on disk, loaded and launched through kfuse._C."""

from __future__ import annotations

import threading
from typing import Any

from kfuse.runtime import kernel_cache

# --fmad=false: every a * b + c the code generator writes rounds twice, as written, instead
# of as one fused multiply-add wherever the compiler finds one. Contraction made a value
# computed twice in one kernel differ by an ulp: a persistent kernel's x - mean(x), with x
# recomputed in the epilogue as fma(a, b, -mean) while the mean summed round(a * b), was not 0
# on a row of one element, and 1 / sqrt(var + eps) made that 2e-5 (a campaign mismatch). It
# also keeps the GPU's arithmetic the emulator's (the host compiler contracts nothing). The
# math functions' own fma (erff, expf, ...) are explicit and stay.
NVRTC_OPTIONS = ("-std=c++17", "-DKFUSE_USE_PTX", "--fmad=false")


def nvrtc_options(options: tuple[str, ...] = ()) -> list[str]:
    """Every option a kernel is compiled with: NVRTC_OPTIONS, then the params' own (what
    KFUSE_DUMP=ptx,sass compile with too)."""
    return [*NVRTC_OPTIONS, *options]


class CudaBackend:
    """Compiles and loads kernels for CUDA devices."""

    name = "cuda"

    def __init__(self) -> None:
        self._kernels: dict[tuple[str, str, int, str, tuple[str, ...]], Any] = {}
        self._lock = threading.Lock()

    def compile(
        self, source: str, name: str, device_index: int, arch: str, options: tuple[str, ...] = ()
    ) -> Any:
        """A loaded kernel for `source` on `device_index` (memory cache, disk cache, NVRTC)."""
        from kfuse import _C

        key = (source, name, device_index, arch, options)
        kernel = self._kernels.get(key)
        if kernel is not None:
            return kernel
        all_options = nvrtc_options(options)
        version = ".".join(str(v) for v in _C.nvrtc_version())
        disk_key = kernel_cache.cache_key(source, name, arch, " ".join(all_options), version)
        identity = kernel_cache.kernel_identity(source, name, arch, " ".join(all_options), version)
        cubin = kernel_cache.load(disk_key, identity)
        if cubin is None:
            cubin = _C.compile_to_cubin(source, name + ".cu", arch, all_options)
            kernel_cache.store(disk_key, identity, cubin)
        kernel = _C.Kernel(cubin, name, device_index)
        with self._lock:
            self._kernels[key] = kernel
        return kernel


CUDA_BACKEND = CudaBackend()
