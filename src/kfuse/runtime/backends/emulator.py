"""The emulator backend: the same CUDA source, compiled by the host C++ compiler and run on
the CPU (kfuse.runtime.emulator). Slow, and meant for testing and debugging without a GPU."""

from __future__ import annotations

from typing import Any

from kfuse.runtime.bounded_cache import BoundedCache


class EmulatorBackend:
    """Builds EmulatedKernels; the emulator caches compiled libraries by source hash."""

    name = "emulator"

    def __init__(self) -> None:
        self._kernels: BoundedCache[tuple[str, str, str], Any] = BoundedCache()

    def compile(self, source: str, name: str, device: Any) -> Any:
        """An EmulatedKernel for `source`, with `device`'s launch limits."""
        from kfuse.runtime.emulator import EmulatedKernel

        key = (source, name, getattr(device, "name", str(device)))
        kernel = self._kernels.get(key)
        if kernel is None:
            kernel = EmulatedKernel(source, name, device=device)
            self._kernels.put(key, kernel)
        return kernel


EMULATOR_BACKEND = EmulatorBackend()
