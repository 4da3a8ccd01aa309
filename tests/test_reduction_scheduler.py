"""The reduction scheduler on CPU: selection, rejection reasons, heuristics on synthetic
devices, and NVRTC compiling the generated kernels for sm_80 and sm_90."""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest

from kfuse import schedule
from kfuse.dtypes import DataType
from kfuse.errors import SchedulerError
from kfuse.frontend import FusionDefinition
from kfuse.runtime.backends.cuda import compile_to_cubin, nvrtc_options
from kfuse.schedule import SchedulerType

PROFILES = ["h100", "h200", "a100"]
RED = SchedulerType.reduction


def rand(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype(dtype)


def exp_sum() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.exp(fd.ops.sum(x, dims=[1])))
    return fd


def sum_fd(dims: list[int], rank: int = 2, dtype: DataType = DataType.Float) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1] * rank, dtype=dtype)
        fd.add_output(fd.ops.sum(x, dims))
    return fd


def test_tutorial_exp_sum_selects_exactly_reduction() -> None:
    assert schedule.find_compatible_schedulers(exp_sum().fusion, [rand(4, 4)]) == [RED]


def test_reduction_of_a_reduction_result_is_rejected_with_a_reason() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.sum(fd.ops.sum(x, [1]), [0]))
    ok, why = schedule.can_schedule(fd.fusion, RED, [rand(4, 4)])
    assert not ok and why.startswith("Scheduler reduction rejected:")
    assert "different axes" in why


def test_reductions_over_different_axes_are_rejected() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.sum(x, [1]))
        fd.add_output(fd.ops.max(x, [0]))
    ok, why = schedule.can_schedule(fd.fusion, RED, [rand(4, 4)])
    assert not ok and "reductions over different axes" in why


def test_reusing_the_input_after_the_reduction_is_left_to_inner_persistent() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.sub(x, fd.ops.mean(x, [1], keepdim=True)))
    ok, why = schedule.can_schedule(fd.fusion, RED, [rand(4, 4)])
    assert not ok and "inner_persistent" in why and "un-reduced" in why
    with FusionDefinition() as fd2:
        x = fd2.define_tensor(shape=[-1, -1])
        fd2.add_output(fd2.ops.softmax(x, 1))
    ok, why = schedule.can_schedule(fd2.fusion, RED, [rand(4, 4)])
    assert not ok and "needs an earlier reduction result" in why


def test_non_adjacent_reduced_axes_are_rejected_with_a_reason() -> None:
    fd = sum_fd([0, 2], rank=3)
    ok, why = schedule.can_schedule(fd.fusion, RED, [rand(3, 4, 5)])
    assert not ok and "not one contiguous block" in why
    # ... unless the axis between them has extent 1.
    assert schedule.can_schedule(fd.fusion, RED, [rand(3, 1, 5)]) == (True, "")


def test_a_permute_of_a_reduction_result_is_rejected() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1])
        fd.add_output(fd.ops.permute(fd.ops.sum(x, [2]), [1, 0]))
    ok, why = schedule.can_schedule(fd.fusion, RED, [rand(2, 3, 4)])
    assert not ok and "PermuteOp" in why


def test_reduction_and_inner_persistent_are_disjoint_on_simple_reductions() -> None:
    for fd in (sum_fd([1]), sum_fd([0]), exp_sum()):
        found = schedule.find_compatible_schedulers(fd.fusion, [rand(4, 4)])
        assert found == [RED]
    ok, why = schedule.can_schedule(exp_sum().fusion, SchedulerType.inner_persistent, [rand(4, 4)])
    assert not ok and "reduction scheduler takes this fusion" in why


def test_compute_heuristics_returns_reduction_params() -> None:
    from kfuse._C import ReductionParams

    hp = schedule.compute_heuristics(exp_sum().fusion, RED, [rand(8, 64)])
    assert isinstance(hp, ReductionParams) and hp.scheduler_type is RED
    assert hp.fastest_dim_reduction and not hp.persistent
    hp0 = schedule.compute_heuristics(sum_fd([0]).fusion, RED, [rand(64, 64)])
    assert not hp0.fastest_dim_reduction


