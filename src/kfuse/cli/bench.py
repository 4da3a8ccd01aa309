"""``kfuse bench``'s check before the suite starts: the benchmarks time CUDA work with torch's
events, so a machine without a GPU (or with CPU-only torch) gets one line saying what is
missing instead of the traceback torch would print halfway through."""

from __future__ import annotations

import importlib.util

from kfuse import _C


def missing() -> str | None:
    """What the benchmark suite needs and this machine lacks, or None where it can run."""
    try:
        _C.driver_version()
    except _C.CudaError:
        return "no NVIDIA driver was found (kfuse info says where it looked)"
    try:
        count = _C.device_count()
    except _C.CudaError as exc:
        return f"the CUDA driver reports an error ({str(exc).splitlines()[0]})"
    if count == 0:
        return "the CUDA driver sees no GPU"
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed (the suite times every peer with torch's CUDA events)"
    import torch

    if not torch.cuda.is_available():
        return f"torch {torch.__version__} cannot use the GPU (a CPU-only build?)"
    return None
