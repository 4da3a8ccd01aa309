"""fd.ops.stride_order and fd.ops.segment_set: nvFuser's tests ported (test_output_stride_order,
test_output_stride_order_with_reduction, test_broadcast_and_stride_order, test_segment_set,
the transpose benchmark's copy by segment_set), the strides outputs come back with on every
path (one kernel, a transpose tile kernel, segments), the number of kernels, the checks at
definition, and the printed definition (host emulator; the GPU tests last)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gpu_support import cuda_torch, requires_gpu
from kfuse.dtypes import DataType
from kfuse.errors import DefinitionError
from kfuse.frontend import FusionDefinition
from kfuse.schedule import SchedulerType

F = DataType.Float


def element_strides(array: np.ndarray) -> tuple[int, ...]:
    return tuple(s // array.itemsize for s in array.strides)


def assert_stored_in_order(array: np.ndarray, order: tuple[int, ...]) -> None:
    """Dense (its elements fill one span) with strides growing as order ranks the axes: the
    array `.contiguous(memory_format=...)` of that order gives."""
    strides = element_strides(array)
    slowest_first = sorted(range(array.ndim), key=lambda i: -order[i])
    stored = np.empty([array.shape[i] for i in slowest_first], dtype=array.dtype)
    expected = np.transpose(stored, [slowest_first.index(i) for i in range(array.ndim)])
    assert strides == element_strides(expected), (strides, order)


@pytest.mark.parametrize("perm", list(itertools.permutations(range(3))))
def test_output_stride_order(perm: tuple[int, ...]) -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1, -1], dtype=F)
        fd.add_output(fd.ops.stride_order(fd.ops.add(t0, 3.0), perm))
    (out,) = fd.execute([x])
    np.testing.assert_array_equal(out, x + 3.0)
    assert_stored_in_order(out, perm)
    assert len(fd.last_program().launches) == 1


@pytest.mark.parametrize("perm", list(itertools.permutations(range(3))))
def test_output_stride_order_with_reduction(perm: tuple[int, ...]) -> None:
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1] * 4, dtype=F)
        fd.add_output(fd.ops.stride_order(fd.ops.sum(t0, dims=[2]), perm))
    (out,) = fd.execute([x])
    np.testing.assert_allclose(out, x.sum(2), rtol=1e-5, atol=1e-6)
    assert_stored_in_order(out, perm)


def test_broadcast_and_stride_order() -> None:
    """A size-1 axis gets the stride the order gives it, as torch's memory formats do."""
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1, -1], dtype=F)
        t1 = fd.ops.broadcast(t0, is_broadcast_dim=[False, True, False, False])
        fd.add_output(fd.ops.stride_order(t1, stride_order=[0, 1, 2, 3]))
    (out,) = fd.execute([x])
    np.testing.assert_array_equal(out, x[:, None])
    assert element_strides(out) == (1, 2, 2, 6)


def test_channels_last_output_is_a_transpose_kernel() -> None:
    """An NCHW value stored channels-last ([3, 0, 2, 1]): the strides NHWC memory gives, written
    by the transpose scheduler's tiles (the output's unit stride is along C)."""
    x = np.random.default_rng(2).standard_normal((2, 64, 12, 20)).astype(np.float32)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1] * 4, contiguity=[True] * 4, dtype=F)
        fd.add_output(fd.ops.stride_order(fd.ops.relu(t0), [3, 0, 2, 1]))
    (out,) = fd.execute([x])
    np.testing.assert_array_equal(out, np.maximum(x, 0))
    assert element_strides(out) == (64 * 12 * 20, 1, 20 * 64, 64)
    assert fd.last_scheduler() is SchedulerType.transpose


