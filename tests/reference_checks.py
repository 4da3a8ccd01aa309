"""What the emulator tests of the resize and indexing ops share: random inputs, and a call
checked against the float64 reference."""

from __future__ import annotations

from typing import Any

import numpy as np

from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.testing import assert_outputs_close


def rand(shape: tuple[int, ...], seed: int = 0, dtype: Any = np.float32) -> np.ndarray:
    """Standard normal values of `shape`, drawn in float64 and cast to `dtype`."""
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def check(fd: FusionDefinition, inputs: list) -> list:
    """The outputs of one call, each checked against the float64 reference."""
    out = fd.execute(inputs)
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)
    return out
