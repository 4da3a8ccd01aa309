"""The inner_persistent scheduler end to end on the host emulator: normalizations against
kfuse.reference, row lengths around vector and warp boundaries, edited params."""

from __future__ import annotations

import re
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from kfuse import schedule
from kfuse.codegen.persistent_memory import RELOAD_GROUP
from kfuse.dtypes import DataType
from kfuse.errors import SchedulerError
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.runtime.backends import spill_fallback
from kfuse.runtime.backends.emulator import EmulatorBackend
from kfuse.schedule import SchedulerType
from kfuse.testing import assert_outputs_close
from norm_fusions import var_mean_normalization

IP = SchedulerType.inner_persistent


BF16 = ml_dtypes.bfloat16  # NumPy's bfloat16


def rand(shape: tuple[int, ...], dtype: type = np.float32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def check(fd: FusionDefinition, inputs: list, params: object = None) -> list:
    if params is None:
        out = fd.execute(inputs)
        assert fd.last_scheduler() is IP
    else:
        out = fd.manual_execute(inputs, heuristic_params=params)
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)
    return out


def softmax_fd(
    dtype: DataType = DataType.Float, log: bool = False, rank: int = 2
) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1] * rank, dtype=dtype)
        fd.add_output((fd.ops.log_softmax if log else fd.ops.softmax)(x, -1))
    return fd


def layer_norm_fd(
    dtype: DataType = DataType.Float, affine: bool = True, stats: bool = False
) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=dtype)
        w = fd.define_tensor(shape=[-1], dtype=dtype) if affine else None
        b = fd.define_tensor(shape=[-1], dtype=dtype) if affine else None
        fd.add_output(fd.ops.layer_norm(x, w, b, eps=1e-5))
        if stats:
            xf = fd.ops.cast(x, DataType.Float)
            var, mean = fd.ops.var_mean(xf, [1], correction=0)
            fd.add_output(mean)
            fd.add_output(fd.ops.rsqrt(var + 1e-5))
    return fd


def rms_norm_fd(dtype: DataType = DataType.Float) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=dtype)
        w = fd.define_tensor(shape=[-1], dtype=dtype)
        fd.add_output(fd.ops.rms_norm(x, w, eps=1e-6))
    return fd


@pytest.mark.parametrize("n", [1, 3, 31, 32, 33, 1000, 1024, 4097])
def test_softmax_row_lengths(n: int) -> None:
    rows = 3 if n > 1000 else 5
    check(softmax_fd(), [rand((rows, n)) * 3])


@pytest.mark.parametrize("n", [1, 33, 1024])
def test_log_softmax(n: int) -> None:
    check(softmax_fd(log=True), [rand((4, n))])


@pytest.mark.parametrize("n", [3, 32, 1000])
def test_layer_norm_with_weight_bias_and_stats(n: int) -> None:
    fd = layer_norm_fd(stats=True)
    check(fd, [rand((6, n)), rand((n,), seed=1), rand((n,), seed=2)])


@pytest.mark.parametrize("n", [31, 256])
def test_layer_norm_without_affine_and_rms_norm(n: int) -> None:
    check(layer_norm_fd(affine=False), [rand((6, n))])
    check(rms_norm_fd(), [rand((6, n)), rand((n,), seed=1)])


def test_half_and_double_normalizations() -> None:
    check(softmax_fd(DataType.Half), [rand((4, 200), np.float16)])
    check(
        layer_norm_fd(DataType.Double),
        [rand((4, 70), np.float64), rand((70,), np.float64), rand((70,), np.float64)],
    )


def test_bfloat16_torch_cpu() -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(5, 520, dtype=torch.bfloat16)
    w = torch.randn(520, dtype=torch.bfloat16)
    fd = rms_norm_fd(DataType.BFloat16)
    out = fd.execute([x, w])
    assert fd.last_scheduler() is IP and out[0].dtype == torch.bfloat16
    assert_outputs_close(fd, out, evaluate(fd.fusion, [x, w]), [x, w])
    fd = layer_norm_fd(DataType.BFloat16)
    b = torch.randn(520, dtype=torch.bfloat16)
    out = fd.execute([x, w, b])
    assert_outputs_close(fd, out, evaluate(fd.fusion, [x, w, b]), [x, w, b])


