"""Consecutive rows a pointwise thread takes (PointwiseParams.unroll_factor_outer): the inputs
the same along them (a normalization's statistics broadcast over the positions of an NHWC
tensor) are loaded once for the rows, the others for each. The heuristics' choice on the H200
profile, the kernel on the emulator against the float64 reference (whole vectors and a
ragged row end), and the params it refuses by name."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from kfuse import schedule, switches
from kfuse.dtypes import DataType
from kfuse.errors import SchedulerError
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.schedule import SchedulerType
from kfuse.testing import assert_outputs_close

PW = SchedulerType.pointwise
BF16 = ml_dtypes.bfloat16


def normalize_nhwc() -> FusionDefinition:
    """y = (x - mean) * invstd * w + b over [N, P, C] (P the positions), mean and invstd per
    (n, c), w and b per c: four inputs the same along P, one that is not."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.BFloat16)
        mean = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        invstd = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        w = fd.define_tensor(shape=[-1], dtype=DataType.BFloat16)
        b = fd.define_tensor(shape=[-1], dtype=DataType.BFloat16)
        shape = fd.ops.shape(x)
        m = fd.ops.broadcast_in_dim(mean, shape=shape, broadcast_dims=[0, 2])
        s = fd.ops.broadcast_in_dim(invstd, shape=shape, broadcast_dims=[0, 2])
        wb = fd.ops.broadcast_in_dim(w, shape=shape, broadcast_dims=[2])
        bb = fd.ops.broadcast_in_dim(b, shape=shape, broadcast_dims=[2])
        xf = fd.ops.cast(x, DataType.Float)
        y = fd.ops.add(fd.ops.mul(fd.ops.mul(fd.ops.sub(xf, m), s), wb), bb)
        fd.add_output(fd.ops.cast(y, DataType.BFloat16))
    return fd


def inputs_nhwc(n: int, p: int, c: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal((n, p, c)).astype(BF16),
        rng.standard_normal((n, c)).astype(np.float32),
        rng.random((n, c)).astype(np.float32) + 0.5,
        rng.standard_normal(c).astype(BF16),
        rng.standard_normal(c).astype(BF16),
    ]


