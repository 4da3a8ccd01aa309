"""``python -m kfuse info``: versions, where the CUDA libraries were found, and the devices.

Never fails because CUDA is missing: each part reports what it found or why not, and the
command exits 0 (so it works on a machine with no GPU).
"""

from __future__ import annotations

import importlib.metadata
import platform
import sys
from collections.abc import Sequence

from kfuse import _C, knobs, nvrtc_loader


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _versions() -> list[str]:
    import kfuse

    lines = [
        f"kfuse {kfuse.__version__}",
        f"python {platform.python_version()} ({sys.executable})",
    ]
    for dist in ("nanobind-backend", "numpy", "cuda-pathfinder", "torch", "cupy-cuda13x",
                 "cupy-cuda12x", "cupy"):
        version = _version(dist)
        if version != "not installed" or dist in ("nanobind-backend", "numpy", "torch"):
            lines.append(f"{dist} {version}")
    return lines


def _driver() -> tuple[list[str], bool]:
    """Lines about the driver, and whether it is usable."""
    try:
        version = _C.driver_version()
    except _C.CudaError as exc:
        return [f"CUDA driver: not available ({exc})"], False
    where = _C.driver_library() or "?"
    return [f"CUDA driver: {where}, supports CUDA {version // 1000}.{version % 1000 // 10}"], True


def _nvrtc() -> list[str]:
    try:
        path = nvrtc_loader.ensure_loaded()
        major, minor = _C.nvrtc_version()
        archs = _C.nvrtc_supported_archs()
    except (_C.CompileError, RuntimeError) as exc:
        return [f"NVRTC: not available ({exc})"]
    span = f"sm_{archs[0]}..sm_{archs[-1]}" if archs else "no architectures"
    return [f"NVRTC {major}.{minor}: {path} ({span})"]


def _cupti() -> list[str]:
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        found = load_nvidia_dynamic_lib("cupti")
    except Exception as exc:  # pathfinder's not-found errors have no common base to name
        return [f"CUPTI: not found ({type(exc).__name__}: {exc})"]
    return [f"CUPTI: {found.abs_path} (via {found.found_via})"]


def _devices(driver_ok: bool) -> list[str]:
    if not driver_ok:
        return ["devices: no GPU (no usable CUDA driver)"]
    try:
        count = _C.device_count()
    except _C.CudaError as exc:
        return [f"devices: no GPU ({exc})"]
    if count == 0:
        return ["devices: no GPU (the driver sees no CUDA device)"]
    lines = [f"devices: {count}"]
    for index in range(count):
        try:
            p = _C.get_device_properties(index)
        except _C.CudaError as exc:
            lines.append(f"  [{index}] unavailable: {exc}")
            continue
        lines.append(
            f"  [{index}] {p.name}: compute capability {p.major}.{p.minor}, {p.sm_count} SMs, "
            f"{p.total_memory / 2**30:.1f} GiB, peak bandwidth {p.peak_bandwidth_gbs:.0f} GB/s, "
            f"L2 {p.l2_cache_bytes // 2**20} MiB, shared memory per block {p.shared_mem_per_block} "
            f"(opt-in {p.shared_mem_per_block_optin}) bytes"
        )
    return lines


def _environment() -> list[str]:
    """The knobs that differ from their defaults, by environment variable name."""
    settings, defaults = knobs.get(), knobs.Knobs()
    lines = []
    for name in knobs.ENVIRONMENT_VARIABLES:
        field = name.removeprefix("KFUSE_").lower()
        value = getattr(settings, field, None)
        if value != getattr(defaults, field, None):
            lines.append(f"{name}={value}")
    return lines or ["no KFUSE_* settings differ from the defaults"]


def report() -> str:
    """The full report as text."""
    lines = _versions()
    driver_lines, driver_ok = _driver()
    lines += driver_lines + _nvrtc() + _cupti() + _devices(driver_ok) + _environment()
    return "\n".join(lines)


def main(argv: Sequence[str] = ()) -> int:
    """Print the report; always returns 0."""
    print(report())
    return 0
