"""Rows read through an index whose launch covers them exactly (switches.WHOLE_GATHER_ROWS,
kfuse.schedule.gather_rows.gather_row_tile, kfuse.codegen.whole_rows): the tile chosen, the
values against the reference and against the generic loop's, the row's constant inputs
loaded once a row, and a position outside its axis still an InputError (host emulator; the
GPU tests at the end, at the model suite's sizes)."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from gpu_support import cuda_torch, requires_gpu
from kfuse import switches
from kfuse.dtypes import DataType
from kfuse.engine.program import KernelProgram
from kfuse.errors import InputError
from kfuse.frontend import FusionDefinition
from kfuse.runtime.launch import KernelLaunch
from kfuse.schedule.gather_rows import gather_row_tile
from reference_checks import check, rand


def embedding(dtype: DataType = DataType.BFloat16) -> FusionDefinition:
    """The rows of a table at token ids, as the model suite's embedding_fwd reads them."""
    with FusionDefinition() as fd:
        table = fd.define_tensor(shape=[-1, -1], dtype=dtype)
        ids = fd.define_tensor(shape=[-1], dtype=DataType.Int)
        fd.add_output(fd.ops.index_select(table, ids, 0))
    return fd


def scaled_embedding() -> FusionDefinition:
    """Rows at token ids times a weight a token: an input constant along the row besides the
    ids (BCAST), loaded once a row too."""
    with FusionDefinition() as fd:
        table = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        ids = fd.define_tensor(shape=[-1], dtype=DataType.Int)
        weight = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        rows = fd.ops.cast(fd.ops.index_select(table, ids, 0), DataType.Float)
        each = fd.ops.broadcast(weight, [False, True])
        fd.add_output(fd.ops.cast(fd.ops.mul(rows, each), DataType.BFloat16))
    return fd


def _launch(fd: FusionDefinition) -> KernelLaunch:
    program = fd.last_program()
    assert isinstance(program, KernelProgram) and len(program.launches) == 1
    return program.launches[0]


@pytest.mark.parametrize(
    ("vecs", "given", "want"),
    [
        (384, (128, 2), (128, 3)),  # embedding_fwd's 3072 bf16: two blocks, one half idle
        (512, (128, 2), (128, 2)),  # already exact: kept
        (96, (32, 2), (32, 3)),  # GPT-2's 768 bf16 at many rows
        (96, (64, 1), (96, 1)),  # and at few: three warps, one vector each
        (640, (128, 2), (128, 1)),  # no block of one row: five blocks of 128
        (12, (4, 2), (4, 3)),  # a divisor of a warp, rows packed along block_y
        (7, (2, 2), (2, 2)),  # no exact tile: the generic launch
    ],
)
def test_gather_row_tile(vecs: int, given: tuple[int, int], want: tuple[int, int]) -> None:
    assert gather_row_tile(vecs, 128, *given) == want


def test_a_row_the_default_launch_leaves_ragged_is_covered_by_one_block() -> None:
    """768 bf16 a row over 7 ids: 96 vectors, which two blocks of 64 threads covered (the
    second half idle), taken by one block of 96 threads; the kernel has no ragged end."""
    fd = embedding()
    table = rand((30, 768), dtype=ml_dtypes.bfloat16)
    ids = np.array([3, 29, 0, 3, 17, 8, 11], np.int64)
    (out,) = check(fd, [table, ids])
    np.testing.assert_array_equal(out.view(np.uint16), table[ids].view(np.uint16))
    launch = _launch(fd)
    assert launch.name.endswith("_whole")
    assert (launch.grid[0], launch.block) == (1, (96, 1, 1))
    assert "kf_iv" not in launch.source  # no ragged-end path
    assert launch.source.count("kf::indexed_position(") == 1  # once a row


@pytest.mark.parametrize(
    ("width", "tokens", "grid", "block", "vectors"),
    [
        (3072, 8192, (1, 8192, 1), (128, 1, 1), 3),  # was two blocks of 128 x 2, one half idle
        (512, 4096, (1, 2048, 1), (64, 2, 1), 1),  # the default launch, exact already
    ],
)
def test_the_suites_embedding_rows_take_whole_rows(
    width: int, tokens: int, grid: tuple[int, ...], block: tuple[int, ...], vectors: int
) -> None:
    """The model suite's embedding_fwd and its GPU test size (a smaller vocabulary: the
    launch depends on the rows, not on the table's length), bit for bit."""
    fd = embedding()
    table = rand((100, width), dtype=ml_dtypes.bfloat16)
    ids = np.random.default_rng(7).integers(0, 100, tokens)
    (out,) = fd.execute([table, ids])
    np.testing.assert_array_equal(out.view(np.uint16), table[ids].view(np.uint16))
    launch = _launch(fd)
    assert launch.name.endswith("_whole")
    assert (launch.grid, launch.block) == (grid, block)
    assert f"kf::Vec<kf::bfloat16, 8> x1[{vectors}];" in launch.source


