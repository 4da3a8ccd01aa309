"""The inner_persistent scheduler on CPU: selection (disjoint from reduction), rejection
reasons, heuristics on synthetic devices, NVRTC compiling its kernels."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from example_budget import examples
from kfuse import schedule
from kfuse.dtypes import DataType, to_numpy_dtype
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.runtime.backends.cuda import compile_to_cubin, nvrtc_options
from kfuse.schedule import SchedulerType
from kfuse.testing import assert_outputs_close

IP = SchedulerType.inner_persistent
PROFILES = ["h100", "h200", "a100"]


BF16 = ml_dtypes.bfloat16  # NumPy's bfloat16


def rand(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype(dtype)


def tutorial_layer_norm() -> FusionDefinition:
    """nvFuser's tutorial layer norm, written from primitives."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        n = fd.ops.size(x, 1)
        mean = fd.ops.div(fd.ops.sum(x, [1]), n)
        mean_b = fd.ops.broadcast_in_dim(mean, shape=fd.ops.shape(x), broadcast_dims=[0])
        diff = fd.ops.sub(x, mean_b)
        var = fd.ops.div(fd.ops.sum(fd.ops.mul(diff, diff), [1]), n)
        var_b = fd.ops.broadcast_in_dim(var, shape=fd.ops.shape(x), broadcast_dims=[0])
        fd.add_output(fd.ops.mul(diff, fd.ops.rsqrt(fd.ops.add(var_b, 1e-5))))
    return fd


def tutorial_layer_norm_var_mean() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        var, mean = fd.ops.var_mean(x, [1], correction=0, keepdim=True)
        eps = fd.define_scalar(1e-5)
        fd.add_output(fd.ops.mul(fd.ops.sub(x, mean), fd.ops.rsqrt(fd.ops.add(var, eps))))
    return fd


def layer_norm(dtype: DataType) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=dtype)
        w = fd.define_tensor(shape=[-1], dtype=dtype)
        b = fd.define_tensor(shape=[-1], dtype=dtype)
        fd.add_output(fd.ops.layer_norm(x, w, b))
    return fd


def softmax(dtype: DataType = DataType.Float) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=dtype)
        fd.add_output(fd.ops.softmax(x, 1))
    return fd


def rms_norm(dtype: DataType) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=dtype)
        w = fd.define_tensor(shape=[-1], dtype=dtype)
        fd.add_output(fd.ops.rms_norm(x, w))
    return fd


@pytest.mark.parametrize("make", [tutorial_layer_norm, tutorial_layer_norm_var_mean])
def test_tutorial_layer_norm_selects_exactly_inner_persistent(make: object) -> None:
    fd = make()  # type: ignore[operator]
    assert schedule.find_compatible_schedulers(fd.fusion, [rand(4, 4)]) == [IP]


def test_normalizations_select_inner_persistent() -> None:
    assert schedule.find_compatible_schedulers(softmax().fusion, [rand(4, 8)]) == [IP]
    fd = layer_norm(DataType.Float)
    assert schedule.find_compatible_schedulers(fd.fusion, [rand(4, 8), rand(8), rand(8)]) == [IP]


def test_outer_normalization_is_left_to_outer_persistent() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.softmax(x, 0))
    ok, why = schedule.can_schedule(fd.fusion, IP, [rand(8, 8)])
    assert not ok and "outer_persistent" in why


def _without_clusters(monkeypatch: pytest.MonkeyPatch) -> None:
    """The heuristics of a target that runs no thread-block clusters (before sm_90) on the
    emulated device's sizes: the emulator runs clusters like an sm_90 GPU otherwise."""
    from kfuse.schedule import persistent

    monkeypatch.setattr(persistent, "clusters_supported", lambda info: False)


def test_rows_too_long_to_hold_are_rejected_with_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_clusters(monkeypatch)
    fd = softmax()
    x = np.empty((2, 1 << 17), np.float32)
    ok, why = schedule.can_schedule(fd.fusion, IP, [x])
    assert not ok and "registers" in why and str(1 << 17) in why


