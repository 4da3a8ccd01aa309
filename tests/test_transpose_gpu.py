"""The transpose scheduler on the GPU: transposed views and permutes of torch CUDA tensors
against the float64 reference, at sizes with many tiles and ragged edges, and edited params."""

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
    x = _random(torch, (3000, 1025), DataType.Float).t()
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.transpose, [x])
    for tile_a, tile_b, block_y, grid_x in [(32, 64, 4, 7), (64, 64, 16, 132), (96, 32, 1, 1)]:
        hp.tile_a, hp.tile_b, hp.block_y, hp.grid_x = tile_a, tile_b, block_y, grid_x
        (out,) = fd.manual_execute([x], heuristic_params=hp)
        torch.testing.assert_close(out, x + x)
