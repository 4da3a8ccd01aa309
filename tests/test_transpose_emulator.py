"""The transpose scheduler on the host emulator against the float64 reference: transposed
views in, permutes inside the fusion, several operands in different orders and dtypes,
broadcasts, casts, odd, short and degenerate extents, misaligned views (the vector and the
element-by-element paths), special values, every storage dtype; edited params and their
validation; what the H200 heuristics pick; and that fusions whose operands agree on the
innermost axis (the benchmark workloads W1-W6 among them) keep their schedulers."""

from __future__ import annotations

import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from kfuse import schedule
from kfuse.codegen.layout import BCAST, STRIDED, VEC
from kfuse.dtypes import DataType
from kfuse.errors import ParamsError, SchedulerError
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.schedule import SchedulerType
from kfuse.schedule.transpose_params import TransposeParams
from kfuse.testing import assert_outputs_close

TR = SchedulerType.transpose
NUMPY = {
    DataType.BFloat16: ml_dtypes.bfloat16,
    DataType.Half: np.float16,
    DataType.Float: np.float32,
    DataType.Double: np.float64,
    DataType.Int32: np.int32,
    DataType.Int: np.int64,
    DataType.Bool: np.bool_,
}


def values(shape: tuple[int, ...], dtype: DataType = DataType.Float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype is DataType.Bool:
        return rng.random(shape) < 0.5
    if dtype in (DataType.Int32, DataType.Int):
        return rng.integers(-50, 50, shape).astype(NUMPY[dtype])
    return rng.standard_normal(shape).astype(NUMPY[dtype])


def transposed(
    shape: tuple[int, int], dtype: DataType = DataType.Float, seed: int = 0
) -> np.ndarray:
    """A [rows, cols] view of a contiguous [cols, rows] array: unit stride along axis 0."""
    return values(shape[::-1], dtype, seed).T


def run(fd: FusionDefinition, inputs: list, scheduler: SchedulerType | None = TR) -> list:
    expected = evaluate(fd.fusion, inputs)
    actual = fd.execute(inputs)
    if scheduler is not None:
        assert fd.last_scheduler() is scheduler
    assert_outputs_close(fd.fusion, actual, expected, inputs)
    return actual


def unary(op: str, dtype: DataType = DataType.Float, rank: int = 2) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1] * rank, dtype=dtype)
        fd.add_output(getattr(fd.ops, op)(x, x) if op in ("add", "mul") else getattr(fd.ops, op)(x))
    return fd


@pytest.mark.parametrize("shape", [(67, 131), (32, 32), (33, 97), (131, 67), (200, 40)])
def test_2d_transposed_input(shape: tuple[int, int]) -> None:
    fd = unary("add")
    out = run(fd, [transposed(shape)])[0]
    assert out.flags.c_contiguous


def test_3d_transposed_views_of_axes_1_2_and_0_2() -> None:
    fd = unary("exp", rank=3)
    run(fd, [np.transpose(values((5, 67, 131)), (0, 2, 1))])
    run(fd, [np.transpose(values((33, 5, 67)), (2, 1, 0))])  # [67, 5, 33], unit stride on 0


@pytest.mark.parametrize("perm", [(0, 2, 1), (2, 1, 0), (1, 2, 0)])
def test_permute_inside_the_fusion(perm: tuple[int, int, int]) -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1])
        fd.add_output(fd.ops.mul(fd.ops.permute(x, dims=list(perm)), 3.0))
    run(fd, [values((40, 67, 33))])


