"""The transpose scheduler on the GPU: transposed views and permutes of torch CUDA tensors
against the float64 reference, at sizes with many tiles and ragged edges, short axes tiled
whole, misaligned views (element-by-element fallback), mixed dtypes, and edited params
(tiles, vector widths, block and grid)."""

from __future__ import annotations

import pytest

from kfuse import DataType, FusionDefinition, schedule
from kfuse.reference import evaluate
from kfuse.schedule import SchedulerType
from kfuse.testing import assert_outputs_close

pytestmark = pytest.mark.gpu

DTYPES = {
    DataType.BFloat16: "bfloat16",
    DataType.Half: "float16",
    DataType.Float: "float32",
    DataType.Double: "float64",
    DataType.Int32: "int32",
    DataType.Bool: "bool",
}


def _add_self(dtype: DataType, rank: int) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1] * rank, dtype=dtype)
        fd.add_output(fd.ops.logical_not(x) if dtype is DataType.Bool else fd.ops.add(x, x))
    return fd


def _random(torch, shape: tuple[int, ...], dtype: DataType):  # type: ignore[no-untyped-def]
    t = getattr(torch, DTYPES[dtype])
    if dtype is DataType.Bool:
        return torch.rand(shape, device="cuda") < 0.5
    if dtype is DataType.Int32:
        return torch.randint(-50, 50, shape, device="cuda", dtype=t)
    return torch.randn(shape, device="cuda", dtype=t)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", [(4096, 4096), (1000, 2049), (67, 131)])
def test_transposed_view_matches_reference(dtype: DataType, shape: tuple[int, int]) -> None:
    torch = pytest.importorskip("torch")
    fd = _add_self(dtype, 2)
    x = _random(torch, shape[::-1], dtype).t()
    (out,) = fd.execute([x])
    assert fd.last_scheduler() is SchedulerType.transpose
    assert_outputs_close(fd.fusion, [out], evaluate(fd.fusion, [x]), [x])


@pytest.mark.parametrize("perm", [(0, 2, 1), (2, 1, 0), (1, 2, 0)])
def test_permute_inside_the_fusion_with_bf16_casts(perm: tuple[int, int, int]) -> None:
    torch = pytest.importorskip("torch")
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.BFloat16)
        b = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.BFloat16)
        s = fd.ops.add(fd.ops.cast(a, DataType.Float), fd.ops.cast(b, DataType.Float))
        fd.add_output(fd.ops.cast(fd.ops.permute(s, dims=list(perm)), DataType.BFloat16))
    inputs = [_random(torch, (16, 1000, 520), DataType.BFloat16) for _ in range(2)]
    (out,) = fd.execute(inputs)
    assert fd.last_scheduler() is SchedulerType.transpose
    assert_outputs_close(fd.fusion, [out], evaluate(fd.fusion, inputs), inputs)


def test_edited_params_match_reference() -> None:
    torch = pytest.importorskip("torch")
    fd = _add_self(DataType.Float, 2)
    x = _random(torch, (3000, 1024), DataType.Float).t()
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.transpose, [x])
    assert (hp.vector_a, hp.vector_b) == (4, 4)
    for tile_a, tile_b, va, vb, block_y, grid_x in [
        (32, 64, 4, 4, 4, 7),
        (64, 64, 2, 4, 16, 132),
        (128, 32, 1, 1, 1, 1),
        (8, 512, 8, 4, 8, 264),
        (2, 1024, 1, 16, 2, 50),
    ]:
        hp.tile_a, hp.tile_b, hp.vector_a, hp.vector_b = tile_a, tile_b, va, vb
        hp.block_y, hp.grid_x = block_y, grid_x
        (out,) = fd.manual_execute([x], heuristic_params=hp)
        torch.testing.assert_close(out, x + x)


@pytest.mark.parametrize("n", [2, 3, 16, 31, 48])
@pytest.mark.parametrize("dtype", [DataType.BFloat16, DataType.Float])
def test_short_axes_are_tiled_whole(n: int, dtype: DataType) -> None:
    """Outputs [20000, n] (short A) and [n, 20000] (short B) of transposed inputs."""
    torch = pytest.importorskip("torch")
    fd = _add_self(dtype, 2)
    for shape in [(n, 20000), (20000, n)]:
        x = _random(torch, shape, dtype).t()
        (out,) = fd.execute([x])
        assert fd.last_scheduler() is SchedulerType.transpose
        assert_outputs_close(fd.fusion, [out], evaluate(fd.fusion, [x]), [x])


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [
        ((8, 1024, 520), DataType.BFloat16),  # 16-byte runs of A: rows of C in every tile
        ((6, 333, 700), DataType.BFloat16),  # A of 6 in a side of 8, C not a tile multiple
        ((3, 1000, 257), DataType.Float),
    ],
)
def test_short_innermost_axis_with_rows_of_the_next_one(
    shape: tuple[int, int, int], dtype: DataType
) -> None:
    """Swapping the outer and inner axes where the output's innermost axis is shorter than a
    sector: tiles take rows of the middle axis too (tile_c), the heuristics' and edited."""
    torch = pytest.importorskip("torch")
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], dtype=dtype)
        fd.add_output(fd.ops.relu(fd.ops.permute(fd.ops.add(x, x), dims=[2, 1, 0])))
    x = _random(torch, shape, dtype)
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.transpose, [x])
    assert hp.tile_c > 1
    expected = evaluate(fd.fusion, [x])
    for tile_c, grid_x in [(hp.tile_c, hp.grid_x), (2, 100), (16, 7)]:
        hp.tile_c, hp.grid_x = tile_c, grid_x
        (out,) = fd.manual_execute([x], heuristic_params=hp)
        assert_outputs_close(fd.fusion, [out], expected, [x])