@pytest.mark.parametrize("row", [3136, 1000, 2048, 8192, 40000])
def test_every_thread_of_an_inner_row_gets_a_whole_batch(
    monkeypatch: pytest.MonkeyPatch, row: int
) -> None:
    """The inner kernel's batched loop runs while the batch's last vector is in the row: the
    batch is at most the vectors each of the row's threads has, so that no thread is left to
    load one vector at a time (bf16 rows of 56 x 56: 392 vectors over 128 threads, batches of
    3, not 4 for 8 threads and 1 for the others)."""
    monkeypatch.setenv("KFUSE_EMULATOR_PROFILE", "h200")
    x = _big((16384, row), ml_dtypes.bfloat16)
    hp = schedule.compute_heuristics(sum_fd([1], dtype=DataType.BFloat16).fusion, RED, [x])
    vecs = -(-row // hp.vectorize_reduction)
    threads, batch = hp.block_x * hp.grid_y, hp.unroll_reduction
    assert hp.grid_y == 1  # 16384 rows fill the device without splitting them
    # Thread threads - 1, the last, still has a whole batch (the loop's condition)...
    assert (threads - 1) + (batch - 1) * threads < vecs or batch == 1, (threads, batch)
    # ...and the batch is not smaller than that allows (at most 4).
    assert batch == 4 or (batch + 1) * threads > vecs, (threads, batch)


@pytest.mark.parametrize(
    "rows, row, block_x",
    [(16384, 3136, 32), (16384, 8192, 64), (16384, 16384, 128), (1024, 4096, 128)],
)
def test_inner_rows_take_few_threads_where_the_rows_fill_the_device(
    monkeypatch: pytest.MonkeyPatch, rows: int, row: int, block_x: int
) -> None:
    """A thread takes up to 16 vectors of its row before the row gets more threads (a block
    combine per row cost more than its loads: bf16 [16384, 3136] 29.6 us with 128 threads a
    row, 27.1 with 32, on an H200); where that leaves the device short of threads (1024
    rows), a row gets more threads, down to 4 vectors each, rather than a grid split."""
    monkeypatch.setenv("KFUSE_EMULATOR_PROFILE", "h200")
    x = _big((rows, row), ml_dtypes.bfloat16)
    hp = schedule.compute_heuristics(sum_fd([1], dtype=DataType.BFloat16).fusion, RED, [x])
    assert (hp.block_x, hp.grid_y) == (block_x, 1)


@pytest.mark.parametrize("kept, block_x", [(256, 8), (2048, 8), (4096, 16), (8192, 32)])
def test_finalize_blocks_cover_the_sms_where_kept_elements_are_few(kept: int, block_x: int) -> None:
    """A grid reduction's finalize kernel takes 32 kept elements a block, fewer (down to 8,
    a sector of floats) while that leaves SMs of an H200 (132) without a block."""
    from kfuse.codegen.reduction_finalize import finalize_threads_x

    assert finalize_threads_x(kept, 132) == block_x


def _big(shape: tuple[int, ...], dtype: type = np.float32, offset: int = 0) -> np.ndarray:
    # np.empty does not touch memory: large shapes cost address space only.
    n = int(np.prod(shape))
    return np.empty(n + offset, dtype)[offset : offset + n].reshape(shape)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize(
    "shape,dims,offset",
    [
        ((16384, 16384), [1], 0),
        ((16384, 16384), [0], 0),
        ((1, 1 << 26), [1], 0),
        ((1 << 26, 1), [0], 0),
        ((7, 100003), [1], 0),
        ((100003, 7), [0], 0),
        ((4, 4), [1], 0),
        ((1000, 33), [1], 1),
        ((33, 1000), [0], 1),
        ((64, 8, 128), [0, 1], 0),
    ],
)
def test_heuristics_are_sane_on_synthetic_devices(
    monkeypatch: pytest.MonkeyPatch, profile: str, shape: tuple, dims: list, offset: int
) -> None:
    from kfuse.codegen.layout import VEC
    from kfuse.codegen.reduction_plan import plan_reductions, reduction_layout
    from kfuse.runtime.device import get_profile
    from kfuse.runtime.info import build_runtime_info
    from kfuse.schedule.reduction_launch import kernel_spec

    monkeypatch.setenv("KFUSE_EMULATOR_PROFILE", profile)
    device = get_profile(profile)
    fd = sum_fd(dims, rank=len(shape))
    x = _big(shape, offset=offset)
    hp = schedule.compute_heuristics(fd.fusion, RED, [x])
    threads = hp.block_x * hp.block_y
    assert 1 <= threads <= device.max_threads_per_block
    assert 1 <= hp.grid_x < 2**31 and 1 <= hp.grid_y <= 65535
    assert hp.lparams.block_x == hp.block_x and hp.lparams.grid_y == hp.grid_y
    vector = hp.vectorize_reduction if hp.fastest_dim_reduction else hp.vectorize_iter
    assert vector * 4 <= 16
    reduced = int(np.prod([shape[d] for d in dims]))
    kept = x.size // reduced
    assert hp.fastest_dim_reduction == (dims[-1] == len(shape) - 1 or kept == 1)
    if kept * 4 < device.sm_count and reduced >= 1 << 16:
        assert hp.grid_y > 1, "few outputs: the reduced axis is split over blocks"
    if shape == (16384, 16384):
        assert vector == 4, "16-byte loads for the bandwidth targets"
        assert hp.grid_y * hp.grid_x >= device.sm_count
    info = build_runtime_info(fd.fusion, [x])
    plan = plan_reductions(fd.fusion)
    layout = reduction_layout(plan, info)
    spec = kernel_spec(plan, layout, hp, device)
    for op, kind in zip(layout.loop, spec.loop_kinds):
        if kind == VEC:
            assert op.data_ptr % min(16, vector * 4) == 0
    if offset:
        assert vector == 1 or spec.loop_kinds != (VEC,)
    assert hp.cparams.index_type == ("int64" if x.size > 2**31 - 1 else "int32")


def _outer_welford_fd(rank: int, dims: list[int]) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1] * rank, dtype=DataType.BFloat16)
        v, m = fd.ops.var_mean(fd.ops.cast(x, DataType.Float), dims, correction=0)
        fd.add_output(v)
        fd.add_output(m)
    return fd


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize(
    "shape,dims",
    [
        ((64 * 56 * 56, 256), [0]),  # a channels-last batch norm's statistics
        ((64, 56 * 56, 256), [1]),  # a channels-last instance norm's
        ((8192, 1024), [0]),
        ((300, 64), [0]),
    ],
)
def test_outer_welford_grids_are_whole_waves_of_their_launch_bound(
    monkeypatch: pytest.MonkeyPatch, profile: str, shape: tuple, dims: list
) -> None:
    """An outer Welford kernel's registers bound its blocks an SM: it states that bound in
    __launch_bounds__, and its grid is whole waves of it (or less than one). A batch norm's
    statistics kernel took 92 registers, 2 blocks of 256 threads an SM, while its grid of
    392 was sized for 8: on an H200 it ran as a wave and a second, half-empty one."""
    from kfuse.codegen.reduction import emit_reduction
    from kfuse.codegen.reduction_plan import plan_reductions, reduction_layout
    from kfuse.runtime.device import get_profile
    from kfuse.runtime.info import build_runtime_info
    from kfuse.schedule.reduction_launch import kernel_spec

    monkeypatch.setenv("KFUSE_EMULATOR_PROFILE", profile)
    device = get_profile(profile)
    fd = _outer_welford_fd(len(shape), dims)
    x = _big(shape, ml_dtypes.bfloat16)
    hp = schedule.compute_heuristics(fd.fusion, RED, [x])
    assert not hp.fastest_dim_reduction
    plan = plan_reductions(fd.fusion)
    spec = kernel_spec(plan, reduction_layout(plan, build_runtime_info(fd.fusion, [x])), hp, device)
    (source, _), *_ = emit_reduction(plan, spec)
    threads = hp.block_x * hp.block_y
    assert spec.min_blocks is not None
    assert f"__launch_bounds__({threads}, {spec.min_blocks})" in source
    assert spec.min_blocks * threads <= device.max_threads_per_sm
    wave = device.sm_count * spec.min_blocks
    blocks = hp.grid_x * hp.grid_y
    assert blocks <= wave or blocks % wave < hp.grid_x, (blocks, wave)


