"""The outer_persistent scheduler end to end on the host emulator: outer normalizations against
kfuse.reference (odd sizes, size-1 and empty extents, NaN and inf, bf16/half/float), what it
takes and leaves to the other schedulers, and edited params."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from kfuse import schedule
from kfuse.dtypes import DataType
from kfuse.errors import SchedulerError
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.schedule import SchedulerType
from kfuse.testing import assert_outputs_close
from outer_norm_fusions import FUSIONS, batch_norm_nhwc, batch_norm_nhwc_backward, softmax0

OP = SchedulerType.outer_persistent
NUMPY = {
    DataType.Float: np.float32,
    DataType.Half: np.float16,
    DataType.BFloat16: ml_dtypes.bfloat16,
}


def inputs_for(name: str, dtype: DataType, rows: int, cols: int, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    shapes = FUSIONS[name][1](rows, cols)
    # statistics inputs of the backward are float, the rest of the fusion's dtype
    defined = FUSIONS[name][0](dtype).fusion.inputs
    return [
        (rng.standard_normal(s) + (1.5 if k == len(shapes) - 1 else 0)).astype(
            np.float32 if v.dtype is DataType.Float else NUMPY[dtype]
        )
        for k, (s, v) in enumerate(zip(shapes, defined, strict=True))
    ]


def run(fd: FusionDefinition, inputs: list, scheduler: SchedulerType | None = OP) -> list:
    out = fd.execute(inputs)
    if scheduler is not None:
        assert fd.last_scheduler() is scheduler
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)
    return out


@pytest.mark.parametrize("name", sorted(FUSIONS))
@pytest.mark.parametrize(("rows", "cols"), [(37, 13), (64, 16), (5, 3), (130, 33)])
def test_outer_norms_match_the_reference(name: str, rows: int, cols: int) -> None:
    """Column counts around the vector width (13, 33: groups cut by the end of the columns;
    3: fewer columns than one vector), column lengths around the batch."""
    fd = FUSIONS[name][0](DataType.Float)
    run(fd, inputs_for(name, DataType.Float, rows, cols))


@pytest.mark.parametrize("dtype", [DataType.BFloat16, DataType.Half])
@pytest.mark.parametrize("name", ["softmax0", "batch_norm_nhwc", "batch_norm_nhwc_backward"])
def test_16_bit_inputs(name: str, dtype: DataType) -> None:
    fd = FUSIONS[name][0](dtype)
    run(fd, inputs_for(name, dtype, 45, 24))


def test_each_target_is_one_outer_persistent_segment() -> None:
    for name, (build, _) in sorted(FUSIONS.items()):
        fd = build(DataType.BFloat16)
        segments = fd.segments(inputs_for(name, DataType.BFloat16, 96, 64))
        assert [s.scheduler for s in segments] == [OP], name


def test_nan_and_inf_propagate_per_column() -> None:
    fd = softmax0()
    x = np.random.default_rng(1).standard_normal((33, 11)).astype(np.float32)
    x[5, 2] = np.nan
    x[7, 4] = np.inf
    x[:, 9] = -np.inf
    out = run(fd, [x])[0]
    assert np.isnan(out[:, 2]).all() and np.isnan(out[:, 9]).all()
    assert np.isnan(out[:, 4]).all()  # inf - max = inf - inf is NaN, as in torch
    assert np.isfinite(out[:, 0]).all()
    fd = batch_norm_nhwc()
    x = np.random.default_rng(2).standard_normal((6, 2, 3, 7)).astype(np.float32)
    x[1, 1, 2, 3] = np.nan
    x[0, 0, 0, 5] = np.inf
    w, b = np.ones(7, np.float32), np.zeros(7, np.float32)
    y, mean, invstd = run(fd, [x, w, b])
    assert np.isnan(y[..., 3]).all() and np.isnan(mean[3]) and np.isnan(invstd[3])
    assert np.isinf(mean[5]) and np.isnan(invstd[5])
    assert np.isfinite(y[..., 0]).all()


def test_size_one_and_empty_extents_go_elsewhere_and_are_right() -> None:
    """One column or one reduced row is an inner normalization (inner_persistent); empty
    outputs are no_op's."""
    fd = softmax0()
    x = np.random.default_rng(3).standard_normal((9, 1)).astype(np.float32)
    run(fd, [x], SchedulerType.inner_persistent)
    run(fd, [np.ones((1, 9), np.float32)], SchedulerType.inner_persistent)
    for shape in [(0, 5), (5, 0)]:
        out = fd.execute([np.ones(shape, np.float32)])
        assert out[0].shape == shape
    ok, why = schedule.can_schedule(fd.fusion, OP, [np.ones((1, 9), np.float32)])
    assert not ok and "inner_persistent" in why
    fd = batch_norm_nhwc()  # empty reduction: mean of nothing is NaN
    x = np.ones((0, 2, 2, 3), np.float32)
    y, mean, invstd = run(fd, [x, np.ones(3, np.float32), np.zeros(3, np.float32)], None)
    assert y.shape == (0, 2, 2, 3) and np.isnan(mean).all()


