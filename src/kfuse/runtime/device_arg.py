"""execute's `device=`: which CUDA device a call runs on, spelled as nvFuser's execute takes it.

nvFuser (and Thunder, which passes `device=` on every call) accepts a device index, a
torch.device or a string such as "cuda:1". The device is inferred from the tensor inputs;
`device=` matters for fusions with none (every output made by `full`, `iota`, `uniform`...),
whose outputs it places, and must agree with the inputs' device otherwise.

Parsed here without importing torch, so that a CuPy- or NumPy-only install reads the same
spellings; a torch.device is recognised by its attributes.
"""

from __future__ import annotations

import re
from typing import Any

from kfuse.errors import InputError

_CUDA_STRING = re.compile(r"cuda(?::(\d+))?")


def device_index(device: Any) -> int | None:
    """The CUDA ordinal `device` names (None for None). InputError for anything that is not
    a CUDA device: a negative index, "cpu", another torch device type, another type."""
    if device is None:
        return None
    if type(device) is int:
        if device < 0:
            raise InputError(f"device must be a CUDA device index >= 0, got {device}")
        return device
    if isinstance(device, str):
        match = _CUDA_STRING.fullmatch(device.strip())
        if match is None:
            raise InputError(
                f"device must name a CUDA device (an int, 'cuda', 'cuda:N' or a "
                f"torch.device of type cuda), got {device!r}"
            )
        return _current_or(match.group(1))
    if type(device).__name__ == "device" and type(device).__module__.startswith("torch"):
        if device.type != "cuda":
            raise InputError(
                f"device must be a CUDA device, got torch.device {str(device)!r}; "
                "host arrays run on the emulator without device="
            )
        return _current_or(None if device.index is None else str(device.index))
    raise InputError(
        f"device must be a CUDA device index (an int >= 0), 'cuda:N' or a torch.device, "
        f"got {type(device).__name__} {device!r}"
    )


def _current_or(index: str | None) -> int:
    """An explicit ordinal, or (for a bare "cuda") the current device, as torch reads
    torch.device("cuda"): torch's current device where torch is loaded, else 0."""
    if index is not None:
        return int(index)
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return int(torch.cuda.current_device())
    return 0


def generated_framework() -> str:
    """The array framework of the outputs of a fusion without tensor inputs run on a CUDA
    device: torch tensors, as nvFuser returns, wherever torch is installed (a CuPy user
    takes them zero-copy with cupy.asarray or cupy.from_dlpack); CuPy arrays on an install
    without torch."""
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        return "torch"
    if importlib.util.find_spec("cupy") is not None:
        return "cupy"
    raise InputError(
        "device= places a fusion without tensor inputs on a GPU, whose outputs are torch "
        "tensors (or CuPy arrays); neither torch nor CuPy is installed"
    )


def check_device_exists(index: int) -> None:
    """InputError unless CUDA device `index` exists (before anything is allocated there);
    without a driver, kfuse's CudaError saying so."""
    from kfuse import _C

    count = int(_C.device_count())
    if index >= count:
        raise InputError(
            f"device={index} was asked for, but this machine has "
            f"{count} CUDA device{'s' if count != 1 else ''}"
        )