def test_several_inputs_and_outputs_in_different_orders() -> None:
    """out0 = permute(x * 2) + y with y transposed, and out1 = x * 2 in x's order: both
    inputs are read through tiles, and out1, whose unit stride is along the other axis of
    out0's domain, is staged through its own tile and stored along its own fast axis."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        y = fd.define_tensor(shape=[-1, -1])
        z = fd.define_tensor(shape=[-1, -1])
        s = fd.ops.mul(x, 2.0)
        fd.add_output(fd.ops.add(fd.ops.permute(s, dims=[1, 0]), fd.ops.mul(y, z)))
        fd.add_output(s)
    inputs = [
        values((100, 100), seed=1),
        transposed((100, 100), seed=2),
        values((100, 100), seed=3),
    ]
    run(fd, inputs)
    hp = schedule.compute_heuristics(fd.fusion, TR, inputs)
    spec = schedule.registry.scheduler_for(TR).kernels(fd.fusion, _info(fd, inputs), hp)[0].spec
    assert sorted(spec.tiled_inputs) == [False, True, True]  # z is read along out0's order
    assert spec.tiled_outputs == (False, True)


def test_outputs_of_transposed_shapes_are_segmented_and_right() -> None:
    """Outputs [m, n] and [n, m] are not one pointwise domain: each is its own segment."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        s = fd.ops.add(x, 1.0)
        fd.add_output(s)
        fd.add_output(fd.ops.permute(s, dims=[1, 0]))
    inputs = [values((67, 131))]
    run(fd, inputs, SchedulerType.none)
    assert "transpose" in [s.scheduler.value for s in fd.segments(inputs)]


def _info(fd: FusionDefinition, inputs: list) -> object:
    from kfuse.ir.canonicalize import canonical_fusion
    from kfuse.runtime.info import build_runtime_info

    return build_runtime_info(canonical_fusion(fd.fusion), inputs)


def test_broadcast_operands_need_no_tile() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        row = fd.define_tensor(shape=[-1])
        col = fd.define_tensor(shape=[-1, 1])
        b = fd.ops.broadcast(row, is_broadcast_dim=[True, False])
        fd.add_output(fd.ops.add(fd.ops.mul(x, b), col))
    inputs = [transposed((67, 131)), values((131,), seed=4), values((67, 1), seed=5)]
    run(fd, inputs)
    spec = (
        schedule.registry.scheduler_for(TR)
        .kernels(fd.fusion, _info(fd, inputs), schedule.compute_heuristics(fd.fusion, TR, inputs))[
            0
        ]
        .spec
    )
    assert spec.tiled_inputs == (True, False, False)


def test_casts_between_16_bit_and_float() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        y = fd.define_tensor(shape=[-1, -1], dtype=DataType.Half)
        s = fd.ops.add(fd.ops.cast(x, DataType.Float), fd.ops.cast(y, DataType.Float))
        fd.add_output(fd.ops.cast(fd.ops.tanh(s), DataType.Half))
        fd.add_output(fd.ops.cast(s, DataType.Double))
    run(fd, [transposed((67, 131), DataType.BFloat16), values((67, 131), DataType.Half, 2)])


@pytest.mark.parametrize("dtype", list(NUMPY))
def test_every_storage_dtype(dtype: DataType) -> None:
    fd = unary("logical_not" if dtype is DataType.Bool else "add", dtype)
    run(fd, [transposed((67, 131), dtype)])


def test_nan_and_inf_go_through_the_tiles() -> None:
    fd = unary("abs")
    x = transposed((67, 131))
    x[3, 5], x[66, 130], x[0, 0] = np.nan, np.inf, -np.inf
    out = run(fd, [x])[0]
    assert np.isnan(out[3, 5]) and out[66, 130] == np.inf and out[0, 0] == np.inf


def test_short_size_one_and_empty_extents_go_elsewhere_and_are_right() -> None:
    fd = unary("add")
    run(fd, [transposed((67, 1))], SchedulerType.pointwise)  # folds to one axis
    run(fd, [transposed((7, 5))], SchedulerType.pointwise)  # a plane of 35 < 256 elements
    ok, why = schedule.can_schedule(fd.fusion, TR, [transposed((7, 5))])
    assert not ok and "short" in why and "35 elements" in why
    run(fd, [transposed((0, 131))], SchedulerType.no_op)
    fd3 = unary("add", rank=3)
    run(fd3, [np.transpose(values((1, 67, 131)), (0, 2, 1))])  # size 1 folded, then tiled


def test_contiguous_and_broadcast_only_fusions_keep_pointwise() -> None:
    fd = unary("add")
    run(fd, [values((67, 131))], SchedulerType.pointwise)
    ok, why = schedule.can_schedule(fd.fusion, TR, [values((67, 131))])
    assert not ok and "innermost axis" in why
    # A strided (sliced) input that still has its unit stride innermost is not transposed.
    run(fd, [values((67, 262))[:, ::2]], SchedulerType.pointwise)


