"""``python -m kfuse demo``: define a fusion, run it on what this machine has, check it.

On a machine with a GPU and torch it runs there; elsewhere the same generated CUDA runs on the
host emulator (NumPy inputs). Either way the result is compared with the eager reference.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any


def _rms_norm() -> Any:
    from kfuse import DataType, FusionDefinition

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        w = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        fd.add_output(fd.ops.rms_norm(x, w, eps=1e-6))
    return fd


def _inputs(rows: int, cols: int) -> tuple[list[Any], str]:
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    w = rng.standard_normal(cols, dtype=np.float32)
    try:
        import torch

        if torch.cuda.is_available():
            return [torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda()], "GPU (torch)"
    except ImportError:
        pass
    return [x, w], "host emulator (NumPy)"


def main(argv: Sequence[str]) -> int:
    """Run the demo; returns 0 when kfuse's result matches the reference."""
    from kfuse.reference import evaluate
    from kfuse.testing import assert_outputs_close

    fd = _rms_norm()
    print("fusion:\n" + repr(fd))
    inputs, where = _inputs(64, 1000)
    print(f"running on: {where}")
    start = time.perf_counter()
    outputs = fd.execute(inputs)
    first = time.perf_counter() - start
    start = time.perf_counter()
    outputs = fd.execute(inputs)
    again = time.perf_counter() - start
    print(
        f"scheduler: {fd.last_scheduler()}; first call {first * 1e3:.1f} ms (compiles), "
        f"cached call {again * 1e3:.2f} ms"
    )
    try:
        assert_outputs_close(fd, outputs, evaluate(fd.fusion, inputs), inputs)
    except AssertionError as exc:
        print(f"MISMATCH against the eager reference: {exc}")
        return 1
    print("matches the eager reference")
    return 0
