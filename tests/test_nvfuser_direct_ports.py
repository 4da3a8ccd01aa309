"""nvFuser's tests/python/direct tests, ported: each builds the fusion the nvFuser test builds,
runs it on CPU torch tensors (the host emulator, emulator-sized shapes) and compares with
torch eager. docs/guides/nvfuser-tests.md lists every nvFuser test and where it is ported."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch

from kfuse.errors import DefinitionError, InputError
from kfuse.nvfuser_direct import DataType, FusionDefinition

Build = Callable[[FusionDefinition], None]


def run(build: Build, inputs: Sequence[Any]) -> list[torch.Tensor]:
    """The outputs of the fusion `build` defines, for `inputs`."""
    with FusionDefinition() as fd:
        build(fd)
    return list(fd.execute(list(inputs)))


# ---- test_python_frontend.py ----


def test_basic_fp16() -> None:
    a, b = torch.randn(2, 4, 8).half(), torch.randn(2, 4, 8).half()

    def build(fd: FusionDefinition) -> None:
        t0, t1 = fd.from_pytorch(a), fd.from_pytorch(b)
        scaled = fd.ops.mul(fd.ops.add(t0, t1), fd.define_scalar(3.0))
        fd.add_output(fd.ops.cast(fd.ops.sum(scaled, [-1], False, DataType.Float), DataType.Half))

    out = run(build, [a, b])[0]
    assert out.dtype == torch.float16
    # add and mul of Half values give Half values (each rounded), as in torch eager.
    torch.testing.assert_close(out, torch.sum((a + b) * 3, dim=-1, dtype=torch.float32).half())


def test_define_noncontiguous_tensor() -> None:
    # Both inputs are transposed views: kfuse reads their strides.
    a, b = torch.randn(4, 6).t(), torch.randn(4, 6).t()

    def build(fd: FusionDefinition) -> None:
        fd.add_output(fd.ops.add(fd.from_pytorch(a), fd.from_pytorch(b)))

    torch.testing.assert_close(run(build, [a, b])[0], a + b)


def test_define_broadcast_tensor() -> None:
    a, b = torch.randn(3, 1), torch.randn(3, 5)

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=DataType.Float)
        t1 = fd.from_pytorch(b)
        fd.add_output(fd.ops.add(t0, t1))

    torch.testing.assert_close(run(build, [a, b])[0], a + b)


def test_cast_scalar() -> None:
    a = torch.ones(2, 4, 8, dtype=torch.int32)
    b = torch.full((2, 4, 8), 2, dtype=torch.int32)

    def build(fd: FusionDefinition) -> None:
        total = fd.ops.add(fd.from_pytorch(a), fd.from_pytorch(b))
        three = fd.ops.cast(fd.define_scalar(3.0), DataType.Int32)
        fd.add_output(fd.ops.sum(fd.ops.mul(total, three), [-1], False, DataType.Int32))

    out = run(build, [a, b])[0]
    assert out.dtype == torch.int32
    torch.testing.assert_close(out, torch.sum((a + b) * 3, dim=-1, dtype=torch.int32))


def test_cast_double_to_half() -> None:
    a, b = torch.randn(2, 4, dtype=torch.float64), torch.randn(2, 4, dtype=torch.float64)

    def build(fd: FusionDefinition) -> None:
        t0 = fd.ops.cast(fd.from_pytorch(a), DataType.Half)
        t1 = fd.ops.cast(fd.from_pytorch(b), DataType.Half)
        fd.add_output(fd.ops.cast(fd.ops.relu(fd.ops.add(t0, t1)), DataType.Half))

    torch.testing.assert_close(run(build, [a, b])[0], torch.relu(a.half() + b.half()))


def test_promote_to_double() -> None:
    a, b = torch.randn(2, 4).half(), torch.randn(2, 4, dtype=torch.float64)

    def build(fd: FusionDefinition) -> None:
        fd.add_output(fd.ops.relu(fd.ops.add(fd.from_pytorch(a), fd.from_pytorch(b))))

    out = run(build, [a, b])[0]
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, torch.relu(a + b))


def test_broadcast() -> None:
    a, b = torch.randn(3), torch.randn(3, 3)

    def build(fd: FusionDefinition) -> None:
        row = fd.ops.broadcast_in_dim(fd.from_pytorch(a), [3, 3], [1])
        fd.add_output(fd.ops.add(row, fd.from_pytorch(b)))

    torch.testing.assert_close(run(build, [a, b])[0], a.expand(3, 3) + b)


def test_implicit_broadcast_input() -> None:
    a, b = torch.randn(3), torch.randn(2, 3, 4)

    def build(fd: FusionDefinition) -> None:
        mid = fd.ops.broadcast_in_dim(fd.from_pytorch(a), [2, 3, 4], [1])
        fd.add_output(fd.ops.add(mid, fd.from_pytorch(b)))

    torch.testing.assert_close(run(build, [a, b])[0], a[None, :, None] + b)


def test_explicit_broadcast_input() -> None:
    a, b = torch.randn(1, 1, 4), torch.randn(2, 3, 4)

    def build(fd: FusionDefinition) -> None:
        full = fd.ops.broadcast_in_dim(fd.from_pytorch(a), [2, 3, 4], [0, 1, 2])
        fd.add_output(fd.ops.add(full, fd.from_pytorch(b)))

    torch.testing.assert_close(run(build, [a, b])[0], a + b)


def test_broadcast_mixing() -> None:
    a, b = torch.randn(3, 1), torch.randn(3)

    def build(fd: FusionDefinition) -> None:
        t0, t1 = fd.from_pytorch(a), fd.from_pytorch(b)
        fd.add_output(fd.ops.add(t0, fd.ops.broadcast_in_dim(t1, [3, 3], [0])))

    torch.testing.assert_close(run(build, [a, b])[0], a + b[:, None].expand(3, 3))


@pytest.mark.parametrize("keepdim", [False, True])
def test_expanded_reduction(keepdim: bool) -> None:
    # One stored value seen as a [2, 3] array (both strides 0).
    x = torch.tensor(1.5).as_strided((2, 3), (0, 0))

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[None, None], dtype=DataType.Float)
        fd.add_output(fd.ops.sum(t0, dims=[0], keepdim=keepdim, dtype=DataType.Null))

    torch.testing.assert_close(run(build, [x])[0], x.sum(0, keepdim=keepdim))


def test_where() -> None:
    cond = torch.tensor([[True, False, True], [False, False, True]])
    a, b = torch.randn(2, 3), torch.randn(2, 3)

    def build(fd: FusionDefinition) -> None:
        c, t0, t1 = (fd.from_pytorch(v) for v in (cond, a, b))
        fd.add_output(fd.ops.where(c, t0, t1))

    torch.testing.assert_close(run(build, [cond, a, b])[0], torch.where(cond, a, b))


def test_where_dtypes() -> None:
    # The output dtype of where(cond, scalar, scalar) is the scalars' dtype.
    cond = torch.tensor([False, True])
    cases = [
        (3.0, 5.0, None, torch.float64),
        (3.0, 5.0, DataType.Float, torch.float32),
        (3, 5, DataType.Int32, torch.int32),
        (3, 5, None, torch.int64),
        (complex(3.0), complex(5.0), None, torch.complex128),
        (3.0 + 0j, 5.0 + 0j, DataType.ComplexFloat, torch.complex64),
        (3.0 + 0j, 5.0 + 0j, DataType.ComplexDouble, torch.complex128),
        (True, False, DataType.Bool, torch.bool),
    ]

    def build(fd: FusionDefinition) -> None:
        c = fd.from_pytorch(cond)
        for yes, no, dtype, _ in cases:
            if dtype is None:
                pair = fd.define_scalar(yes), fd.define_scalar(no)
            else:
                pair = fd.define_scalar(yes, dtype), fd.define_scalar(no, dtype)
            fd.add_output(fd.ops.where(c, *pair))

    for out, (yes, no, _, torch_dtype) in zip(run(build, [cond]), cases, strict=True):
        assert out.dtype == torch_dtype
        torch.testing.assert_close(out, torch.tensor([no, yes], dtype=torch_dtype))


def test_complex_constants() -> None:
    x = torch.arange(2).type(torch.complex64)

    def build(fd: FusionDefinition) -> None:
        fd.add_output(fd.ops.mul(fd.from_pytorch(x), fd.define_scalar(complex(3.0, 0.5))))

    (out,) = run(build, [x])
    assert out.dtype == torch.complex64
    torch.testing.assert_close(out, x * (3.0 + 0.5j))


def test_complex_rsqrt() -> None:
    a = torch.randn(4, dtype=torch.complex64)
    b = torch.randn(4, dtype=torch.complex128)

    def build(fd: FusionDefinition) -> None:
        fd.add_output(fd.ops.rsqrt(fd.from_pytorch(a)))
        fd.add_output(fd.ops.rsqrt(fd.from_pytorch(b)))

    got_a, got_b = run(build, [a, b])
    torch.testing.assert_close(got_a, a.rsqrt())
    torch.testing.assert_close(got_b, b.rsqrt())


@pytest.mark.parametrize("dtype", [torch.complex128, torch.complex64])
def test_real_imag(dtype: torch.dtype) -> None:
    x = torch.randn(5, dtype=dtype)

    def build(fd: FusionDefinition) -> None:
        t0 = fd.from_pytorch(x)
        fd.add_output(fd.ops.real(t0))
        fd.add_output(fd.ops.imag(t0))

    real, imag = run(build, [x])
    torch.testing.assert_close(real, torch.real(x))
    torch.testing.assert_close(imag, torch.imag(x))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_reduction_complex_number(dtype: torch.dtype) -> None:
    x = torch.randn(2, 32, dtype=dtype)
    nv_dtype = DataType.ComplexFloat if dtype == torch.complex64 else DataType.ComplexDouble

    def build(fd: FusionDefinition) -> None:
        fd.add_output(fd.ops.sum(fd.from_pytorch(x), [-1], False, nv_dtype))

    (out,) = run(build, [x])
    assert out.dtype == dtype
    torch.testing.assert_close(out, torch.sum(x, dim=-1))


def test_welford() -> None:
    x = torch.randn(3, 5)

    def build(fd: FusionDefinition) -> None:
        mean, var_sum, n = fd.ops.welford(fd.from_pytorch(x), [-1])
        fd.add_output(fd.ops.div(var_sum, n))
        fd.add_output(mean)

    var, mean = run(build, [x])
    want_var, want_mean = torch.var_mean(x, [-1], correction=0)
    torch.testing.assert_close(var, want_var)
    torch.testing.assert_close(mean, want_mean)


@pytest.mark.parametrize("correction", [0, 1])
def test_var_correction(correction: int) -> None:
    x = torch.randn(3, 4)

    def build(fd: FusionDefinition) -> None:
        fd.add_output(fd.ops.var(fd.from_pytorch(x), [-1], correction))

    torch.testing.assert_close(run(build, [x])[0], torch.var(x, [-1], correction=correction))


@pytest.mark.parametrize("correction", [0, 1])
def test_var_mean_correction(correction: int) -> None:
    x = torch.randn(3, 4)

    def build(fd: FusionDefinition) -> None:
        var, mean = fd.ops.var_mean(fd.from_pytorch(x), [-1], correction)
        fd.add_output(var)
        fd.add_output(mean)

    var, mean = run(build, [x])
    want_var, want_mean = torch.var_mean(x, [-1], correction=correction)
    torch.testing.assert_close(var, want_var)
    torch.testing.assert_close(mean, want_mean)


def test_all_dim_var_mean() -> None:
    x = torch.randn(2, 3, 4)

    def build(fd: FusionDefinition) -> None:
        var, mean = fd.ops.var_mean(fd.from_pytorch(x), [0, 1, 2], 0)
        fd.add_output(var)
        fd.add_output(mean)

    var, mean = run(build, [x])
    want_var, want_mean = torch.var_mean(x, [0, 1, 2], correction=0)
    torch.testing.assert_close(var, want_var)
    torch.testing.assert_close(mean, want_mean)


def test_zero_size_dim() -> None:
    x = torch.ones(0, 0)

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(shape=[0, 0], contiguity=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.relu(t0))

    out = run(build, [x])[0]
    assert out.shape == (0, 0)


def test_constant_nans() -> None:
    x = torch.randn(4, 4)

    def build(fd: FusionDefinition) -> None:
        fd.add_output(fd.ops.add(fd.from_pytorch(x), fd.define_scalar(float("nan"))))

    torch.testing.assert_close(run(build, [x])[0], x + float("nan"), equal_nan=True)


def test_misaligned_add() -> None:
    # The first input starts one element into its storage (no vector loads from it).
    a = torch.ones(1025)[1:]
    b = torch.arange(1024, dtype=torch.float32)

    def build(fd: FusionDefinition) -> None:
        fd.add_output(fd.ops.add(fd.from_pytorch(a), fd.from_pytorch(b)))

    torch.testing.assert_close(run(build, [a, b])[0], a + b)


def test_scalar_only_inputs() -> None:
    def build(fd: FusionDefinition) -> None:
        total = fd.ops.add(fd.define_scalar(), fd.define_scalar())
        one = fd.define_scalar(1.0, DataType.Float)
        ones = fd.ops.full(shape=[2, 2], fill_value=one, dtype=DataType.Float)
        fd.add_output(fd.ops.mul(ones, total))

    # Without a tensor input kfuse runs on the emulator and returns NumPy arrays.
    out = torch.as_tensor(run(build, [2.0, 3.0])[0])
    torch.testing.assert_close(out, torch.full([2, 2], 5.0))


def test_dynamic_bcast_in_dim() -> None:
    row, other = torch.randn(1, 10), torch.randn(5, 10)

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(shape=[1, -1], contiguity=[None, True], dtype=DataType.Float)
        rows, cols = (
            fd.define_scalar(None, dtype=DataType.Int),
            fd.define_scalar(None, dtype=DataType.Int),
        )
        t1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.add(fd.ops.broadcast_in_dim(t0, (rows, cols), (0, 1)), t1))

    torch.testing.assert_close(run(build, [row, 5, 10, other])[0], row + other)


def test_dynamic_full() -> None:
    other = torch.randn(5, 10)

    def build(fd: FusionDefinition) -> None:
        rows, cols = (
            fd.define_scalar(None, dtype=DataType.Int),
            fd.define_scalar(None, dtype=DataType.Int),
        )
        value = fd.define_scalar(None, dtype=DataType.Float)
        t1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.add(fd.ops.full((rows, cols), value, DataType.Float), t1))

    torch.testing.assert_close(run(build, [5, 10, 2.5, other])[0], other + 2.5)


def test_dynamic_reshape() -> None:
    x = torch.rand(3, 4)

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor([-1, -1], [True, True])
        d1, d2 = fd.define_scalar(dtype=DataType.Int32), fd.define_scalar(dtype=DataType.Int32)
        fd.add_output(fd.ops.reshape(t0, [fd.ops.size(t0, 0), d1, d2]))

    outs = run(build, [x, 2, 2])
    assert len(outs) == 1
    torch.testing.assert_close(outs[0], x.reshape(3, 2, 2))


def test_empty_reshape() -> None:
    x = torch.randint(0, 10, (0, 1, 2, 3, 4))

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(
            shape=[-1, 1, -1, -1, -1],
            contiguity=[False, None, True, True, True],
            dtype=DataType.Int,
            stride_order=[4, 3, 2, 1, 0],
        )
        five, zero = (
            fd.define_scalar(5, dtype=DataType.Int),
            fd.define_scalar(0, dtype=DataType.Int),
        )
        fd.add_output(fd.ops.reshape(t0, new_shape=[five, zero]))

    out = run(build, [x])[0]
    assert out.shape == (5, 0)


def test_expand() -> None:
    a, b = torch.randn(1, 1, 4), torch.randn(2, 3, 4)

    def build(fd: FusionDefinition) -> None:
        t0, t1 = fd.from_pytorch(a), fd.from_pytorch(b)
        fd.add_output(fd.ops.mul(fd.ops.expand(t0, b.size()), t1))

    torch.testing.assert_close(run(build, [a, b])[0], a.expand(2, 3, 4) * b)


@pytest.mark.parametrize("dim", [0, 1])
def test_index_select_scalar_indices(dim: int) -> None:
    # nvFuser's index is a 0-dim CUDA tensor; a 0-dim CPU tensor from from_pytorch would be a
    # CPU scalar, so the emulator's port defines the rank-0 tensor explicitly.
    x, index = torch.randn(8, 16), torch.tensor(2)

    def build(fd: FusionDefinition) -> None:
        t0 = fd.from_pytorch(x)
        t1 = fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Int)
        fd.add_output(fd.ops.index_select(t0, t1, dim))

    torch.testing.assert_close(run(build, [x, index])[0], torch.index_select(x, dim, index))


@pytest.mark.parametrize("dim", [0, 1])
def test_select(dim: int) -> None:
    x = torch.randn(8, 16)

    def build(fd: FusionDefinition) -> None:
        t0 = fd.from_pytorch(x)
        fd.add_output(fd.ops.select(t0, fd.define_scalar(dtype=DataType.Int), dim))

    torch.testing.assert_close(run(build, [x, 2])[0], torch.select(x, dim, 2))


def test_slice() -> None:
    # The same slice three ways: constant bounds, the input's shape as the end, and both
    # bounds as vectors given at execute.
    x = torch.randn(2, 5, 10)
    start = (0, 1, 2)

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(
            shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.Float
        )
        fd.add_output(
            fd.ops.slice(t0, start_indices=start, end_indices=(2, 5, 10), strides=(1, 1, 1))
        )
        fd.add_output(fd.ops.slice(t0, list(start), t0.shape()))
        fd.add_output(fd.ops.slice(t0, fd.define_vector(3), fd.define_vector(3)))

    outs = run(build, [x, *start, *x.shape])
    assert len(outs) == 3
    for out in outs:
        torch.testing.assert_close(out, x[:, 1:, 2:])


def test_pad_dynamic() -> None:
    x = torch.randn(1, 2, 3)

    def build(fd: FusionDefinition) -> None:
        scaled = fd.ops.mul(
            fd.define_scalar(2.5, dtype=DataType.Float), fd.define_scalar(7, dtype=DataType.Int)
        )
        width = fd.ops.cast(scaled, dtype=DataType.Int)
        fd.add_output(fd.ops.pad(fd.from_pytorch(x), [width, width, width, width]))

    torch.testing.assert_close(run(build, [x])[0], torch.nn.functional.pad(x, [17, 17, 17, 17]))


def test_input_scalar() -> None:
    x = torch.randn(3)

    def build(fd: FusionDefinition) -> None:
        fd.add_output(fd.ops.mul(fd.from_pytorch(x), fd.define_scalar()))

    torch.testing.assert_close(run(build, [x, 0.1])[0], x * 0.1)


def test_tensor_shape_expand_bcast() -> None:
    full, a, b = torch.randn(2, 3, 4), torch.randn(2, 1, 4), torch.randn(2, 1, 4)

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True])
        t1 = fd.define_tensor(shape=[-1, 1, -1], contiguity=[True, None, True])
        t2 = fd.define_tensor(shape=[-1, 1, -1], contiguity=[True, None, True])
        t1_b = fd.ops.broadcast_in_dim(t1, t0.shape(), [0, 1, 2])
        fd.add_output(fd.ops.broadcast_in_dim(t2, t1_b.shape(), [0, 1, 2]))

    torch.testing.assert_close(run(build, [full, a, b])[0], b.expand(2, 3, 4))


def test_expand_to_zero() -> None:
    empty, one = torch.zeros(1, 0), torch.zeros(1, 1)

    def build(fd: FusionDefinition) -> None:
        t0, t1 = fd.from_pytorch(empty), fd.from_pytorch(one)
        fd.add_output(fd.ops.broadcast_in_dim(t0, shape=[0, 0], broadcast_dims=[0, 1]))
        fd.add_output(fd.ops.broadcast_in_dim(t1, shape=[0, 0], broadcast_dims=[0, 1]))

    assert [tuple(out.shape) for out in run(build, [empty, one])] == [(0, 0), (0, 0)]


def test_pad_expanded_empty() -> None:
    x = torch.randn(0, dtype=torch.float64).as_strided((2, 0, 3), (0, 0, 0))

    def build(fd: FusionDefinition) -> None:
        value = fd.define_scalar(-3.70753, dtype=DataType.Double)
        fd.add_output(fd.ops.pad(fd.from_pytorch(x), [0, 0, 1, 1, 1, 0], value))

    expected = torch.nn.functional.pad(x, (0, 0, 1, 1, 1, 0), "constant", -3.70753)
    torch.testing.assert_close(run(build, [x])[0], expected)


def test_define_contiguous_tensor() -> None:
    x = torch.randn(2, 3)

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor([2, 3], contiguity=True)
        fd.add_output(fd.ops.add(t0, t0))

    torch.testing.assert_close(run(build, [x])[0], x * 2)


def test_define_tensor_contiguity_with_stride_order() -> None:
    x = torch.randn(1, 2)

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor([1, 2], contiguity=True, stride_order=[0, 1])
        fd.add_output(fd.ops.add(t0, t0))

    torch.testing.assert_close(run(build, [x])[0], x * 2)


def test_reshape_dynamic() -> None:
    # The second extent is 192 // rows, rounded toward minus infinity, worked out of scalar
    # ops the way Thunder's translation of reshape(-1) writes it.
    x = torch.randn(192).as_strided((4, 8, 6), (48, 6, 1))

    def build(fd: FusionDefinition) -> None:
        rows = fd.define_scalar(None, dtype=DataType.Int)
        t1 = fd.define_tensor(
            shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.Float
        )
        r = fd.ops.mul(fd.define_scalar(1, dtype=DataType.Int), rows)
        negative = fd.ops.ne(fd.ops.signbit(r), fd.define_scalar(False, dtype=DataType.Bool))
        rest = fd.ops.cast(
            fd.ops.fmod(fd.define_scalar(192, dtype=DataType.Int), r), dtype=DataType.Int
        )
        inexact = fd.ops.ne(rest, fd.define_scalar(0, dtype=DataType.Int))
        adjust = fd.ops.cast(fd.ops.bitwise_and(negative, inexact), dtype=DataType.Int)
        quotient = fd.ops.mul(fd.define_scalar(192, dtype=DataType.Int), fd.ops.reciprocal(r))
        cols = fd.ops.sub(quotient, adjust)
        fd.add_output(
            fd.ops.sum(fd.ops.reshape(t1, new_shape=[rows, cols]), dims=[1], keepdim=False)
        )

    torch.testing.assert_close(run(build, [32, x])[0], x.reshape(32, 6).sum(1))


@pytest.mark.parametrize("dim", [0, 1])
def test_index_select(dim: int) -> None:
    a, b, index = torch.randn(8, 16), torch.randn(8, 16), torch.randint(0, 8, (6,))

    def build(fd: FusionDefinition) -> None:
        t0, t1, t2 = fd.from_pytorch(a), fd.from_pytorch(b), fd.from_pytorch(index)
        fd.add_output(fd.ops.index_select(fd.ops.add(t0, t1), t2, dim))

    torch.testing.assert_close(run(build, [a, b, index])[0], torch.index_select(a + b, dim, index))


@pytest.mark.parametrize("dim", [0, 1])
def test_take_along_axis(dim: int) -> None:
    a, b, index = torch.randn(8, 16), torch.randn(8, 16), torch.randint(0, 8, (8, 16))

    def build(fd: FusionDefinition) -> None:
        t0, t1, t2 = fd.from_pytorch(a), fd.from_pytorch(b), fd.from_pytorch(index)
        fd.add_output(fd.ops.take_along_axis(fd.ops.add(t0, t1), t2, dim))

    torch.testing.assert_close(run(build, [a, b, index])[0], torch.gather(a + b, dim, index))


@pytest.mark.parametrize("dim", [0, 1])
def test_gather(dim: int) -> None:
    # The index is smaller than the input on every axis.
    a, b, index = torch.randn(8, 16), torch.randn(8, 16), torch.randint(0, 8, (4, 4))

    def build(fd: FusionDefinition) -> None:
        t0, t1, t2 = fd.from_pytorch(a), fd.from_pytorch(b), fd.from_pytorch(index)
        fd.add_output(fd.ops.gather(fd.ops.add(t0, t1), t2, dim))

    torch.testing.assert_close(run(build, [a, b, index])[0], torch.gather(a + b, dim, index))


def test_pad() -> None:
    x = torch.randn(1, 2, 3)
    widths = [[1, 1, 1, 1], [0, 0, 2, 3], [0, 0, 0, 0], [2, 3], [2, 3, 0, 0, 0, 0]]

    def build(fd: FusionDefinition) -> None:
        t0 = fd.from_pytorch(x)
        for w in widths:
            fd.add_output(fd.ops.pad(t0, w))
        fd.add_output(fd.ops.pad(t0, [2, 3], fd.define_scalar(2.0)))

    outs = run(build, [x])
    for out, w in zip(outs, widths, strict=False):
        torch.testing.assert_close(out, torch.nn.functional.pad(x, w))
    torch.testing.assert_close(outs[-1], torch.nn.functional.pad(x, [2, 3], "constant", 2.0))


def test_cat() -> None:
    # The empty fourth input is defined and left unused, as in nvFuser's test.
    a, b, c, empty = torch.randn(2, 4), torch.randn(2, 3), torch.randn(4, 4), torch.randn(0, 4)

    def build(fd: FusionDefinition) -> None:
        t0, t1, t2 = fd.from_pytorch(a), fd.from_pytorch(b), fd.from_pytorch(c)
        fd.from_pytorch(empty)
        fd.add_output(fd.ops.cat([t0, t1], 1))
        fd.add_output(fd.ops.cat([t0, t2], 0))

    first, second = run(build, [a, b, c, empty])
    torch.testing.assert_close(first, torch.cat([a, b], dim=1))
    torch.testing.assert_close(second, torch.cat([a, c], dim=0))


def test_tensor_shape() -> None:
    a, b = torch.randn(2, 3, 4), torch.randn(4)

    def build(fd: FusionDefinition) -> None:
        t0, t1 = fd.from_pytorch(a), fd.from_pytorch(b)
        fd.add_output(fd.ops.sub(t0, fd.ops.broadcast_in_dim(t1, t0.shape(), [2])))

    torch.testing.assert_close(run(build, [a, b])[0], a - b)


def test_tensor_shape_nobcast() -> None:
    a, b = torch.randn(2, 3), torch.randn(2, 3)

    def build(fd: FusionDefinition) -> None:
        t0, t1 = fd.from_pytorch(a), fd.from_pytorch(b)
        fd.add_output(fd.ops.add(t0, fd.ops.broadcast_in_dim(t1, t0.shape(), [0, 1])))

    torch.testing.assert_close(run(build, [a, b])[0], a + b)


def test_tensor_shape_with_output_bcast() -> None:
    # One definition run at two shapes: the broadcast takes each call's shape.
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True])
        fd.add_output(fd.ops.broadcast_in_dim(fd.ops.sum(t0, dims=[2]), t0.shape(), [0, 1]))
    for shape in [(2, 3, 4), (4, 5, 32)]:
        x = torch.randn(shape)
        expected = x.sum(-1, keepdim=True).expand(shape)
        torch.testing.assert_close(fd.execute([x])[0], expected)


def test_contiguous() -> None:
    """nvFuser's test_contiguous (test_allocation.py): a [1, 1] tensor with stride 2 on its
    size-1 axis is contiguous by definition."""
    with FusionDefinition() as fd:
        t0 = fd.define_tensor([-1, -1], dtype=DataType.Float, contiguity=True)
        fd.add_output(fd.ops.sum(t0, [-1]))
    x = torch.as_strided(torch.ones(1), [1, 1], [2, 1])
    torch.testing.assert_close(fd.execute([x])[0], torch.ones(1))


# ---- test_high_complexity.py ----


def layer_norm_by_hand(fd: FusionDefinition, shape: torch.Size, eps: float) -> None:
    """nvFuser's test_prim_layer_norm_fwd fusion: mean and variance from sums over the last
    axis, kept as size-1 axes."""
    x = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.Float)
    weight = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
    bias = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
    n = fd.define_scalar(shape[2])
    mean = fd.ops.div(fd.ops.sum(x, dims=[2], keepdim=True), n)
    diff = fd.ops.sub(x, mean)
    var = fd.ops.div(fd.ops.sum(fd.ops.mul(diff, diff), dims=[2], keepdim=True), n)
    invstd = fd.ops.rsqrt(fd.ops.add(var, fd.define_scalar(eps)))
    w = fd.ops.broadcast_in_dim(weight, shape=list(shape), broadcast_dims=[2])
    b = fd.ops.broadcast_in_dim(bias, shape=list(shape), broadcast_dims=[2])
    fd.add_output(fd.ops.add(fd.ops.mul(fd.ops.mul(diff, invstd), w), b))
    fd.add_output(mean)
    fd.add_output(invstd)


def layer_norm_by_var_mean(fd: FusionDefinition, shape: torch.Size, eps: float) -> None:
    """The same layer norm with var_mean."""
    x = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.Float)
    weight = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
    bias = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
    var, mean = fd.ops.var_mean(x, dims=[2], correction=0, keepdim=True)
    invstd = fd.ops.rsqrt(fd.ops.add(var, fd.define_scalar(eps)))
    w = fd.ops.broadcast_in_dim(weight, shape=list(shape), broadcast_dims=[2])
    b = fd.ops.broadcast_in_dim(bias, shape=list(shape), broadcast_dims=[2])
    fd.add_output(fd.ops.add(fd.ops.mul(fd.ops.mul(fd.ops.sub(x, mean), invstd), w), b))
    fd.add_output(mean)
    fd.add_output(invstd)


@pytest.mark.parametrize("definition", [layer_norm_by_hand, layer_norm_by_var_mean])
def test_prim_layer_norm_fwd(definition: Callable[..., None]) -> None:
    x, weight, bias = torch.randn(4, 8, 64), torch.randn(64), torch.randn(64)
    eps = 1e-12
    with FusionDefinition() as fd:
        definition(fd, x.shape, eps)
    out, mean, invstd = fd.execute([x, weight, bias])
    want_mean = x.mean(2, keepdim=True)
    want_var = ((x - want_mean) ** 2).mean(2, keepdim=True)
    expected = weight * (x - want_mean) / torch.sqrt(want_var + eps) + bias
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(mean, want_mean)
    torch.testing.assert_close(invstd, torch.rsqrt(want_var + eps))


def test_prim_rms_norm_fwd() -> None:
    x, weight = torch.randn(4, 8, 64), torch.randn(64)
    eps = 1e-12

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(
            shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.Float
        )
        w = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        squares = fd.ops.sum(fd.ops.mul(t0, t0), dims=[2], keepdim=True)
        var = fd.ops.div(squares, fd.define_scalar(x.shape[2]))
        invstd = fd.ops.rsqrt(fd.ops.add(var, fd.define_scalar(eps)))
        scale = fd.ops.broadcast_in_dim(w, shape=list(x.shape), broadcast_dims=[2])
        fd.add_output(fd.ops.mul(fd.ops.mul(t0, invstd), scale))
        fd.add_output(invstd)

    out, invstd = run(build, [x, weight])
    var = (x * x).mean(2, keepdim=True)
    torch.testing.assert_close(out, weight * x / torch.sqrt(var + eps))
    torch.testing.assert_close(invstd, torch.rsqrt(var + eps))


def test_cat_symbolic() -> None:
    # nvFuser's [4, 6, 64, 128] heads at [2, 3, 4, 8]: scaled queries and keys back to
    # [batch, tokens, heads * size], a cat with a third input on the last axis, and a sum.
    q, k, other = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 4, 8), torch.randn(2, 4, 24)
    scale = 0.29730177875068026

    def build(fd: FusionDefinition) -> None:
        s_q, s_k = (
            fd.define_scalar(None, dtype=DataType.Double),
            fd.define_scalar(None, dtype=DataType.Double),
        )
        t_q = fd.define_tensor(shape=[-1] * 4, contiguity=[True] * 4, dtype=DataType.Float)
        t_k = fd.define_tensor(shape=[-1] * 4, contiguity=[True] * 4, dtype=DataType.Float)
        t_o = fd.define_tensor(shape=[-1] * 3, contiguity=[True] * 3, dtype=DataType.Float)
        keys = fd.ops.permute(
            fd.ops.permute(fd.ops.mul(t_k, s_k), dims=[0, 1, 3, 2]), dims=[0, 2, 1, 3]
        )
        queries = fd.ops.permute(fd.ops.mul(t_q, s_q), dims=[0, 2, 1, 3])
        flat = [fd.define_scalar(v, dtype=DataType.Int) for v in (2, 4, 24)]
        joined = fd.ops.cat(
            [fd.ops.reshape(queries, new_shape=flat), fd.ops.reshape(keys, new_shape=flat), t_o],
            dim=2,
        )
        fd.add_output(joined)
        fd.add_output(fd.ops.sum(joined, [0, 1], keepdim=False, dtype=DataType.Null))

    joined, total = run(build, [scale, scale, q, k, other])
    want_q = (q * scale).permute(0, 2, 1, 3).reshape(2, 4, 24)
    want_k = (k * scale).permute(0, 1, 3, 2).permute(0, 2, 1, 3).reshape(2, 4, 24)
    want = torch.cat([want_q, want_k, other], dim=2)
    torch.testing.assert_close(joined, want)
    torch.testing.assert_close(total, want.sum([0, 1]))


@pytest.mark.parametrize("split_heads", [True, False])
def test_nanogpt_split_mha_linears(split_heads: bool) -> None:
    # nanoGPT's fused qkv activations [16, 128, 3 * 1024], 16 heads, at [2, 8, 3 * 32], 4 heads.
    acts = torch.randn(2, 8, 96)

    def build(fd: FusionDefinition) -> None:
        t0 = fd.from_pytorch(acts)
        for start in (0, 32, 64):
            part = fd.ops.slice(t0, [0, 0, start], [2, 8, start + 32], [1, 1, 1])
            if split_heads:
                part = fd.ops.permute(fd.ops.reshape(part, [2, 8, 4, 8]), [0, 2, 1, 3])
            fd.add_output(part)

    outs = run(build, [acts])
    for out, part in zip(outs, acts.split(32, dim=2), strict=True):
        want = part.reshape(2, 8, 4, 8).transpose(1, 2) if split_heads else part
        torch.testing.assert_close(out, want)


BAD_SLICES = [
    ([-1, -2], [5, 5], [7, 7], "start of axis 0 is -1"),
    ([3, 4], [1, 2], [1, 1], "ends at 1, before its start 3"),
    ([0, 0, 0], [4, 4, 4], [1, 1, 1], "start_indices must be a list of 2"),
    ([0, 0, 0], [4, 4], [1, 1], "start_indices must be a list of 2"),
    ([0, 0], [4, 4, 4], [1, 1], "end_indices must be a list of 2"),
    ([0, 0], [4, 4], [1, 1, 1], "strides must be a list of 2"),
]


@pytest.mark.parametrize("size", [10, 5])
def test_slice_error_checks(size: int) -> None:
    """Each slice nvFuser refuses is a DefinitionError naming what is wrong; the legal ones
    match torch's slicing, past the end too. A stride other than 1 (an nvFuser limitation)
    is a slice kfuse computes, as torch does."""
    x = torch.randn(size, size)
    for start, end, strides, message in BAD_SLICES:
        with pytest.raises(DefinitionError, match=re.escape(message)), FusionDefinition() as fd:
            fd.add_output(fd.ops.slice(fd.from_pytorch(x), start, end, strides))

    def build(fd: FusionDefinition) -> None:
        t0 = fd.from_pytorch(x)
        fd.add_output(fd.ops.slice(t0, start_indices=[2, 2], end_indices=[4, 4]))
        fd.add_output(fd.ops.slice(t0, start_indices=[6, 6], end_indices=[8, 8], strides=[1, 1]))
        fd.add_output(fd.ops.slice(t0, start_indices=[0, 0], end_indices=[5, 5], strides=[5, 5]))

    no_strides, past_end, strided = run(build, [x])
    torch.testing.assert_close(no_strides, x[2:4, 2:4])
    torch.testing.assert_close(past_end, x[6:8, 6:8])
    torch.testing.assert_close(strided, x[0:5:5, 0:5:5])


# ---- test_python_frontend.py, layouts and corner shapes ----


def test_expanded_bcast_tensor() -> None:
    # A 0-dim tensor, a full one and a Bool mask expanded along its last axis (stride 0).
    # nvFuser's 0-dim CUDA tensor is a tensor; a 0-dim CPU tensor is a CPU scalar, which
    # from_pytorch defines as such: the values are the same.
    scalar, full = torch.tensor(1.5), torch.randn(5, 5, 5)
    mask = torch.randint(0, 2, (5, 5)).bool().unsqueeze(-1).expand(5, 5, 5)

    def build(fd: FusionDefinition) -> None:
        t0, t1, t2 = fd.from_pytorch(scalar), fd.from_pytorch(full), fd.from_pytorch(mask)
        fd.add_output(fd.ops.add(t2, fd.ops.add(t0, t1)))

    torch.testing.assert_close(run(build, [scalar, full, mask])[0], scalar + full + mask)


def test_pad_prior_cat() -> None:
    a, b = torch.randn(2, 4), torch.randn(3, 3)

    def build(fd: FusionDefinition) -> None:
        t0, t1 = fd.from_pytorch(a), fd.from_pytorch(b)
        fd.add_output(fd.ops.cat([fd.ops.pad(t0, [0, 0, 0, 8]), fd.ops.pad(t1, [0, 0, 0, 7])], 1))

    pad = torch.nn.functional.pad
    torch.testing.assert_close(
        run(build, [a, b])[0], torch.cat([pad(a, [0, 0, 0, 8]), pad(b, [0, 0, 0, 7])], 1)
    )


def test_sum_sliced_reshape_to_broadcast() -> None:
    # The slice keeps one of the last axis' two entries, so the sum over it is a squeeze.
    x = torch.randn(4, 3, 5, 8)

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(shape=[-1] * 4, contiguity=[True] * 4, dtype=DataType.Float)
        split = fd.ops.reshape(t0, new_shape=[2, 3, 5, 8, 2])
        kept = fd.ops.slice(
            split, start_indices=[0] * 5, end_indices=[2, 3, 5, 8, 1], strides=[1] * 5
        )
        fd.add_output(fd.ops.sum(kept, dims=[4], keepdim=False, dtype=DataType.Null))

    torch.testing.assert_close(run(build, [x])[0], x.reshape(2, 3, 5, 8, 2)[..., 0])


def test_mark_alias_pass() -> None:
    # nvFuser returns a reshape of a contiguous input as a view of it; kfuse's output has the
    # values (whether it shares the input's storage is not part of kfuse's contract).
    x = torch.rand(2, 3, 4)

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor([2, 3, 4], contiguity=[True, True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.reshape(t0, [2, 12]))

    outs = run(build, [x])
    assert len(outs) == 1
    torch.testing.assert_close(outs[0], x.reshape(2, 12))


def test_reshape_squeeze_concretization() -> None:
    x = torch.randn(100).as_strided((2, 5, 10), (50, 10, 1))

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(
            shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.Float
        )
        corner = fd.ops.slice(t0, start_indices=[0, 0, 0], end_indices=[1, 2, 4], strides=[1, 1, 1])
        one, eight = (
            fd.define_scalar(1, dtype=DataType.Int),
            fd.define_scalar(8, dtype=DataType.Int),
        )
        fd.add_output(
            fd.ops.reshape(fd.ops.reshape(corner, new_shape=[one, eight]), new_shape=[eight])
        )

    torch.testing.assert_close(run(build, [x])[0], x[:1, :2, :4].reshape(8))


def test_expanded_to_size_one() -> None:
    x = torch.randint(0, 10, (1, 1))

    def build(fd: FusionDefinition) -> None:
        fd.add_output(fd.define_tensor(shape=[1, -1], contiguity=[None, None], dtype=DataType.Int))

    torch.testing.assert_close(run(build, [x])[0], x)


def test_broadcast_in_dim_no_redundant_set() -> None:
    # A broadcast_in_dim that broadcasts nothing new is the expand it amounts to.
    a, b = torch.randn(1, 4), torch.randn(3, 4)
    results = []
    for use_expand in (False, True):
        with FusionDefinition() as fd:
            t0 = fd.define_tensor(shape=[1, -1], contiguity=[None, True])
            t1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
            wide = (
                fd.ops.expand(t0, t1.shape())
                if use_expand
                else fd.ops.broadcast_in_dim(t0, t1.shape(), [0, 1])
            )
            fd.add_output(fd.ops.add(wide, t1))
        assert "set" not in repr(fd)
        results.append(fd.execute([a, b])[0])
    for out in results:
        torch.testing.assert_close(out, a + b)


def test_stride_order_with_explicit_broadcast() -> None:
    a = torch.randn(3).unsqueeze(-1)
    b = torch.randn(2, 3).unsqueeze(-1).expand(2, 3, 4).transpose(2, 0)
    c = torch.randn(5 * 960).as_strided((5, 4, 1, 5, 16), (960, 48, 16, 192, 1))
    d = torch.randn(6).as_strided((2, 16, 3), (3, 0, 1))

    def build(fd: FusionDefinition) -> None:
        t0, t1, t2 = fd.from_pytorch(a), fd.from_pytorch(b), fd.from_pytorch(c)
        t3 = fd.define_tensor(
            shape=[-1, 16, 3],
            contiguity=[None, True, True],
            dtype=DataType.Float,
            stride_order=[1, 2, 0],
        )
        three = fd.define_scalar(3.0)
        fd.add_output(fd.ops.add(fd.ops.broadcast(t0, [True, False, False]), t1))
        fd.add_output(fd.ops.add(t2, three))
        fd.add_output(fd.ops.mul(t3, three))

    first, second, third = run(build, [a, b, c, d])
    torch.testing.assert_close(first, a + b)
    torch.testing.assert_close(second, c + 3.0)
    torch.testing.assert_close(third, d * 3.0)


def test_allocation_domain_concretization() -> None:
    x = torch.randn(0, dtype=torch.float64).as_strided((1, 0, 1, 1), (0, 1, 1, 1))

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(
            shape=[1, -1, 1, 1],
            contiguity=[True, None, None, None],
            dtype=DataType.Double,
            stride_order=[0, 3, 2, 1],
        )
        fd.add_output(fd.ops.mul(t0, fd.define_scalar(2.0, dtype=DataType.Double)))

    torch.testing.assert_close(run(build, [x])[0], x * 2.0)


def test_allocation_domain_index_select() -> None:
    # A column-major input (stride order [0, 1]) indexed along its second axis.
    x = torch.randn(252).as_strided((9, 28), (1, 9))
    index = torch.randint(0, 28, (4,))

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(
            shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float, stride_order=[0, 1]
        )
        t1 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int)
        fd.add_output(fd.ops.index_select(t0, t1, dim=1))

    torch.testing.assert_close(run(build, [x, index])[0], torch.index_select(x, 1, index))


NVFUSER_DTYPES = {
    torch.float64: DataType.Double,
    torch.float32: DataType.Float,
    torch.float16: DataType.Half,
    torch.bfloat16: DataType.BFloat16,
    torch.float8_e4m3fn: DataType.Float8_e4m3fn,
    torch.float8_e5m2: DataType.Float8_e5m2,
}


@pytest.mark.parametrize("wide", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("narrow", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_cast_fp8(wide: torch.dtype, narrow: torch.dtype) -> None:
    # Both directions; Float8_e8m0fnu (Blackwell's scale type) is not a kfuse dtype.
    for source, target in ((wide, narrow), (narrow, wide)):
        x = torch.randn(5, 5).to(source)

        def build(fd: FusionDefinition, x: torch.Tensor = x, target: torch.dtype = target) -> None:
            fd.add_output(fd.ops.cast(fd.from_pytorch(x), dtype=NVFUSER_DTYPES[target]))

        out = run(build, [x])[0]
        assert out.dtype == target
        torch.testing.assert_close(out.float(), x.to(target).float(), rtol=0, atol=0)


# ---- test_repro.py (emulator sizes) ----


def test_issue2853() -> None:
    # A CPU scalar tensor plus a number is a CPU scalar: nvFuser refuses such an output at
    # execute ("KernelExecutor does not support the Fusion provided"), kfuse when it is added
    # (an output is a tensor); the GPU tensor's output beside it is not the problem.
    inputs = [torch.tensor(2.0), torch.randn(3)]
    with FusionDefinition() as fd:
        tv0, tv1 = fd.from_pytorch(inputs[0]), fd.from_pytorch(inputs[1])
        s0 = fd.define_scalar(3.0)
        t2 = fd.ops.add(tv0, s0)
        t3 = fd.ops.add(tv1, s0)
        with pytest.raises(DefinitionError, match="not a tensor; outputs must be tensors"):
            fd.add_output(t2)
        fd.add_output(t3)
    torch.testing.assert_close(fd.execute(inputs)[0], inputs[1] + 3.0)


def test_reductions_take_one_axis_as_dim() -> None:
    # nvFuser's overload sum(arg, dim: int, keepdim, dtype), as its profiler test writes
    # fd.ops.sum(t, dim=-1); likewise prod, max and min.
    x = torch.randn(3, 4, 5)

    def build(fd: FusionDefinition) -> None:
        t = fd.from_pytorch(x)
        fd.add_output(fd.ops.sum(fd.ops.sum(t, dim=-1), dim=-1))
        fd.add_output(fd.ops.prod(t, dim=0, keepdim=True))
        fd.add_output(fd.ops.max(t, dim=1))
        fd.add_output(fd.ops.min(t, dim=-2, dtype=DataType.Double))

    got = run(build, [x])
    torch.testing.assert_close(got[0], x.sum([-1, -2]))
    torch.testing.assert_close(got[1], x.prod(0, keepdim=True))
    torch.testing.assert_close(got[2], x.amax(1))
    torch.testing.assert_close(got[3], x.double().amin(-2))
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        with pytest.raises(DefinitionError, match="dims or dim, not both"):
            fd.ops.sum(t, [0], dim=1)
        with pytest.raises(DefinitionError, match="one axis"):
            fd.ops.max(t, dim=[0, 1])
        fd.add_output(t)


def test_issue1129() -> None:
    # Row indices from a [5, 5] Int tensor flattened, then the gathered rows reshaped.
    index = torch.randint(0, 10, (25,)).as_strided((5, 5), (5, 1))
    table = torch.randn(40 * 8).as_strided((40, 8), (8, 1))

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Int)
        t1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        rows = fd.ops.index_select(t1, fd.ops.reshape(t0, new_shape=[25]), dim=0)
        fd.add_output(fd.ops.reshape(rows, new_shape=[5, 5, 8]))

    expected = torch.index_select(table, 0, index.reshape(25)).reshape(5, 5, 8)
    torch.testing.assert_close(run(build, [index, table])[0], expected)


@pytest.mark.parametrize("final_mul", [False, True])
def test_issue1246(final_mul: bool) -> None:
    # A cat with an empty input whose strides are those of a larger tensor.
    x = torch.randn(4 * 16 * 8).as_strided((1, 4, 16, 8), (512, 128, 8, 1))
    empty = torch.randn(0).as_strided((1, 4, 16, 0), (512, 128, 8, 1))

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(
            shape=[1, -1, -1, -1], contiguity=[None, True, True, True], dtype=DataType.Float
        )
        t1 = fd.define_tensor(
            shape=[1, -1, -1, -1], contiguity=[None, True, False, True], dtype=DataType.Float
        )
        joined = fd.ops.cat(
            [fd.ops.mul(t0, fd.define_scalar(2.0, dtype=DataType.Double)), t1], dim=-1
        )
        if final_mul:
            joined = fd.ops.mul(joined, fd.define_scalar(1.0, dtype=DataType.Double))
        fd.add_output(joined)

    torch.testing.assert_close(run(build, [x, empty])[0], torch.cat([2.0 * x, empty], dim=-1))


def test_issue1270() -> None:
    # Empty BFloat16 inputs (one axis of size 0, a stride of 0) times a full of that shape.
    a = torch.randn(0, dtype=torch.bfloat16).as_strided((5, 0), (1, 0))
    b = torch.randn(0, dtype=torch.bfloat16).as_strided((5, 0), (0, 1))

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, None], dtype=DataType.BFloat16)
        t1 = fd.define_tensor(shape=[-1, -1], contiguity=[None, True], dtype=DataType.BFloat16)
        ones = fd.ops.full(
            fill_value=fd.define_scalar(1.0, dtype=DataType.Double),
            shape=[5, 0],
            dtype=DataType.BFloat16,
        )
        ones_f = fd.ops.cast(ones, dtype=DataType.Float)
        prod_b = fd.ops.mul(fd.ops.cast(t1, dtype=DataType.Float), ones_f)
        prod_a = fd.ops.mul(fd.ops.cast(t0, dtype=DataType.Float), ones_f)
        fd.add_output(fd.ops.sum(prod_b, dims=[1], keepdim=False, dtype=DataType.Null))
        fd.add_output(fd.ops.sum(prod_a, dims=[0], keepdim=False, dtype=DataType.Null))

    rows, cols = run(build, [a, b])
    torch.testing.assert_close(rows, torch.zeros(5))
    torch.testing.assert_close(cols, torch.zeros(0))


def test_issue1279() -> None:
    # var_mean over an axis of size 1, with correction 0.
    x = torch.randn(2, 1, 2, dtype=torch.float16)

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(shape=[-1, 1, -1], contiguity=[True, None, True], dtype=DataType.Half)
        var, mean = fd.ops.var_mean(
            fd.ops.cast(t0, dtype=DataType.Float), dims=[1], correction=0, keepdim=False
        )
        fd.add_output(fd.ops.cast(var, dtype=DataType.Half))
        fd.add_output(fd.ops.cast(mean, dtype=DataType.Half))

    var, mean = run(build, [x])
    want_var, want_mean = torch.var_mean(x.float(), dim=1, correction=0)
    torch.testing.assert_close(var, want_var.half())
    torch.testing.assert_close(mean, want_mean.half())


def test_issue1310() -> None:
    # One input cast twice, each cast read by reductions over different axes.
    x = torch.randn(4, 8, 16, dtype=torch.bfloat16)

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(
            shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.BFloat16
        )
        first, second = fd.ops.cast(t0, dtype=DataType.Float), fd.ops.cast(t0, dtype=DataType.Float)
        fd.add_output(fd.ops.sum(second, dims=[0, 1], keepdim=False, dtype=DataType.Null))
        fd.add_output(fd.ops.sum(first, dims=[0, 1], keepdim=False, dtype=DataType.Null))
        fd.add_output(fd.ops.sum(first, dims=[2], keepdim=False, dtype=DataType.Null))

    outer_a, outer_b, inner = run(build, [x])
    torch.testing.assert_close(outer_a, x.float().sum([0, 1]))
    torch.testing.assert_close(outer_b, x.float().sum([0, 1]))
    torch.testing.assert_close(inner, x.float().sum([2]))


def test_issue1691() -> None:
    a = torch.randn(12).as_strided((1, 3, 4), (12, 4, 1))
    b = torch.randn(12).as_strided((4, 3), (3, 1))

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(
            shape=[1, -1, -1], contiguity=True, dtype=DataType.Float, stride_order=[2, 1, 0]
        )
        t1 = fd.define_tensor(
            shape=[-1, -1], contiguity=True, dtype=DataType.Float, stride_order=[1, 0]
        )
        row_sums = fd.ops.reshape(
            fd.ops.sum(t1, dims=[1], keepdim=False, dtype=DataType.Null), new_shape=[4]
        )
        col_sums = fd.ops.reshape(
            fd.ops.sum(t0, dims=[1, 0], keepdim=False, dtype=DataType.Null), new_shape=[4]
        )
        fd.add_output(
            fd.ops.sum(fd.ops.mul(row_sums, col_sums), dims=[0], keepdim=False, dtype=DataType.Null)
        )

    torch.testing.assert_close(run(build, [a, b])[0], (a.sum(dim=[0, 1]) * b.sum(dim=1)).sum(dim=0))


def test_issue1872() -> None:
    # No inputs: a full, two slices of it, each cast to Half.
    def build(fd: FusionDefinition) -> None:
        ones = fd.ops.full(
            shape=[fd.define_scalar(5, dtype=DataType.Int)],
            fill_value=fd.define_scalar(1.0, dtype=DataType.Double),
            dtype=DataType.Float,
        )
        fd.add_output(
            fd.ops.cast(
                fd.ops.slice(ones, start_indices=[0], end_indices=[2], strides=[1]),
                dtype=DataType.Half,
            )
        )
        fd.add_output(
            fd.ops.cast(
                fd.ops.slice(ones, start_indices=[2], end_indices=[5], strides=[1]),
                dtype=DataType.Half,
            )
        )

    head, tail = (torch.as_tensor(out) for out in run(build, []))
    torch.testing.assert_close(head, torch.ones(2, dtype=torch.float16))
    torch.testing.assert_close(tail, torch.ones(3, dtype=torch.float16))


def test_issue2395() -> None:
    # A Bool mask expanded along its last axis, another broadcast from 2-D, both masking.
    mask0 = torch.randint(0, 2, (256,), dtype=torch.bool).as_strided((16, 16, 32), (16, 1, 0))
    values = torch.randn(8192).as_strided((16, 16, 32), (512, 32, 1))
    mask1 = torch.randint(0, 2, (256,), dtype=torch.bool).as_strided((16, 16), (16, 1))

    def build(fd: FusionDefinition) -> None:
        c0 = fd.define_tensor(
            shape=[-1, -1, -1], contiguity=[True, True, None], dtype=DataType.Bool
        )
        v = fd.define_tensor(
            shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.Float
        )
        c1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Bool)
        c1_b = fd.ops.broadcast_in_dim(c1, shape=[16, 16, 32], broadcast_dims=[0, 1])
        zero = fd.define_scalar(0.0, dtype=DataType.Double)
        fd.add_output(
            fd.ops.slice(v, start_indices=[0, 0, 16], end_indices=[16, 16, 32], strides=[1, 1, 1])
        )
        fd.add_output(fd.ops.where(c0, zero, fd.ops.where(c1_b, zero, v)))

    sliced, masked = run(build, [mask0, values, mask1])
    torch.testing.assert_close(sliced, values[:, :, 16:])
    expected = torch.where(mask0, 0.0, torch.where(mask1[:, :, None], 0.0, values))
    torch.testing.assert_close(masked, expected)


def test_issue2545() -> None:
    # Cats of an empty Int tensor with computed ones, in three levels.
    x, empty = torch.randint(0, 10, (2,)), torch.randint(0, 10, (0,))

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int)
        t1 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int)

        def const(v: int) -> Any:
            return fd.define_scalar(v, dtype=DataType.Int)

        wrapped = fd.ops.add(t0, fd.ops.where(fd.ops.lt(t0, const(0)), const(5), const(0)))
        first = fd.ops.cat([t1, fd.ops.add(wrapped, const(0))], dim=0)
        second = fd.ops.cat([t1, fd.ops.add(first, const(0))], dim=0)
        fd.add_output(fd.ops.add(first, const(10)))
        fd.add_output(fd.ops.cat([second, fd.ops.add(first, const(5))], dim=0))

    plus_ten, joined = run(build, [x, empty])
    wrapped = x + torch.where(x < 0, 5, 0)
    torch.testing.assert_close(plus_ten, wrapped + 10)
    torch.testing.assert_close(joined, torch.cat([wrapped, wrapped + 5]))


def test_issue2549() -> None:
    a, b = torch.ones(4, 1, dtype=torch.float64), torch.ones(4, 4, dtype=torch.float64)

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=DataType.Double)
        t1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Double)
        fd.add_output(
            fd.ops.div(t1, fd.ops.broadcast_in_dim(t0, shape=[4, 4], broadcast_dims=[0, 1]))
        )

    torch.testing.assert_close(run(build, [a, b])[0], b / a)


def define_vector_and_rank0(fd: FusionDefinition, rank0: int) -> list[Any]:
    """A Float vector input, then `rank0` rank-0 Float tensor inputs."""
    vector = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
    return [vector] + [
        fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Float) for _ in range(rank0)
    ]


def test_issue2664_repro1() -> None:
    # A rank-0 input updated in place (its value plus 1), that new value also broadcast.
    vec, one = torch.randn(1024), torch.randn(())
    before = one.clone()

    def build(fd: FusionDefinition) -> None:
        t1, t2 = define_vector_and_rank0(fd, 1)
        bumped = fd.ops.add(t2, fd.define_scalar(1.0, dtype=DataType.Double))
        wide = fd.ops.broadcast_in_dim(
            bumped, shape=[fd.define_scalar(1024, dtype=DataType.Int)], broadcast_dims=[]
        )
        fd.add_output(bumped, t2)
        fd.add_output(fd.ops.mul(t1, wide))

    (out,) = run(build, [vec, one])
    torch.testing.assert_close(one, before + 1.0)
    torch.testing.assert_close(out, (before + 1.0) * vec)


def test_issue2664_repro2() -> None:
    # The in-place update is a sum of the broadcast rank-0 input, which other outputs read.
    vec, one = torch.randn(1024), torch.randn(())
    before = one.clone()

    def build(fd: FusionDefinition) -> None:
        t1, t2 = define_vector_and_rank0(fd, 1)
        wide = fd.ops.broadcast_in_dim(
            t2, shape=[fd.define_scalar(1024, dtype=DataType.Int)], broadcast_dims=[]
        )
        fd.add_output(fd.ops.sum(wide, dims=[0], keepdim=False), t2)
        fd.add_output(fd.ops.mul(t1, wide))
        fd.add_output(fd.ops.add(t1, wide))

    product, total = run(build, [vec, one])
    torch.testing.assert_close(one, before * 1024)
    torch.testing.assert_close(product, before * vec)
    torch.testing.assert_close(total, vec + before)


def test_issue2664_repro3() -> None:
    # Two rank-0 inputs, each updated with a value computed from the other.
    vec, first, second = torch.randn(1024), torch.randn(()), torch.randn(())
    first_before, second_before = first.clone(), second.clone()

    def build(fd: FusionDefinition) -> None:
        t1, t2, t3 = define_vector_and_rank0(fd, 2)
        total = fd.ops.sum(
            fd.ops.add(t1, fd.ops.broadcast_in_dim(t2, shape=t1.shape(), broadcast_dims=[])),
            dims=[0],
        )
        fd.add_output(total, t3)
        fd.add_output(fd.ops.add(t3, fd.define_scalar(1.0, dtype=DataType.Double)), t2)

    assert run(build, [vec, first, second]) == []
    torch.testing.assert_close(first, second_before + 1.0)
    torch.testing.assert_close(second, (vec + first_before).sum(), rtol=1e-5, atol=1e-4)


def test_issue2664_repro4() -> None:
    # nvFuser's [4194304, 128] at [64, 8]: an add with a column, and the column negated in place.
    col, full = torch.randn(64, 1), torch.randn(64, 8)
    before = col.clone()

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=DataType.Float)
        t1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.add(t1, t0))
        fd.add_output(fd.ops.neg(t0), t0)

    (out,) = run(build, [col, full])
    torch.testing.assert_close(out, before + full)
    torch.testing.assert_close(col, -before)


def test_issue2755() -> None:
    x = torch.randn(10)

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(shape=[-1])
        head = fd.ops.neg(fd.ops.slice(t0, start_indices=[0], end_indices=[5]))
        fd.add_output(fd.ops.neg(fd.ops.slice(head, start_indices=[0], end_indices=[2])))

    torch.testing.assert_close(run(build, [x])[0], x[:2])


def test_issue3192() -> None:
    x = torch.randn(1, 1, 2)

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor([1, 1, 2], contiguity=True)
        fd.add_output(fd.ops.slice(fd.ops.squeeze(t0, [0, 1]), [1], [2]))

    torch.testing.assert_close(run(build, [x])[0], x.squeeze([0, 1])[1:2], rtol=0, atol=0)


def test_issue3227() -> None:
    # One [1, 2, 3] input broadcast twice to different extents of axis 1.
    a = torch.rand(24).as_strided((1, 4, 2, 3), (24, 6, 3, 1))
    b = torch.rand(30).as_strided((1, 5, 2, 3), (30, 6, 3, 1))
    c = torch.rand(6).as_strided((1, 2, 3), (6, 3, 1))

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(
            shape=[1, 4, 2, 3], contiguity=[None, True, True, True], dtype=DataType.Float
        )
        t1 = fd.define_tensor(
            shape=[1, 5, 2, 3], contiguity=[None, True, True, True], dtype=DataType.Float
        )
        t2 = fd.define_tensor(shape=[1, 2, 3], contiguity=[None, True, True], dtype=DataType.Float)

        def ints(*values: int) -> list[Any]:
            return [fd.define_scalar(v, dtype=DataType.Int) for v in values]

        t3 = fd.ops.broadcast_in_dim(t2, shape=ints(1, 1, 2, 3), broadcast_dims=[1, 2, 3])
        fd.add_output(
            fd.ops.add(
                fd.ops.broadcast_in_dim(t3, shape=ints(1, 4, 2, 3), broadcast_dims=[0, 1, 2, 3]), t0
            )
        )
        fd.add_output(
            fd.ops.add(
                fd.ops.broadcast_in_dim(t3, shape=ints(1, 5, 2, 3), broadcast_dims=[0, 1, 2, 3]), t1
            )
        )

    four, five = run(build, [a, b, c])
    torch.testing.assert_close(four, c.unsqueeze(1) + a)
    torch.testing.assert_close(five, c.unsqueeze(1) + b)


def test_issue1273() -> None:
    x = torch.randn(4).as_strided((2, 2), (2, 1))
    eps = 1e-5

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        s_eps = fd.define_scalar(None, dtype=DataType.Double)
        t7 = fd.ops.reshape(t0, new_shape=[2, 1, 2])
        var, mean = fd.ops.var_mean(t7, dims=[2], correction=0, keepdim=False)
        invstd = fd.ops.rsqrt(
            fd.ops.add(fd.ops.broadcast_in_dim(var, shape=[2, 1, 1], broadcast_dims=[0, 1]), s_eps)
        )
        mean_b = fd.ops.broadcast_in_dim(
            fd.ops.broadcast_in_dim(mean, shape=[2, 1, 1], broadcast_dims=[0, 1]),
            shape=[2, 1, 2],
            broadcast_dims=[0, 1, 2],
        )
        invstd_b = fd.ops.broadcast_in_dim(invstd, shape=[2, 1, 2], broadcast_dims=[0, 1, 2])
        fd.add_output(
            fd.ops.reshape(fd.ops.mul(fd.ops.sub(t7, mean_b), invstd_b), new_shape=[2, 2])
        )

    rows = x.reshape(2, 1, 2)
    var, mean = rows.var(dim=2, unbiased=False), rows.mean(dim=2)
    expected = ((rows - mean.unsqueeze(-1)) * torch.rsqrt(var.unsqueeze(-1) + eps)).reshape(2, 2)
    torch.testing.assert_close(run(build, [x, eps])[0], expected)


def test_issue1393() -> None:
    # Half inputs that are expanded views (zero strides), a product reshaped and broadcast.
    a = torch.randn(5, dtype=torch.float16).as_strided((3, 4, 5), (0, 0, 1))
    b = torch.randn(3, dtype=torch.float16).as_strided((3, 4), (1, 0))
    c = torch.randn(4, dtype=torch.float16).as_strided((3, 4), (0, 1))

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(
            shape=[-1, -1, -1], contiguity=[None, None, True], dtype=DataType.Half
        )
        t1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, None], dtype=DataType.Half)
        t2 = fd.define_tensor(shape=[-1, -1], contiguity=[None, True], dtype=DataType.Half)
        product = fd.ops.cast(
            fd.ops.mul(
                fd.ops.cast(t1, dtype=DataType.Float), fd.ops.cast(t2, dtype=DataType.Float)
            ),
            dtype=DataType.Half,
        )
        column = fd.ops.broadcast_in_dim(
            fd.ops.reshape(product, new_shape=[3, 4, 1]), shape=[3, 4, 5], broadcast_dims=[0, 1, 2]
        )
        scaled = fd.ops.mul(
            fd.ops.cast(column, dtype=DataType.Float), fd.ops.cast(t0, dtype=DataType.Float)
        )
        fd.add_output(fd.ops.cast(scaled, dtype=DataType.Half))

    torch.testing.assert_close(run(build, [a, b, c])[0], a * (b * c).unsqueeze(-1))


# ---- test_python_direct.py and the rest of test_python_frontend.py ----


def test_fusion_not_defined() -> None:
    with pytest.raises(DefinitionError, match="finish the definition"):
        FusionDefinition().execute([torch.randn(4, 4)])


def test_fusion_empty() -> None:
    # nvFuser raises at execute; kfuse already where the block ends.
    with pytest.raises(DefinitionError, match="the fusion has no outputs"), FusionDefinition():
        pass


def test_define_tensor() -> None:
    a, b = torch.randn(2, 4, 8), torch.randn(2, 4, 8)

    def build(fd: FusionDefinition) -> None:
        spec: dict[str, Any] = {
            "shape": [-1, -1, -1],
            "contiguity": [True] * 3,
            "dtype": DataType.Float,
        }
        t0 = fd.define_tensor(**spec, is_cpu=False, stride_order=[2, 1, 0])
        t1 = fd.define_tensor(**spec, is_cpu=False, stride_order=[2, 1, 0])
        fd.add_output(fd.ops.add(t0, t1))

    torch.testing.assert_close(run(build, [a, b])[0], a + b)


def test_mismatched_input_types() -> None:
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float, stride_order=[0])
        fd.add_output(fd.ops.mul(t0, fd.define_scalar()))
    x = torch.rand(15)
    wrong = [
        ([2.0, 2.0], r"input 0 \(T0\) must be a NumPy, CuPy or torch array, got float"),
        ([x, x], r"input 1 \(S0\) is a scalar input; got an array of shape \(15,\)"),
        ([x.half(), 2.0], r"input 0 \(T0\) was defined as Float but the array is Half"),
        ([x, 2.0 + 1.0j], r"input 1 \(S0\) is a scalar input of dtype Double; got \(2\+1j\)"),
    ]
    for inputs, message in wrong:
        with pytest.raises(InputError, match=message):
            fd.execute(inputs)


def test_replaced_sizes_pr2714() -> None:
    a = torch.randn(4).as_strided((2, 2), (2, 1))
    b = torch.randn(4).as_strided((2, 2), (2, 1))

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        t1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        tanh = fd.ops.tanh(t1)
        four = fd.define_scalar(4, dtype=DataType.Int)
        flat_sum = fd.ops.add(
            fd.ops.reshape(fd.ops.exp(t0), new_shape=[four]), fd.ops.reshape(tanh, new_shape=[four])
        )
        fd.add_output(flat_sum)
        fd.add_output(fd.ops.mul(tanh, fd.ops.reciprocal(t0)))
        fd.add_output(
            fd.ops.mul(flat_sum, fd.ops.reciprocal(fd.define_scalar(2.0, dtype=DataType.Double)))
        )

    flat_sum, ratio, half = run(build, [a, b])
    want = (a.exp() + b.tanh()).reshape(4)
    torch.testing.assert_close(flat_sum, want)
    torch.testing.assert_close(ratio, b.tanh() / a)
    torch.testing.assert_close(half, want / 2)


def test_bcast_squeeze_replace_aliased_output() -> None:
    # A reshape written into the second input (set, then alias) and also returned.
    a = torch.randn(1, 1, 576).bfloat16()
    b = torch.randn(1, 576).bfloat16()

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(
            shape=[1, 1, 576], contiguity=[None, None, True], dtype=DataType.BFloat16
        )
        t1 = fd.define_tensor(shape=[1, 576], contiguity=[None, True], dtype=DataType.BFloat16)
        flat = fd.ops.reshape(t0, new_shape=[1, 576])
        fd.add_output(fd.ops.set(flat), t1)
        fd.add_output(flat)

    outs = run(build, [a, b])
    assert len(outs) == 1
    torch.testing.assert_close(outs[0], a.squeeze(1))
    torch.testing.assert_close(b, a.squeeze(1))


def test_validate_precomputed_values() -> None:
    # Comparisons with a NaN scalar input are all False.
    x = torch.randn(10).as_strided((2, 5), (5, 1))

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.ge(t0, fd.define_scalar(None, dtype=DataType.Double)))

    torch.testing.assert_close(run(build, [x, float("nan")])[0], torch.full((2, 5), False))


def test_issue2275_repro2() -> None:
    # Rotary-style halves swapped with a negation, sin + cos, and a cat with an empty slice.
    x = torch.randn(2, 4, 16, 8).bfloat16()

    def build(fd: FusionDefinition) -> None:
        t0 = fd.from_pytorch(x)
        whole = fd.ops.slice(
            t0, start_indices=[0, 0, 0, 0], end_indices=[2, 4, 16, 8], strides=[1, 1, 1, 1]
        )
        first = fd.ops.slice(
            whole, start_indices=[0, 0, 0, 0], end_indices=[2, 4, 16, 4], strides=[1, 1, 1, 1]
        )
        second = fd.ops.slice(
            whole, start_indices=[0, 0, 0, 4], end_indices=[2, 4, 16, 8], strides=[1, 1, 1, 1]
        )
        rotated = fd.ops.cat([fd.ops.cast(fd.ops.neg(second), DataType.BFloat16), first], dim=-1)
        waves = fd.ops.cast(fd.ops.add(fd.ops.sin(rotated), fd.ops.cos(rotated)), DataType.BFloat16)
        empty = fd.ops.slice(
            t0, start_indices=[0, 0, 0, 0], end_indices=[2, 4, 16, 0], strides=[1, 1, 1, 1]
        )
        fd.add_output(fd.ops.cat([waves, empty], dim=-1))

    # sin, cos and their sum of BFloat16 values are BFloat16 values, as in torch eager.
    rotated = torch.cat([-x[..., 4:], x[..., :4]], dim=-1)
    expected = rotated.sin() + rotated.cos()
    torch.testing.assert_close(run(build, [x])[0], expected)


def test_issue4670() -> None:
    # No inputs: a causal mask from two iotas (with gt) and a masked BFloat16 fill (with ge).
    def build(fd: FusionDefinition) -> None:
        def ints(*values: int) -> list[Any]:
            return [fd.define_scalar(v, dtype=DataType.Int) for v in values]

        cols = fd.ops.iota(*ints(9, 0, 1), dtype=DataType.Int)
        rows = fd.ops.iota(*ints(8, 0, 1), dtype=DataType.Int)
        col_grid = fd.ops.expand(
            fd.ops.broadcast(cols, is_broadcast_dim=[True, False]),
            shape=[ints(8)[0], fd.ops.size(cols, dim=0)],
        )
        row_grid = fd.ops.expand(
            fd.ops.broadcast(rows, is_broadcast_dim=[False, True]),
            shape=[fd.ops.size(rows, dim=0), ints(9)[0]],
        )
        fd.add_output(fd.ops.gt(col_grid, row_grid))
        lowest = fd.define_scalar(-3.38953e38, dtype=DataType.BFloat16)
        fill = fd.ops.full(shape=ints(8, 9), fill_value=lowest, dtype=DataType.BFloat16)
        above = fd.ops.ge(fd.ops.sub(col_grid, row_grid), ints(1)[0])
        fd.add_output(fd.ops.where(above, fill, fd.define_scalar(0.0, dtype=DataType.Double)))

    # Without inputs the emulator returns NumPy arrays (BFloat16 as ml_dtypes' type).
    mask_array, filled_array = run(build, [])
    mask = torch.as_tensor(mask_array)
    filled = torch.as_tensor(filled_array.astype("float32")).bfloat16()
    cols, rows = torch.arange(9)[None, :], torch.arange(8)[:, None]
    torch.testing.assert_close(mask, cols > rows)
    lowest = torch.tensor(-3.38953e38, dtype=torch.bfloat16)
    expected = torch.where(cols - rows >= 1, lowest, torch.tensor(0.0, dtype=torch.bfloat16))
    torch.testing.assert_close(filled, expected)


def test_issue3292() -> None:
    # Nine heads of 64 from [5, 5, 576], seven kept, rotary halves, squares summed, and a cat
    # with an empty slice; slice and cat spelled with nvFuser's manual_normalization and
    # manual_padding keywords, as its printed repros write them.
    x = torch.randn(5, 5, 576)

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(
            shape=[5, 5, 576], contiguity=[True, True, True], dtype=DataType.Float
        )
        heads = fd.ops.permute(fd.ops.reshape(t0, new_shape=[5, 5, 1, 9, 64]), dims=[0, 2, 3, 1, 4])
        kept = fd.ops.slice(
            heads, [0, 0, 0, 0, 0], [5, 1, 7, 5, 64], [1, 1, 1, 1, 1], manual_normalization=0
        )
        t108 = fd.ops.reshape(kept, new_shape=[5, 7, 5, 64])

        def rotate() -> Any:
            first = fd.ops.slice(
                t108, [0, 0, 0, 0], [5, 7, 5, 32], [1, 1, 1, 1], manual_normalization=0
            )
            second = fd.ops.slice(
                t108, [0, 0, 0, 32], [5, 7, 5, 64], [1, 1, 1, 1], manual_normalization=0
            )
            return fd.ops.cat([fd.ops.neg(second), first], dim=-1, manual_padding=0)

        rotated = rotate()
        squares = fd.ops.add(fd.ops.mul(t108, t108), fd.ops.mul(rotated, rotated))
        fd.ops.mul(rotate(), rotate())  # unused, as in nvFuser's repro
        empty = fd.ops.slice(t108, [0, 0, 0, 0], [5, 7, 5, 0], [1, 1, 1, 1], manual_normalization=0)
        fd.add_output(fd.ops.cat([squares, empty], dim=-1, manual_padding=0))

    t108 = x.reshape(5, 5, 1, 9, 64).permute(0, 2, 3, 1, 4)[:, :1, :7].reshape(5, 7, 5, 64)
    rotated = torch.cat([-t108[..., 32:], t108[..., :32]], dim=-1)
    torch.testing.assert_close(run(build, [x])[0], t108 * t108 + rotated * rotated)


def test_ca_map_concrete_loop_id() -> None:
    # Broadcasts, squeezes of size-1 axes and permutes around a product with ones.
    a, b = torch.randn(16, 1, 1), torch.randn(1, 1, 1024)

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(shape=[16, 1, 1], contiguity=[True, None, None], dtype=DataType.Float)
        t1 = fd.define_tensor(
            shape=[1, 1, 1024], contiguity=[None, None, True], dtype=DataType.Float
        )
        e = fd.ops.exp(fd.ops.sub(t0, t0))
        ones = fd.ops.mul(e, fd.ops.reciprocal(e))
        one = fd.ops.size(ones, dim=1)
        ints = [fd.define_scalar(v, dtype=DataType.Int) for v in (16, 64, 1024)]
        heads = fd.ops.permute(
            fd.ops.reshape(t1, new_shape=[one, one, ints[0], ints[1]]), dims=[0, 2, 1, 3]
        )
        t13 = fd.ops.squeeze(heads, dims=[0], squeeze_expanded=True)
        t15 = fd.ops.broadcast(
            fd.ops.permute(t13, dims=[0, 2, 1]), is_broadcast_dim=[False, True, False, False]
        )
        t16 = fd.ops.mul(fd.ops.broadcast(ones, is_broadcast_dim=[False, False, True, False]), t15)
        t17 = fd.ops.squeeze(t16, dims=[3], squeeze_expanded=True)
        t19 = fd.ops.permute(
            fd.ops.broadcast(t17, is_broadcast_dim=[True, False, False, False]), dims=[0, 2, 1, 3]
        )
        fd.add_output(ones)
        fd.add_output(t13)
        fd.add_output(fd.ops.reshape(t19, new_shape=[one, one, ints[2]]))

    ones, t13, out = run(build, [a, b])
    want_ones = torch.exp(a - a) / torch.exp(a - a)
    want_t13 = b.reshape(1, 1, 16, 64).permute(0, 2, 1, 3).squeeze(0)
    t16 = want_ones[:, :, None, :] * want_t13.permute(0, 2, 1)[:, None]
    want_out = t16.squeeze(3)[None].permute(0, 2, 1, 3).reshape(1, 1, 1024)
    torch.testing.assert_close(ones, want_ones)
    torch.testing.assert_close(t13, want_t13)
    torch.testing.assert_close(out, want_out)


def test_ws_tma_normalization4() -> None:
    # An RMS norm backward in BFloat16: nvFuser's [14, 2048, 2048] at [3, 8, 32], with the
    # gradient of the input, transposed and flat, and the weight's gradient as outputs.
    b, t, c = 3, 8, 32
    grad_flat, weight = torch.randn(b * t, c).bfloat16(), torch.randn(c).bfloat16()
    x, rstd = torch.randn(b, t, c).bfloat16(), torch.rand(b, t, 1) + 0.5

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(shape=[b * t, c], contiguity=[True, True], dtype=DataType.BFloat16)
        t1 = fd.define_tensor(shape=[c], contiguity=[True], dtype=DataType.BFloat16)
        t2 = fd.define_tensor(shape=[b, t, c], contiguity=[True] * 3, dtype=DataType.BFloat16)
        t3 = fd.define_tensor(shape=[b, t, 1], contiguity=[True, True, None], dtype=DataType.Float)
        grad = fd.ops.cast(fd.ops.reshape(t0, new_shape=[b, t, c]), dtype=DataType.Float)
        w = fd.ops.broadcast_in_dim(
            fd.ops.cast(t1, dtype=DataType.Float), shape=[b, t, c], broadcast_dims=[2]
        )
        t16 = fd.ops.mul(w, grad)
        xf = fd.ops.cast(t2, dtype=DataType.Float)
        dot = fd.ops.broadcast_in_dim(
            fd.ops.sum(fd.ops.mul(xf, t16), dims=[2]), shape=[b, t, 1], broadcast_dims=[0, 1]
        )
        t29 = fd.ops.mul(
            fd.ops.mul(fd.define_scalar(-0.5, dtype=DataType.Double), dot),
            fd.ops.pow(t3, fd.define_scalar(3.0, dtype=DataType.Double)),
        )
        t32 = fd.ops.mul(t29, fd.ops.reciprocal(fd.define_scalar(float(c), dtype=DataType.Double)))
        t38 = fd.ops.broadcast_in_dim(
            fd.ops.sum(t32, dims=[2]), shape=[b, t, 1], broadcast_dims=[0, 1]
        )
        t49 = fd.ops.mul(
            xf, fd.ops.broadcast_in_dim(t38, shape=[b, t, c], broadcast_dims=[0, 1, 2])
        )
        r = fd.ops.broadcast_in_dim(t3, shape=[b, t, c], broadcast_dims=[0, 1, 2])
        t53 = fd.ops.cast(
            fd.ops.add(fd.ops.add(fd.ops.mul(r, t16), t49), t49), dtype=DataType.BFloat16
        )
        t59 = fd.ops.reshape(t53, new_shape=[b * t, c])
        fd.add_output(fd.ops.permute(t59, dims=[1, 0]))
        fd.add_output(t59)
        fd.add_output(t53)
        fd.add_output(
            fd.ops.cast(
                fd.ops.sum(fd.ops.mul(fd.ops.mul(xf, r), grad), dims=[0, 1]),
                dtype=DataType.BFloat16,
            )
        )

    transposed, flat, grad_x, grad_w = run(build, [grad_flat, weight, x, rstd])
    grad, xf = grad_flat.float().reshape(b, t, c), x.float()
    t16 = weight.float() * grad
    t38 = (-0.5 * (xf * t16).sum(2, keepdim=True) * rstd**3 / c).sum(2, keepdim=True)
    want = (rstd * t16 + 2 * xf * t38).bfloat16()
    torch.testing.assert_close(grad_x, want)
    torch.testing.assert_close(flat, want.reshape(b * t, c))
    torch.testing.assert_close(transposed, want.reshape(b * t, c).t())
    torch.testing.assert_close(grad_w, (xf * rstd * grad).sum([0, 1]).bfloat16())


def test_ws_tma_normalization3() -> None:
    # An RMS norm backward adding a residual gradient: nvFuser's [1, 4096, 4096] at [1, 16, 32];
    # its sums run over axes 0 and 2 (axis 0 has size 1).
    t, c = 16, 32
    grad_flat, weight = torch.randn(t, c).bfloat16(), torch.randn(c).bfloat16()
    x, rstd, residual = (
        torch.randn(1, t, c).bfloat16(),
        torch.rand(1, t, 1) + 0.5,
        torch.randn(1, t, c).bfloat16(),
    )

    def build(fd: FusionDefinition) -> None:
        t0 = fd.define_tensor(shape=[t, c], contiguity=[True, True], dtype=DataType.BFloat16)
        t1 = fd.define_tensor(shape=[c], contiguity=[True], dtype=DataType.BFloat16)
        t2 = fd.define_tensor(
            shape=[1, t, c], contiguity=[None, True, True], dtype=DataType.BFloat16
        )
        t3 = fd.define_tensor(shape=[1, t, 1], contiguity=[None, True, None], dtype=DataType.Float)
        t4 = fd.define_tensor(
            shape=[1, t, c], contiguity=[None, True, True], dtype=DataType.BFloat16
        )
        grad = fd.ops.cast(fd.ops.reshape(t0, new_shape=[1, t, c]), dtype=DataType.Float)
        w = fd.ops.broadcast_in_dim(
            fd.ops.cast(t1, dtype=DataType.Float), shape=[1, t, c], broadcast_dims=[2]
        )
        t17 = fd.ops.mul(w, grad)
        xf = fd.ops.cast(t2, dtype=DataType.Float)
        dot = fd.ops.broadcast_in_dim(
            fd.ops.sum(fd.ops.mul(xf, t17), dims=[0, 2]), shape=[1, t, 1], broadcast_dims=[1]
        )
        t30 = fd.ops.mul(
            fd.ops.mul(fd.define_scalar(-0.5, dtype=DataType.Double), dot),
            fd.ops.pow(t3, fd.define_scalar(3.0, dtype=DataType.Double)),
        )
        t33 = fd.ops.mul(t30, fd.ops.reciprocal(fd.define_scalar(float(c), dtype=DataType.Double)))
        t38 = fd.ops.broadcast_in_dim(
            fd.ops.sum(t33, dims=[0, 2]), shape=[1, t], broadcast_dims=[1]
        )
        t43 = fd.ops.broadcast_in_dim(t38, shape=[1, t, 1], broadcast_dims=[0, 1])
        t54 = fd.ops.mul(
            xf, fd.ops.broadcast_in_dim(t43, shape=[1, t, c], broadcast_dims=[0, 1, 2])
        )
        r = fd.ops.broadcast_in_dim(t3, shape=[1, t, c], broadcast_dims=[0, 1, 2])
        t57 = fd.ops.add(fd.ops.add(fd.ops.mul(r, t17), t54), t54)
        t61 = fd.ops.add(fd.ops.cast(t4, dtype=DataType.Float), t57)
        t62 = fd.ops.sum(fd.ops.mul(fd.ops.mul(xf, r), grad), dims=[0, 1])
        fd.add_output(fd.ops.cast(t62, dtype=DataType.BFloat16))
        fd.add_output(fd.ops.cast(t61, dtype=DataType.BFloat16))

    grad_w, grad_x = run(build, [grad_flat, weight, x, rstd, residual])
    grad, xf = grad_flat.float().reshape(1, t, c), x.float()
    t17 = weight.float() * grad
    t43 = (-0.5 * (xf * t17).sum(2, keepdim=True) * rstd**3 / c).sum(2, keepdim=True)
    torch.testing.assert_close(grad_x, (residual.float() + rstd * t17 + 2 * xf * t43).bfloat16())
    torch.testing.assert_close(grad_w, (xf * rstd * grad).sum([0, 1]).bfloat16())


# ---- test_sdpa.py ----


def test_softmax_logsumexp() -> None:
    # All-ones queries, keys and values: every score is E * scale = sqrt(E), so the
    # log-sum-exp over S keys is log(S) + sqrt(E).
    batch, heads, queries, keys, size = 1, 1, 4, 4, 8
    q, k, v = (
        torch.ones(batch, heads, queries, size).bfloat16(),
        torch.ones(batch, heads, keys, size).bfloat16(),
        torch.ones(batch, heads, keys, size).bfloat16(),
    )

    def build(fd: FusionDefinition) -> None:
        tensors = [
            fd.define_tensor(shape=[-1, -1, -1, -1], dtype=DataType.BFloat16) for _ in range(3)
        ]
        _, lse, *_ = fd.ops.sdpfa_fwd(*tensors, dropout_p=None, is_causal=None, scale=None)
        fd.add_output(lse)

    torch.testing.assert_close(
        run(build, [q, k, v])[0], torch.full((batch, heads, queries), math.log(keys) + size**0.5)
    )


# ---- test_alphafold3.py ----


@pytest.mark.parametrize("incoming", [False, True], ids=["outgoing", "incoming"])
def test_triangle_attention(incoming: bool) -> None:
    # AlphaFold's triangle attention over a pair representation [B, N, N, C]: a layer norm,
    # per-head queries, keys and values from linears, a per-head bias from the pair itself,
    # a key mask, attention over 5-D [B, N, H, N, E] heads, a sigmoid gate and an output
    # linear; "incoming" runs it on the transposed pair. nvFuser's C 128, 4 heads of 32 at
    # C 8, 2 heads of 4 (B 3, N 5 as in nvFuser's).
    b, n, c, heads, e = 3, 5, 8, 2, 4
    hidden = heads * e
    pair = torch.randn(b, n, n, c).bfloat16()
    w_norm, b_norm = torch.randn(c).bfloat16(), torch.randn(c).bfloat16()
    w_q, w_k = torch.randn(hidden, c).bfloat16(), torch.randn(hidden, c).bfloat16()
    w_bias = torch.randn(heads, c).bfloat16()
    mask = torch.rand(b, n, n) > 0.3
    mask[..., 0] = True  # every query attends to at least one key
    w_v, w_g = torch.randn(hidden, c).bfloat16(), torch.randn(hidden, c).bfloat16()
    w_o = torch.randn(c, hidden).bfloat16()

    def build(fd: FusionDefinition) -> None:
        def weight(*shape: int) -> Any:
            return fd.define_tensor(shape=list(shape), dtype=DataType.BFloat16, contiguity=True)

        z = fd.define_tensor(shape=[-1, -1, -1, c], dtype=DataType.BFloat16, contiguity=True)
        t_wn, t_bn, t_wq, t_wk, t_wb = (
            weight(c),
            weight(c),
            weight(hidden, c),
            weight(hidden, c),
            weight(heads, c),
        )
        t_mask = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Bool, contiguity=True)
        t_wv, t_wg, t_wo = weight(hidden, c), weight(hidden, c), weight(c, hidden)
        batch, tokens = fd.ops.size(z, 0), fd.ops.size(z, 1)
        if incoming:
            z = fd.ops.permute(z, [0, 2, 1, 3])
            t_mask = fd.ops.permute(t_mask, [0, 2, 1])
        zf = fd.ops.cast(z, dtype=DataType.Float)
        var, mean = fd.ops.var_mean(zf, dims=[-1], correction=0, keepdim=True)
        inv_std = fd.ops.rsqrt(fd.ops.add(var, fd.define_scalar(1e-5)))
        whole = fd.ops.shape(zf)
        scaled = fd.ops.mul(
            fd.ops.mul(fd.ops.sub(zf, mean), inv_std),
            fd.ops.broadcast_in_dim(t_wn, shape=whole, broadcast_dims=[-1]),
        )
        normed = fd.ops.cast(
            fd.ops.add(scaled, fd.ops.broadcast_in_dim(t_bn, shape=whole, broadcast_dims=[-1])),
            dtype=DataType.BFloat16,
        )

        def per_head(x: Any) -> Any:
            split = fd.ops.reshape(x, [batch, tokens, tokens, heads, -1])
            return fd.ops.permute(split, [0, 1, 3, 2, 4])

        q, k, v = (per_head(fd.ops.linear(normed, w)) for w in (t_wq, t_wk, t_wv))
        bias = fd.ops.broadcast_in_dim(
            fd.ops.permute(fd.ops.linear(normed, t_wb), [0, 3, 1, 2]),
            shape=[batch, 1, heads, tokens, tokens],
            broadcast_dims=[0, 2, 3, 4],
        )
        key_mask = fd.ops.broadcast_in_dim(
            t_mask, shape=[batch, tokens, 1, 1, tokens], broadcast_dims=[0, 1, 4]
        )
        attended, _, _, _ = fd.ops.sdpfa_fwd(q, k, v, bias=bias, mask=key_mask, is_causal=False)
        gate = per_head(fd.ops.sigmoid(fd.ops.linear(normed, t_wg)))
        gated = fd.ops.cast(fd.ops.mul(attended, gate), dtype=DataType.BFloat16)
        rows = fd.ops.reshape(fd.ops.permute(gated, [0, 1, 3, 2, 4]), [batch, tokens, tokens, -1])
        out = fd.ops.linear(rows, t_wo)
        fd.add_output(fd.ops.permute(out, [0, 2, 1, 3]) if incoming else out)

    (got,) = run(build, [pair, w_norm, b_norm, w_q, w_k, w_bias, mask, w_v, w_g, w_o])
    z, keys_kept = (pair.transpose(1, 2), mask.transpose(1, 2)) if incoming else (pair, mask)
    normed = torch.nn.functional.layer_norm(
        z.float(), [c], w_norm.float(), b_norm.float(), eps=1e-5
    ).bfloat16()

    def per_head(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(b, n, n, heads, e).permute(0, 1, 3, 2, 4)

    q, k, v = (per_head(torch.nn.functional.linear(normed, w)) for w in (w_q, w_k, w_v))
    bias = torch.nn.functional.linear(normed, w_bias).permute(0, 3, 1, 2)[:, None]
    blocked = torch.zeros(b, n, 1, 1, n).masked_fill(~keys_kept[:, :, None, None, :], -math.inf)
    # Eager torch's BFloat16 attention of the 4-D heads (its flash kernel, as kfuse's),
    # the bias and mask as one BFloat16 attn_mask.
    scores_bias = (bias + blocked).bfloat16().expand(b, n, heads, n, n)
    attended = torch.nn.functional.scaled_dot_product_attention(
        *(t.flatten(0, 1) for t in (q, k, v)), attn_mask=scores_bias.flatten(0, 1)
    ).unflatten(0, (b, n))
    gate = per_head(torch.sigmoid(torch.nn.functional.linear(normed, w_g)))
    rows = (attended * gate).permute(0, 1, 3, 2, 4).reshape(b, n, n, hidden)
    want = torch.nn.functional.linear(rows, w_o)
    torch.testing.assert_close(got, want.transpose(1, 2) if incoming else want)


def test_broadcast_in_dim_negative_dims() -> None:
    # test_alphafold3.py's layer norm places its weight with broadcast_dims=[-1]: nvFuser
    # counts a negative entry from the end of the output shape.
    x, w = torch.randn(2, 3, 4), torch.randn(4)

    def build(fd: FusionDefinition) -> None:
        t_x, t_w = fd.from_pytorch(x), fd.from_pytorch(w)
        fd.add_output(
            fd.ops.mul(
                t_x, fd.ops.broadcast_in_dim(t_w, shape=fd.ops.shape(t_x), broadcast_dims=[-1])
            )
        )

    torch.testing.assert_close(run(build, [x, w])[0], x * w)


# ---- test_cuda_graph.py (an unmerged branch of nvFuser) ----


def test_capture_and_replay() -> None:
    # nvFuser's test runs the fusion five times with kernel reuse off (a new kernel a call).
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        b = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        fd.add_output(fd.ops.add(a, b))
    for _ in range(5):
        out = fd.execute([x, y], _disable_options=["kernel_reuse"])
    torch.testing.assert_close(out[0], x + y)


# ---- test_inline_definitions.py (an unmerged branch of nvFuser) ----


def test_inline_def_reshape() -> None:
    """A printed definition is the definition as written, symbolic Index sizes included
    (kfuse prints nvFuser's Index, int64 in both, as Int)."""
    constant = (
        "def nvfuser_fusion(fd : FusionDefinition) -> None :\n"
        "    tv0 = fd.define_tensor(shape=[-1], contiguity=[False], dtype=DataType.Float, "
        "is_cpu=False)\n"
        "    tv1 = fd.ops.reshape(tv0, new_shape=[2, 5])\n"
        "    fd.add_output(tv1)\n"
    )
    mixed = constant.replace(
        "    tv1 = fd.ops.reshape(tv0, new_shape=[2, 5])\n",
        "    c2 = fd.define_scalar(None, dtype=DataType.Index)\n"
        "    tv1 = fd.ops.reshape(tv0, new_shape=[2, c2])\n",
    )
    for text, printed in (
        (constant, constant),
        (mixed, mixed.replace("c2", "c0").replace("DataType.Index", "DataType.Int")),
    ):
        namespace: dict[str, Any] = {"FusionDefinition": FusionDefinition, "DataType": DataType}
        exec(text, namespace)  # noqa: S102 - the test's own definition text
        with FusionDefinition() as fd:
            namespace["nvfuser_fusion"](fd)
        assert str(fd).rstrip("\n") + "\n" == printed
    (out,) = fd.execute([torch.arange(10.0), 5])
    torch.testing.assert_close(out, torch.arange(10.0).reshape(2, 5))


# ---- test_examples.py (an unmerged branch of nvFuser) ----


def test_pointwise(capsys: pytest.CaptureFixture[str]) -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], dtype=DataType.Float)
        fd.add_output(fd.ops.relu(x))
    fd.fusion.print()
    assert "relu" in capsys.readouterr().out
    x_t = torch.randn(2, 3)
    [y] = fd.execute([x_t])
    torch.testing.assert_close(y, x_t.relu())


@pytest.mark.parametrize("shape", [[-1, -1], [2, 3]], ids=["symbolic", "concrete"])
def test_symoblic_reshape_and_concrete_reshape(shape: list[int]) -> None:
    # nvFuser's test_symoblic_reshape (its spelling) and test_concrete_reshape.
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape, dtype=DataType.Float)
        x = fd.ops.reshape(x, [-1])
        x = fd.ops.reshape(x, [-1, 2])
        fd.add_output(x)
    assert fd.fusion.print_math().count("ReshapeOp") == 2
    x_t = torch.arange(6, dtype=torch.float32).view(2, 3)
    [y] = fd.execute([x_t])
    torch.testing.assert_close(y, x_t.view(-1, 2))