def test_segments_of_a_fusion_use_the_transpose_scheduler() -> None:
    """Outputs of different shapes: a transposed segment and a pointwise one."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        v = fd.define_tensor(shape=[-1])
        fd.add_output(fd.ops.add(x, 1.0))
        fd.add_output(fd.ops.mul(v, 2.0))
    inputs = [transposed((67, 131)), values((50,))]
    run(fd, inputs, SchedulerType.none)
    assert sorted(s.scheduler.value for s in fd.segments(inputs)) == ["pointwise", "transpose"]


def test_edited_params_run_and_bad_values_are_refused_by_name() -> None:
    fd = unary("add")
    x = transposed((67, 131))
    hp = schedule.compute_heuristics(fd.fusion, TR, [x])
    assert isinstance(hp, TransposeParams)
    assert (hp.vector_a, hp.vector_b) == (1, 1)  # 131 and 67 elements: odd
    (out,) = fd.manual_execute([x], heuristic_params=hp)
    np.testing.assert_array_equal(out, x + x)
    assert "for (Index tile" not in fd.last_cuda_source()  # a block a tile: no tile loop
    hp.tile_a, hp.tile_b, hp.block_y, hp.grid_x = 64, 32, 4, 3  # 3 blocks stride over 15 tiles
    (out,) = fd.manual_execute([x], heuristic_params=hp)
    np.testing.assert_array_equal(out, x + x)
    assert "for (Index tile" in fd.last_cuda_source()
    hp.tile_a, hp.tile_b, hp.block_y = 2, 1024, 1  # a warp over 32 columns of 2
    (out,) = fd.manual_execute([x], heuristic_params=hp)
    np.testing.assert_array_equal(out, x + x)
    hp.cparams.index_type = "int64"
    cp = hp.cparams
    cp.index_type = "int64"
    hp.cparams = cp
    (out,) = fd.manual_execute([x], heuristic_params=hp)
    np.testing.assert_array_equal(out, x + x)
    assert "long long" in fd.last_cuda_source()
    for field, bad in [
        ("tile_a", 48),
        ("tile_a", 3),
        ("tile_b", 0),
        ("tile_b", 8192),
        ("tile_c", 3),
        ("tile_c", 0),
        ("vector_a", 3),
        ("vector_a", 32),
        ("vector_b", 0),
        ("vector_b", 2.0),
        ("block_y", 33),
        ("grid_x", 0),
        ("tile_a", "64"),
    ]:
        with pytest.raises(ParamsError, match=field):
            setattr(hp, field, bad)
    with pytest.raises(ParamsError, match="no field"):
        hp.tile_d = 32  # type: ignore[attr-defined]
    big = TransposeParams(tile_a=128, tile_b=128)
    with pytest.raises(SchedulerError, match="shared memory"):
        fd.manual_execute([x], heuristic_params=big)
    for fields, match in [
        ({"vector_a": 2}, "vector_a = 2: axis A .* 131 elements"),
        ({"vector_b": 4}, "vector_b = 4: axis B .* 67 elements"),
        ({"tile_a": 4, "vector_a": 8}, "vector_a = 8 does not divide tile_a = 4"),
        ({"tile_b": 2, "vector_b": 4}, "vector_b = 4 does not divide tile_b = 2"),
        ({"tile_c": 2}, "tile_c = 2 needs axis C: the axis outside A is B"),
    ]:
        with pytest.raises(SchedulerError, match=match):
            fd.manual_execute([x], heuristic_params=TransposeParams(**fields))
    with pytest.raises(SchedulerError, match="transpose"):
        fd.manual_execute([values((67, 131))], heuristic_params=hp)


def test_params_equality_hash_and_dict() -> None:
    a, b = TransposeParams(tile_a=64, vector_b=4), TransposeParams(tile_a=64, vector_b=4)
    assert a == b and hash(a) == hash(b) and a != TransposeParams(tile_a=64)
    assert a.to_dict()["tile_a"] == 64 and a.to_dict()["scheduler_type"] == "transpose"
    assert a.to_dict()["vector_b"] == 4 and a.to_dict()["vector_a"] == 1
    assert "vector_b=4" in repr(a)
    assert a.scheduler_type is SchedulerType.transpose  # as the C++ params' property
    assert repr(a).startswith("TransposeParams(scheduler_type=SchedulerType.transpose, ")


def test_h200_heuristics_tile_full_sectors_and_fill_the_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KFUSE_EMULATOR_PROFILE", "h200")
    from kfuse.runtime.device import get_profile

    sms = get_profile("h200").sm_count
    for dtype in (DataType.BFloat16, DataType.Float, DataType.Double):
        fd = unary("add", dtype)
        x = np.empty((4096, 4096), dtype=NUMPY[dtype]).T
        hp = schedule.compute_heuristics(fd.fusion, TR, [x])
        for tile in (hp.tile_a, hp.tile_b):
            assert tile * dtype.itemsize % 32 == 0
        assert hp.tile_a * hp.tile_b * dtype.itemsize >= 4096  # bytes a block moves a tile
        assert hp.grid_x >= 4 * sms
        assert hp.cparams.index_type == "int32"
        assert hp.vector_a == hp.vector_b == 16 // dtype.itemsize  # 16-byte accesses
    # 2**31 elements need int64 offsets.
    x = np.lib.stride_tricks.as_strided(np.empty(1, np.float32), (65536, 32768), (4, 65536 * 4))
    assert schedule.compute_heuristics(unary("add").fusion, TR, [x]).cparams.index_type == "int64"


def test_benchmark_workloads_keep_their_schedulers(monkeypatch: pytest.MonkeyPatch) -> None:
    """W1-W6 at their benchmark layouts: the transpose scheduler declines every one, so each
    keeps the scheduler it had (W1/W1f pointwise)."""
    monkeypatch.setenv("KFUSE_EMULATOR_PROFILE", "h200")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from workloads import WORKLOADS

    bf, f32 = ml_dtypes.bfloat16, np.float32
    shapes = {
        "W1": [((16384, 8192), bf), ((8192,), bf)],
        "W1f": [((16384, 8192), f32), ((8192,), f32)],
        "W2": [((16384, 16384), f32)],
        "W3": [((16384, 16384), f32)],
        "W4": [((32768, 4096), bf)],
        "W5": [((32768, 4096), bf), ((4096,), bf)],
        "W6": [((32768, 4096), bf), ((4096,), bf), ((4096,), bf)],
    }
    for w in WORKLOADS:
        fd = w.definition()
        inputs = [np.empty(shape, dtype) for shape, dtype in shapes[w.id]]
        found = schedule.find_compatible_schedulers(fd, inputs)
        assert TR not in found, w.id
        if w.id in ("W1", "W1f"):
            assert found[0] is SchedulerType.pointwise


def _many_inputs(n: int, dtype: DataType) -> FusionDefinition:
    with FusionDefinition() as fd:
        xs = [fd.define_tensor(shape=[-1, -1], dtype=dtype) for _ in range(n)]
        total = xs[0]
        for x in xs[1:]:
            total = fd.ops.add(total, x)
        fd.add_output(total)
    return fd


@pytest.mark.parametrize("profile", ["h100", "h200", "a100"])
def test_heuristics_give_params_their_kernels_accept(
    profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over sizes up to int64 offsets and up to 12 tiled operands (whose 64 x 64 tiles no
    longer fit in shared memory: 32 x 32 then), the automatic params always make a kernel;
    fusions whose 32 x 32 tiles do not fit are rejected."""
    monkeypatch.setenv("KFUSE_EMULATOR_PROFILE", profile)
    scheduler = schedule.registry.scheduler_for(TR)
    for dtype in (DataType.Bool, DataType.BFloat16, DataType.Float, DataType.Double):
        item = np.dtype(NUMPY[dtype]).itemsize
        for rows, cols in [(32, 32), (33, 4097), (8192, 40), (65536, 40000)]:
            for n in (1, 3, 12):
                fd = _many_inputs(n, dtype)
                buf = np.empty(1, NUMPY[dtype])
                x = np.lib.stride_tricks.as_strided(buf, (rows, cols), (item, rows * item))
                inputs = [x] * n
                ok, why = schedule.can_schedule(fd.fusion, TR, inputs)
                if not ok:
                    assert "32 x 32 tiles" in why and n * 32 * 33 * item > 48 * 1024
                    continue
                hp = schedule.compute_heuristics(fd.fusion, TR, inputs)
                (kernel,) = scheduler.kernels(fd.fusion, _info(fd, inputs), hp)
                assert kernel.grid[0] >= 1 and kernel.block == (32, hp.block_y, 1)


