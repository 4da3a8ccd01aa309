"""Cats whose parts differ in size along the cat's axis, each part pointwise over inputs:
one pointwise kernel over the cat's output computes each element's part
(kfuse.codegen.domain.CatSelect), with the same bits as the parts computed on their own."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gpu_support import cuda_torch, requires_gpu
from kfuse.dtypes import DataType
from kfuse.engine.program import KernelProgram
from kfuse.frontend import FusionDefinition
from kfuse.schedule import SchedulerType

WIDTHS = (3, 7, 2)  # three parts of three sizes along the cat's axis
WHOLE_VECTORS = (8, 16, 24)  # windows of whole vectors (of 4 floats, of 8 bf16 values)


def three_parts(
    dtype: DataType, dim: int, joined: bool, widths: tuple[int, ...] = WIDTHS
) -> FusionDefinition:
    """x (rank 3) split along `dim` into parts of WIDTHS: the first times y (y's shape), the
    second x's slice as it is, the third -z (z's shape); joined by a cat along `dim`, or
    (not `joined`) the three parts as outputs of their own."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], dtype=dtype)
        y = fd.define_tensor(shape=[-1, -1, -1], dtype=dtype)
        z = fd.define_tensor(shape=[-1, -1, -1], dtype=dtype)
        sizes = [fd.ops.size(x, i) for i in range(3)]
        slices = []
        start = 0
        for width in widths:
            lo = [0, 0, 0]
            hi = list(sizes)
            lo[dim], hi[dim] = start, start + width
            slices.append(fd.ops.slice(x, lo, hi))
            start += width
        first = fd.ops.mul(slices[0], y)
        if dtype is DataType.Int32:  # an integer op that divides: by y, only where y is read
            first = fd.ops.remainder(first, y)
        parts = [first, slices[1], fd.ops.neg(z)]
        if dtype is DataType.BFloat16:
            parts = [fd.ops.cast(p, dtype) for p in parts]
        if joined:
            fd.add_output(fd.ops.cat(parts, dim=dim))
        else:
            for p in parts:
                fd.add_output(p)
    return fd


def shapes(dim: int, widths: tuple[int, ...] = WIDTHS) -> tuple[tuple[int, ...], ...]:
    """The shapes of x, y and z for a cat along `dim` of a [4, 5, 6]-like tensor."""
    base = [4, 5, 6]

    def along(width: int) -> tuple[int, ...]:
        shape = list(base)
        shape[dim] = width
        return tuple(shape)

    return along(sum(widths)), along(widths[0]), along(widths[2])


def inputs(dtype: DataType, dim: int, widths: tuple[int, ...] = WIDTHS) -> list[np.ndarray]:
    rng = np.random.default_rng(dim)
    x_shape, y_shape, z_shape = shapes(dim, widths)
    if dtype is DataType.Int32:
        x = rng.integers(-1000, 1000, x_shape).astype(np.int32)
        y = rng.integers(1, 50, y_shape).astype(np.int32) * rng.choice([-1, 1], y_shape)
        z = rng.integers(-1000, 1000, z_shape).astype(np.int32)
        return [x, y.astype(np.int32), z]
    return [rng.standard_normal(s).astype(np.float32) for s in (x_shape, y_shape, z_shape)]


def bits(a: Any) -> np.ndarray:
    """The array's bytes as unsigned integers of its item size: -0.0 and NaN payloads count."""
    a = np.ascontiguousarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.itemsize])


def assert_one_kernel_like_its_parts(
    dtype: DataType, dim: int, args: list[Any], widths: tuple[int, ...] = WIDTHS
) -> Any:
    """The cat from one pointwise kernel (and its parts computed on their own, to compare
    with bit for bit)."""
    joined = three_parts(dtype, dim, True, widths)
    (out,) = joined.execute(args)
    parts = three_parts(dtype, dim, False, widths).execute(args)
    program = joined.last_program()
    assert isinstance(program, KernelProgram)
    assert program.schedulers() == [SchedulerType.pointwise]
    return out, parts


def _three_sizes_cross() -> list:
    """Every (dtype, dim, widths). The README's command runs the inner axis whole (both
    dtypes, both kinds of windows) and each outer axis with parts of three sizes, in floats
    along axis 1 and in ints (the remainder) along axis 0; the other six (a kernel each) are
    CI's extended step."""
    quick = {(DataType.Float, 1), (DataType.Int32, 0)}
    return [
        pytest.param(
            dtype,
            dim,
            widths,
            id=f"{dtype}-{dim}-widths{k}",
            marks=() if dim == 2 or (k == 0 and (dtype, dim) in quick) else pytest.mark.extended,
        )
        for k, widths in enumerate([WIDTHS, WHOLE_VECTORS])
        for dim in [2, 1, 0]
        for dtype in [DataType.Float, DataType.Int32]
    ]


