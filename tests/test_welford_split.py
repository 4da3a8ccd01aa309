"""A Welford over separate runs of axes runs in two stages (kfuse.schedule.welford_split): a
Welford over the innermost run, then a merge of its statistics with sums, instead of a
permuted copy of the input. Checked on the emulator against the float64 reference, including
what the merge must keep exact (a channel of equal values) and special values."""

from __future__ import annotations

import numpy as np
import pytest

from kfuse import DataType, FusionDefinition
from kfuse.campaign.property import check_outputs
from kfuse.ir.exprs import PermuteOp, WelfordOp
from kfuse.schedule import SchedulerType


def batch_norm(rank: int, dims: list[int], dtype: DataType = DataType.Float) -> FusionDefinition:
    """Statistics over `dims` and the normalized input (as a batch norm computes them)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1] * rank, dtype=dtype)
        xf = fd.ops.cast(x, DataType.Float)
        avg, m2, n = fd.ops.welford(xf, dims=dims)
        count = fd.ops.cast(n, DataType.Float)
        invstd = fd.ops.rsqrt(fd.ops.add(fd.ops.div(m2, count), 1e-5))
        keep = [i in dims for i in range(rank)]
        centred = fd.ops.sub(xf, fd.ops.broadcast(avg, keep))
        y = fd.ops.mul(centred, fd.ops.broadcast(invstd, keep))
        fd.add_output(fd.ops.cast(y, dtype))
        fd.add_output(avg)
        fd.add_output(m2)
        fd.add_output(n)
    return fd


def segments_of(fd: FusionDefinition) -> list:
    return fd.last_program().segments()


def test_nchw_statistics_take_no_permuted_copy() -> None:
    fd = batch_norm(4, [0, 2, 3])
    x = np.random.default_rng(1).standard_normal((3, 8, 5, 7)).astype(np.float32) * 3 + 1
    check_outputs(fd, [x])
    segments = segments_of(fd)
    exprs = [e for s in segments for e in s.fusion.exprs]
    assert not any(isinstance(e, PermuteOp) for e in exprs)
    first = [e for e in segments[0].fusion.exprs if isinstance(e, WelfordOp)]
    assert [e.dims for e in first] == [(2, 3)]  # the contiguous run, read once
    assert segments[0].scheduler is SchedulerType.reduction


def test_a_channel_of_equal_values_keeps_its_exact_mean() -> None:
    """Every per-image mean of channel 1 is 3.1 (as float32): the merged mean must be exactly
    that and the centred values exactly 0, as the reference's (1 / sqrt(eps) amplifies any
    error there)."""
    fd = batch_norm(4, [0, 2, 3])
    x = np.random.default_rng(2).standard_normal((5, 3, 4, 6)).astype(np.float32)
    x[:, 1] = np.float32(3.1)
    y, avg, m2, n = fd.execute([x])
    assert avg[1] == np.float32(3.1)
    assert m2[1] == 0.0
    assert (np.asarray(y)[:, 1] == 0.0).all()
    assert (np.asarray(n) == 5 * 4 * 6).all()
    check_outputs(fd, [x])


@pytest.mark.parametrize(
    "values", [[np.inf], [-np.inf], [np.nan], [np.inf, -np.inf], [np.inf, np.nan]]
)
def test_special_values_give_the_references_statistics(values: list[float]) -> None:
    fd = batch_norm(4, [0, 2, 3])
    x = np.random.default_rng(3).standard_normal((4, 3, 3, 5)).astype(np.float32)
    for k, v in enumerate(values):  # in channel 2, in different images
        x[k, 2, 1, k] = v
    check_outputs(fd, [x])


def test_bf16_input_and_an_outer_run_of_several_axes() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    fd = batch_norm(5, [0, 1, 3, 4], DataType.BFloat16)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 4, 5, 6)).astype(ml_dtypes.bfloat16)
    check_outputs(fd, [x])


def test_second_stage_over_separate_runs() -> None:
    """dims (0, 2, 4): stage 1 over axis 4, then sums over axes 0 and 2 of the statistics,
    which are not adjacent either (split into a chain of their own)."""
    fd = batch_norm(5, [0, 2, 4])
    x = np.random.default_rng(5).standard_normal((3, 4, 2, 5, 7)).astype(np.float32)
    check_outputs(fd, [x])


@pytest.mark.parametrize("shape", [(0, 3, 4, 5), (2, 3, 0, 5)])
def test_empty_extents_fall_back_to_the_permuted_copy(shape: tuple[int, ...]) -> None:
    fd = batch_norm(4, [0, 2, 3])
    x = np.ones(shape, np.float32)
    check_outputs(fd, [x])


def test_an_inner_run_that_is_not_one_block_falls_back_without_looping() -> None:
    """A campaign found (emulator, seed 91): dims (0, 2, 3) of a view whose axes 2 and 3 are
    not one block in memory (strides 765 and 1 over extents 5 and 3). The first stage is then
    refused; the segmenter asked for the Welford one axis at a time by the id of the stage it
    had made, which is a new object on every try, and recursed until Python's limit."""
    torch = pytest.importorskip("torch")
    fd = batch_norm(4, [0, 2, 3])
    x = torch.randn(255 * 5 * 3).as_strided((1, 255, 5, 3), (3825, 3, 765, 1))
    check_outputs(fd, [x])


def test_a_short_inner_run_goes_after_the_leading_one() -> None:
    """Images of 3 x 3 and a batch of 40 (kfuse.schedule.axis_runs): stage 1 is the outer
    Welford over N, whose partial statistics per (c, h, w) stage 2 merges over H and W."""
    fd = batch_norm(4, [0, 2, 3])
    x = np.random.default_rng(6).standard_normal((40, 5, 3, 3)).astype(np.float32) * 2 - 1
    x[:, 1] = np.float32(3.1)  # a channel of equal values: still exact through this order
    y, avg, m2, n = fd.execute([x])
    assert avg[1] == np.float32(3.1) and m2[1] == 0.0
    assert (np.asarray(y)[:, 1] == 0.0).all()
    check_outputs(fd, [x])
    first = [e for e in segments_of(fd)[0].fusion.exprs if isinstance(e, WelfordOp)]
    assert [e.dims for e in first] == [(0,)]


@pytest.mark.parametrize("values", [[np.inf], [np.nan], [np.inf, -np.inf]])
def test_special_values_through_the_leading_run_first(values: list[float]) -> None:
    fd = batch_norm(4, [0, 2, 3])
    x = np.random.default_rng(7).standard_normal((36, 3, 2, 3)).astype(np.float32)
    for k, v in enumerate(values):  # in channel 2, in different images
        x[3 * k, 2, 1, k] = v
    check_outputs(fd, [x])


def test_three_runs_with_a_short_inner_one() -> None:
    """dims (0, 2, 4) of [33, 2, 3, 2, 5]: stage 1 over the longest leading run (axis 0), then
    sums over what were axes 2 and 4."""
    fd = batch_norm(5, [0, 2, 4])
    x = np.random.default_rng(8).standard_normal((33, 2, 3, 2, 5)).astype(np.float32)
    check_outputs(fd, [x])
    first = [e for e in segments_of(fd)[0].fusion.exprs if isinstance(e, WelfordOp)]
    assert [e.dims for e in first] == [(0,)]