def test_multi_axis_normalization_and_3d_rows() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1])
        fd.add_output(fd.ops.layer_norm(x, normalized_ndim=2))
    check(fd, [rand((3, 4, 9))])
    check(softmax_fd(rank=3), [rand((2, 3, 17))])


def test_centering_with_welford_outputs() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        avg, m2, n = fd.ops.welford(x, [1])
        fd.add_output(fd.ops.sub(x, fd.ops.broadcast(avg, [False, True])))
        fd.add_output(m2)
        fd.add_output(n)
    check(fd, [rand((5, 77))])


def test_empty_rows_give_nan_statistics() -> None:
    fd = layer_norm_fd(affine=False, stats=True)
    x = np.zeros((3, 0), np.float32)
    out = fd.execute([x])
    assert out[0].shape == (3, 0) and np.isnan(out[1]).all() and np.isnan(out[2]).all()


def test_strided_rows() -> None:
    base = rand((8, 100))
    check(softmax_fd(), [base[::2, 1:]])


@pytest.mark.parametrize(
    "edit",
    [
        {"block_x": 32, "persistent_batch_size": 8},
        {"block_x": 64, "block_y": 2},
        {"vectorize_reduction": 1, "persistent_batch_size": 16},
        {"block_x": 100, "block_y": 3},
        {"grid_x": 1},
        {"block_x": 1024, "block_y": 1, "persistent_batch_size": 1},
        {"smem_persistent": True},
        {"smem_persistent": True, "block_x": 32, "block_y": 4, "persistent_batch_size": 8},
    ],
)
def test_edited_params_stay_correct(edit: dict) -> None:
    fd = layer_norm_fd(stats=True)
    x, w, b = rand((7, 250)), rand((250,), seed=1), rand((250,), seed=2)
    hp = schedule.compute_heuristics(fd.fusion, IP, [x, w, b])
    assert hp.persistent and hp.scheduler_type is IP
    for k, v in edit.items():
        setattr(hp, k, v)
    check(fd, [x, w, b], hp)


def test_params_that_cannot_hold_the_row_raise() -> None:
    fd = softmax_fd()
    x = rand((2, 300))
    hp = schedule.compute_heuristics(fd.fusion, IP, [x])
    hp.block_x, hp.persistent_batch_size, hp.vectorize_reduction = 32, 2, 2
    with pytest.raises(SchedulerError, match="fewer than the row's 300"):
        fd.manual_execute([x], heuristic_params=hp)
    hp = schedule.compute_heuristics(fd.fusion, IP, [x])
    hp.persistent = False
    with pytest.raises(SchedulerError, match="persistent"):
        fd.manual_execute([x], heuristic_params=hp)
    for reload in (-1, 2):
        hp = schedule.compute_heuristics(fd.fusion, IP, [x])
        hp.persistent_batch_size, hp.reload_batch_size = 1, reload
        with pytest.raises(SchedulerError, match=f"reload_batch_size = {reload} must be"):
            fd.manual_execute([x], heuristic_params=hp)


def test_softmax_with_kept_exponentials_matches_the_reference_on_ragged_rows() -> None:
    """Rows that end inside a vector: the kept values past the row end are never stored."""
    fd = softmax_fd(DataType.BFloat16)
    for n in (4093, 4096):
        check(fd, [(rand((5, n)) * 4).astype(BF16)])
    assert "c1[" in fd.last_cuda_source()


