"""Finds libnvrtc for ``kfuse._C``, which loads it (dlopen) on the first compile.

Order: ``KFUSE_NVRTC_LIBRARY`` if set, else ``cuda.pathfinder`` (the nvidia-cuda-nvrtc wheel,
then the system's CUDA). ``_C`` calls :func:`nvrtc_library_path` itself when it first needs
NVRTC; :func:`ensure_loaded` does the same eagerly.
"""

from __future__ import annotations

from kfuse import knobs


def nvrtc_library_path() -> str:
    """Path of the libnvrtc kfuse will use; raises RuntimeError saying how to get one."""
    override = knobs.get().nvrtc_library
    if override:
        return override
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        loaded = load_nvidia_dynamic_lib("nvrtc")
    except Exception as exc:  # pathfinder raises its own DynamicLibNotFoundError, among others
        raise RuntimeError(
            f"cuda.pathfinder did not find libnvrtc ({type(exc).__name__}: {exc}). Install it "
            "with pip install 'nvidia-cuda-nvrtc==13.0.*' or set KFUSE_NVRTC_LIBRARY."
        ) from exc
    if not loaded.abs_path:
        raise RuntimeError("cuda.pathfinder loaded libnvrtc but could not say from where")
    return str(loaded.abs_path)


def ensure_loaded() -> str:
    """Hand the library's path to ``_C`` now (it is loaded on first use); returns the path."""
    from kfuse import _C

    loaded = _C.nvrtc_library()
    if loaded:
        return loaded
    path = nvrtc_library_path()
    _C.set_nvrtc_library(path)
    return path