def _spec(fd: FusionDefinition, inputs: list, hp: object | None = None) -> object:
    hp = hp or schedule.compute_heuristics(fd.fusion, TR, inputs)
    scheduler = schedule.registry.scheduler_for(TR)
    return scheduler.kernels(fd.fusion, _info(fd, inputs), hp)[0].spec


@pytest.mark.parametrize("dtype", [DataType.BFloat16, DataType.Float, DataType.Double])
def test_aligned_extents_take_16_byte_vectors(dtype: DataType) -> None:
    """[64, 136]: both extents multiples of 8, so every tiled load and every store along A
    is one 16-byte vector (8 bf16, 4 float, 2 double)."""
    fd = unary("add", dtype)
    x = transposed((64, 136), dtype)
    hp = schedule.compute_heuristics(fd.fusion, TR, [x])
    assert hp.vector_a == hp.vector_b == 16 // dtype.itemsize
    run(fd, [x])
    spec = _spec(fd, [x])
    assert spec.input_kinds == (VEC,) and spec.output_kinds == (VEC,)
    assert f"load_vec<{hp.vector_b}>" in fd.last_cuda_source()
    assert f"store_vec<{hp.vector_a}>" in fd.last_cuda_source()


def test_misaligned_views_fall_back_to_element_accesses() -> None:
    """A transposed view at storage offset 1: its pointer is 4 bytes off 16, so the
    heuristics take scalar tiles; params forcing 4-wide vectors read it element by element
    (access kind STRIDED) and keep 16-byte stores of the aligned output."""
    fd = unary("add")
    x = values((136 * 64 + 1,))[1:].reshape(136, 64).T  # [64, 136], unit stride on axis 0
    hp = schedule.compute_heuristics(fd.fusion, TR, [x])
    assert hp.vector_b == 1 and hp.vector_a == 4
    run(fd, [x])
    hp.vector_b = 4
    assert _spec(fd, [x], hp).input_kinds == (STRIDED,)  # type: ignore[attr-defined]
    (out,) = fd.manual_execute([x], heuristic_params=hp)
    np.testing.assert_array_equal(out, x + x)
    # Offset 4 floats: 16-byte aligned again; a stride of 66 along A allows 2-wide vectors.
    y = values((128 * 66 + 4,))[4:].reshape(128, 66).T[:64]  # [64, 128], strides (1, 66)
    hp = schedule.compute_heuristics(fd.fusion, TR, [y])
    assert hp.vector_b == 2
    run(fd, [y])