@pytest.mark.parametrize(("dtype", "dim", "widths"), _three_sizes_cross())
def test_parts_of_three_sizes_are_one_kernel_with_the_parts_bits(
    dtype: DataType, dim: int, widths: tuple[int, ...]
) -> None:
    """Along the inner axis (each element checks its part, or each vector where the parts
    are whole vectors) and along outer ones (a row's part decides); ints with a remainder
    by y, which is 0 outside y's window: never computed there."""
    args = inputs(dtype, dim, widths)
    out, parts = assert_one_kernel_like_its_parts(dtype, dim, args, widths)
    np.testing.assert_array_equal(bits(out), bits(np.concatenate(parts, axis=dim)))
    x, y, z = args
    first = np.take(x, range(widths[0]), axis=dim) * y
    if dtype is DataType.Int32:
        first = np.fmod(first, y)
        first = np.where((first != 0) & ((first < 0) != (y < 0)), first + y, first)
    middle = np.take(x, range(widths[0], widths[0] + widths[1]), axis=dim)
    np.testing.assert_array_equal(out, np.concatenate([first, middle, -z], axis=dim))


@pytest.mark.parametrize("widths", [WIDTHS, WHOLE_VECTORS])
@pytest.mark.parametrize("dim", [2, 1])
def test_bf16_parts_keep_their_bits(dim: int, widths: tuple[int, ...]) -> None:
    """bf16 parts, their windows element by element or whole vectors of 8 along the inner
    axis (a vector inside one part: loaded as one)."""
    torch = pytest.importorskip("torch")
    arrays = inputs(DataType.Float, dim, widths)
    args = [torch.from_numpy(a).to(torch.bfloat16) for a in arrays]
    out, parts = assert_one_kernel_like_its_parts(DataType.BFloat16, dim, args, widths)
    want = torch.cat([torch.as_tensor(p) for p in parts], dim=dim)
    assert torch.equal(torch.as_tensor(out).view(torch.int16), want.view(torch.int16))
    x, y, z = args
    first = (x.narrow(dim, 0, widths[0]).float() * y.float()).to(torch.bfloat16)
    middle = x.narrow(dim, widths[0], widths[1])
    assert torch.equal(torch.as_tensor(out), torch.cat([first, middle, -z], dim=dim))


def test_negative_zeros_and_nans_survive_the_selection() -> None:
    """Selected, not summed with zeros: -0.0 from -z and in x's slice, NaN from x * y and
    in x's slice, each with its sign bit and payload."""
    x, y, z = inputs(DataType.Float, 2)
    x[..., 0] = np.nan  # the first part: nan * y
    x[..., 3] = -0.0  # the slice copied as it is
    x[..., 4] = np.float32(np.nan) * -1  # a NaN with its sign bit set
    z[..., 1] = 0.0  # -z: -0.0
    y[..., 2] = -1.0
    x[..., 2] = 0.0  # 0 * -1: -0.0
    out, parts = assert_one_kernel_like_its_parts(DataType.Float, 2, [x, y, z])
    np.testing.assert_array_equal(bits(out), bits(np.concatenate(parts, axis=2)))
    assert np.signbit(out[..., 2]).all() and np.isnan(out[..., 0]).all()
    assert np.signbit(out[..., 3]).all() and (out[..., 3] == 0).all()
    assert bits(out[..., 4]).tolist() == bits(x[..., 4]).tolist()
    assert np.signbit(out[..., 11]).all() and (out[..., 11] == 0).all()


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("dtype", [DataType.Float, DataType.BFloat16, DataType.Int32])
@pytest.mark.parametrize("dim", [2, 1])
@pytest.mark.parametrize("widths", [WIDTHS, WHOLE_VECTORS])
def test_parts_of_three_sizes_on_the_gpu(
    dtype: DataType, dim: int, widths: tuple[int, ...]
) -> None:
    """The same on the GPU with torch's CUDA tensors: bit for bit the parts on their own,
    with -0.0 and NaN in them (float types), on three calls (the third is the fast path)."""
    torch = cuda_torch()
    arrays = inputs(dtype, dim, widths)
    if dtype is not DataType.Int32:
        arrays[0][..., 0] = np.nan
        arrays[2][..., 1] = 0.0
    torch_dtype = {
        DataType.Float: torch.float32,
        DataType.BFloat16: torch.bfloat16,
        DataType.Int32: torch.int32,
    }[dtype]
    args = [torch.from_numpy(a).to("cuda").to(torch_dtype) for a in arrays]
    joined = three_parts(dtype, dim, True, widths)
    on_their_own = three_parts(dtype, dim, False, widths)
    for _ in range(3):
        (out,) = joined.execute(args)
        want = torch.cat(on_their_own.execute(args), dim=dim)
        view = torch.int16 if dtype is DataType.BFloat16 else torch.int32
        assert torch.equal(out.view(view), want.view(view))
    program = joined.last_program()
    assert isinstance(program, KernelProgram)
    assert program.schedulers() == [SchedulerType.pointwise]


