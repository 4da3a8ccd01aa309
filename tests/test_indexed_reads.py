"""index_select, gather and take_along_axis of fusion inputs read inside the pointwise kernel
that consumes them (kfuse.codegen.indexed): the values against the reference, one kernel with
no framework indexing between, vectors where a vector's elements share a position, and a
position outside its axis an InputError found without waiting for the GPU, the kernel never
reading outside its tensor (host emulator; the GPU tests at the end)."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from gpu_support import cuda_torch, requires_gpu
from kfuse.dtypes import DataType
from kfuse.engine.program import KernelProgram
from kfuse.errors import InputError
from kfuse.frontend import FusionDefinition
from kfuse.runtime import index_checks
from kfuse.schedule import SchedulerType
from reference_checks import check, rand


def embedding(dtype: DataType = DataType.BFloat16, index: DataType = DataType.Int) -> Any:
    """Rows of a table at token ids, scaled in float and rounded back: an embedding lookup
    as a model writes it after index_select."""
    with FusionDefinition() as fd:
        table = fd.define_tensor(shape=[-1, -1], dtype=dtype)
        ids = fd.define_tensor(shape=[-1], dtype=index)
        rows = fd.ops.cast(fd.ops.index_select(table, ids, 0), DataType.Float)
        fd.add_output(fd.ops.cast(fd.ops.mul(rows, 2.0), dtype))
    return fd


def _reads_vectors(fd: FusionDefinition) -> bool:
    """Whether the last call, one pointwise kernel, reads its indexed input a vector at a time
    (INDEXED_VEC) where whole vectors lie in the row, as its source shows (INDEXED reads an
    element at a time, as every kernel does at a row's ragged end; a kernel whose launch
    covers its rows exactly, kfuse.codegen.whole_rows, has no ragged end)."""
    program = fd.last_program()
    assert isinstance(program, KernelProgram)
    assert program.schedulers() == [SchedulerType.pointwise]
    source = program.cuda_source() or ""
    whole = program.launches[0].name.endswith("_whole")
    assert "kf::indexed_load(" in source or whole
    return "kf::indexed_load_vec<" in source


def test_an_embedding_lookup_is_one_kernel_reading_whole_rows_as_vectors() -> None:
    fd = embedding()
    table = rand((50, 64), dtype=ml_dtypes.bfloat16)
    ids = np.random.default_rng(1).integers(0, 50, 37)
    (out,) = check(fd, [table, ids])
    want = (table.astype(np.float32)[ids] * 2).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(out.astype(np.float32), want.astype(np.float32))
    assert _reads_vectors(fd)


@pytest.mark.parametrize("index", [DataType.Int, DataType.Int32])
def test_index_select_along_the_inner_axis_reads_element_by_element(index: DataType) -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        idx = fd.define_tensor(shape=[-1], dtype=index)
        fd.add_output(fd.ops.exp(fd.ops.index_select(x, idx, 1)))
    x = rand((6, 9))
    kind = np.int32 if index is DataType.Int32 else np.int64
    idx = np.array([8, 0, 3, 3, 7, 1, 2, 5, 4, 6, 0], kind)
    (out,) = check(fd, [x, idx])
    np.testing.assert_allclose(out, np.exp(x[:, idx]), rtol=1e-6)
    assert not _reads_vectors(fd)


@pytest.mark.parametrize("dim", [0, 1])
def test_gather_takes_the_index_shape(dim: int) -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        idx = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int)
        fd.add_output(fd.ops.add(fd.ops.gather(x, idx, dim), 1.0))
    x = rand((6, 9))
    idx = np.random.default_rng(2).integers(0, x.shape[dim], (4, 7))
    (out,) = check(fd, [x, idx])
    rows = np.arange(4)[:, None]
    cols = np.arange(7)[None, :]
    want = x[idx, cols] if dim == 0 else x[rows, idx]
    np.testing.assert_allclose(out, want + 1.0, rtol=1e-6)


def test_take_along_axis_picks_a_target_a_row_and_broadcasts_size_one_axes() -> None:
    """Cross-entropy's pick of each row's target ([N, 1] positions), and axes of size 1 in
    either operand broadcast against the other's."""
    with FusionDefinition() as fd:
        logits = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        target = fd.define_tensor(shape=[-1, 1], dtype=DataType.Int)
        fd.add_output(fd.ops.neg(fd.ops.take_along_axis(logits, target, 1)))
    x = rand((6, 9))
    target = np.random.default_rng(3).integers(0, 9, (6, 1))
    (out,) = check(fd, [x, target])
    np.testing.assert_allclose(out, -np.take_along_axis(x, target, 1), rtol=1e-6)
    with FusionDefinition() as fd:
        x2 = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        i2 = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int)
        fd.add_output(fd.ops.take_along_axis(x2, i2, 0))
    check(fd, [x[:1], np.zeros((5, 9), np.int64)])  # the tensor's other axis of size 1
    check(fd, [x, np.random.default_rng(4).integers(0, 6, (3, 1))])  # the index's