def test_rows_too_long_for_one_block_run_in_clusters_on_the_emulator() -> None:
    """Where one block cannot hold a row, the blocks of a cluster share it (their row parts
    in their own shared memory, their reductions combined through each other's): the
    emulator runs the cluster's blocks together, so its results are checked here."""
    fd = softmax()
    x = rand(3, 1 << 17)
    hp = schedule.compute_heuristics(fd.fusion, IP, [x])
    assert hp.cluster_size == 8 and hp.grid_x == 3 * 8
    (out,) = fd.execute([x])
    assert_outputs_close(fd, [out], evaluate(fd.fusion, [x]), [x])


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize(
    "dtype,np_dtype",
    [
        (DataType.Float, np.float32),
        (DataType.BFloat16, BF16),
        (DataType.Half, np.float16),
    ],
)
@pytest.mark.parametrize("n", [1, 7, 32, 1000, 4096, 16384])
def test_heuristics_cover_the_row_within_limits(
    monkeypatch: pytest.MonkeyPatch, profile: str, dtype: DataType, np_dtype: type, n: int
) -> None:
    from kfuse.runtime.device import get_profile

    monkeypatch.setenv("KFUSE_EMULATOR_PROFILE", profile)
    device = get_profile(profile)
    fd = layer_norm(dtype)
    inputs = [np.empty((64, n), np_dtype), np.empty(n, np_dtype), np.empty(n, np_dtype)]
    hp = schedule.compute_heuristics(fd.fusion, IP, inputs)
    assert hp.persistent and hp.fastest_dim_reduction and hp.grid_y == 1
    assert hp.block_x * hp.persistent_batch_size * hp.vectorize_reduction >= n
    assert hp.block_x * hp.block_y <= device.max_threads_per_block
    assert hp.vectorize_reduction * dtype.itemsize <= 16
    # Words of x per thread held on chip (weight and bias are streamed; reloaded vectors are
    # read again instead of held).
    held_vectors = hp.persistent_batch_size - hp.reload_batch_size
    held = held_vectors * hp.vectorize_reduction * dtype.itemsize / 4
    if hp.smem_persistent:  # in shared memory
        assert held * 4 * hp.block_x * hp.block_y <= device.shared_mem_per_block_optin
    else:  # in registers
        assert held <= 64
    if n == 4096 and dtype is not DataType.Float:
        assert hp.vectorize_reduction == 8 and hp.block_x in (128, 256)


def test_w4_softmax_heuristics() -> None:
    fd = softmax(DataType.BFloat16)
    x = np.empty((32768, 4096), BF16)  # only the layout matters
    hp = schedule.compute_heuristics(fd.fusion, IP, [x])
    assert hp.vectorize_reduction == 8 and hp.block_x * hp.persistent_batch_size * 8 == 4096
    assert hp.grid_x * hp.block_y >= 32768 or hp.grid_x >= 132


# The A100's compiles in CI's extended step (-m extended); the H100's here.
@pytest.mark.parametrize("arch", [pytest.param("sm_80", marks=pytest.mark.extended), "sm_90"])
@pytest.mark.parametrize(
    "case", ["softmax", "layer_norm", "rms_norm", "tutorial", "odd", "long_rows"]
)
def test_nvrtc_compiles_persistent_kernels(
    monkeypatch: pytest.MonkeyPatch, arch: str, case: str
) -> None:
    from tests.test_reduction_scheduler import _sources

    bf = DataType.BFloat16
    if case == "long_rows":  # held in part in shared memory, the rest reloaded
        monkeypatch.setenv("KFUSE_EMULATOR_PROFILE", "h200")
        srcs = _sources(softmax(bf), [rand(4, 65536, dtype=BF16)], IP)
        srcs += _sources(
            layer_norm(bf),
            [rand(4, 65536, dtype=BF16), rand(65536, dtype=BF16), rand(65536, dtype=BF16)],
            IP,
        )
        assert all("kf_held" in source and "rv0" in source for source, _ in srcs)
    elif case == "softmax":
        srcs = _sources(softmax(bf), [rand(64, 4096, dtype=BF16)], IP)
    elif case == "layer_norm":
        srcs = _sources(
            layer_norm(bf),
            [rand(64, 4096, dtype=BF16), rand(4096, dtype=BF16), rand(4096, dtype=BF16)],
            IP,
        )
    elif case == "rms_norm":
        srcs = _sources(rms_norm(DataType.Float), [rand(64, 1000), rand(1000)], IP)
    elif case == "tutorial":
        srcs = _sources(tutorial_layer_norm_var_mean(), [rand(64, 100)], IP)
    else:
        srcs = _sources(softmax(DataType.Half), [rand(64, 33, dtype=np.float16)], IP)
    for source, name in srcs:
        cubin = compile_to_cubin(source, name, arch, nvrtc_options())
        assert len(cubin) > 0


