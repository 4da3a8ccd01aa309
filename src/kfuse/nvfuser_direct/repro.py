"""FusionDefinition.repro_script_for: a script that defines a fusion and runs it on inputs
like the given ones, as nvFuser writes it (Thunder's reports ask for it by that name)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from kfuse.errors import InputError


def repro_script(definition: str, inputs: Sequence[Any] | None) -> str:
    """The script: imports, the printed `definition` (nvFuser's form) and the lines that
    build it; with `inputs`, a list of arrays of their shapes, strides, dtypes and devices
    (random values) or their numbers, and the call that runs the fusion on it."""
    lines = [
        "import torch",
        "from nvfuser_direct import FusionDefinition, DataType",
        definition.rstrip("\n"),
        "with FusionDefinition() as fd:",
        "    nvfuser_fusion(fd)",
    ]
    if inputs is not None:
        lines += ["", "inputs = ["]
        lines += [f"    {_input(a)}," for a in inputs]
        lines += ["]", "fd.execute(inputs)"]
    return "\n".join(lines) + "\n"


def _input(a: Any) -> str:
    if isinstance(a, (bool, int)):
        return repr(a)
    if isinstance(a, (list, tuple)):  # a define_vector's sizes
        return repr(type(a)(int(n) for n in a))
    if isinstance(a, float):
        return repr(a) if math.isfinite(a) else f'float("{a}")'
    try:
        sizes, strides = tuple(a.size()), tuple(a.stride())
        dtype, device = a.dtype, a.device
    except (AttributeError, TypeError):
        raise InputError(
            f"repro_script_for: {type(a).__name__} is not a torch tensor or a number"
        ) from None
    if a.is_contiguous():
        return f"torch.testing.make_tensor({sizes}, dtype={dtype}, device='{device}')"
    # The storage the strides reach: one past the largest linear index.
    extent = 0 if 0 in sizes else 1 + sum((n - 1) * s for n, s in zip(sizes, strides))
    if dtype.is_floating_point:
        values = f"torch.randn({extent}, dtype={dtype}, device='{device}')"
    else:
        high = 2 if dtype == _bool() else 10
        values = f"torch.randint(0, {high}, ({extent},), dtype={dtype}, device='{device}')"
    return f"{values}.as_strided({sizes}, {strides})"


def fake_copies(inputs: Any) -> list[Any]:
    """The inputs with each torch tensor as a fake tensor of its shape, strides, dtype and
    device (torch's FakeTensorMode: no storage is kept alive), numbers as they are."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    return [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in inputs]


def _bool() -> Any:
    import torch

    return torch.bool
