"""Outer normalizations whose columns are split over the blocks of a thread-block cluster
(kfuse.switches.OUTER_CLUSTERS; kfuse.schedule.outer_persistent.CLUSTER_SIZES), on the host
emulator, which runs a cluster's blocks together: each block holds its part of every column
of its group, and the reductions combine through distributed shared memory. Against
kfuse.reference at sizes that leave a cluster's last blocks a part of a column or none of
it, with NaN and inf in a later block's part; what the heuristics pick on an H100; and the
params they refuse by name."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kfuse import schedule, switches
from kfuse.dtypes import DataType
from kfuse.errors import SchedulerError
from kfuse.reference import evaluate
from kfuse.schedule import SchedulerType
from kfuse.testing import assert_outputs_close
from outer_norm_fusions import FUSIONS, batch_norm_nhwc, softmax0, softmax0_backward
from test_outer_persistent_emulator import inputs_for

OP = SchedulerType.outer_persistent


@pytest.fixture(autouse=True)
def _outer_clusters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(switches, "OUTER_CLUSTERS", True)


def _split_params(fd: object, inputs: list, cluster: int, block_y: int, batch: int) -> object:
    """The heuristics' params for `inputs`, edited to split each column over `cluster`
    blocks of block_y threads holding `batch` rows each."""
    params = schedule.compute_heuristics(fd.fusion, OP, inputs)
    params.vectorize_iter, params.block_x, params.block_y = 1, 2, block_y
    params.persistent_batch_size = batch
    params.cluster_size = cluster
    params.grid_x = 3 * cluster  # three column groups at a time, grid-strided over the rest
    return params


@pytest.mark.parametrize("name", sorted(FUSIONS))
@pytest.mark.parametrize(
    ("cluster", "rows"),
    [
        (2, 61),  # the second block holds 29 of its 32 rows
        (4, 100),  # every block holds part of the column, the last 4 of its 32
        (8, 70),  # 12 rows a block: blocks 6 and 7 hold none
    ],
)
def test_split_columns_match_the_reference(name: str, cluster: int, rows: int) -> None:
    fd = FUSIONS[name][0](DataType.Float)
    inputs = inputs_for(name, DataType.Float, rows, 13, seed=cluster)
    block_y = 8 if cluster == 2 else 4
    batch = -(-rows // (cluster * block_y))
    params = _split_params(fd, inputs, cluster, block_y, batch)
    out = fd.manual_execute(inputs, heuristic_params=params)
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)
    again = fd.manual_execute(inputs, heuristic_params=params)
    for a, b in zip(out, again, strict=True):  # the combine is in rank order: the same bits
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_vectors_and_16_bit_inputs_split_over_a_cluster() -> None:
    """The heuristics' own params (16-byte vectors of bf16) for columns longer than a block
    holds: the emulated H100 splits them over a cluster."""
    import ml_dtypes

    fd = softmax0_backward(DataType.BFloat16)
    rng = np.random.default_rng(7)
    inputs = [rng.standard_normal((1500, 40)).astype(ml_dtypes.bfloat16) for _ in range(2)]
    params = schedule.compute_heuristics(fd.fusion, OP, inputs)
    assert params.cluster_size > 1 and params.vectorize_iter == 8
    out = fd.execute(inputs)
    assert fd.last_scheduler() is OP
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)


def test_nan_and_inf_in_a_later_blocks_part_reach_the_whole_column() -> None:
    fd = softmax0()
    x = np.random.default_rng(1).standard_normal((90, 7)).astype(np.float32)
    x[80, 2] = np.nan  # in the last block's part (4 blocks of 24 rows)
    x[50, 4] = np.inf
    x[:, 6] = -np.inf
    params = _split_params(fd, [x], 4, 8, 3)
    (out,) = fd.manual_execute([x], heuristic_params=params)
    out = np.asarray(out)
    assert np.isnan(out[:, 2]).all() and np.isnan(out[:, 4]).all() and np.isnan(out[:, 6]).all()
    assert np.isfinite(out[:, [0, 1, 3, 5]]).all()
    assert_outputs_close(fd, [out], evaluate(fd.fusion, [x]), [x])
    fd = batch_norm_nhwc()
    x = np.random.default_rng(2).standard_normal((9, 2, 5, 7)).astype(np.float32)
    x[8, 1, 4, 3] = np.nan  # the last of the 90 reduced rows
    w, b = np.ones(7, np.float32), np.zeros(7, np.float32)
    y, mean, invstd = (
        np.asarray(a)
        for a in fd.manual_execute(
            [x, w, b], heuristic_params=_split_params(fd, [x, w, b], 2, 16, 3)
        )
    )
    assert np.isnan(y[..., 3]).all() and np.isnan(mean[3]) and np.isnan(invstd[3])
    assert np.isfinite(y[..., [0, 1, 2, 4, 5, 6]]).all()


def test_the_h100_heuristics_split_only_columns_one_block_cannot_hold() -> None:
    """Softmax backward over dim 0 of [4096, 16384] bf16: one block cannot hold a column of
    the two inputs (the segmenter split it before); a cluster of 8 blocks of 64 threads along
    the column does, 8 rows a thread, 16-byte vectors four threads a row (64 bytes:
    _cluster_shape's measured shape). [512, 16384] stays in one block; with the switch off the
    long one is left to the segmenter, and so is a column that would leave a thread more than
    8 rows in a cluster ([8192, 16384]: 16) or a short one ([49, 2**20])."""
    from kfuse.schedule.registry import scheduler_for
    from kfuse.schedule.types import Rejection
    from planning import gpu_info

    fd = softmax0_backward(DataType.BFloat16)
    scheduler = scheduler_for(OP)
    info = gpu_info(fd, [(4096, 16384)] * 2, "h100")
    params = scheduler.heuristics(fd.fusion, info)
    assert (params.cluster_size, params.block_x, params.block_y) == (8, 4, 64)
    assert params.persistent_batch_size == 8 and params.vectorize_iter == 8
    assert params.grid_x % 8 == 0
    (kernel,) = scheduler.kernels(fd.fusion, info, params)
    assert "__cluster_dims__(8, 1, 1)" in kernel.source
    short = scheduler.heuristics(fd.fusion, gpu_info(fd, [(512, 16384)] * 2, "h100"))
    assert short.cluster_size == 1
    with pytest.raises(Rejection, match="would hold 16 rows"):
        scheduler.check(fd.fusion, gpu_info(fd, [(8192, 16384)] * 2, "h100"))
    # Short columns in many waves are split by the segmenter (SHORT_COLUMN_ROWS), not spread
    # a few rows a block over a cluster.
    with pytest.raises(Rejection, match="not longer than one block"):
        scheduler.check(fd.fusion, gpu_info(fd, [(49, 1 << 20)] * 2, "h100"))
    switches.OUTER_CLUSTERS = False  # the fixture restores it
    with pytest.raises(Rejection, match="too long to hold in one block"):
        scheduler.check(fd.fusion, info)


def test_cluster_params_are_refused_by_name() -> None:
    fd = softmax0()
    x = np.random.default_rng(5).standard_normal((64, 10)).astype(np.float32)
    for field, value, message in [
        ("cluster_size", 3, "splits a column over 1, 2, 4, 8 blocks"),
        ("cluster_size", 16, "splits a column over 1, 2, 4, 8 blocks"),
        ("grid_x", 6, "multiple of cluster_size = 4"),
        ("persistent_batch_size", 1, r"4 \* 1 \* 4 rows per column, fewer than the column's 64"),
    ]:
        params = _split_params(fd, [x], 4, 4, 4)
        setattr(params, field, value)
        with pytest.raises(SchedulerError, match=message):
            fd.manual_execute([x], heuristic_params=params)


def test_targets_without_clusters_refuse_them() -> None:
    from kfuse.schedule.registry import scheduler_for
    from kfuse.schedule.types import Rejection
    from planning import gpu_info

    fd = softmax0_backward(DataType.BFloat16)
    scheduler = scheduler_for(OP)
    a100 = gpu_info(fd, [(4096, 16384)] * 2, "a100")
    with pytest.raises(Rejection, match="too long to hold in one block"):
        scheduler.check(fd.fusion, a100)
    params = scheduler.heuristics(fd.fusion, gpu_info(fd, [(4096, 16384)] * 2, "h100"))
    with pytest.raises(SchedulerError, match="compute capability 9.0"):
        scheduler.kernels(fd.fusion, a100, params)


@st.composite
def _split_cases(draw: st.DrawFn) -> tuple:
    """(fusion name, dtype, inputs, params or None): edited params that split small columns
    over a cluster (any block shape, vector width and grid; a cluster's last blocks may hold
    nothing), or the heuristics' own for columns longer than one block holds."""
    import ml_dtypes

    name = draw(st.sampled_from(sorted(FUSIONS)))
    dtype = draw(st.sampled_from([DataType.Float, DataType.BFloat16, DataType.Half]))
    heuristics = draw(st.integers(0, 3)) == 0
    # up to 4096 rows: a cluster of 8 blocks of 64 threads, 8 rows each (_cluster_shape)
    rows = draw(st.integers(2200, 4096) if heuristics else st.integers(2, 300))
    cols = draw(st.integers(2, 24 if heuristics else 40))  # one column: an inner norm
    inputs = inputs_for(name, dtype, rows, cols, seed=draw(st.integers(0, 2**16)))
    if draw(st.booleans()):  # NaN or an infinity somewhere in a column
        k = draw(st.integers(0, len(inputs) - 1))
        flat = inputs[k].reshape(-1)
        flat[draw(st.integers(0, flat.size - 1))] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    if dtype is DataType.BFloat16:
        assert all(a.dtype in (np.float32, ml_dtypes.bfloat16) for a in inputs)
    if heuristics:
        return name, dtype, inputs, None
    fd = FUSIONS[name][0](dtype)
    cluster = draw(st.sampled_from([2, 4, 8]))
    # at most 62 rows a thread (the batch limit is 64, and up to 2 more are drawn below)
    block_y = draw(st.sampled_from([b for b in (1, 2, 4, 8, 16, 32) if b * cluster * 62 >= rows]))
    params = schedule.compute_heuristics(fd.fusion, OP, inputs)
    params.vectorize_iter = draw(st.sampled_from([1, 2, 4]))
    params.block_x, params.block_y = draw(st.sampled_from([1, 2, 3, 4])), block_y
    params.persistent_batch_size = -(-rows // (cluster * block_y)) + draw(st.integers(0, 2))
    params.cluster_size = cluster
    params.grid_x = cluster * draw(st.integers(1, 3))
    return name, dtype, inputs, params


@given(case=_split_cases())
def test_split_columns_property(case: tuple) -> None:
    """Drawn split columns against the reference (the vector width may not suit every
    operand's alignment: such params are refused by name), and the heuristics' params for
    columns of 2200 to 4096 rows (most of them split: a block holds about 2048)."""
    name, dtype, inputs, params = case
    fd = FUSIONS[name][0](dtype)
    if params is None:
        out = fd.execute(inputs)
        assert fd.last_scheduler() is OP
    else:
        try:
            out = fd.manual_execute(inputs, heuristic_params=params)
        except SchedulerError as exc:
            assert "vector width" in str(exc), exc
            return
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)