def test_int64_indexing_when_offsets_need_it() -> None:
    fd = sum_fd([1])
    huge = np.broadcast_to(np.empty((1, 1), np.float32), (2**16, 2**16))
    hp = schedule.compute_heuristics(fd.fusion, RED, [huge])
    assert hp.cparams.index_type == "int64"


def _sources(
    fd: FusionDefinition,
    inputs: list,
    stype: SchedulerType,
    edit: dict | None = None,
    clusters: bool = False,
) -> list[tuple[str, str]]:
    """Source and name of each kernel for these inputs; clusters: as on a GPU that runs
    thread-block clusters (the heuristics and the checks for an sm_90 target)."""
    from kfuse.codegen.persistent import emit_persistent
    from kfuse.codegen.reduction import emit_reduction
    from kfuse.codegen.reduction_plan import plan_reductions, reduction_layout
    from kfuse.runtime.info import CUDA, build_runtime_info
    from kfuse.schedule.persistent_spec import persistent_spec
    from kfuse.schedule.reduction_launch import kernel_spec
    from kfuse.schedule.registry import scheduler_for

    info = build_runtime_info(fd.fusion, inputs)
    if clusters:
        info = dataclasses.replace(info, backend=CUDA)
        hp = scheduler_for(stype).heuristics(fd.fusion, info)
    else:
        hp = schedule.compute_heuristics(fd.fusion, stype, inputs)
    for k, v in (edit or {}).items():
        setattr(hp, k, v)
    plan = plan_reductions(fd.fusion)
    layout = reduction_layout(plan, info)
    if stype is SchedulerType.inner_persistent:
        return [emit_persistent(plan, persistent_spec(plan, layout, hp, info.device, clusters))]
    return emit_reduction(plan, kernel_spec(plan, layout, hp, info.device))