@pytest.mark.parametrize(
    ("width", "whole"),
    [(64, True), (96, True), (56, False)],  # 8 and 12 vectors a row, then 7 (no exact tile)
)
def test_rows_read_the_same_with_and_without_whole_rows(
    monkeypatch: pytest.MonkeyPatch, width: int, whole: bool
) -> None:
    """A row's ids and weights loaded once a row give what the generic loop gives, bit for
    bit; a row of 7 vectors, which no launch of whole warps covers, keeps the generic loop."""
    fd = scaled_embedding()
    table = rand((20, width), dtype=ml_dtypes.bfloat16)
    ids = np.random.default_rng(5).integers(0, 20, 33)
    weight = rand((33,), seed=6)
    (out,) = check(fd, [table, ids, weight])
    assert _launch(fd).name.endswith("_whole") == whole
    monkeypatch.setattr(switches, "WHOLE_GATHER_ROWS", False)
    generic = scaled_embedding()
    (again,) = check(generic, [table, ids, weight])
    assert not _launch(generic).name.endswith("_whole")
    np.testing.assert_array_equal(out.view(np.uint16), again.view(np.uint16))


def test_a_gather_with_a_position_a_lane_takes_whole_rows() -> None:
    """gather along axis 0 with an index that changes along the row: whole rows, each lane
    checked at its own position."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        idx = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int)
        fd.add_output(fd.ops.gather(x, idx, 0))
    x = rand((6, 32))
    idx = np.random.default_rng(2).integers(0, 6, (5, 32))
    (out,) = check(fd, [x, idx])
    np.testing.assert_array_equal(out, np.take_along_axis(x, idx, 0))
    launch = _launch(fd)
    assert launch.name.endswith("_whole")
    assert "kf::indexed_position(x0[u][j]" in launch.source  # the index is input 0


@pytest.mark.parametrize("bad", [-1, 30])
def test_a_position_outside_its_axis_is_an_input_error_on_whole_rows(bad: int) -> None:
    fd = embedding()
    table = rand((30, 768), dtype=ml_dtypes.bfloat16)
    good = np.array([0, 29, 7], np.int64)
    check(fd, [table, good])
    assert _launch(fd).name.endswith("_whole")
    with pytest.raises(
        InputError,
        match=rf"index_select along axis 0: an index holds {bad}, outside the axis \(size 30\)",
    ):
        fd.execute([table, np.array([0, bad, 7], np.int64)])
    (out,) = check(fd, [table, good])  # the flags were cleared
    assert out.shape == (3, 768)


# ---- GPU ----


def _gpu_rows(torch: Any, width: int, tokens: int) -> tuple[Any, Any]:
    gen = torch.Generator(device="cuda").manual_seed(0)
    table = torch.randn((32064, width), device="cuda", generator=gen).to(torch.bfloat16)
    ids = torch.randint(0, 32064, (tokens,), device="cuda", generator=gen)
    return table, ids


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize(
    ("width", "tokens", "grid", "block"),
    [
        (3072, 8192, (1, 8192, 1), (128, 1, 1)),  # was two blocks a row, one half idle
        (512, 4096, (1, 2048, 1), (64, 2, 1)),  # the default launch, exact already
    ],
)
def test_embedding_rows_on_the_gpu(
    width: int, tokens: int, grid: tuple[int, ...], block: tuple[int, ...]
) -> None:
    """The model suite's embedding_fwd and its GPU test size on whole rows: its launch, and
    the rows bit for bit, through the cached program and the host fast path too."""
    torch = cuda_torch()
    fd = embedding()
    table, ids = _gpu_rows(torch, width, tokens)
    for _ in range(3):
        (out,) = check(fd, [table, ids])
        assert torch.equal(out, table[ids])
    launch = _launch(fd)
    assert launch.name.endswith("_whole")
    assert (launch.grid, launch.block) == (grid, block)
    assert fd._executor_cache.fast_calls([table, ids], None) is not None


@pytest.mark.gpu
@requires_gpu
def test_a_position_outside_its_axis_on_whole_rows_on_the_gpu() -> None:
    """A bad id among the suite's rows: the call that read it or the next one raises the
    InputError, NaN where it was read, and the next calls are right."""
    torch = cuda_torch()
    fd = embedding()
    table, good = _gpu_rows(torch, 3072, 8192)
    bad = good.clone()
    bad[4000] = 32064
    check(fd, [table, good])
    assert _launch(fd).name.endswith("_whole")
    raised = False
    try:
        (out,) = fd.execute([table, bad])
        torch.cuda.synchronize()
        assert torch.isnan(out[4000].float()).all() and torch.equal(out[0], table[good[0]])
    except InputError:
        raised = True
    if not raised:
        with pytest.raises(InputError, match="an index holds 32064, outside the axis"):
            fd.execute([table, good])
    torch.cuda.synchronize()
    (out,) = check(fd, [table, good])
    assert torch.equal(out, table[good])