@pytest.mark.parametrize("offset", [1, 2, 4, 8])
def test_misaligned_views_match_reference(offset: int) -> None:
    """Transposed bf16 views at storage offsets of 2 to 16 bytes: vectors as wide as the
    alignment allows, scalars at offset 1."""
    torch = pytest.importorskip("torch")
    fd = _add_self(DataType.BFloat16, 2)
    base = _random(torch, (1024 * 2048 + offset,), DataType.BFloat16)
    x = base[offset:].view(1024, 2048).t()
    (out,) = fd.execute([x])
    assert fd.last_scheduler() is SchedulerType.transpose
    assert_outputs_close(fd.fusion, [out], evaluate(fd.fusion, [x]), [x])


def test_mixed_dtypes_broadcasts_and_a_tiled_output() -> None:
    """bf16 and float transposed inputs, a half input in the output's order, a broadcast
    row, and a bf16 output in the inputs' order (a tiled output)."""
    torch = pytest.importorskip("torch")
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        y = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        z = fd.define_tensor(shape=[-1, -1], dtype=DataType.Half)
        v = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        t = fd.ops.cast(fd.ops.add(fd.ops.cast(x, DataType.Float), y), DataType.BFloat16)
        p = fd.ops.permute(fd.ops.cast(t, DataType.Float), dims=[1, 0])
        row = fd.ops.broadcast(v, is_broadcast_dim=[True, False])
        fd.add_output(fd.ops.add(fd.ops.mul(p, fd.ops.cast(z, DataType.Float)), row))
        fd.add_output(t)
    n = 2056
    inputs = [
        _random(torch, (n, n), DataType.BFloat16),
        _random(torch, (n, n), DataType.Float),
        _random(torch, (n, n), DataType.Half),
        _random(torch, (n,), DataType.Float),
    ]
    outs = fd.execute(inputs)
    assert fd.last_scheduler() is SchedulerType.transpose
    assert_outputs_close(fd.fusion, outs, evaluate(fd.fusion, inputs), inputs)


def test_model_suite_transposes_match_reference() -> None:
    """The model suite's three transposes at an eighth of their size: swaps (1, 2) and
    (0, 2) of a bf16 sum with relu, and a bias added to an input with axis 0 fastest."""
    torch = pytest.importorskip("torch")
    for perm in ([0, 2, 1], [2, 1, 0]):
        with FusionDefinition() as fd:
            a = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.BFloat16)
            b = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.BFloat16)
            s = fd.ops.add(fd.ops.cast(a, DataType.Float), fd.ops.cast(b, DataType.Float))
            fd.add_output(fd.ops.cast(fd.ops.relu(fd.ops.permute(s, dims=perm)), DataType.BFloat16))
        inputs = [_random(torch, (16, 512, 2048), DataType.BFloat16) for _ in range(2)]
        (out,) = fd.execute(inputs)
        assert fd.last_scheduler() is SchedulerType.transpose
        assert_outputs_close(fd.fusion, [out], evaluate(fd.fusion, inputs), inputs)
    with FusionDefinition() as fd:
        v = fd.define_tensor(shape=[-1], dtype=DataType.BFloat16)
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        row = fd.ops.broadcast(v, is_broadcast_dim=[True, False])
        s = fd.ops.add(fd.ops.cast(x, DataType.Float), fd.ops.cast(row, DataType.Float))
        fd.add_output(fd.ops.cast(s, DataType.BFloat16))
    inputs = [
        _random(torch, (4096,), DataType.BFloat16),
        _random(torch, (4096, 8192), DataType.BFloat16).t(),
    ]
    (out,) = fd.execute(inputs)
    assert fd.last_scheduler() is SchedulerType.transpose
    assert_outputs_close(fd.fusion, [out], evaluate(fd.fusion, inputs), inputs)
