"""The pointwise scheduler on CPU: selection, rejection reasons, heuristics, NVRTC, caches."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from example_budget import examples
from kfuse import schedule
from kfuse.dtypes import DataType
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.runtime.backends.cuda import compile_to_cubin, nvrtc_options
from kfuse.schedule import SchedulerType
from kfuse.testing import assert_outputs_close, fusions, inputs_for

PROFILES = ["h100", "h200", "a100"]


def exp_add() -> FusionDefinition:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1])
        b = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.exp(fd.ops.add(a, b)))
    return fd


def exp_sum() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.exp(fd.ops.sum(x, dims=[1])))
    return fd


def bias_gelu(dtype: DataType) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=dtype)
        b = fd.define_tensor(shape=[-1], dtype=dtype)
        xf = fd.ops.cast(x, DataType.Float)
        bf = fd.ops.broadcast_in_dim(
            fd.ops.cast(b, DataType.Float), shape=fd.ops.shape(x), broadcast_dims=[1]
        )
        y = fd.ops.mul(fd.ops.gelu(fd.ops.add(xf, bf), approximate="tanh"), 0.5)
        fd.add_output(fd.ops.cast(y, dtype))
    return fd


def rand(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype(dtype)


def test_tutorial_exp_add_selects_exactly_pointwise() -> None:
    fd = exp_add()
    assert schedule.find_compatible_schedulers(fd.fusion, [rand(4, 4), rand(4, 4)]) == [
        SchedulerType.pointwise
    ]


def test_tutorial_exp_sum_is_rejected_by_pointwise_with_a_reason() -> None:
    ok, why = schedule.can_schedule(exp_sum().fusion, SchedulerType.pointwise, [rand(4, 4)])
    assert not ok
    assert why.startswith("Scheduler pointwise rejected:")
    assert "reduction" in why and "sum" in why


def test_reduction_scheduler_rejects_a_fusion_without_reduction() -> None:
    ok, why = schedule.can_schedule(
        exp_add().fusion, SchedulerType.reduction, [rand(4, 4), rand(4, 4)]
    )
    assert (ok, why) == (False, "Scheduler reduction rejected: fusion has no reduction")


@pytest.mark.parametrize("stype", list(SchedulerType))
def test_any_scheduler_on_any_fusion_never_raises(stype: SchedulerType) -> None:
    for fd, inputs in [
        (exp_add(), [rand(4, 4), rand(4, 4)]),
        (exp_sum(), [rand(3, 5)]),
        (exp_add(), [rand(4, 4)]),
        (exp_add(), [rand(4, 4), rand(4, 5)]),
    ]:
        ok, why = schedule.can_schedule(fd.fusion, stype, inputs)
        assert isinstance(ok, bool) and isinstance(why, str)
        if not ok:
            assert stype.value in why


def test_bad_inputs_come_back_as_a_reason() -> None:
    ok, why = schedule.can_schedule(
        exp_add().fusion, SchedulerType.pointwise, [rand(4, 4), rand(4, 5)]
    )
    assert not ok and "input" in why


def test_outputs_of_different_shapes_are_rejected() -> None:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1])
        b = fd.define_tensor(shape=[1, -1])
        fd.add_output(fd.ops.add(a, b))
        fd.add_output(fd.ops.neg(b))
    ok, why = schedule.can_schedule(fd.fusion, SchedulerType.pointwise, [rand(3, 4), rand(1, 4)])
    assert not ok and "different shapes" in why


def test_compute_heuristics_does_not_change_the_fusion() -> None:
    fd = exp_add()
    before = repr(fd)
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.pointwise, [rand(4, 4), rand(4, 4)])
    assert hp.scheduler_type is SchedulerType.pointwise
    assert repr(fd) == before


def test_compute_heuristics_of_a_rejecting_scheduler_raises_scheduler_error() -> None:
    from kfuse.errors import SchedulerError

    with pytest.raises(SchedulerError, match="Scheduler pointwise rejected"):
        schedule.compute_heuristics(exp_sum().fusion, SchedulerType.pointwise, [rand(4, 4)])


def test_the_tutorials_queries_inside_the_definition_block() -> None:
    """nvFuser's pointwise scheduling tutorial asks inside the `with` block, once the output
    is added, then runs the heuristics it got with manual_execute after the block."""
    inputs = [rand(4, 4), rand(4, 4)]
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1])
        b = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.exp(fd.ops.add(a, b)))
        assert schedule.find_compatible_schedulers(fd.fusion, inputs) == [SchedulerType.pointwise]
        assert schedule.can_schedule(fd.fusion, SchedulerType.pointwise, inputs) == (True, "")
        ok, why = schedule.can_schedule(fd.fusion, SchedulerType.reduction, inputs)
        assert (ok, why) == (False, "Scheduler reduction rejected: fusion has no reduction")
        hp = schedule.compute_heuristics(fd.fusion, SchedulerType.pointwise, inputs)
    (out,) = fd.manual_execute(inputs, hp)
    np.testing.assert_allclose(out, np.exp(inputs[0] + inputs[1]), rtol=1e-6)


def test_queries_inside_the_block_answer_for_the_fusion_defined_so_far() -> None:
    """Each answer is for the outputs added so far; what is added after it changes the next
    answer, and the finished fusion runs all of it (no answer is kept for it)."""
    from kfuse.errors import SchedulerError

    x = rand(3, 5)
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1])
        with pytest.raises(SchedulerError, match="no outputs yet: call fd.add_output"):
            schedule.find_compatible_schedulers(fd.fusion, [x])
        ok, why = schedule.can_schedule(fd.fusion, SchedulerType.pointwise, [x])
        assert not ok and "no outputs yet" in why
        e = fd.ops.exp(t)
        fd.add_output(e)
        assert schedule.find_compatible_schedulers(fd.fusion, [x]) == [SchedulerType.pointwise]
        fd.add_output(fd.ops.sum(e, dims=[1]))
        ok, why = schedule.can_schedule(fd.fusion, SchedulerType.pointwise, [x])
        assert not ok and "reduction" in why
    exp_x, sums = fd.execute([x])
    np.testing.assert_allclose(exp_x, np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(sums, np.exp(x).sum(axis=1), rtol=1e-5)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize(
    "shape,offset",
    [
        ((16384, 8192), 0),
        ((3, 5), 0),
        ((1, 1000003), 1),
        ((100003, 7), 0),
        ((1, 1), 0),
        ((2049, 33), 3),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_heuristics_are_sane_on_synthetic_devices(
    monkeypatch: pytest.MonkeyPatch, profile: str, shape: tuple, offset: int, dtype: type
) -> None:
    from kfuse.runtime.device import get_profile

    monkeypatch.setenv("KFUSE_EMULATOR_PROFILE", profile)
    device = get_profile(profile)
    dt = {np.float32: DataType.Float, np.float64: DataType.Double, np.float16: DataType.Half}[dtype]
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], dtype=dt)
        b = fd.define_tensor(shape=[1, -1], dtype=dt)
        fd.add_output(fd.ops.mul(a, b))
    # Inputs as zero-copy views so that the misaligned offset is real; shapes only matter.
    base = np.empty(shape[0] * shape[1] + offset, dtype=dtype)
    a_arr = base[offset : offset + shape[0] * shape[1]].reshape(shape)
    b_arr = np.empty((1, shape[1]), dtype=dtype)
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.pointwise, [a_arr, b_arr])
    itemsize = np.dtype(dtype).itemsize
    vector = hp.vectorization_factor
    assert vector * itemsize <= 16, "a vector access never exceeds 16 bytes"
    assert shape[1] % vector == 0 or shape[0] == 1, "vectors never straddle output rows"
    threads = hp.block_x * hp.block_y
    assert 32 <= threads <= device.max_threads_per_block and threads % 32 == 0
    assert 1 <= hp.grid_y <= 65535 and 1 <= hp.grid_x < 2**31
    assert hp.lparams.block_x == hp.block_x and hp.lparams.grid_y == hp.grid_y
    assert hp.cparams.index_type == "int32"

    from kfuse.codegen.layout import VEC
    from kfuse.codegen.pointwise import plan_pointwise
    from kfuse.runtime.info import build_runtime_info
    from kfuse.schedule.pointwise import PointwiseScheduler, pointwise_layout

    info = build_runtime_info(fd.fusion, [a_arr, b_arr])
    plan = plan_pointwise(fd.fusion)
    layout = pointwise_layout(plan, info, None)
    spec = PointwiseScheduler().kernel_spec(plan, layout, hp)
    for op, kind in zip(layout.inputs, spec.input_kinds):
        if kind == VEC:  # vector loads only where the alignment allows them
            assert op.data_ptr % min(16, vector * itemsize) == 0


def test_int64_indexing_is_chosen_only_when_needed() -> None:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1])
        fd.add_output(fd.ops.neg(a))
    small = schedule.compute_heuristics(
        fd.fusion, SchedulerType.pointwise, [np.empty(1000, np.float32)]
    )
    assert small.cparams.index_type == "int32"
    # A broadcast view has a huge logical size but no memory: 2^31 + 8 elements.
    huge = np.broadcast_to(np.empty(1, np.float32), (2**31 + 8,))
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.pointwise, [huge])
    assert hp.cparams.index_type == "int64"


def test_broadcast_rows_make_a_2d_schedule_and_contiguous_tensors_a_1d_one() -> None:
    fd = bias_gelu(DataType.Float)
    x, b = rand(64, 256), rand(256)
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.pointwise, [x, b])
    assert hp.break_point == 1  # rows stay apart: the bias walks them with stride 0
    hp1 = schedule.compute_heuristics(
        exp_add().fusion, SchedulerType.pointwise, [rand(64, 256), rand(64, 256)]
    )
    assert hp1.break_point == -1  # everything merged into one axis


@pytest.mark.parametrize("row", [8, 256, 264, 512, 8192])
def test_a_threads_unrolled_vectors_lie_inside_its_row(row: int) -> None:
    """Threads along a row times vectors each never exceed the row's vectors (a half row of
    256 has 32 vectors of 8: 16 threads of 2, not 32 threads whose second vector is past
    the end), and many rows still fill 128-thread blocks."""
    fd = bias_gelu(DataType.Half)
    x, b = np.zeros((1 << 20, row), np.float16), np.zeros(row, np.float16)
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.pointwise, [x, b])
    vecs = -(-row // hp.vectorization_factor)
    assert hp.unroll_factor == (2 if vecs >= 2 else 1)  # a million rows: many waves of work
    assert hp.block_x * hp.unroll_factor <= vecs
    assert hp.block_x * hp.block_y == 128
    assert hp.block_x == 128 or hp.block_x * 2 * hp.unroll_factor > vecs  # the widest that fits


def test_the_1d_and_2d_schedules_unroll_by_their_own_constants(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Many waves of work: a fusion merged into one axis takes UNROLL_FLAT vectors a thread,
    one whose rows a broadcast keeps apart takes UNROLL_ROWS (measured apart on the H200)."""
    from kfuse.schedule import pointwise

    monkeypatch.setattr(pointwise, "UNROLL_FLAT", 4)
    monkeypatch.setattr(pointwise, "UNROLL_ROWS", 2)
    x = np.zeros((1 << 14, 8192), np.float16)
    x32 = np.zeros((1 << 14, 8192), np.float32)
    flat = schedule.compute_heuristics(exp_add().fusion, SchedulerType.pointwise, [x32, x32])
    rows = schedule.compute_heuristics(
        bias_gelu(DataType.Half).fusion, SchedulerType.pointwise, [x, x[0]]
    )
    assert (flat.break_point, flat.unroll_factor) == (-1, 4)
    assert (rows.break_point, rows.unroll_factor) == (1, 2)
    small = np.zeros((64, 64), np.float32)  # less than a wave: one vector a thread
    assert (
        schedule.compute_heuristics(
            exp_add().fusion, SchedulerType.pointwise, [small, small]
        ).unroll_factor
        == 1
    )