def test_the_same_value_in_two_layouts_and_row_major_elsewhere() -> None:
    """Only the output the order is given to is stored so: the same value added plainly is
    row major, and a stride_order whose value is not an output changes nothing."""
    x = np.random.default_rng(3).standard_normal((5, 7)).astype(np.float32)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], dtype=F)
        y = fd.ops.mul(t0, 2.0)
        fd.add_output(y)
        fd.add_output(fd.ops.stride_order(y, [0, 1]))
        fd.add_output(fd.ops.neg(fd.ops.stride_order(y, [0, 1])))
        fd.add_output(fd.ops.stride_order(y, []))
    plain, column, negated, empty_order = fd.execute([x])
    for out in (plain, column, negated, empty_order):
        np.testing.assert_array_equal(np.abs(out), np.abs(x * 2.0))
    assert element_strides(plain) == element_strides(negated) == (7, 1)
    assert element_strides(empty_order) == (7, 1)
    assert element_strides(column) == (1, 5)


def test_a_row_major_order_before_a_reshape_is_the_value_itself() -> None:
    """Thunder's pattern: a permute ordered row major, then reshaped. The order places no
    output, so the canonical form drops it: one kernel, as without it."""
    x = np.random.default_rng(9).standard_normal((2, 6, 4, 8)).astype(np.float32)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1] * 4, contiguity=[True] * 4, dtype=F)
        t1 = fd.ops.permute(t0, dims=[0, 2, 1, 3])
        t2 = fd.ops.stride_order(t1, stride_order=[3, 2, 1, 0])
        fd.add_output(fd.ops.mul(fd.ops.reshape(t2, new_shape=[2, 4, 48]), 2.0))
    (out,) = fd.execute([x])
    np.testing.assert_array_equal(out, 2.0 * x.transpose(0, 2, 1, 3).reshape(2, 4, 48))
    (segment,) = fd.segments([x])
    assert not any("stride_order" in e for e in segment.exprs)
    assert len(fd.last_program().launches) == 1


def test_stride_order_of_a_segmented_fusion() -> None:
    """Outputs of different segments (a reduction over axis 0, then the normalization) each
    stored in their order; a stride-ordered value passed between segments is read right."""
    x = np.random.default_rng(4).standard_normal((33, 40)).astype(np.float32)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], dtype=F)
        e = fd.ops.stride_order(fd.ops.exp(t0), [0, 1])
        s = fd.ops.sum(e, dims=[0], keepdim=True)
        fd.add_output(fd.ops.stride_order(fd.ops.div(e, s), [0, 1]))
        fd.add_output(fd.ops.stride_order(fd.ops.broadcast(s, [False, False, True]), [1, 0, 2]))
    out, sums = fd.execute([x])
    ex = np.exp(x.astype(np.float64))
    np.testing.assert_allclose(out, ex / ex.sum(0, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(sums[..., 0], ex.sum(0, keepdims=True), rtol=1e-5)
    assert element_strides(out) == (1, 33)
    assert element_strides(sums) == (40, 1, 40)


def test_a_later_segment_reads_a_stride_ordered_output_in_its_order() -> None:
    """An output stored column-major that the next segments read back (through
    segment_set): they read it with its strides, not as a row-major array."""
    x = np.random.default_rng(10).standard_normal((33, 40)).astype(np.float32)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], dtype=F)
        y = fd.ops.stride_order(fd.ops.neg(t0), [0, 1])
        fd.add_output(y)
        fd.add_output(fd.ops.relu(fd.ops.segment_set(y)))
        fd.add_output(fd.ops.sum(fd.ops.segment_set(y), dims=[1]))
    negated, relu, sums = fd.execute([x])
    np.testing.assert_array_equal(negated, -x)
    np.testing.assert_array_equal(relu, np.maximum(-x, 0))
    np.testing.assert_allclose(sums, -x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)
    assert element_strides(negated) == (1, 33)
    assert len(fd.segments([x])) == 2


