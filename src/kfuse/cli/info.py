"""``python -m kfuse info``: versions, where the CUDA libraries were found, and the devices.

Never fails because CUDA is missing: each part reports what it found or why not, and the
command exits 0 (so it works on a machine with no GPU).
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import sys
from collections.abc import Sequence
from typing import Any

from kfuse import _C, knobs
from kfuse.runtime import nvrtc_loader


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _versions() -> dict[str, str | None]:
    import kfuse

    versions: dict[str, str | None] = {
        "kfuse": kfuse.__version__,
        "python": platform.python_version(),
    }
    for dist in (
        "nanobind-backend",
        "numpy",
        "cuda-pathfinder",
        "torch",
        "cupy-cuda13x",
        "cupy-cuda12x",
        "cupy",
    ):
        version = _version(dist)
        if version is not None or dist in ("nanobind-backend", "numpy", "torch"):
            versions[dist] = version
    return versions


def _driver() -> dict[str, Any]:
    try:
        version = _C.driver_version()
    except _C.CudaError as exc:
        return {"available": False, "error": str(exc)}
    return {
        "available": True,
        "library": _C.driver_library() or None,
        "cuda_version": f"{version // 1000}.{version % 1000 // 10}",
    }


def _nvrtc() -> dict[str, Any]:
    try:
        path = nvrtc_loader.ensure_loaded()
        major, minor = _C.nvrtc_version()
        archs = _C.nvrtc_supported_archs()
    except (_C.CompileError, RuntimeError) as exc:
        return {"available": False, "error": str(exc)}
    return {
        "available": True,
        "library": str(path),
        "version": f"{major}.{minor}",
        "archs": [f"sm_{a}" for a in archs],
    }


def _cupti() -> dict[str, Any]:
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        found = load_nvidia_dynamic_lib("cupti")
    except Exception as exc:  # pathfinder's not-found errors have no common base to name
        return {"available": False, "error": f"{type(exc).__name__}: {exc}"}
    return {"available": True, "library": found.abs_path, "found_via": found.found_via}


def _devices(driver: dict[str, Any]) -> dict[str, Any]:
    if not driver["available"]:
        return {"count": 0, "why": "no usable CUDA driver", "devices": []}
    try:
        count = _C.device_count()
    except _C.CudaError as exc:
        return {"count": 0, "why": str(exc), "devices": []}
    devices: list[dict[str, Any]] = []
    for index in range(count):
        try:
            p = _C.get_device_properties(index)
        except _C.CudaError as exc:
            devices.append({"index": index, "error": str(exc)})
            continue
        devices.append(
            {
                "index": index,
                "name": p.name,
                "compute_capability": f"{p.major}.{p.minor}",
                "sm_count": p.sm_count,
                "memory_bytes": p.total_memory,
                "peak_bandwidth_gbs": round(p.peak_bandwidth_gbs, 1),
                "l2_cache_bytes": p.l2_cache_bytes,
                "shared_mem_per_block": p.shared_mem_per_block,
                "shared_mem_per_block_optin": p.shared_mem_per_block_optin,
            }
        )
    return {
        "count": count,
        "why": None if count else "the driver sees no CUDA device",
        "devices": devices,
    }


def _environment() -> dict[str, Any]:
    """The knobs that differ from their defaults, by environment variable name."""
    settings, defaults = knobs.get(), knobs.Knobs()
    changed = {}
    for name in knobs.ENVIRONMENT_VARIABLES:
        field = name.removeprefix("KFUSE_").lower()
        value = getattr(settings, field, None)
        if value != getattr(defaults, field, None):
            changed[name] = value
    return changed


def facts() -> dict[str, Any]:
    """Everything the report says, as data (`kfuse info --json`)."""
    driver = _driver()
    return {
        "versions": _versions(),
        "executable": sys.executable,
        "driver": driver,
        "nvrtc": _nvrtc(),
        "cupti": _cupti(),
        "devices": _devices(driver),
        "environment": _environment(),
    }


def report(found: dict[str, Any] | None = None) -> str:
    """The full report as text."""
    f = facts() if found is None else found
    v = f["versions"]
    lines = [f"kfuse {v['kfuse']}", f"python {v['python']} ({f['executable']})"]
    lines += [
        f"{k} {'not installed' if n is None else n}"
        for k, n in v.items()
        if k not in ("kfuse", "python")
    ]
    d = f["driver"]
    lines.append(
        f"CUDA driver: {d['library'] or '?'}, supports CUDA {d['cuda_version']}"
        if d["available"]
        else f"CUDA driver: not available ({d['error']})"
    )
    n = f["nvrtc"]
    span = f"{n['archs'][0]}..{n['archs'][-1]}" if n.get("archs") else "no architectures"
    lines.append(
        f"NVRTC {n['version']}: {n['library']} ({span})"
        if n["available"]
        else f"NVRTC: not available ({n['error']})"
    )
    c = f["cupti"]
    lines.append(
        f"CUPTI: {c['library']} (via {c['found_via']})"
        if c["available"]
        else f"CUPTI: not found ({c['error']})"
    )
    devs = f["devices"]
    if not devs["count"]:
        lines.append(f"devices: no GPU ({devs['why']})")
    else:
        lines.append(f"devices: {devs['count']}")
        for p in devs["devices"]:
            if "error" in p:
                lines.append(f"  [{p['index']}] unavailable: {p['error']}")
                continue
            lines.append(
                f"  [{p['index']}] {p['name']}: compute capability {p['compute_capability']}, "
                f"{p['sm_count']} SMs, {p['memory_bytes'] / 2**30:.1f} GiB, peak bandwidth "
                f"{p['peak_bandwidth_gbs']:.0f} GB/s, L2 {p['l2_cache_bytes'] // 2**20} MiB, "
                f"shared memory per block {p['shared_mem_per_block']} (opt-in "
                f"{p['shared_mem_per_block_optin']}) bytes"
            )
    env = f["environment"]
    lines += [f"{k}={val}" for k, val in env.items()] or [
        "no KFUSE_* settings differ from the defaults"
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] = (), *, as_json: bool = False) -> int:
    """Print the report (as JSON with `as_json`); always returns 0."""
    if as_json:
        print(json.dumps(facts(), indent=2))
    else:
        print(report())
    return 0