def test_inner_norms_and_plain_reductions_keep_their_schedulers() -> None:
    x = np.random.default_rng(4).standard_normal((16, 24)).astype(np.float32)
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.softmax(t, 1))
    assert schedule.find_compatible_schedulers(fd.fusion, [x]) == [SchedulerType.inner_persistent]
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.sum(t, [0]))
    assert schedule.find_compatible_schedulers(fd.fusion, [x]) == [SchedulerType.reduction]
    assert schedule.find_compatible_schedulers(softmax0().fusion, [x]) == [OP]


def test_columns_too_long_for_a_block_are_rejected_and_segmented() -> None:
    fd = softmax0()
    x = np.empty((1 << 17, 8), np.float32)
    ok, why = schedule.can_schedule(fd.fusion, OP, [x])
    assert not ok and "too long to hold" in why
    assert len(fd.segments([x])) > 1


def test_columns_that_leave_a_block_less_than_a_sector_wide_are_segmented() -> None:
    """A channels-last norm whose column takes all of a block's threads along y, leaving one
    16-byte vector along the row (half a sector): on an H200 the instance norm forward of
    [64, 256, 56, 56] bf16 ran at 0.12 of copy so. It is left to the segmenter (a statistics
    reduction, then the normalization), and right."""
    from kfuse.schedule.registry import scheduler_for
    from kfuse.schedule.types import Rejection
    from planning import gpu_info

    fd = batch_norm_nhwc(DataType.BFloat16)
    long_columns = gpu_info(fd, [(1, 3136, 1, 256), (256,), (256,)], "h200")
    with pytest.raises(Rejection, match="whole 32-byte sectors"):
        scheduler_for(OP).check(fd.fusion, long_columns)
    held = gpu_info(fd, [(1, 1024, 1, 256), (256,), (256,)], "h200")
    scheduler_for(OP).check(fd.fusion, held)  # two vectors along a row: whole sectors
    x = np.random.default_rng(3).standard_normal((1, 3136, 1, 24)).astype(ml_dtypes.bfloat16)
    w, b = (np.random.default_rng(k).standard_normal(24).astype(ml_dtypes.bfloat16) for k in (4, 5))
    out = fd.execute([x, w, b])
    assert len(fd.segments([x, w, b])) > 1
    assert_outputs_close(fd, out, evaluate(fd.fusion, [x, w, b]), [x, w, b])


def _params(fd: FusionDefinition, inputs: list) -> object:
    return schedule.compute_heuristics(fd.fusion, OP, inputs)


def test_edited_params_run_or_are_refused_by_name() -> None:
    fd = softmax0()
    x = np.random.default_rng(5).standard_normal((50, 20)).astype(np.float32)
    params = _params(fd, [x])
    params.vectorize_iter, params.block_x, params.block_y = 1, 3, 5
    params.persistent_batch_size = 10  # 5 * 10 covers the 50 rows exactly
    params.grid_x = 2  # grid-strided over the 20 columns
    out = fd.manual_execute([x], heuristic_params=params)
    assert_outputs_close(fd, out, evaluate(fd.fusion, [x]), [x])
    params.persistent_batch_size = 9
    with pytest.raises(SchedulerError, match="fewer than the column's 50"):
        fd.manual_execute([x], heuristic_params=params)
    for field, value, message in [
        ("fastest_dim_reduction", True, "fastest_dim_reduction = False"),
        ("grid_y", 2, "grid_y"),
        ("persistent", False, "persistent = True"),
        ("vectorize_iter", 3, "vector width 3"),
    ]:
        params = _params(fd, [x])
        setattr(params, field, value)
        with pytest.raises(SchedulerError, match=message):
            fd.manual_execute([x], heuristic_params=params)