@pytest.mark.parametrize("with_matmul", [False, True])
def test_a_repeated_stride_ordered_output_is_two_arrays_in_its_order(with_matmul: bool) -> None:
    """The same ordered output added twice: two arrays, both column-major, from one kernel
    or from a segmented fusion's runner (a matmul beside it is a library segment), whose
    second output is a copy."""
    x = np.random.default_rng(11).standard_normal((33, 40)).astype(np.float32)
    m = np.eye(3, dtype=np.float32)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], dtype=F)
        y = fd.ops.stride_order(fd.ops.neg(t0), [0, 1])
        fd.add_output(y)
        fd.add_output(y)
        if with_matmul:
            t1 = fd.define_tensor(shape=[-1, -1], dtype=F)
            fd.add_output(fd.ops.matmul(t1, t1))
    outs = fd.execute([x, m] if with_matmul else [x])
    assert not np.shares_memory(outs[0], outs[1])
    for out in outs[:2]:
        np.testing.assert_array_equal(out, -x)
        assert element_strides(out) == (1, 33)
    assert fd.last_scheduler() is (SchedulerType.none if with_matmul else SchedulerType.transpose)


def test_stride_order_of_an_input_is_a_copy_in_that_order() -> None:
    x = np.random.default_rng(5).standard_normal((6, 10)).astype(np.float32)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], dtype=F)
        fd.add_output(fd.ops.stride_order(t0, [0, 1]))
    (out,) = fd.execute([x])
    np.testing.assert_array_equal(out, x)
    assert element_strides(out) == (1, 6) and not np.shares_memory(out, x)


def test_bad_stride_orders_are_definition_errors() -> None:
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1, -1], dtype=F)
        with pytest.raises(DefinitionError, match=r"\[0, 1\] has 2 entries but T0 has 3 axes"):
            fd.ops.stride_order(t0, [0, 1])
        with pytest.raises(DefinitionError, match=r"\[0, 1, 1\] is not a permutation of 0..2"):
            fd.ops.stride_order(t0, [0, 1, 1])
        with pytest.raises(DefinitionError, match=r"\[0, 1, 3\] is not a permutation"):
            fd.ops.stride_order(t0, [0, 1, 3])
        with pytest.raises(DefinitionError, match="must be a list of ints"):
            fd.ops.stride_order(t0, [0, 1.0, 2])
        with pytest.raises(DefinitionError, match="expected a tensor"):
            fd.ops.stride_order(fd.define_scalar(1.0), [0])
        fd.add_output(fd.ops.stride_order(t0, [2, 0, 1]))


def test_segment_set() -> None:
    """nvFuser's test_segment_set: neg, then relu in another segment, which reads the neg
    its segment wrote: two kernels (pointwise alone would fuse them into one)."""
    x = np.random.default_rng(6).standard_normal((5, 5, 5)).astype(np.float32)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1, -1], dtype=F)
        t1 = fd.ops.neg(t0)
        t2 = fd.ops.segment_set(t1)
        fd.add_output(fd.ops.relu(t2))
    (out,) = fd.execute([x])
    np.testing.assert_array_equal(out, np.maximum(-x, 0))
    assert len(fd.last_program().launches) == 2
    first, second = fd.segments([x])
    assert (first.inputs, first.outputs) == (("T0",), ("T1",))
    assert (second.inputs, second.outputs) == (("T1",), ("T3",))


@pytest.mark.parametrize("copy", [False, True])
def test_transpose_by_copy(copy: bool) -> None:
    """nvFuser's transpose benchmark: relu of a permuted input, with segment_set its result
    copied in a segment of its own (the transpose kernel, then the copy); the output is a
    row-major array either way."""
    x = np.random.default_rng(7).standard_normal((64, 96)).astype(np.float32)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=F)
        t1 = fd.ops.permute(t0, dims=[1, 0])
        s2 = fd.define_scalar(0.0, dtype=DataType.Double)
        t4 = fd.ops.where(fd.ops.gt(t1, s2), t1, s2)
        fd.add_output(fd.ops.segment_set(t4) if copy else t4)
    (out,) = fd.execute([x])
    np.testing.assert_array_equal(out, np.maximum(x.T, 0))
    assert element_strides(out) == (64, 1)
    schedulers = [s.scheduler for s in fd.segments([x])]
    expected = [SchedulerType.transpose] + [SchedulerType.pointwise] * copy
    assert schedulers == expected
    assert len(fd.last_program().launches) == 1 + copy