def test_odd_layouts_of_the_table_read_right() -> None:
    """A transposed table, one a column offset in (no vector alignment) and one whose rows
    are not a multiple of a vector apart: the kernel picks element reads where vectors
    would not be aligned at every position."""
    fd = embedding(DataType.Float)
    ids = np.array([3, 0, 7, 7, 1], np.int64)
    base = rand((8, 40))
    for table in (base.T.copy().T, base[:, 1:33], base[:, :36]):
        (out,) = check(fd, [table, ids])
        np.testing.assert_allclose(out, table[ids] * 2, rtol=1e-6)


def test_a_read_of_a_computed_tensor_in_another_segment() -> None:
    """index_select(exp(x)) between a kernel and a sum: exp(x) from one kernel, read at the
    positions by the next (the segment's input is its tensor)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        idx = fd.define_tensor(shape=[-1], dtype=DataType.Int)
        e = fd.ops.exp(x)
        fd.add_output(fd.ops.sum(e, dims=[1]))
        fd.add_output(fd.ops.mul(fd.ops.index_select(e, idx, 0), 3.0))
    x = rand((5, 16))
    idx = np.array([4, 4, 0, 2], np.int64)
    _, picked = check(fd, [x, idx])
    np.testing.assert_allclose(picked, np.exp(x)[idx] * 3, rtol=1e-6)


@pytest.mark.parametrize("bad", [-1, 50, 1 << 40])
def test_a_position_outside_its_axis_is_an_input_error_and_the_next_call_runs(bad: int) -> None:
    fd = embedding()
    table = rand((50, 64), dtype=ml_dtypes.bfloat16)
    good = np.array([0, 49, 7], np.int64)
    check(fd, [table, good])
    with pytest.raises(
        InputError,
        match=rf"index_select along axis 0: an index holds {bad}, outside the axis \(size 50\)",
    ):
        fd.execute([table, np.array([0, bad, 7], np.int64)])
    (out,) = check(fd, [table, good])  # the flags were cleared
    assert out.shape == (3, 64)


def _two_reads_of_one_index() -> Any:
    """A gather and a take_along_axis of one table at one index tensor: one kernel's two
    indexed reads (the InputError's test of an emulator campaign with float8 inputs)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], dtype=DataType.Float)
        positions = fd.define_tensor([-1, -1], dtype=DataType.Int32)
        fd.add_output(fd.ops.gather(x, positions, 1))
        fd.add_output(fd.ops.take_along_axis(x, positions, 1))
    return fd


def test_a_call_whose_reads_find_several_bad_positions_raises_once() -> None:
    """Both reads find the bad position: the call raises once, naming the first and counting
    the other, and clears both records. Before, it cleared the first only, and the next call,
    valid, raised the second's error."""
    fd = _two_reads_of_one_index()
    x = rand((9, 13))
    good = np.zeros((9, 5), np.int32)
    check(fd, [x, good])
    with pytest.raises(InputError, match=r"gather along axis 1: .*13.*\(1 more read outside"):
        fd.execute([x, np.full((9, 5), 13, np.int32)])
    for _ in range(3):  # compiled, cached, then the host fast path
        check(fd, [x, good])


def test_a_position_recorded_by_a_kernel_still_running_is_raised_by_the_next_call() -> None:
    """On a GPU the launch may not have finished when its call returns: its record is found
    by the next call of any fusion, which raises it (the flags as a kernel leaves them)."""
    checks = index_checks.IndexChecks((None, ("gather along axis 1", 9)))
    checks.pointer("numpy", -1)  # its words, made as a launch on the emulator makes them
    words = checks._flags[("numpy", -1)][1]
    words[2], words[3] = np.uint64(12), np.uint64(1)  # read 1 found 12, then its 1
    fd = embedding(DataType.Float)
    inputs = [rand((4, 8)), np.array([1, 2], np.int64)]
    with pytest.raises(InputError, match=r"gather along axis 1: an index holds 12.*size 9"):
        fd.execute(inputs)
    assert not words.any()
    check(fd, inputs)
    words[2] = np.uint64(3)  # a value without its 1: not written whole yet, not raised
    check(fd, inputs)
    words[2] = 0


# ---- GPU ----


@pytest.mark.gpu
@requires_gpu
def test_an_embedding_lookup_on_the_gpu() -> None:
    """bf16 rows at int64 ids on the GPU, compiled, cached and through the host fast path
    (whose packed launch carries the flags' address), right against the reference."""
    torch = cuda_torch()
    fd = embedding()
    gen = torch.Generator(device="cuda").manual_seed(0)
    table = torch.randn((32064, 512), device="cuda", generator=gen).to(torch.bfloat16)
    ids = torch.randint(0, 32064, (4096,), device="cuda", generator=gen)
    for _ in range(3):
        (out,) = check(fd, [table, ids])
    want = (table.float()[ids] * 2).to(torch.bfloat16)
    assert torch.equal(out, want)
    assert fd._executor_cache.fast_calls([table, ids], None) is not None


@pytest.mark.gpu
@requires_gpu
def test_a_position_outside_its_axis_on_the_gpu_leaves_the_context_usable() -> None:
    """A bad id on the GPU: the call that read it or the next one raises the InputError (the
    kernel does not trap, and nothing waits for it), NaN where it was read, and the device
    runs on: the next calls and torch's own work are right."""
    torch = cuda_torch()
    fd = embedding(DataType.Float)
    table = torch.randn((100, 64), device="cuda")
    good = torch.tensor([0, 99, 5], device="cuda")
    bad = torch.tensor([0, 100, 5], device="cuda")
    check(fd, [table, good])
    raised = False
    try:
        (out,) = fd.execute([table, bad])
        torch.cuda.synchronize()
        assert torch.isnan(out[1]).all() and torch.equal(out[0], table[0] * 2)
    except InputError:
        raised = True
    if not raised:
        with pytest.raises(InputError, match="an index holds 100, outside the axis"):
            fd.execute([table, good])
    torch.cuda.synchronize()
    check(fd, [table, good])
    assert torch.equal(torch.ones(4, device="cuda").sum(), torch.tensor(4.0, device="cuda"))


@pytest.mark.gpu
@requires_gpu
def test_several_bad_positions_on_the_gpu_raise_once() -> None:
    """Two reads of one bad index on the GPU: one InputError (from the call or the next one),
    then every valid call runs, through the fast path too."""
    torch = cuda_torch()
    fd = _two_reads_of_one_index()
    x = torch.randn((900, 130), device="cuda")
    good = torch.randint(0, 130, (900, 50), device="cuda", dtype=torch.int32)
    check(fd, [x, good])
    bad = good.clone()
    bad[7, 3] = 130
    with pytest.raises(InputError, match="an index holds 130"):
        fd.execute([x, bad])
        torch.cuda.synchronize()
        fd.execute([x, good])
    torch.cuda.synchronize()
    for _ in range(3):
        check(fd, [x, good])
