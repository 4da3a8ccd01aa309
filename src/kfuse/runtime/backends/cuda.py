"""The CUDA backend: NVRTC to a cubin for the device's exact architecture, cached in memory
and on disk, loaded and launched through kfuse._C."""

from __future__ import annotations

import functools
from typing import Any

from kfuse.runtime import kernel_cache
from kfuse.runtime.backends import cubin_info, ptxas_workarounds, register_fit, spill_fallback
from kfuse.runtime.bounded_cache import BoundedCache
from kfuse.runtime.runtime_header import (
    PHILOX_WIDE_PRODUCTS,
    RUNTIME_HEADER_NAME,
    with_header_included,
)

# --fmad=false: the compiler fuses no a * b + c of the generated code into a fused
# multiply-add wherever it finds one. Its contraction made a value computed twice in one
# kernel differ by an ulp: a persistent kernel's x - mean(x), with x recomputed in the epilogue
# as fma(a, b, -mean) while the mean summed round(a * b), was not 0 on a row of one element,
# and 1 / sqrt(var + eps) made that 2e-5 (a campaign mismatch). It also keeps the GPU's
# arithmetic the emulator's (the host compiler contracts nothing). The fused multiply-adds
# are the code generator's, explicit kf::fma calls where they cannot make two computations of
# a value differ (kfuse.codegen.contraction); the math functions' own (erff, expf, ...) stay.
NVRTC_OPTIONS = ("-std=c++17", "-DKFUSE_USE_PTX", "--fmad=false")

# What makes NVRTC (12.8 and later) faster without changing what it generates: --minimal
# leaves out the CUDA runtime's declarations no kernel uses (textures, device-side launches,
# the runtime API's types), and --pch makes a precompiled header of the runtime header once
# a process and reuses it (nvrtc_program hands the header in as an #include, the only form
# automatic PCH takes). Of the 430 kernels of the source corpus, every cubin is byte for
# byte the same with and without them; on an H200 machine's CPUs a campaign's kernels compile
# 11% faster (tools/nvrtc_probe.py); a campaign spends 86% of its time in first calls, mostly NVRTC.
FAST_COMPILE_OPTIONS = ("--minimal", "--pch", "--pch-messages=false", "--pch-verbose=false")


@functools.cache
def _compiles_fast() -> bool:
    from kfuse import _C

    return _C.nvrtc_version() >= (12, 8)


def nvrtc_options(options: tuple[str, ...] = ()) -> list[str]:
    """Every option a kernel is compiled with: NVRTC_OPTIONS, FAST_COMPILE_OPTIONS where
    the NVRTC has them, then the params' own (what KFUSE_DUMP=compile's PTX and SASS are
    compiled with too)."""
    fast = FAST_COMPILE_OPTIONS if _compiles_fast() else ()
    return [*NVRTC_OPTIONS, *fast, *options]


def nvrtc_program(source: str, options: list[str]) -> tuple[str, list[tuple[str, str]]]:
    """(the source NVRTC compiles, the headers it may #include) for a kernel's `source`:
    with --pch among `options`, the runtime header it starts with is an included header."""
    included = with_header_included(source) if "--pch" in options else None
    if included is None:
        return source, []
    program, header = included
    return program, [(RUNTIME_HEADER_NAME, header)]


# What the disk cache's keys name besides the source, architecture and options: how a cubin
# is made from them (bumped when that changes, so that no older entry is taken for a new one).
COMPILE_STEPS = (
    "nvrtc, ptxas workarounds (-O0 for zero low words), register fit, narrow Philox products"
    " where they cost less, spill fallback where it spills less"
)


def nvrtc_cubin(source: str, name: str, arch: str, options: list[str]) -> bytes:
    """One NVRTC compile of `source` as nvrtc_program says (no register fit), with the
    options kfuse.runtime.backends.ptxas_workarounds asks for it."""
    from kfuse import _C

    program, headers = nvrtc_program(source, options)
    options = [*options, *ptxas_workarounds.workaround_options(source)]
    return _C.compile_to_cubin(program, name + ".cu", arch, options, headers)