def test_softmax_keeps_its_exponentials_and_norms_keep_nothing() -> None:
    """The exp(x - max) of softmax's sum is kept in registers for the outputs; a layer or RMS
    norm's reduction inputs are loads or products the outputs do not reuse."""
    from kfuse.codegen.reduction_functions import keepable
    from kfuse.codegen.reduction_plan import plan_reductions

    assert keepable(plan_reductions(softmax().fusion)) == (1,)
    assert keepable(plan_reductions(layer_norm(DataType.Float).fusion)) == ()
    assert keepable(plan_reductions(rms_norm(DataType.BFloat16).fusion)) == ()


def test_kept_values_need_room_next_to_the_held_row(monkeypatch: pytest.MonkeyPatch) -> None:
    import kfuse.schedule.persistent_heuristics as sp
    from kfuse.codegen.reduction_plan import plan_reductions, reduction_layout
    from kfuse.runtime.info import build_runtime_info

    monkeypatch.setenv("KFUSE_EMULATOR_PROFILE", "h200")
    fd = softmax(DataType.Float)
    plan = plan_reductions(fd.fusion)
    layout = reduction_layout(plan, build_runtime_info(fd.fusion, [rand(4, 4096)]))
    # a float row held as 4 vectors of 4 per thread: 16 words held + 16 kept fits; 16 vectors
    # (64 words held) leaves no room, so the exponentials are recomputed instead
    assert sp.kept_stages(plan, layout, batch=4, held_batch=4, vector=4) == (1,)
    assert sp.kept_stages(plan, layout, batch=16, held_batch=16, vector=4) == ()


