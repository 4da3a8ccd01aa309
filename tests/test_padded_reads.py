"""Pads of a kernel's inputs read inside the pointwise kernel that consumes them
(kfuse.codegen.windowed): each element the tensor's, moved by the low widths, or the pad value
outside the tensor; negative widths crop; one kernel, with no framework pad between, whole
vectors where a row is inside the window or not as a whole (host emulator; the GPU test at the
end)."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from gpu_support import cuda_torch, requires_gpu
from kfuse.dtypes import DataType
from kfuse.engine.program import KernelProgram
from kfuse.frontend import FusionDefinition
from kfuse.schedule import SchedulerType
from reference_checks import check, rand


def numpy_pad(x: np.ndarray, widths: list[int], value: Any) -> np.ndarray:
    """torch.nn.functional.pad's meaning of `widths` (the last axis first; negative ones
    crop), in NumPy."""
    pairs = [(0, 0)] * x.ndim
    for k in range(len(widths) // 2):
        pairs[x.ndim - 1 - k] = (widths[2 * k], widths[2 * k + 1])
    cropped = x[
        tuple(slice(max(0, -lo), x.shape[i] - max(0, -hi)) for i, (lo, hi) in enumerate(pairs))
    ]
    return np.pad(cropped, [(max(0, lo), max(0, hi)) for lo, hi in pairs], constant_values=value)


def _one_kernel(fd: FusionDefinition) -> str:
    """The source of the last call's program, asserted to be one pointwise kernel."""
    program = fd.last_program()
    assert isinstance(program, KernelProgram)
    assert program.schedulers() == [SchedulerType.pointwise]
    return program.cuda_source() or ""


@pytest.mark.parametrize(
    "widths",
    [[2, 3], [0, 0, 1, 2], [2, 3, 1, 0], [-1, 2], [0, 0, -2, -1], [-3, 4, 1, -1], [1, 1, 1, 1]],
)
def test_pads_and_crops_of_an_input_are_read_by_one_kernel(widths: list[int]) -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        fd.add_output(fd.ops.exp(fd.ops.pad(x, widths, 0.5)))
    x = rand((6, 9))
    (out,) = check(fd, [x])
    np.testing.assert_allclose(out, np.exp(numpy_pad(x, widths, 0.5)), rtol=1e-6)
    # Crops alone read a view of x with no window to check.
    assert ("kf::window_load(" in _one_kernel(fd)) == any(w > 0 for w in widths)