@pytest.mark.parametrize("n", [2, 3, 16, 31])
@pytest.mark.parametrize("dtype", [DataType.BFloat16, DataType.Float])
def test_short_innermost_output_axis_is_tiled_whole(n: int, dtype: DataType) -> None:
    """Outputs [600, n] of a transposed input: A (n elements) is one tile side, rounded up
    to a power of two, B the long side; vectors along A where n allows."""
    fd = unary("add", dtype)
    x = transposed((600, n), dtype, seed=n)
    hp = schedule.compute_heuristics(fd.fusion, TR, [x])
    assert hp.tile_a == 1 << (n - 1).bit_length() and hp.tile_b >= 64
    assert hp.tile_a * hp.tile_b >= 1024
    assert n % hp.vector_a == 0 and (hp.vector_a > 1) == (n % 2 == 0)
    run(fd, [x])


@pytest.mark.parametrize("n", [2, 5, 16])
def test_short_b_axis_is_tiled_whole(n: int) -> None:
    fd = unary("add", DataType.BFloat16)
    x = transposed((n, 600), DataType.BFloat16, seed=n)
    hp = schedule.compute_heuristics(fd.fusion, TR, [x])
    assert hp.tile_b == 1 << (n - 1).bit_length() and hp.tile_a >= 64
    run(fd, [x])