def dropout_layer_norm_fd() -> FusionDefinition:
    """nvFuser's dropout + layer norm forward: the Welford reads x + r * mask * scale, a
    computed value the normalized output uses again; mean and rstd are outputs too."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        r = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        keep = fd.define_tensor(shape=[-1, -1], dtype=DataType.Bool)
        w = fd.define_tensor(shape=[-1], dtype=DataType.BFloat16)
        dropped = fd.ops.mul(fd.ops.mul(fd.ops.cast(r, DataType.Float), keep), 1.25)
        v = fd.ops.add(fd.ops.cast(x, DataType.Float), dropped)
        var, mean = fd.ops.var_mean(v, dims=[1], correction=0, keepdim=False)
        rstd = fd.ops.rsqrt(fd.ops.add(var, 1e-5))
        shape = fd.ops.shape(v)
        y = fd.ops.mul(
            fd.ops.sub(v, fd.ops.broadcast_in_dim(mean, shape=shape, broadcast_dims=[0])),
            fd.ops.broadcast_in_dim(rstd, shape=shape, broadcast_dims=[0]),
        )
        wb = fd.ops.broadcast_in_dim(
            fd.ops.cast(w, DataType.Float), shape=shape, broadcast_dims=[1]
        )
        fd.add_output(fd.ops.cast(fd.ops.mul(y, wb), DataType.BFloat16))
        fd.add_output(mean)
        fd.add_output(rstd)
    return fd


@pytest.mark.parametrize("n", [1, 7, 1000, 4093, 4096])
@pytest.mark.parametrize("reload", [0, 1])
def test_a_welford_of_a_computed_value_keeps_it_for_both_passes(n: int, reload: int) -> None:
    """The value is computed once, kept in registers (c0), and read by the mean pass, the
    squared-deviation pass and the outputs; rows that end inside a vector and reloaded slots
    included (rows held in registers: in shared memory nothing is kept). Against the
    reference."""
    fd = dropout_layer_norm_fd()
    rng = np.random.default_rng(n)
    inputs = [
        rand((6, n), BF16),
        rand((6, n), BF16, seed=1),
        rng.random((6, n)) < 0.8,
        rand((n,), BF16, seed=2),
    ]
    hp = schedule.compute_heuristics(fd.fusion, IP, inputs)
    hp.smem_persistent = False
    hp.reload_batch_size = min(reload, hp.persistent_batch_size)
    check(fd, inputs, hp)
    source = fd.last_cuda_source()
    assert "c0[b][j] = " in source and "const float d = c0[b][j] - r0_avg;" in source


@pytest.mark.parametrize("n", [1, 31, 1000, 4097])
def test_rows_held_in_shared_memory_match_the_reference(n: int) -> None:
    for fd, inputs in [
        (softmax_fd(DataType.BFloat16), [(rand((6, n)) * 4).astype(BF16)]),
        (rms_norm_fd(), [rand((6, n)), rand((n,), seed=1)]),
    ]:
        hp = schedule.compute_heuristics(fd.fusion, IP, inputs)
        hp.smem_persistent = True
        check(fd, inputs, hp)
        assert "kf_held" in fd.last_cuda_source()


@pytest.mark.parametrize(("rows", "block_y", "grid_x"), [(37, 1, 4), (37, 2, 3), (5, 1, 8)])
@pytest.mark.parametrize("n", [1000, 4096])
def test_rows_held_in_shared_memory_walked_by_fewer_blocks(
    rows: int, block_y: int, grid_x: int, n: int
) -> None:
    """Fewer blocks than rows, held in shared memory: each block walks its rows
    (grid-strided) and each row reuses the block's shared memory: softmax, a layer norm with
    its statistics (Welford; weight and bias streamed), a bf16 RMS norm; rows left over, more
    blocks than rows, rows of whole and part vectors."""
    cases = [
        (softmax_fd(DataType.BFloat16), [(rand((rows, n)) * 4).astype(BF16)]),
        (
            layer_norm_fd(stats=True),
            [rand((rows, n)), rand((n,), seed=1), rand((n,), seed=2)],
        ),
        (rms_norm_fd(DataType.BFloat16), [rand((rows, n), BF16), rand((n,), BF16, seed=1)]),
    ]
    for fd, inputs in cases:
        hp = schedule.compute_heuristics(fd.fusion, IP, inputs)
        hp.smem_persistent, hp.reload_batch_size, hp.cluster_size = True, 0, 1
        hp.block_x, hp.block_y, hp.grid_x = 64, block_y, grid_x
        hp.persistent_batch_size = -(-n // (64 * hp.vectorize_reduction))
        check(fd, inputs, hp)


def test_held_inputs_of_different_dtypes_share_shared_memory() -> None:
    """Two held rows (bf16 and float) in shared memory, with an odd number of slots: each
    region starts on a 16-byte boundary."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        y = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        fd.add_output(fd.ops.softmax(fd.ops.add(fd.ops.cast(x, DataType.Float), y), -1))
    inputs = [rand((5, 3), BF16), rand((5, 3), seed=1)]
    hp = schedule.compute_heuristics(fd.fusion, IP, inputs)
    hp.smem_persistent = True
    hp.block_x, hp.block_y, hp.vectorize_reduction, hp.persistent_batch_size = 1, 1, 1, 3
    check(fd, inputs, hp)
    source = fd.last_cuda_source()
    assert "kf_held + 0)" in source and "kf_held + 16)" in source


