"""Where kernels run: a CUDA device (NVRTC + driver) or the host emulator.

Both backends take the same CUDA source and the same launch arguments (kernel ABI in
docs/INTERFACES.md), so the executor does not care which one it drives.
"""

from __future__ import annotations

from typing import Any

from kfuse.runtime.info import EMULATOR, RuntimeInfo


def backend_for(info: RuntimeInfo) -> Any:
    """The backend that runs this call."""
    if info.backend == EMULATOR:
        from kfuse.runtime.backends.emulator import EMULATOR_BACKEND

        return EMULATOR_BACKEND
    from kfuse.runtime.backends.cuda import CUDA_BACKEND

    return CUDA_BACKEND