@pytest.mark.parametrize("name", ["softmax0", "batch_norm_nhwc"])
def test_the_warp_shuffled_combine_gives_the_shared_memory_trees_bits(name: str) -> None:
    """The block combine over threadIdx.y takes its in-warp steps through shuffles where
    block_x divides 32 (kfuse.codegen.block_combine.combine_over_y) and through shared memory
    otherwise; both pair rows in the same tree, so a column's statistics and outputs are the
    same bits whichever path a block shape takes."""
    fd = FUSIONS[name][0](DataType.Float)
    inputs = inputs_for(name, DataType.Float, 1000, 6, seed=9)
    outs = []
    for block_x in (1, 2, 3):  # 1 and 2: shuffles within warps; 3: the shared-memory tree
        params = _params(fd, inputs)
        params.vectorize_iter, params.block_x, params.block_y = 1, block_x, 64
        params.persistent_batch_size = 16  # 64 * 16 covers the 1000 rows
        params.grid_x = 2
        outs.append(fd.manual_execute(inputs, heuristic_params=params))
    assert_outputs_close(fd, outs[0], evaluate(fd.fusion, inputs), inputs)
    for other in outs[1:]:
        for a, b in zip(outs[0], other, strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_heuristics_on_the_h200_fill_the_sms_with_16_byte_accesses() -> None:
    from kfuse.schedule.registry import scheduler_for
    from planning import gpu_info

    fd = batch_norm_nhwc(DataType.BFloat16)
    info = gpu_info(fd, [(64, 1, 16, 4096), (4096,), (4096,)], "h200")
    params = scheduler_for(OP).heuristics(fd.fusion, info)
    assert params.vectorize_iter == 8  # 16 bytes of bf16
    assert params.grid_x >= 132  # every SM gets a block
    assert params.block_x * 8 * 2 >= 32  # a row's loads of a block are whole sectors
    assert params.block_y * params.persistent_batch_size >= 1024
    assert params.persistent_batch_size * 4 <= 64  # MAX_HELD_WORDS


def test_inputs_constant_along_the_column_are_held_once_and_their_math_hoisted() -> None:
    """A batch norm backward's per-channel mean, invstd (held) and weight (streamed) are
    the same for every reduced row: one slot a thread, not one a row, and what is computed
    from them and the results alone (invstd * weight, the projection) once a lane before
    the loops over the rows. Right at a size that cuts a group of 8 columns (the
    parametrized tests above run the same kernels at more sizes)."""
    from kfuse.codegen.reduction_plan import plan_reductions
    from kfuse.schedule.outer_persistent import _plan_and_layout, slot_words
    from kfuse.schedule.registry import scheduler_for
    from planning import gpu_info

    fd = batch_norm_nhwc_backward(DataType.BFloat16)
    info = gpu_info(fd, [(64, 3, 5, 20), (64, 3, 5, 20), (20,), (20,), (20,)], "h200")
    scheduler = scheduler_for(OP)
    (kernel,) = scheduler.kernels(fd.fusion, info, scheduler.heuristics(fd.fusion, info))
    constant = set(fd.fusion.inputs[2:])  # weight, mean, invstd
    loop = [u.val for u in plan_reductions(fd.fusion).loop_inputs]
    assert list(kernel.spec.red_constant) == [v in constant for v in loop]
    assert "_full_row(" in kernel.source and "fu_h0[j]" in kernel.source
    plan, layout = _plan_and_layout(fd.fusion, info)
    assert slot_words(plan, layout, 8) == 8  # x and grad, 8 bf16 each; mean, invstd once
    rng = np.random.default_rng(11)
    shapes = [(37, 1, 1, 13), (37, 1, 1, 13), (13,), (13,), (13,)]
    values = [
        rng.standard_normal(s).astype(ml_dtypes.bfloat16 if k < 3 else np.float32)
        for k, s in enumerate(shapes)
    ]
    values[4] = np.abs(values[4]) + 0.5  # invstd
    run(fd, values)


def test_short_columns_in_many_blocks_are_split_and_longer_ones_kept() -> None:
    """A channels-last instance norm of [256, 2048, 7, 7] bf16 (columns of 49, 2048 blocks)
    took 87.5 us in this kernel on an H200 and 82.7 us as a statistics reduction and a
    pointwise kernel (its backward 148 against 101.6 us): SHORT_COLUMN_ROWS. Columns of 64
    stay, and so do short columns that fit one wave of blocks."""
    from kfuse.schedule.registry import scheduler_for
    from kfuse.schedule.types import Rejection
    from planning import gpu_info, schedulers_for

    fd = batch_norm_nhwc(DataType.BFloat16, axes=(1,))
    short = gpu_info(fd, [(256, 49, 2048), (2048,), (2048,)], "h200")
    with pytest.raises(Rejection, match="columns of 49 rows"):
        scheduler_for(OP).check(fd.fusion, short)
    assert schedulers_for(fd.fusion, short) == [
        SchedulerType.reduction,
        SchedulerType.pointwise,
    ]
    scheduler_for(OP).check(fd.fusion, gpu_info(fd, [(256, 64, 2048), (2048,), (2048,)], "h200"))
    scheduler_for(OP).check(fd.fusion, gpu_info(fd, [(4, 49, 2048), (2048,), (2048,)], "h200"))