@pytest.mark.parametrize("perm", [(2, 1, 0), (1, 2, 0)])
def test_permutes_with_a_short_innermost_axis(perm: tuple[int, int, int]) -> None:
    """The GPU's [16, 1000, 520] permutes at a small size: the output's innermost axis has
    the 16 elements of the input's axis 0."""
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.BFloat16)
        b = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.BFloat16)
        s = fd.ops.add(fd.ops.cast(a, DataType.Float), fd.ops.cast(b, DataType.Float))
        fd.add_output(fd.ops.cast(fd.ops.permute(s, dims=list(perm)), DataType.BFloat16))
    inputs = [values((16, 20, 72), DataType.BFloat16, seed=k) for k in range(2)]
    hp = schedule.compute_heuristics(fd.fusion, TR, inputs)
    assert hp.tile_a == 16 and hp.vector_a == hp.vector_b == 8
    run(fd, inputs)


@pytest.mark.parametrize(
    ("dtype", "n_a", "n_c", "tile_a", "tile_c"),
    [
        (DataType.BFloat16, 8, 40, 8, 8),  # 16-byte runs of A: a tile takes 8 rows of C
        (DataType.BFloat16, 6, 37, 8, 8),  # A of 6 in a tile side of 8; C not a multiple
        (DataType.Float, 3, 5, 4, 8),  # C shorter than the rows a tile would take
        (DataType.BFloat16, 16, 40, 16, 4),  # 32-byte runs
        (DataType.Float, 16, 40, 16, 1),  # 64-byte runs: no rows of C
    ],
)
def test_a_short_innermost_axis_takes_rows_of_the_next_one(
    dtype: DataType, n_a: int, n_c: int, tile_a: int, tile_c: int
) -> None:
    """Swapping the outer and inner axes of [n_a, n_c, 100]: the output's innermost axis A
    has n_a elements, and where its runs are shorter than a sector a tile also takes tile_c
    rows of the next axis C, so that the output is written in runs of C x A."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], dtype=dtype)
        fd.add_output(fd.ops.mul(fd.ops.permute(x, dims=[2, 1, 0]), x_scale(fd)))
    x = values((n_a, n_c, 100), dtype, seed=n_a)
    hp = schedule.compute_heuristics(fd.fusion, TR, [x])
    assert (hp.tile_a, hp.tile_c) == (tile_a, tile_c)
    run(fd, [x])
    source = fd.last_cuda_source()
    assert ("gc = c_origin + ti / " in source) == (tile_c > 1)
    if tile_c > 1:  # edited: fewer rows of C over 2 blocks, then a tile_a short of A
        hp.tile_c, hp.grid_x = 2, 2
        run_manual(fd, [x], hp)
        assert "for (Index tile" in fd.last_cuda_source()
        hp.tile_a, hp.vector_a = 1 << ((n_a - 1).bit_length() - 1), 1
        with pytest.raises(SchedulerError, match="tile_c = 2 needs axis C: tile_a"):
            fd.manual_execute([x], heuristic_params=hp)


def test_rows_of_c_with_another_axis_outside() -> None:
    """[3, 6, 37, 50] to [3, 50, 37, 6]: A of 6, C of 37, B of 50 and an outer axis of 3
    that the tiles are flattened with."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1] * 4, dtype=DataType.BFloat16)
        y = fd.define_tensor(shape=[-1] * 4, dtype=DataType.BFloat16)
        fd.add_output(fd.ops.permute(fd.ops.sub(x, y), dims=[0, 3, 2, 1]))
    inputs = [values((3, 6, 37, 50), DataType.BFloat16, seed=k) for k in range(2)]
    hp = schedule.compute_heuristics(fd.fusion, TR, inputs)
    assert (hp.tile_a, hp.tile_c) == (8, 8)
    run(fd, inputs)


