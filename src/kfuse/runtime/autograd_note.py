"""The one warning a torch user needs: kfuse has no autograd.

A torch input that requires grad is read like any other tensor, and the outputs are new
tensors outside torch's graph: a backward pass would stop at them without an error. kfuse
says so the first time it sees such an input (kfuse.errors.NoAutogradWarning), once per
process, so that a training loop is not flooded.
"""

from __future__ import annotations

import sys
import warnings
from types import FrameType
from typing import Any

from kfuse.errors import NoAutogradWarning

_warned = False  # a process sees the warning once


def note_requires_grad(array: Any, what: str) -> None:
    """Warn, the first time in this process, if torch tensor `array` requires grad."""
    global _warned
    if _warned or not getattr(array, "requires_grad", False):
        return
    torch = sys.modules.get("torch")
    if torch is not None and not torch.is_grad_enabled():
        return  # under torch.no_grad() nobody expects a graph
    _warned = True
    warnings.warn(
        f"{what} requires grad, but kfuse has no autograd: the fusion's outputs do not "
        "require grad and no gradient flows back through it to its inputs (pass x.detach(), "
        "or call it under torch.no_grad(), to say that this is meant). This warning is shown "
        "once per process.",
        NoAutogradWarning,
        stacklevel=_callers_level(),
    )


def _callers_level() -> int:
    """The stacklevel of the first frame outside kfuse: the user's fd.execute call."""
    level = 2  # 1: note_requires_grad, 2: its caller
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] == "kfuse":
        level, frame = level + 1, frame.f_back
    return level