def _held_in_part_cross() -> list:
    """Every (share, n, smem). The README's command runs three (each value of each, the
    cp.async one among them: one slot reloaded of 1000-element rows held in shared memory);
    the other five (three kernels each) are CI's extended step."""
    quick = {("one", 1000, True), ("all", 1000, False), ("one", 4097, False)}
    return [
        pytest.param(
            share, n, smem, marks=() if (share, n, smem) in quick else pytest.mark.extended
        )
        for share in ["one", "all"]
        for n in [1000, 4097]
        for smem in [False, True]
    ]


@pytest.mark.parametrize(("share", "n", "smem"), _held_in_part_cross())
def test_rows_held_in_part_match_the_reference(smem: bool, n: int, share: str) -> None:
    """The last reload_batch_size vectors of each thread are read again from global memory by
    every pass instead of being held: softmax (kept exponentials in registers), a layer norm
    with statistics (two-pass Welford, streamed weight and bias) and an RMS norm."""
    cases = [
        (softmax_fd(DataType.BFloat16), [(rand((6, n)) * 4).astype(BF16)]),
        (layer_norm_fd(stats=True), [rand((5, n)), rand((n,), seed=1), rand((n,), seed=2)]),
        (rms_norm_fd(), [rand((6, n)), rand((n,), seed=1)]),
    ]
    for fd, inputs in cases:
        hp = schedule.compute_heuristics(fd.fusion, IP, inputs)
        hp.smem_persistent = smem
        hp.block_x, hp.block_y = (32 if n < 2048 else 128), 2
        batch = -(-n // (hp.block_x * hp.vectorize_reduction))
        hp.persistent_batch_size = batch
        hp.reload_batch_size = 1 if share == "one" else batch
        check(fd, inputs, hp)
        source = fd.last_cuda_source()
        # Reloaded in groups of at most RELOAD_GROUP slots, each loaded before its first use.
        groups = -(-hp.reload_batch_size // RELOAD_GROUP)
        assert "rv0" in source and source.count("rg0[") >= 2 * groups
        # 16-byte vectors go to shared memory by cp.async (4097: one element per access)
        held = share == "one"
        assert ("kf::copy_async(" in source) == (smem and held and n == 1000)


def test_an_output_that_broadcasts_an_empty_kept_axis_gets_a_segment_of_its_own() -> None:
    """The domain [1, 0] has no points, so a persistent kernel would never write exp(y), of
    shape [1, 1]: the fusion is split and every output is right (found by a Hypothesis
    campaign, which saw garbage in that output)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        y = fd.define_tensor(shape=[-1, 1])
        fd.add_output(fd.ops.exp(y))
        fd.add_output(fd.ops.sum(x, [0]))
    inputs = [rand((1, 0)), rand((1, 1), seed=1)]
    ok, why = schedule.can_schedule(fd.fusion, IP, inputs)
    assert not ok and "empty along axis 1, which it broadcasts" in why
    out = fd.execute(inputs)
    assert len(fd.segments(inputs)) == 2
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)


@pytest.mark.parametrize(
    "rows, n, block_x, block_y, batch, full, whole",
    [
        (8, 256, 32, 4, 2, True, True),  # 32 threads x 2 vectors x 4 = the row
        (7, 256, 32, 4, 2, True, False),  # the last block's fourth row does not exist
        (8, 250, 32, 4, 2, False, True),  # the last vector is cut by the row end
        (6, 192, 32, 4, 2, False, False),  # whole vectors, the last slots past the row
        (5, 256, 64, 1, 1, True, True),  # one row a block: row_ok is true at any count
        (8, 512, 32, 2, 4, True, True),
        (8, 48, 8, 4, 2, False, False),  # 8 threads a row: row_ok stays a test (measured)
    ],
)
def test_rows_without_row_end_tests_match_the_reference(
    monkeypatch: pytest.MonkeyPatch,
    rows: int,
    n: int,
    block_x: int,
    block_y: int,
    batch: int,
    full: bool,
    whole: bool,
) -> None:
    """Where the row is exactly its threads' slots (full_slots) and the rows are a multiple
    of block_y (rows_whole), the persistent kernel drops the tests of the row's end and of
    the row's existence; elsewhere it keeps them. Both give the reference's results."""
    from kfuse.schedule.persistent import persistent_kernel
    from kfuse.schedule.registry import scheduler_for
    from planning import gpu_info

    fd = dropout_layer_norm_fd()
    rng = np.random.default_rng(3)
    x, r = rand((rows, n)).astype(BF16), rand((rows, n), seed=1).astype(BF16)
    inputs = [x, r, rng.random((rows, n)) < 0.8, rand((n,), seed=2).astype(BF16)]
    info = gpu_info(fd, [a.shape for a in inputs], "h200")
    params = scheduler_for(IP).heuristics(fd.fusion, info)
    params.vectorize_reduction = 4
    params.block_x, params.block_y, params.persistent_batch_size = block_x, block_y, batch
    kernel = persistent_kernel(fd.fusion, info, params)
    assert kernel.spec.full_slots is full and kernel.spec.rows_whole is whole
    assert ("_fs" in kernel.name) is full and ("_rw" in kernel.name) is whole
    # Full: every row-end test is KF_IN_ROW(test), true unless ptxas spills without them.
    untested = re.sub(r"KF_IN_ROW\([^()]*\)", "", kernel.source)
    assert ("KF_IN_ROW(" in kernel.source) is full
    assert ("< n_red" in untested or "<= n_red" in untested) is not full
    assert ("row < n_rows" in kernel.source) is not (whole or block_y == 1)
    check(fd, inputs, params)
    if full:  # the spill fallback (the tests) gives the same results
        compiled: list[str] = []
        monkeypatch.setattr(
            EmulatorBackend, "compile", _compiling_fallbacks(EmulatorBackend.compile, compiled)
        )
        check(dropout_layer_norm_fd(), inputs, params)
        assert len(compiled) == 1 and "#define KF_SPILL_FALLBACK 1" in compiled[0]


def _compiling_fallbacks(compile: Any, compiled: list[str]) -> Any:
    """EmulatorBackend.compile, compiling each kernel's spill fallback (into `compiled`)."""

    def with_fallback(self: Any, source: str, *args: Any) -> Any:
        assert spill_fallback.offers_fallback(source)
        compiled.append(spill_fallback.fallback_source(source))
        return compile(self, compiled[-1], *args)

    return with_fallback


# ---- rows split over a thread-block cluster (the emulator runs a cluster's blocks together) --


@pytest.mark.parametrize("cluster", [2, 4])
@pytest.mark.parametrize("in_smem", [False, True])
def test_pinned_cluster_layouts(cluster: int, in_smem: bool) -> None:
    """Any row may be split over a cluster by hand, held in registers or in shared memory:
    a layer norm with its statistics (row outputs, written once per cluster), and var_mean's
    normalization (a Welford state combined across the cluster)."""
    x, w, b = rand((5, 1025)), rand((1025,), seed=1), rand((1025,), seed=2)
    tutorial = var_mean_normalization()
    for fd, inputs in [(layer_norm_fd(stats=True), [x, w, b]), (tutorial, [x])]:
        hp = schedule.compute_heuristics(fd.fusion, IP, inputs)
        hp.cluster_size, hp.smem_persistent, hp.block_y = cluster, in_smem, 1
        hp.block_x, hp.grid_x = 64, 5 * cluster
        hp.persistent_batch_size = -(-1025 // (64 * cluster))  # one element per vector
        hp.vectorize_reduction, hp.reload_batch_size = 1, 0
        check(fd, inputs, hp)


@pytest.mark.parametrize("kind", ["softmax", "rms_norm"])
def test_long_rows_split_over_clusters_and_reloaded(
    monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Rows of 524288 bf16 on an H200: a cluster of 8 blocks each hold part of their share
    in shared memory and reload the rest on every pass, as the heuristics plan it."""
    monkeypatch.setenv("KFUSE_EMULATOR_PROFILE", "h200")
    n = 524288
    fd = softmax_fd(DataType.BFloat16) if kind == "softmax" else rms_norm_fd(DataType.BFloat16)
    x = rand((2, n), BF16)
    inputs = [x] if kind == "softmax" else [x, rand((n,), BF16, seed=1)]
    hp = schedule.compute_heuristics(fd.fusion, IP, inputs)
    assert hp.cluster_size == 8 and hp.reload_batch_size > 0 and hp.smem_persistent
    check(fd, inputs)