def test_a_part_reading_a_value_the_same_along_the_axis() -> None:
    """A part that scales x's slice by a per-row value (broadcast along the cat's axis, no
    window there): one kernel; a part reading nothing along the axis (the per-row value
    expanded) has no read whose window selects it: the parts are written as before, right."""
    rng = np.random.default_rng(3)
    x, r = rng.standard_normal((6, 9)).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    for expanded in (False, True):
        with FusionDefinition() as fd:
            xt = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
            rt = fd.define_tensor(shape=[-1], dtype=DataType.Float)
            rows, width = fd.ops.size(xt, 0), fd.ops.size(xt, 1)
            head = fd.ops.slice(xt, [0, 0], [rows, 4])
            rest = fd.ops.slice(xt, [0, 4], [rows, width])
            per_row = fd.ops.broadcast(rt, [False, True])
            if expanded:
                first = fd.ops.expand(fd.ops.mul(per_row, 2.0), [rows, 4])
            else:
                first = fd.ops.mul(head, per_row)
            fd.add_output(fd.ops.cat([first, rest], dim=1))
        (out,) = fd.execute([x, r])
        first_want = np.tile(r[:, None] * 2, (1, 4)) if expanded else x[:, :4] * r[:, None]
        np.testing.assert_array_equal(out, np.concatenate([first_want, x[:, 4:]], axis=1))
        program = fd.last_program()
        assert isinstance(program, KernelProgram)
        if not expanded:
            assert program.schedulers() == [SchedulerType.pointwise]


def test_a_part_from_a_reduction_keeps_the_parts_path() -> None:
    """A softmax part (a persistent kernel's) beside a slice of x of another size: no one
    pointwise kernel computes it, so the parts are written into their windows by their
    kernels, the slice copied by one of its own, in one program."""
    rng = np.random.default_rng(4)
    a, x = rng.standard_normal((6, 5)).astype(np.float32), rng.standard_normal((6, 12))
    x = x.astype(np.float32)
    with FusionDefinition() as fd:
        at = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        xt = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        rows, width = fd.ops.size(xt, 0), fd.ops.size(xt, 1)
        rest = fd.ops.slice(xt, [0, 5], [rows, width])
        fd.add_output(fd.ops.cat([fd.ops.softmax(at, 1), rest], dim=1))
    (out,) = fd.execute([a, x])
    e = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(out[:, :5], e / e.sum(1, keepdims=True), rtol=1e-5)
    np.testing.assert_array_equal(out[:, 5:], x[:, 5:])
    program = fd.last_program()
    assert isinstance(program, KernelProgram)
    assert program.schedulers() == [SchedulerType.inner_persistent, SchedulerType.pointwise]


def test_a_generated_value_inside_a_part_is_indexed_by_the_part() -> None:
    """An iota inside a cat's part at an offset: its element at the part's coordinate, not
    the cat's (a kernel computing the cat whole would index it by the cat's coordinate, so
    such a part keeps the part-by-part writes)."""
    with FusionDefinition() as fd:
        b = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        a = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        ramp = fd.ops.broadcast(fd.ops.iota(5, dtype=DataType.Float), [True, False])
        fd.add_output(fd.ops.cat([b, fd.ops.add(a, ramp)], dim=1))
    rng = np.random.default_rng(3)
    bb, aa = rng.random((4, 3), np.float32), rng.random((4, 5), np.float32)
    (out,) = fd.execute([bb, aa])
    want = np.concatenate([bb, aa + np.arange(5, dtype=np.float32)], 1)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("widths", [WIDTHS, WHOLE_VECTORS])
def test_a_vector_inside_one_part_computes_that_part_alone(
    monkeypatch: pytest.MonkeyPatch, widths: tuple[int, ...]
) -> None:
    """Parts of whole vectors along the inner axis: the kernel picks a vector's part once
    and runs its lanes with it (switches.CAT_PART_PER_VECTOR; rope_partial 481 -> 374 us on an
    H100); parts that split vectors keep the per-lane choice. Both give the parts' bits."""
    from kfuse import switches
    from source_corpus import recorded_sources

    args = inputs(DataType.Float, 2, widths)
    found: list[tuple[str, str]] = []
    with recorded_sources(found):
        try:
            three_parts(DataType.Float, 2, True, widths).execute(args)
        except Exception:  # noqa: BLE001, S110 - the kernel is not loaded; its source is the point
            pass
    ((_, source),) = found
    assert ("const int kf_part =" in source) == (widths == WHOLE_VECTORS)
    results = []
    for per_vector in (True, False):
        monkeypatch.setattr(switches, "CAT_PART_PER_VECTOR", per_vector)
        out, parts = assert_one_kernel_like_its_parts(DataType.Float, 2, args, widths)
        np.testing.assert_array_equal(bits(out), bits(np.concatenate(parts, axis=2)))
        results.append(bits(out))
    np.testing.assert_array_equal(results[0], results[1])