@pytest.mark.parametrize(
    "n,smem,block_x,batch,reload",
    [
        (8192, False, 256, 4, 0),
        (16384, True, 256, 8, 0),
        (32768, True, 512, 8, 0),
        # 128 KB a row: two blocks of an SM hold 13 of 16 vectors per thread each and reload 3
        (65536, True, 512, 16, 3),
        # two blocks an SM would reload 41 MB of rows in flight (more than half the 60 MB L2):
        # one block holds 11 of 16 vectors per thread
        (131072, True, 1024, 16, 5),
    ],
)
def test_long_rows_are_held_in_shared_memory(
    monkeypatch: pytest.MonkeyPatch, n: int, smem: bool, block_x: int, batch: int, reload: int
) -> None:
    monkeypatch.setenv("KFUSE_EMULATOR_PROFILE", "h200")
    _without_clusters(monkeypatch)  # the last row takes a cluster where the target has them
    fd = softmax(DataType.BFloat16)
    x = np.empty((2**27 // n, n), BF16)  # only the layout matters
    hp = schedule.compute_heuristics(fd.fusion, IP, [x])
    assert (hp.smem_persistent, hp.block_x) == (smem, block_x)
    assert (hp.persistent_batch_size, hp.reload_batch_size) == (batch, reload)
    assert hp.block_x * hp.persistent_batch_size * hp.vectorize_reduction >= n


def dropout_rms_norm() -> FusionDefinition:
    """x1 + x2 * mask, then an RMS norm: three held inputs (5 bytes an element in bf16)."""
    with FusionDefinition() as fd:
        x1, x2 = (fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16) for _ in range(2))
        mask = fd.define_tensor(shape=[-1, -1], dtype=DataType.Bool)
        x = fd.ops.add(
            fd.ops.cast(x1, DataType.Float),
            fd.ops.mul(fd.ops.cast(x2, DataType.Float), fd.ops.cast(mask, DataType.Float)),
        )
        rms = fd.ops.sqrt(fd.ops.mean(fd.ops.mul(x, x), [1]))
        y = fd.ops.div(x, fd.ops.broadcast(rms, [False, True]))
        fd.add_output(fd.ops.cast(y, DataType.BFloat16))
    return fd


@pytest.mark.parametrize(
    "n,smem,block_x,batch",
    [
        (4096, False, 256, 2),  # HELD_WORDS_TARGET: 2 vectors of 10 words a thread
        # 2 vectors would take 512 threads or more: 4 of them in registers (WIDE_HELD_WORDS)
        (8192, False, 256, 4),
        (16384, False, 512, 4),
        (32768, True, 512, 8),  # 4 would still take 1024 threads: shared memory
    ],
)
def test_wide_held_rows_stay_in_registers(
    monkeypatch: pytest.MonkeyPatch, n: int, smem: bool, block_x: int, batch: int
) -> None:
    monkeypatch.setenv("KFUSE_EMULATOR_PROFILE", "h200")
    x = np.empty((2**26 // n, n), BF16)
    inputs = [x, x, np.empty(x.shape, np.bool_)]
    hp = schedule.compute_heuristics(dropout_rms_norm().fusion, IP, inputs)
    assert (hp.smem_persistent, hp.block_x, hp.persistent_batch_size) == (smem, block_x, batch)


def test_rows_too_long_for_registers_and_l2_are_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KFUSE_EMULATOR_PROFILE", "h200")
    _without_clusters(monkeypatch)
    fd = softmax(DataType.BFloat16)
    x = np.empty((512, 262144), BF16)
    ok, why = schedule.can_schedule(fd.fusion, IP, [x])
    assert not ok
    assert "262144 elements is too long to hold" in why and "of L2" in why
    assert "no thread-block clusters" in why


def _on_sm90(monkeypatch: pytest.MonkeyPatch, fd: FusionDefinition, inputs: list) -> object:
    """The RuntimeInfo of a call on an H200-like GPU (which runs thread-block clusters)."""
    import dataclasses

    from kfuse.runtime.info import CUDA, build_runtime_info

    monkeypatch.setenv("KFUSE_EMULATOR_PROFILE", "h200")
    return dataclasses.replace(build_runtime_info(fd.fusion, inputs), backend=CUDA)


@pytest.mark.parametrize(
    "dtype,n,block_x,batch,reload,cluster",
    [
        # two blocks an SM hold most of the row and reload the rest: no cluster
        (DataType.BFloat16, 65536, 512, 16, 3, 1),
        # scalar accesses: one block an SM holds the row whole: no cluster
        (DataType.BFloat16, 65533, 1024, 64, 0, 1),
        # one block an SM would reload 5/16 of the row: 8 blocks of a cluster hold it whole
        (DataType.BFloat16, 131072, 256, 8, 0, 8),
        (DataType.BFloat16, 262144, 256, 16, 0, 8),
        # a cluster block's part is itself too long for two blocks an SM: held 27/32, as above
        (DataType.BFloat16, 524288, 256, 32, 5, 8),
        (DataType.BFloat16, 1048576, 512, 32, 10, 8),  # one block an SM holds 22/32
        (DataType.Float, 65536, 256, 8, 0, 8),
        (DataType.Float, 262144, 256, 32, 5, 8),
    ],
)
def test_long_rows_split_over_clusters_on_sm90(
    monkeypatch: pytest.MonkeyPatch,
    dtype: DataType,
    n: int,
    block_x: int,
    batch: int,
    reload: int,
    cluster: int,
) -> None:
    from kfuse.schedule.registry import scheduler_for

    fd = softmax(dtype)
    x = np.empty((300, n), to_numpy_dtype(dtype))  # only the layout matters
    hp = scheduler_for(IP).heuristics(fd.fusion, _on_sm90(monkeypatch, fd, [x]))
    assert (hp.smem_persistent, hp.block_x, hp.block_y) == (True, block_x, 1)
    assert (hp.persistent_batch_size, hp.reload_batch_size, hp.cluster_size) == (
        batch,
        reload,
        cluster,
    )
    assert hp.grid_x == 300 * cluster  # one cluster a row
    assert hp.block_x * hp.persistent_batch_size * hp.vectorize_reduction * cluster >= n


def test_rows_longer_than_a_cluster_holds_are_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    from kfuse.schedule.registry import scheduler_for
    from kfuse.schedule.types import Rejection

    fd = softmax(DataType.BFloat16)
    x = np.empty((8, 2**21), BF16)
    with pytest.raises(Rejection, match="even split over a cluster of 8 blocks"):
        scheduler_for(IP).check(fd.fusion, _on_sm90(monkeypatch, fd, [x]))


def test_cluster_params_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster the target cannot run, or one the launch cannot form, is a SchedulerError
    that says why, before anything is compiled."""
    from kfuse.codegen.reduction_plan import plan_reductions, reduction_layout
    from kfuse.errors import SchedulerError
    from kfuse.schedule.persistent_spec import persistent_spec

    fd = softmax()
    x = rand(64, 4096)
    info = _on_sm90(monkeypatch, fd, [x])
    plan = plan_reductions(fd.fusion)
    layout = reduction_layout(plan, info)
    hp = schedule.compute_heuristics(fd.fusion, IP, [x])
    hp.cluster_size, hp.grid_x = 2, 128
    persistent_spec(plan, layout, hp, info.device, clusters=True)  # a valid cluster
    with pytest.raises(SchedulerError, match="compute capability 9.0 or later"):
        persistent_spec(plan, layout, hp, info.device, clusters=False)
    # The emulated H200 runs the cluster: the row split over two blocks is right.
    (out,) = fd.manual_execute([x], heuristic_params=hp)
    assert_outputs_close(fd, [out], evaluate(fd.fusion, [x]), [x])
    for field, value, message in [
        ("cluster_size", 16, "between 1 and 8"),
        ("cluster_size", 0, "between 1 and 8"),
        ("grid_x", 127, "a multiple of it"),
        ("block_y", 2, "needs block_y = 1"),
    ]:
        bad = schedule.compute_heuristics(fd.fusion, IP, [x])
        bad.cluster_size, bad.grid_x = 2, 128
        setattr(bad, field, value)
        with pytest.raises(SchedulerError, match=message):
            persistent_spec(plan, layout, bad, info.device, clusters=True)
    with FusionDefinition() as total:
        total.add_output(total.ops.sum(total.define_tensor(shape=[-1, -1]), [1]))
    hp = schedule.compute_heuristics(total.fusion, SchedulerType.reduction, [x])
    hp.cluster_size = 2
    with pytest.raises(SchedulerError, match="only the persistent kernel splits rows"):
        total.manual_execute([x], heuristic_params=hp)


def test_nvrtc_compiles_cluster_kernels() -> None:
    """Rows split over clusters: softmax (max and sum), a layer norm with its statistics
    (row outputs written by the cluster's first block), the tutorial's var_mean (the mean and
    the squared deviations combined across the cluster), for sm_90."""
    from tests.test_reduction_scheduler import _sources

    bf = DataType.BFloat16
    n = 131072
    srcs = _sources(softmax(bf), [rand(4, n, dtype=BF16)], IP, clusters=True)
    with FusionDefinition() as stats:
        x = stats.define_tensor(shape=[-1, -1], dtype=bf)
        var, mean = stats.ops.var_mean(stats.ops.cast(x, DataType.Float), [1], correction=0)
        stats.add_output(stats.ops.layer_norm(x, None, None))
        stats.add_output(mean)
        stats.add_output(var)
    srcs += _sources(stats, [rand(4, n, dtype=BF16)], IP, clusters=True)
    srcs += _sources(tutorial_layer_norm_var_mean(), [rand(4, n)], IP, clusters=True)
    for source, name in srcs:
        assert "__cluster_dims__(8, 1, 1)" in source and "kf::cluster_reduce<8>" in source
        cubin = compile_to_cubin(source, name, "sm_90", nvrtc_options())
        assert len(cubin) > 0
    assert "kf_rank == 0" in srcs[1][0]  # the statistics are written once a row


@settings(max_examples=examples(60), deadline=None)
@given(
    kind=st.sampled_from(["softmax", "layer_norm", "rms_norm"]),
    dtype=st.sampled_from([DataType.BFloat16, DataType.Half, DataType.Float]),
    n=st.integers(1, 2**21),
    rows=st.integers(1, 5000),
)
def test_heuristics_on_sm90_give_valid_layouts(
    kind: str, dtype: DataType, n: int, rows: int
) -> None:
    """On an H200-like target (clusters on), whatever row the heuristics accept, their layout
    covers the row, fits the block's shared memory, forms whole clusters, keeps the reloaded
    rows in flight within half of L2, and persistent_spec accepts it; rejections say why."""
    import _pytest.monkeypatch

    from kfuse.codegen.persistent_memory import smem_bytes_held
    from kfuse.codegen.reduction_loads import smem_bytes
    from kfuse.codegen.reduction_plan import plan_reductions, reduction_layout
    from kfuse.schedule.persistent_heuristics import L2_SPILL_SHARE, SMEM_RESERVE
    from kfuse.schedule.persistent_spec import persistent_spec
    from kfuse.schedule.registry import scheduler_for
    from kfuse.schedule.types import Rejection

    fd = {"softmax": softmax, "layer_norm": layer_norm, "rms_norm": rms_norm}[kind](dtype)
    # Only the layout matters (no kernel runs): one row of memory, described as `rows` rows,
    # so that long rows cost no memory.
    row = np.empty(n, to_numpy_dtype(dtype))
    x = np.lib.stride_tricks.as_strided(row, (rows, n), (row.nbytes, row.itemsize), writeable=False)
    inputs = [x] if kind == "softmax" else [x, row] if kind == "rms_norm" else [x, row, row]
    with _pytest.monkeypatch.MonkeyPatch.context() as mp:
        info = _on_sm90(mp, fd, inputs)
        try:
            scheduler_for(IP).check(fd.fusion, info)
        except Rejection as why:
            assert f"a row of {n} elements is too long to hold" in str(why)
            assert n > 65536  # every shorter row is held, whatever the dtype
            return
        hp = scheduler_for(IP).heuristics(fd.fusion, info)
    plan = plan_reductions(fd.fusion)
    layout = reduction_layout(plan, info)
    spec = persistent_spec(plan, layout, hp, info.device, clusters=True)
    cluster, vector = hp.cluster_size, hp.vectorize_reduction
    assert hp.block_x * hp.persistent_batch_size * vector * cluster >= n
    assert hp.grid_x % cluster == 0 and hp.grid_x // cluster <= rows
    assert cluster == 1 or (hp.block_y == 1 and hp.smem_persistent)
    assert (
        smem_bytes(plan, spec) + smem_bytes_held(plan, spec)
        <= info.device.shared_mem_per_block_optin
    )
    # the reloaded parts of the rows in flight (as many blocks an SM as shared memory fits,
    # at most two) stay within the share of L2 they may take
    held = smem_bytes_held(plan, spec)
    blocks = max(1, min(2, info.device.shared_mem_per_sm // (held + SMEM_RESERVE)))
    slot = plan.loop_inputs[0].val.dtype.itemsize * vector
    in_flight = info.device.sm_count * blocks * hp.reload_batch_size * hp.block_x * slot
    assert in_flight <= info.device.l2_cache_bytes // L2_SPILL_SHARE


@pytest.mark.parametrize(
    ("n", "per_thread", "most", "threads"),
    [
        (49, 4, 8, 8),  # 8 x 7 = 56 slots against 16 x 4 = 64
        (64, 4, 8, 16),  # 16 x 4 is exact: the one above on a tie
        (49, 4, 6, 16),  # 8 threads would take 7 slots each, more than 6
        (1, 4, 8, 1),
        (3000, 4, 8, 512),  # capped
    ],
)
def test_fewest_idle_threads(n: int, per_thread: int, most: int, threads: int) -> None:
    from kfuse.schedule.persistent_heuristics import fewest_idle_threads

    assert fewest_idle_threads(n, per_thread, most, 512) == threads


def test_short_rows_take_the_threads_that_leave_fewest_slots_idle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rows of 49 bf16 (an NCHW instance norm over 7 x 7; one element a load): 8 threads of
    7 elements, 16 rows a block (H200: 80.2 us against 94.6 with 16 threads of 4,
    torch.compile 104.4); rows of 33, 8 threads of 5 (40 slots, not 48). Rows of 128 (16
    vectors of 8) stay at 4 threads of 4: 2 threads of 8 would hold 32 words, past
    HELD_WORDS_TARGET."""
    monkeypatch.setenv("KFUSE_EMULATOR_PROFILE", "h200")
    fd = softmax(DataType.BFloat16)
    for n, block_x, batch in [(49, 8, 7), (33, 8, 5), (128, 4, 4)]:
        x = np.empty((8192, n), BF16)
        hp = schedule.compute_heuristics(fd.fusion, IP, [x])
        assert (hp.block_x, hp.persistent_batch_size) == (block_x, batch), n
    assert hp.block_y == 32  # 128 threads a block
    x = rand(64, 49).astype(BF16)
    out = fd.execute([x])
    assert_outputs_close(fd, out, evaluate(fd.fusion, [x]), [x])


def test_rows_of_a_warps_worth_of_vectors_take_a_warp(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows of 512 bf16 (64 vectors of 8: attention's softmax over 512 keys) are held by 32
    threads of 2 vectors, not 16 of 4 (WARP_ROWS: 87.8 against 104.5 us on an H100); rows of
    2048 keep 64 threads of 4, and with the rule off the 512 go back to 16 threads."""
    from kfuse.schedule import persistent_heuristics

    monkeypatch.setenv("KFUSE_EMULATOR_PROFILE", "h100")
    fd = softmax(DataType.BFloat16)
    for n, block_x, batch in [(512, 32, 2), (2048, 64, 4)]:
        hp = schedule.compute_heuristics(fd.fusion, IP, [np.empty((4096, n), BF16)])
        assert (hp.block_x, hp.persistent_batch_size) == (block_x, batch), n
    x = rand(64, 512).astype(BF16)  # the warp's rows, run on the emulator
    out = fd.execute([x])
    assert_outputs_close(fd, out, evaluate(fd.fusion, [x]), [x])
    monkeypatch.setattr(persistent_heuristics, "WARP_ROWS", False)
    hp = schedule.compute_heuristics(fd.fusion, IP, [np.empty((4096, 512), BF16)])
    assert (hp.block_x, hp.persistent_batch_size) == (16, 4)


@pytest.mark.parametrize(
    "case", ["cluster", "held", "inner_outer_held", "inner_outer_columns", "welford_first"]
)
def test_static_shared_memory_is_what_the_cubin_allocates(
    monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """static_smem_bytes, which the schedulers add to the dynamic shared memory to size a
    block, against the .nv.shared section NVRTC writes (less the 1 KB the system reserves a
    block): equal where dynamic memory follows (held rows, column sums; a cluster's slots
    after the scratch, the padding up to the 128-byte line included); without dynamic memory
    a Welford's shared first values are counted from 16-byte boundaries, so at most that
    over."""
    from kfuse.codegen.persistent_memory import static_smem_bytes
    from kfuse.codegen.reduction_plan import plan_reductions
    from kfuse.runtime.backends.cubin_info import shared_section_bytes
    from kfuse.schedule.inner_outer import Parts
    from kfuse.schedule.persistent_heuristics import DRIVER_SMEM_PER_BLOCK
    from kfuse.schedule.registry import scheduler_for
    from norm_fusions import norm_backward_on_h200

    bf = DataType.BFloat16
    if case.startswith("inner_outer"):
        # held: the row in shared memory, two blocks an SM; columns: the row in registers,
        # the column sums in shared memory
        held = case == "inner_outer_held"
        fd, info = norm_backward_on_h200(*(("rms", 8192, 8192) if held else ("layer", 16384, 4096)))
        scheduler = scheduler_for(SchedulerType.inner_outer_persistent)
        plan = Parts(fd.fusion, info).main
    else:
        fd = {"cluster": softmax(bf), "held": softmax(bf), "welford_first": layer_norm(bf)}[case]
        n = {"cluster": 131072, "held": 16384, "welford_first": 4096}[case]
        inputs = [np.empty((300, n), BF16)] + [np.empty(n, BF16)] * (len(fd.fusion.inputs) - 1)
        info = _on_sm90(monkeypatch, fd, inputs)
        scheduler = scheduler_for(IP)
        plan = plan_reductions(fd.fusion)
    params = scheduler.heuristics(fd.fusion, info)
    kernel = scheduler.kernels(fd.fusion, info, params)[0]
    spec = kernel.spec
    assert (spec.cluster > 1) is (case == "cluster")
    assert bool(spec.smem_held or spec.columns) is (case != "welford_first")
    if case == "welford_first":
        assert "kf_first" in kernel.source
    cubin = compile_to_cubin(kernel.source, kernel.name, "sm_90", nvrtc_options())
    allocated = shared_section_bytes(cubin) - DRIVER_SMEM_PER_BLOCK
    counted = static_smem_bytes(plan, spec)
    if case == "welford_first":
        assert 0 <= counted - allocated < 16 * 2
    else:
        assert counted == allocated