def fitted_compile(source: str, name: str, arch: str, options: list[str]) -> tuple[str, bytes]:
    """(the source compiled, its cubin) for a kernel's `source`: as written, then again with
    its launch bounds fitted to the registers it took where that gives ptxas more
    (kfuse.runtime.backends.register_fit); and where that spills and the source offers a
    fallback, the fallback, fitted the same way (kfuse.runtime.backends.spill_fallback),
    where it costs less (spill_fallback.prefer_fallback: instructions and stack frame): the
    dropout + layer norm forward with its mask drawn inside [2048, 16384] bf16 spilled 24
    bytes a thread as written and 40 with the fallback's row-end tests (1648 and 1952 sm_90
    SASS instructions). Before the fallback, a source with Philox's wide products
    (kfuse.switches.PHILOX_WIDE_PRODUCTS) is compiled with narrow ones too, and the cheaper
    kept (the same cost)."""
    best = _register_fitted(source, name, arch, options)
    wide = "\n" + PHILOX_WIDE_PRODUCTS + "\n"
    if wide in source:
        # Philox's wide products take register pairs: in some kernels that spills, in others
        # ptxas pays for it in other instructions (kfuse.switches.PHILOX_WIDE_PRODUCTS)
        source, best = _cheaper(source, best, source.replace(wide, "\n"), name, arch, options)
    if spill_fallback.offers_fallback(source) and cubin_info.frame_bytes(best[1]) > 0:
        fallback = spill_fallback.fallback_source(source)
        source, best = _cheaper(source, best, fallback, name, arch, options)
    return best


def _cheaper(
    source: str,
    compiled: tuple[str, bytes],
    alternative: str,
    name: str,
    arch: str,
    options: list[str],
) -> tuple[str, tuple[str, bytes]]:
    """(`source`, its fitted compile `compiled`) or (`alternative`, its fitted compile),
    whichever costs less (spill_fallback.prefer_fallback: instructions and stack frame)."""
    other = _register_fitted(alternative, name, arch, options)
    if spill_fallback.prefer_fallback(compiled[1], other[1]):
        return alternative, other
    return source, compiled


def _register_fitted(source: str, name: str, arch: str, options: list[str]) -> tuple[str, bytes]:
    cubin = nvrtc_cubin(source, name, arch, options)
    fitted = register_fit.fit_launch_bounds(source, cubin_info.registers(cubin), arch)
    if fitted is None:
        return source, cubin
    return fitted, nvrtc_cubin(fitted, name, arch, options)


def compile_to_cubin(source: str, name: str, arch: str, options: list[str]) -> bytes:
    """The cubin of a kernel's `source` (NVRTC, no cache): fitted_compile's."""
    return fitted_compile(source, name, arch, options)[1]


def compile_to_ptx(source: str, name: str, arch: str, options: list[str]) -> str:
    """The PTX of the source compile_to_cubin's cubin is compiled from."""
    from kfuse import _C

    fitted, _ = fitted_compile(source, name, arch, options)
    program, headers = nvrtc_program(fitted, options)
    return _C.compile_to_ptx(program, name + ".cu", arch, options, headers)


class CudaBackend:
    """Compiles and loads kernels for CUDA devices."""

    name = "cuda"

    def __init__(self) -> None:
        # Loaded modules, at most LOADED_KERNELS besides those live Programs hold.
        self._kernels: BoundedCache[tuple[str, str, int, str, tuple[str, ...]], Any] = (
            BoundedCache()
        )

    def compile(
        self, source: str, name: str, device_index: int, arch: str, options: tuple[str, ...] = ()
    ) -> Any:
        """A loaded kernel for `source` on `device_index` (memory cache, disk cache, NVRTC)."""
        from kfuse import _C

        key = (source, name, device_index, arch, options)
        kernel = self._kernels.get(key)
        if kernel is not None:
            return kernel
        disk_key, identity = self._disk_entry(source, name, arch, options)
        cubin = kernel_cache.load(disk_key, identity)
        if cubin is None:
            cubin = compile_to_cubin(source, name, arch, nvrtc_options(options))
            kernel_cache.store(disk_key, identity, cubin)
        kernel = _C.Kernel(cubin, name, device_index)
        self._kernels.put(key, kernel)
        return kernel

    def cached_cubin(
        self, source: str, name: str, arch: str, options: tuple[str, ...] = ()
    ) -> bytes | None:
        """The cubin the disk cache holds for this kernel (what compile loaded), or None
        (the disk cache off, or the entry gone): the program store keeps it with the
        program (kfuse.engine.program_store)."""
        return kernel_cache.load(*self._disk_entry(source, name, arch, options))

    @staticmethod
    def _disk_entry(
        source: str, name: str, arch: str, options: tuple[str, ...]
    ) -> tuple[str, dict[str, str]]:
        """The cubin cache's (key, identity) of a kernel: everything its cubin depends on."""
        from kfuse import _C

        all_options = " ".join(nvrtc_options(options))
        version = ".".join(str(v) for v in _C.nvrtc_version())
        digest = kernel_cache.source_digest(source)
        key = kernel_cache.cache_key(digest, name, arch, all_options, version, COMPILE_STEPS)
        return key, kernel_cache.kernel_identity(source, name, arch, all_options, version, digest)


CUDA_BACKEND = CudaBackend()
