"""A new shape that a compiled kernel already covers compiles nothing: kernels take their
sizes as arguments, so a Program planned for a new shape (the executor's cache keys on the
concrete shape) generates the same source, which the backend's memory cache already holds.
Counted on the host emulator (its compiler runs, kfuse.runtime.emulator.build)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from kfuse import DataType, FusionDefinition
from kfuse.reference import evaluate
from kfuse.runtime.emulator import build
from kfuse.testing import assert_outputs_close


def pointwise() -> FusionDefinition:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Float)
        b = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.mul(fd.ops.add(a, b), 2.0))
    return fd


def rmsnorm() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.BFloat16)
        w = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.BFloat16)
        xf = fd.ops.cast(x, DataType.Float)
        ms = fd.ops.mean(fd.ops.mul(xf, xf), dims=[1], keepdim=True)
        wf = fd.ops.broadcast_in_dim(
            fd.ops.cast(w, DataType.Float), shape=fd.ops.shape(x), broadcast_dims=[1]
        )
        y = fd.ops.mul(fd.ops.mul(xf, fd.ops.rsqrt(fd.ops.add(ms, 1e-6))), wf)
        fd.add_output(fd.ops.cast(y, DataType.BFloat16))
    return fd


def pointwise_inputs(n: int) -> list[Any]:
    rng = np.random.default_rng(n)
    return [rng.standard_normal(n, dtype=np.float32) for _ in range(2)]


def rmsnorm_inputs(rows: int) -> list[Any]:
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 1024)).astype(ml_dtypes.bfloat16)
    return [x, rng.standard_normal(1024).astype(ml_dtypes.bfloat16)]


# Shapes the first one's kernel covers. Not among them: a small pointwise size the heuristics
# give another block shape (77: 16 x 8 threads, not 128 x 1; the body is the same, its name,
# a hash of the spec, is not) or fewer rows than a block takes (3: a kernel that guards its
# rows, another source).
CASES = [
    (pointwise, pointwise_inputs, [1024, 4096, 1000, 1 << 16]),
    (rmsnorm, rmsnorm_inputs, [8, 64, 256, 40]),
]


@pytest.mark.parametrize("make, inputs, sizes", CASES, ids=["pointwise", "rmsnorm"])
def test_a_shape_the_compiled_kernel_covers_compiles_nothing(
    make: Any, inputs: Any, sizes: list[int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KFUSE_CACHE_DIR", str(tmp_path))  # the first shape compiles
    fd = make()
    before = build.compiler_invocations()
    kernels = set()
    for size in sizes:
        args = inputs(size)
        out = fd.execute(args)
        assert_outputs_close(fd, out, evaluate(fd.fusion, args), args)
        launches = fd.last_program().launches
        assert len(launches) == 1
        kernels.add(id(launches[0].kernel))
        assert build.compiler_invocations() == before + 1, f"shape {size} compiled again"
    assert len(kernels) == 1  # one loaded kernel runs every shape