def test_segment_set_of_an_input_or_a_scalar() -> None:
    """Nothing to separate from: the input is read by the one kernel; a scalar is itself."""
    x = np.random.default_rng(8).standard_normal(7).astype(np.float32)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1], dtype=F)
        s0 = fd.define_scalar(None, dtype=F)
        assert fd.ops.segment_set(s0) is s0
        fd.add_output(fd.ops.mul(fd.ops.exp(fd.ops.segment_set(t0)), s0))
    (out,) = fd.execute([x, 2.0])
    np.testing.assert_allclose(out, np.exp(x) * 2.0, rtol=1e-6)
    assert len(fd.last_program().launches) == 1


def test_the_printed_definition_rebuilds_the_layout_ops() -> None:
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1, -1], dtype=F)
        t1 = fd.ops.segment_set(fd.ops.neg(t0))
        fd.add_output(fd.ops.stride_order(t1, [1, 2, 0]))
    text = repr(fd)
    assert "T2 = fd.ops.segment_set(T1)" in text
    assert "T3 = fd.ops.stride_order(T2, stride_order=[1, 2, 0])" in text
    namespace: dict = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(text, namespace)
    rebuilt = namespace["fd"]
    assert repr(rebuilt) == text
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    (out,) = rebuilt.execute([x])
    np.testing.assert_array_equal(out, -x)
    assert_stored_in_order(out, (1, 2, 0))


@requires_gpu
def test_stride_order_and_segment_set_on_the_gpu() -> None:
    """torch's CUDA tensors: a channels-last output has the strides of
    .contiguous(memory_format=torch.channels_last), on the first call and on the fast path's
    later ones; segment_set is two kernels."""
    torch = cuda_torch()
    x = torch.randn(4, 32, 18, 30, device="cuda")
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1] * 4, contiguity=[True] * 4, dtype=F)
        fd.add_output(fd.ops.stride_order(fd.ops.mul(t0, 2.0), [3, 0, 2, 1]))
    expected = (x * 2.0).contiguous(memory_format=torch.channels_last)
    for _ in range(3):
        (out,) = fd.execute([x])
        assert out.stride() == expected.stride()
        assert out.is_contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(out, expected)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1, -1], dtype=F)
        fd.add_output(fd.ops.relu(fd.ops.segment_set(fd.ops.neg(t0))))
    y = torch.randn(5, 5, 5, device="cuda")
    for _ in range(2):
        (out,) = fd.execute([y])
        torch.testing.assert_close(out, y.neg().relu())
        assert len(fd.last_program().launches) == 2


@pytest.mark.parametrize("reduced", [False, True], ids=["pointwise", "after_a_reduction"])
def test_a_reshape_of_a_stride_ordered_output_is_in_row_major_order(reduced: bool) -> None:
    """Output c stored column-major and reshape(c) as a second output: the reshape's
    elements are c's in row-major order. Folded into the kernel's operands, the kernel
    wrote c's column-major layout into the reshape's array (wrong at 75a5da0, found by a
    test of kfuse.engine.output_views): an output reshape folds only where neither side has
    a stride order."""
    x = np.random.default_rng(3).standard_normal((4, 6)).astype(np.float32)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], dtype=F)
        v = fd.ops.exp(t0)
        if reduced:
            v = fd.ops.sub(t0, fd.ops.broadcast_in_dim(fd.ops.sum(t0, [1]), [4, 6], [0]))
        c = fd.ops.stride_order(v, [0, 1])
        fd.add_output(c)
        fd.add_output(fd.ops.reshape(c, [24]))
    expected = np.exp(x) if not reduced else x - x.astype(np.float64).sum(1, keepdims=True)
    for _ in range(3):
        stored, flat = fd.execute([x])
        assert element_strides(stored) == (1, 4)
        np.testing.assert_allclose(stored, expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(flat, expected.reshape(24), rtol=1e-5, atol=1e-5)