@pytest.mark.parametrize("shape", [(16, 40, 16), (16, 9, 16)])
def test_rows_of_c_with_an_output_in_the_inputs_order_too(shape: tuple[int, int, int]) -> None:
    """-x permuted (A of 16 bf16: 32-byte runs, so rows of C) and |x| in x's own order, from
    one kernel."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.BFloat16)
        fd.add_output(fd.ops.permute(fd.ops.neg(x), dims=[2, 1, 0]))
        fd.add_output(fd.ops.abs(x))
    x = values(shape, DataType.BFloat16, seed=shape[1])
    hp = schedule.compute_heuristics(fd.fusion, TR, [x])
    assert (hp.tile_a, hp.tile_c) == (16, 4)
    run(fd, [x])


def x_scale(fd: FusionDefinition) -> object:
    return fd.define_scalar(1.5, dtype=DataType.Double)


def run_manual(fd: FusionDefinition, inputs: list, hp: TransposeParams) -> None:
    expected = evaluate(fd.fusion, inputs)
    actual = fd.manual_execute(inputs, heuristic_params=hp)
    assert_outputs_close(fd.fusion, actual, expected, inputs)


def test_tiled_operands_of_different_dtypes() -> None:
    """bf16 and float transposed inputs, a contiguous half one, a float output and a bf16
    output in the inputs' order (tiled): vectors of 16 bytes of the widest tiled dtype."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        y = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        z = fd.define_tensor(shape=[-1, -1], dtype=DataType.Half)
        t = fd.ops.cast(fd.ops.add(fd.ops.cast(x, DataType.Float), y), DataType.BFloat16)
        p = fd.ops.permute(fd.ops.cast(t, DataType.Float), dims=[1, 0])
        fd.add_output(fd.ops.mul(p, fd.ops.cast(z, DataType.Float)))
        fd.add_output(t)  # read in the permuted order inside out0's: tiled
    inputs = [
        values((72, 72), DataType.BFloat16, 1),
        values((72, 72), DataType.Float, 2),
        values((72, 72), DataType.Half, 3),
    ]
    hp = schedule.compute_heuristics(fd.fusion, TR, inputs)
    assert hp.vector_b == 4 and hp.vector_a == 4
    run(fd, inputs)
    spec = _spec(fd, inputs)
    assert spec.tiled_inputs == (True, True, False)  # type: ignore[attr-defined]
    assert spec.tiled_outputs == (False, True)  # type: ignore[attr-defined]
    for tile_a, tile_b, va, vb, block_y in [(8, 128, 2, 2, 2), (64, 16, 8, 8, 8), (4, 4, 1, 4, 1)]:
        hp.tile_a, hp.tile_b, hp.vector_a, hp.vector_b = tile_a, tile_b, va, vb
        hp.block_y = block_y
        expected = evaluate(fd.fusion, inputs)
        assert_outputs_close(
            fd.fusion, fd.manual_execute(inputs, heuristic_params=hp), expected, inputs
        )


def test_broadcast_along_a_is_one_load_a_vector() -> None:
    """bcast_add_strided_dim0 in small: x with axis 0 fastest plus a row vector v broadcast
    along axis 0 (contiguous along A: vectors) and a column broadcast along A (BCAST)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        v = fd.define_tensor(shape=[-1], dtype=DataType.BFloat16)
        c = fd.define_tensor(shape=[-1, 1], dtype=DataType.BFloat16)
        row = fd.ops.broadcast(v, is_broadcast_dim=[True, False])
        f32 = [fd.ops.cast(t, DataType.Float) for t in (x, row, c)]
        s = fd.ops.add(fd.ops.add(f32[0], f32[1]), f32[2])
        fd.add_output(fd.ops.cast(s, DataType.BFloat16))
    inputs = [
        transposed((72, 136), DataType.BFloat16),
        values((136,), DataType.BFloat16, 1),
        values((72, 1), DataType.BFloat16, 2),
    ]
    run(fd, inputs)
    spec = _spec(fd, inputs)
    assert spec.input_kinds == (VEC, VEC, BCAST)  # type: ignore[attr-defined]
    assert spec.vector_a == spec.vector_b == 8  # type: ignore[attr-defined]


def test_h200_heuristics_for_the_model_suite(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the heuristics pick at the model suite's sizes (benchmarks/models/transpose.py):
    transpose_12 and bcast_add_strided_dim0 64 x 64 tiles of 8-wide vectors, transpose_02
    (innermost output axis of 16 or 8: runs of 32 or 16 bytes) a 64 x 64 tile of 4 or 8 rows
    of the middle axis."""
    monkeypatch.setenv("KFUSE_EMULATOR_PROFILE", "h200")
    bf = ml_dtypes.bfloat16

    def permuted(perm: list[int]) -> FusionDefinition:
        with FusionDefinition() as fd:
            a = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.BFloat16)
            b = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.BFloat16)
            fd.add_output(fd.ops.relu(fd.ops.permute(fd.ops.add(a, b), dims=perm)))
        return fd

    big = [np.empty((16, 4096, 2048), bf) for _ in range(2)]
    short = [np.empty((8, 1024, 8192), bf) for _ in range(2)]
    picks = {}
    for name, fd, inputs in [
        ("12", permuted([0, 2, 1]), big),
        ("02", permuted([2, 1, 0]), big),
        ("02 short", permuted([2, 1, 0]), short),
        ("strided", unary("add", DataType.BFloat16), [np.empty((8192, 16384), bf).T]),
    ]:
        hp = schedule.compute_heuristics(fd.fusion, TR, inputs)
        picks[name] = (hp.tile_a, hp.tile_b, hp.tile_c, hp.vector_a, hp.vector_b, hp.block_y)
    assert picks == {
        "12": (64, 64, 1, 8, 8, 8),
        "02": (16, 64, 4, 8, 8, 8),
        "02 short": (8, 64, 8, 8, 8, 8),
        "strided": (64, 64, 1, 8, 8, 8),
    }