def _welford_fd() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        v, m = fd.ops.var_mean(x, [1])
        fd.add_output(v)
        fd.add_output(m)
    return fd


# The A100's compiles in CI's extended step (-m extended); the H100's here.
@pytest.mark.parametrize("arch", [pytest.param("sm_80", marks=pytest.mark.extended), "sm_90"])
@pytest.mark.parametrize(
    "case", ["inner", "outer", "grid_inner", "grid_outer", "welford", "int", "multi"]
)
def test_nvrtc_compiles_reduction_kernels(arch: str, case: str) -> None:

    if case == "inner":
        srcs = _sources(exp_sum(), [rand(64, 1000)], RED)
    elif case == "outer":
        srcs = _sources(sum_fd([0]), [rand(1000, 64)], RED)
    elif case == "grid_inner":
        srcs = _sources(sum_fd([1]), [rand(1, 1 << 16)], RED)
    elif case == "grid_outer":
        srcs = _sources(sum_fd([0]), [rand(1 << 14, 3)], RED, {"grid_y": 4})
    elif case == "welford":
        srcs = _sources(
            _welford_fd(), [rand(64, 300, dtype=ml_dtypes.bfloat16)], RED, {"grid_y": 3}
        )
    elif case == "int":
        srcs = _sources(sum_fd([1], dtype=DataType.Int32), [np.ones((4, 64), np.int32)], RED)
    else:
        srcs = _sources(sum_fd([0, 1], rank=3), [rand(6, 5, 4)], RED)
    if case.startswith("grid") or case == "welford":
        assert len(srcs) == 2
    for source, name in srcs:
        cubin = compile_to_cubin(source, name, arch, nvrtc_options())
        assert len(cubin) > 0


def test_the_tutorials_queries_inside_the_definition_block() -> None:
    """nvFuser's reduction scheduling tutorial: inside the `with` block, pointwise declines
    with its reason and only the reduction scheduler takes the fusion; the heuristics got
    there run with manual_execute after the block."""
    inputs = [rand(4, 4)]
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.exp(fd.ops.sum(x, dims=[1])))
        ok, why = schedule.can_schedule(fd.fusion, SchedulerType.pointwise, inputs)
        assert not ok and why.startswith("Scheduler pointwise rejected:")
        assert schedule.find_compatible_schedulers(fd.fusion, inputs) == [RED]
        hp = schedule.compute_heuristics(fd.fusion, RED, inputs)
    (out,) = fd.manual_execute(inputs, hp)
    np.testing.assert_allclose(out, np.exp(inputs[0].sum(axis=1)), rtol=1e-5)


def test_scheduler_error_for_a_rejected_manual_params() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.softmax(x, 1))
    hp = schedule.compute_heuristics(exp_sum().fusion, RED, [rand(4, 4)])
    with pytest.raises(SchedulerError, match="reduction rejected"):
        fd.manual_execute([rand(4, 4)], heuristic_params=hp)


@pytest.mark.parametrize(
    ("shape", "grid"),
    [
        ((12544, 2048), (8, 49)),  # 8 x 25 blocks at 8 batches a thread: 4 batches
        ((32768, 1024), (4, 128)),  # 4 x 64: 4 x 128
        ((200704, 256), (1, 392)),  # 392 blocks already: 8 batches a thread stay
    ],
)
def test_outer_sums_with_few_blocks_split_the_reduced_axis_finer(
    monkeypatch: pytest.MonkeyPatch, shape: tuple, grid: tuple
) -> None:
    """A sum over dim 0 whose split at 8 batches of loads a thread gives fewer than two blocks
    an SM takes down to 4 batches (H200: a channels-last batch norm backward's statistics of
    [256, 7, 7, 2048] bf16 37.2 -> 27.9 us; a softmax backward's of [32768, 1024] 39.6 ->
    34.0 us); 392 blocks keep 8 (twice the blocks were slower)."""
    monkeypatch.setenv("KFUSE_EMULATOR_PROFILE", "h200")
    x = _big(shape, ml_dtypes.bfloat16)
    hp = schedule.compute_heuristics(sum_fd([0], dtype=DataType.BFloat16).fusion, RED, [x])
    assert (hp.block_x, hp.block_y, hp.unroll_reduction) == (32, 8, 8)
    assert (hp.grid_x, hp.grid_y) == grid