def test_a_pad_of_rows_only_reads_whole_vectors() -> None:
    """Rows padded before and after, each inside the tensor or not as a whole: read a vector
    at a time (bf16, added to another input of the padded shape)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        y = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        fd.add_output(fd.ops.add(fd.ops.pad(x, [0, 0, 2, 1]), y))
    x = rand((4, 64), dtype=ml_dtypes.bfloat16)
    y = rand((7, 64), 1, dtype=ml_dtypes.bfloat16)
    (out,) = check(fd, [x, y])
    want = (numpy_pad(x.astype(np.float32), [0, 0, 2, 1], 0.0) + y.astype(np.float32)).astype(
        ml_dtypes.bfloat16
    )
    np.testing.assert_array_equal(out.astype(np.float32), want.astype(np.float32))
    assert "kf::window_load_vec<" in _one_kernel(fd)


def test_pad_values_of_every_kind_and_from_a_scalar_input() -> None:
    with FusionDefinition() as fd:
        b = fd.define_tensor(shape=[-1, -1], dtype=DataType.Bool)
        i = fd.define_tensor(shape=[-1], dtype=DataType.Int32)
        f = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        s = fd.define_scalar(None, dtype=DataType.Double)
        fd.add_output(fd.ops.pad(b, [1, 1, 1, 1], True))
        fd.add_output(fd.ops.pad(i, [3, 1]))
        fd.add_output(fd.ops.mul(fd.ops.pad(f, [-1, 2], s), 2.0))
    b = np.random.default_rng(0).integers(0, 2, (3, 4)).astype(bool)
    i = np.arange(5, dtype=np.int32)
    f = rand((3, 6))
    outs = check(fd, [b, i, f, 3.25])
    np.testing.assert_array_equal(outs[0], numpy_pad(b, [1, 1, 1, 1], True))
    np.testing.assert_array_equal(outs[1], numpy_pad(i, [3, 1], 0))
    np.testing.assert_allclose(outs[2], numpy_pad(f, [-1, 2], 3.25) * 2, rtol=1e-6)


def test_odd_layouts_and_an_empty_axis() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Float)
        fd.add_output(fd.ops.neg(fd.ops.pad(x, [1, 0, 1, 1, 0, 0])))
    base = rand((3, 5, 18))
    for x in (
        base,
        base[:, :, 1:17],
        base.transpose(0, 2, 1).copy().transpose(0, 2, 1),
        base[:, :0],
    ):
        (out,) = check(fd, [x])
        np.testing.assert_array_equal(out, -numpy_pad(x, [1, 0, 1, 1, 0, 0], 0.0))


@pytest.mark.parametrize("widths", [[-1, 0], [-1, 0, -2, 0], [0, -3, -1, -4], [-2, -1, 0, -5]])
def test_crops_of_a_row_constant_input_read_through_split_rows(widths: list[int]) -> None:
    """Crops (negative widths only: no window) of an input constant along its short rows
    (stride 0 there, an expanded column) lengthen the rows as any such read does (SPLIT
    sub-axes), from the element the crop starts at. A GPU campaign found the split read's
    operand built as the padded read's (one axis, stride 0): every row read garbage."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Double)
        fd.add_output(fd.ops.add(fd.ops.mul(fd.ops.pad(x, widths, 0.0), -0.5), 1.5))
    column = rand((127, 1)).astype(np.float64)
    x = np.broadcast_to(column, (127, 8))
    (out,) = check(fd, [x])
    np.testing.assert_array_equal(out, numpy_pad(x, widths, 0.0) * -0.5 + 1.5)
    _one_kernel(fd)


def test_a_pad_of_computed_values_reads_them_in_the_next_kernel() -> None:
    """pad(x * 2) with a width from a scalar input: x * 2 from one kernel, padded by the next
    as it reads it; the two merged into one program."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Int32)
        lo = fd.define_scalar(None, dtype=DataType.Int)
        fd.add_output(fd.ops.pad(fd.ops.mul(x, 2), [lo, 1]))
    x = np.arange(4, dtype=np.int32)
    for left in (3, -2):
        (out,) = check(fd, [x, left])
        np.testing.assert_array_equal(out, numpy_pad(2 * x, [left, 1], 0))
        program = fd.last_program()
        assert isinstance(program, KernelProgram)
        assert SchedulerType.expr_eval not in program.schedulers()


@pytest.mark.gpu
@requires_gpu
def test_padded_reads_on_the_gpu() -> None:
    """Rows and columns padded and cropped on the GPU, bf16: compiled, cached and through the
    host fast path, right against the reference."""
    torch = cuda_torch()
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        fd.add_output(
            fd.ops.cast(fd.ops.exp(fd.ops.pad(x, [3, -2, 1, 5], 0.25)), DataType.BFloat16)
        )
        fd.add_output(fd.ops.pad(x, [0, 0, 7, 9], -1.0))
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn((1000, 1024), device="cuda", generator=gen).to(torch.bfloat16)
    for _ in range(3):
        padded, rows = check(fd, [x])
    # (check compared exp's output with the reference; the pad alone is exact)
    assert padded.shape == (1006, 1025)
    assert torch.equal(rows, torch.nn.functional.pad(x, [0, 0, 7, 9], value=-1.0))
    assert fd._executor_cache.fast_calls([x], None) is not None