def test_tile_rows_move_through_shared_memory_in_words() -> None:
    """Along a tile's row (phase B) a thread moves its vector through shared memory in the
    widest accesses the row pitch keeps aligned and the banks take as fast: bf16 rows of
    66 elements, 4 bytes (2-byte stores were 64 of a thread's instructions a 64 x 64 tile
    of two inputs); an odd pitch, element by element. Tiled inputs and tiled outputs,
    against the reference."""
    from kfuse.codegen.transpose_tiles import row_access_width

    assert row_access_width(2, 66, 64, 64, 8, 8) == 2
    assert row_access_width(2, 65, 64, 64, 8, 8) == 1
    assert row_access_width(4, 65, 64, 64, 4, 16) == 1
    with FusionDefinition() as fd:  # transposed bf16 inputs in, contiguous out: tiled inputs
        a = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        b = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        fd.add_output(fd.ops.add(a, b))
    inputs = [transposed((96, 136), DataType.BFloat16, s) for s in (1, 2)]
    run(fd, inputs)
    assert "reinterpret_cast<kf::Vec<kf::bfloat16, 2>*>(&tile_in0[ti]" in fd.last_cuda_source()
    with FusionDefinition() as fd:  # out1 in x's order, out0 in the other: a tiled output
        x, y = (fd.define_tensor(shape=[-1, -1], dtype=DataType.Half) for _ in range(2))
        s = fd.ops.mul(x, 2.0)
        fd.add_output(fd.ops.add(fd.ops.permute(s, dims=[1, 0]), y))
        fd.add_output(s)
    # (square: the outputs' shapes are each other's transposes, which segments otherwise)
    run(fd, [values((136, 136), DataType.Half, 3), values((136, 136), DataType.Half, 4)])
    assert "reinterpret_cast<const kf::Vec<kf::half, 2>*>(&tile_out1[ti]" in fd.last_cuda_source()


@pytest.mark.parametrize("planes", [1, 3])
def test_a_grid_of_fewer_blocks_than_tiles_covers_every_tile_once(planes: int) -> None:
    """Tiles A fastest, tile counts that are not powers of two, one plane or several, and a
    grid of fewer blocks than tiles: every output element written once, right."""
    fd = unary("exp", rank=3)
    x = np.transpose(values((planes, 200, 131)), (0, 2, 1))  # [P, 131, 200], unit stride on 1
    run(fd, [x])
    hp = schedule.compute_heuristics(fd.fusion, TR, [x])
    hp.tile_a, hp.tile_b, hp.grid_x = 32, 32, 5  # 7 x 5 tiles a plane, 5 blocks
    (out,) = fd.manual_execute([x], heuristic_params=hp)
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-6)