def bias_add(then: str | None = None) -> FusionDefinition:
    """x + v along the rows, bf16; with `then`, that op of the sum."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        v = fd.define_tensor(shape=[-1], dtype=DataType.BFloat16)
        y = fd.ops.add(x, fd.ops.broadcast_in_dim(v, fd.ops.shape(x), [1]))
        fd.add_output(y if then is None else getattr(fd.ops, then)(y))
    return fd


def test_h200_heuristics_take_two_rows_where_the_shared_inputs_weigh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """NHWC [64, 3136, 256]: 12 bytes an element the same along P against 4 that are not:
    two rows a thread, one vector along the row; odd P, or a bias add (2 bytes shared against
    4), keep one row and two vectors."""
    monkeypatch.setenv("KFUSE_EMULATOR_PROFILE", "h200")
    fd = normalize_nhwc()
    big = [
        np.empty((64, 3136, 256), BF16),
        np.empty((64, 256), np.float32),
        np.empty((64, 256), np.float32),
        np.empty(256, BF16),
        np.empty(256, BF16),
    ]
    hp = schedule.compute_heuristics(fd.fusion, PW, big)
    assert (hp.unroll_factor, hp.unroll_factor_outer) == (1, 2)
    assert hp.grid_y * hp.block_y * 2 >= 64 * 3136
    odd = [np.empty((64, 3135, 256), BF16), *big[1:]]
    hp = schedule.compute_heuristics(fd.fusion, PW, odd)
    assert (hp.unroll_factor, hp.unroll_factor_outer) == (2, 1)
    bias = [np.empty((65536, 4096), BF16), np.empty(4096, BF16)]
    hp = schedule.compute_heuristics(bias_add().fusion, PW, bias)
    assert (hp.unroll_factor, hp.unroll_factor_outer) == (2, 1)


@pytest.mark.parametrize(("op", "unroll"), [("relu", 1), ("neg", 1), ("exp", 2), ("tanh", 2)])
def test_a_second_vector_a_thread_only_where_there_is_math_to_hide(
    monkeypatch: pytest.MonkeyPatch, op: str, unroll: int
) -> None:
    """ONE_VECTOR_WITHOUT_MATH (off until measured; switched on here): a bias add and relu
    over [65536, 4096] bf16 has nothing to compute between its loads and takes one vector a
    thread (twice the blocks); with a transcendental it takes two. The flat schedule
    likewise."""

    monkeypatch.setattr(switches, "ONE_VECTOR_WITHOUT_MATH", True)
    monkeypatch.setenv("KFUSE_EMULATOR_PROFILE", "h200")
    big = [np.empty((65536, 4096), BF16), np.empty(4096, BF16)]
    hp = schedule.compute_heuristics(bias_add(op).fusion, PW, big)
    assert (hp.unroll_factor, hp.unroll_factor_outer) == (unroll, 1)
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        b = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        fd.add_output(getattr(fd.ops, op)(fd.ops.mul(a, b)))
    flat = [np.empty((65536, 4096), BF16), np.empty((65536, 4096), BF16)]
    hp = schedule.compute_heuristics(fd.fusion, PW, flat)
    assert hp.unroll_factor == unroll and hp.break_point == -1


@pytest.mark.parametrize(
    ("shape", "vector", "grid_y"),
    [
        ((3, 40, 64), 8, None),  # whole vectors; a block of rows for each pair
        ((2, 6, 100), 8, 2),  # a ragged row end (100 = 12 x 8 + 4), 2 blocks striding
        ((4, 2, 3), 1, 1),  # one row pair an n, elements
    ],
)
def test_two_rows_a_thread_match_the_reference(
    shape: tuple[int, int, int], vector: int, grid_y: int | None
) -> None:
    fd = normalize_nhwc()
    inputs = inputs_nhwc(*shape, seed=sum(shape))
    hp = schedule.compute_heuristics(fd.fusion, PW, inputs)
    hp.vectorization_factor, hp.unroll_factor, hp.unroll_factor_outer = vector, 1, 2
    hp.block_x, hp.block_y = 8, 4
    hp.grid_x = 1
    hp.grid_y = grid_y or -(-shape[0] * shape[1] // (4 * 2))
    expected = evaluate(fd.fusion, inputs)
    out = fd.manual_execute(inputs, heuristic_params=hp)
    assert_outputs_close(fd.fusion, out, expected, inputs)
    source = fd.last_cuda_source()
    assert "_rows2_" in source and "rstep_in0" in source


def test_rows_a_thread_that_cannot_run_are_refused_by_name() -> None:
    fd = normalize_nhwc()
    inputs = inputs_nhwc(2, 5, 16)
    hp = schedule.compute_heuristics(fd.fusion, PW, inputs)
    hp.unroll_factor, hp.unroll_factor_outer = 1, 2
    with pytest.raises(SchedulerError, match=r"= 2 does not divide .* \(5 rows\)"):
        fd.manual_execute(inputs, heuristic_params=hp)
    inputs = inputs_nhwc(2, 4, 16)
    hp.unroll_factor_outer = 0
    with pytest.raises(SchedulerError, match="unroll_factor_outer = 0 must be at least 1"):
        fd.manual_execute(inputs, heuristic_params=hp)
    hp.unroll_factor, hp.unroll_factor_outer = 2, 2
    with pytest.raises(SchedulerError, match="unroll_factor_outer = 2 needs unroll_factor 1"):
        fd.manual_execute(inputs, heuristic_params=hp)
    with FusionDefinition() as flat:
        x = flat.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        flat.add_output(flat.ops.exp(x))
    x = np.ones((4, 8), np.float32)
    hp = schedule.compute_heuristics(flat.fusion, PW, [x])
    hp.unroll_factor_outer = 2
    with pytest.raises(SchedulerError, match="unroll_factor_outer = 2 needs rows"):
        flat.manual_execute([x], heuristic_params=hp)