def test_row_ends_in_the_middle_of_a_threads_vectors() -> None:
    """Rows of 4 * 37 + 2 floats under 8 threads of 4 vectors: the last thread's vectors are
    partly whole, partly a 2-element remainder, partly past the end."""
    fd = bias_gelu(DataType.Float)
    x, b = rand(3, 4 * 37 + 2), rand(4 * 37 + 2)
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.pointwise, [x, b])
    hp.vectorization_factor, hp.unroll_factor = 4, 4
    hp.block_x, hp.block_y, hp.grid_x, hp.grid_y = 8, 2, 2, 1
    expected = evaluate(fd.fusion, [x, b])
    assert_outputs_close(
        fd.fusion, fd.manual_execute([x, b], heuristic_params=hp), expected, [x, b]
    )


@settings(max_examples=examples(12))
@given(
    data=st.data(),
    fd=fusions(
        kinds={"pointwise"},
        max_rank=3,
        dtypes=(DataType.Float, DataType.Half, DataType.Int32, DataType.Double, DataType.Bool),
    ),
)
@pytest.mark.slow
@pytest.mark.extended  # NVRTC twice for each random fusion: CI's extended step
def test_generated_pointwise_kernels_compile_for_sm80_and_sm90(
    data: st.DataObject, fd: FusionDefinition
) -> None:
    from kfuse.codegen.pointwise import emit_pointwise, plan_pointwise
    from kfuse.runtime.info import build_runtime_info
    from kfuse.schedule.pointwise import PointwiseScheduler, pointwise_layout

    inputs = data.draw(inputs_for(fd, framework="numpy", max_elements=512))
    if not schedule.can_schedule(fd.fusion, SchedulerType.pointwise, inputs)[0]:
        return
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.pointwise, inputs)
    plan = plan_pointwise(fd.fusion)
    layout = pointwise_layout(plan, build_runtime_info(fd.fusion, inputs), None)
    source, name = emit_pointwise(plan, PointwiseScheduler().kernel_spec(plan, layout, hp))
    for arch in ("sm_80", "sm_90"):
        cubin = compile_to_cubin(source, name, arch, nvrtc_options())
        assert cubin[:4] == b"\x7fELF"
