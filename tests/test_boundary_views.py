"""Reshapes at a fusion's boundary folded into one kernel's operands where this call's layout
makes them views (kfuse.engine.boundary_views), and left to segments where it does not."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gpu_support import cuda_torch, requires_gpu
from kfuse.dtypes import DataType
from kfuse.engine.boundary_views import view_strides
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.schedule import SchedulerType
from kfuse.testing import assert_outputs_close

IP = SchedulerType.inner_persistent


def rand(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _numpy_view_strides(a: np.ndarray, shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """NumPy's answer: setting .shape raises where the reshape would need a copy."""
    v = a.view()
    try:
        v.shape = shape
    except AttributeError:
        return None
    return tuple(s // a.itemsize for s in v.strides)


def _layouts() -> list[tuple[np.ndarray, tuple[int, ...]]]:
    base = np.zeros((4, 6, 10), np.float32)
    arrays = [
        base,
        base[:, ::2],  # a gap between the rows
        base.transpose(1, 0, 2),  # axes that do not nest
        base[:, :3, 1:],  # a slice of both inner axes
        base[:, :1],  # a size-1 axis
        np.zeros((1, 6, 1, 5), np.float32)[:, ::2],
    ]
    cases = []
    for a in arrays:
        n = a.size
        shapes = {(n,), (1, n), (n, 1)} | {
            s
            for r in (2, 3, 4)
            for s in itertools.product((1, 2, 3, 4, 5, 6, 10, 12, 20), repeat=r)
            if int(np.prod(s)) == n
        }
        cases += [(a, s) for s in sorted(shapes)]
    return cases


def test_view_strides_agree_with_numpy() -> None:
    """Every reshape NumPy can do as a view is one here, with the same strides on the axes
    that are walked; every one it must copy is None."""
    views = copies = 0
    for a, shape in _layouts():
        want = _numpy_view_strides(a, shape)
        got = view_strides(a.shape, tuple(s // a.itemsize for s in a.strides), shape)
        if want is None:
            assert got is None, (a.shape, a.strides, shape)
            copies += 1
            continue
        assert got is not None, (a.shape, a.strides, shape)
        walked = [i for i, n in enumerate(shape) if n != 1]
        assert [got[i] for i in walked] == [want[i] for i in walked], (a.strides, shape)
        views += 1
    assert views > 50 and copies > 50  # both kinds are exercised


def test_view_strides_of_sizes_that_differ() -> None:
    assert view_strides((2, 3), (3, 1), (7,)) is None
    # An empty array is a view in any shape of its size (no element is read).
    assert view_strides((0, 3), (3, 1), (3, 0)) is not None


def groupnorm_fd(groups: int, dtype: DataType = DataType.Float) -> FusionDefinition:
    """Group norm as benchmarks/models/groupnorm.py writes it, with contiguity not declared
    (any layout is an input it must run correctly on)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1] * 4, dtype=dtype)
        w = fd.define_tensor(shape=[-1], dtype=dtype)
        b = fd.define_tensor(shape=[-1], dtype=dtype)
        g = fd.define_scalar(groups, dtype=DataType.Int)
        n, c, h, wd = (fd.ops.size(x, i) for i in range(4))
        xg = fd.ops.reshape(x, new_shape=[n, groups, fd.ops.div(c, g), h, wd])
        xg = fd.ops.cast(xg, DataType.Float)
        var, mean = fd.ops.var_mean(xg, dims=[2, 3, 4], correction=0, keepdim=True)
        y = fd.ops.mul(fd.ops.sub(xg, mean), fd.ops.rsqrt(fd.ops.add(var, 1e-5)))
        per_channel = [1, groups, fd.ops.div(c, g), 1, 1]
        wg = fd.ops.cast(fd.ops.reshape(w, new_shape=per_channel), DataType.Float)
        bg = fd.ops.cast(fd.ops.reshape(b, new_shape=per_channel), DataType.Float)
        y = fd.ops.add(fd.ops.mul(y, wg), bg)
        fd.add_output(fd.ops.reshape(fd.ops.cast(y, dtype), new_shape=[n, c, h, wd]))
    return fd


def _check(fd: FusionDefinition, inputs: list) -> list:
    out = fd.execute(inputs)
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)
    return out


def _bf16(a: np.ndarray) -> np.ndarray:
    import ml_dtypes

    return a.astype(ml_dtypes.bfloat16)


@pytest.mark.parametrize(
    ("groups", "shape"),
    [(1, (2, 6, 3, 5)), (2, (2, 6, 3, 5)), (3, (3, 9, 5, 7)), (6, (2, 6, 3, 5)), (1, (1, 7, 1, 1))],
)
@pytest.mark.parametrize("dtype", [DataType.Float, DataType.BFloat16])
def test_groupnorm_is_one_persistent_kernel(
    groups: int, shape: tuple[int, ...], dtype: DataType
) -> None:
    """Groups 1 (LayerNorm-like), some, and C (InstanceNorm-like), odd sizes: the weight
    and bias vary along the part C / G of the row [C / G, H, W] (read by row index / (H W))
    or along the kept axes only (G = C)."""
    fd = groupnorm_fd(groups, dtype)
    cast = _bf16 if dtype is DataType.BFloat16 else (lambda a: a)
    c = shape[1]
    inputs = [cast(rand(shape)), cast(rand((c,), 1)), cast(rand((c,), 2))]
    _check(fd, inputs)
    assert [s.scheduler for s in fd.segments(inputs)] == [IP]


@pytest.mark.parametrize(
    ("groups", "shape", "uniform"),
    [
        (1, (2, 6, 4, 4), True),  # H W = 16: every vector (8 bf16, 4 floats) in one channel
        (2, (3, 4, 2, 8), True),
        (1, (2, 3, 8, 1), True),
        (2, (2, 4, 3, 4), None),  # H W = 12: uniform for 4 floats, not for 8 bf16
        (1, (2, 6, 3, 5), False),  # H W = 15: vectors cross channels
    ],
)
@pytest.mark.parametrize("dtype", [DataType.Float, DataType.BFloat16])
def test_weight_read_once_a_vector_where_vectors_stay_in_a_channel(
    groups: int, shape: tuple[int, ...], uniform: bool | None, dtype: DataType
) -> None:
    """Where H * W is a multiple of the vector, each vector of the row reads one weight and
    one bias element: loaded once and copied to its lanes (kernel-name suffix "u", source
    kf_one); elsewhere lane by lane. Both against the reference, the weight and bias
    distinct per channel so that a lane given its neighbour channel's value fails."""
    fd = groupnorm_fd(groups, dtype)
    cast = _bf16 if dtype is DataType.BFloat16 else (lambda a: a)
    c = shape[1]
    inputs = [cast(rand(shape)), cast(np.arange(1, c + 1, dtype=np.float32)), cast(rand((c,), 2))]
    _check(fd, inputs)
    assert [s.scheduler for s in fd.segments(inputs)] == [IP]
    if uniform is None:
        uniform = dtype is DataType.Float
    assert ("kf_one" in fd.last_cuda_source()) is uniform


def test_per_channel_groupnorm_is_one_persistent_kernel() -> None:
    """G = C: the weight varies along the kept axes only; the input reshape (a split) and
    the output reshape (a merge of a contiguous output) fold away."""
    fd = groupnorm_fd(5)
    inputs = [rand((3, 5, 4, 7)), rand((5,), 1), rand((5,), 2)]
    definition = repr(fd)
    _check(fd, inputs)
    assert fd.last_scheduler() is IP
    (segment,) = fd.segments(inputs)
    assert segment.scheduler is IP and "T3, T14, T15, T18 folded" in segment.reason
    assert "reshapes, slices and cats folded into the operands: T3, T14, T15, T18" in str(
        fd.last_program()
    )
    assert repr(fd) == definition  # the definition is never rewritten
    assert "ReshapeOp" not in fd.last_cuda_source()
    _check(fd, inputs)  # the cached Program, then its fast path
    _check(fd, inputs)


@pytest.mark.parametrize("groups", [1, 3, 6])
def test_strided_input_is_still_a_view(groups: int) -> None:
    """Every other sample, and a strided weight: splitting C is a view of any strides, and
    each group's row is still one stretch of memory."""
    fd = groupnorm_fd(groups)
    x = rand((4, 6, 3, 5))[::2]
    _check(fd, [x, rand((12,), 1)[::2], rand((6,), 2)])
    assert fd.last_scheduler() is IP


@pytest.mark.parametrize(("groups", "one_kernel"), [(1, False), (3, False), (6, True)])
def test_gaps_between_channels(groups: int, one_kernel: bool) -> None:
    """Every other channel: still a view, but a group of several channels is no longer one
    stretch of memory, which the persistent kernel needs of the values it reads in vectors:
    segmented (correct); a group of one channel still is."""
    fd = groupnorm_fd(groups)
    x = rand((2, 12, 3, 5))[:, ::2]
    _check(fd, [x, rand((6,), 1), rand((6,), 2)])
    assert (fd.last_scheduler() is IP) is one_kernel


def test_channels_last_groupnorm_is_correct() -> None:
    """Channels-last x: the reshape is a view, but the group's row [C / G, H, W] does not
    merge for x itself, which no kernel reads that way: the fusion is segmented (correct,
    not one kernel)."""
    fd = groupnorm_fd(2)
    x = rand((2, 3, 5, 4)).transpose(0, 3, 1, 2)
    _check(fd, [x, rand((4,), 1), rand((4,), 2)])
    assert fd.last_scheduler() is SchedulerType.none


def merged_rows_fd() -> FusionDefinition:
    """A layer norm over the last axis of [A, B, K] reshaped to [A * B, K] first: a merge,
    a view only where A's stride is B's times B."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Float)
        a, b, k = (fd.ops.size(x, i) for i in range(3))
        rows = fd.ops.reshape(x, new_shape=[fd.ops.mul(a, b), k])
        var, mean = fd.ops.var_mean(rows, dims=[1], correction=0, keepdim=True)
        y = fd.ops.mul(fd.ops.sub(rows, mean), fd.ops.rsqrt(fd.ops.add(var, 1e-5)))
        fd.add_output(fd.ops.reshape(y, new_shape=[a, b, k]))
    return fd


def test_merge_of_nested_axes_is_one_kernel() -> None:
    fd = merged_rows_fd()
    _check(fd, [rand((3, 4, 9))])
    assert fd.last_scheduler() is IP


@pytest.mark.parametrize("make", [lambda: rand((4, 3, 9)).transpose(1, 0, 2)])
def test_merge_that_is_not_a_view_is_segmented(make: object) -> None:
    """Axes that do not nest: the reshape stays (a framework copy in a segment of its
    own), decided from this call's layout; the contiguous layout still gets one kernel."""
    fd = merged_rows_fd()
    x = make()  # type: ignore[operator]
    _check(fd, [x])
    assert fd.last_scheduler() is SchedulerType.none
    assert SchedulerType.expr_eval in [s.scheduler for s in fd.segments([x])]
    _check(fd, [np.ascontiguousarray(x)])
    assert fd.last_scheduler() is IP


def test_pointwise_between_reshapes_is_one_kernel() -> None:
    """Not only normalizations: a pointwise fusion whose input and output are reshaped."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        y = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Float)
        xr = fd.ops.reshape(x, new_shape=[fd.ops.size(y, 0), fd.ops.size(y, 1), -1])
        fd.add_output(fd.ops.reshape(fd.ops.exp(fd.ops.add(xr, y)), new_shape=[-1]))
    inputs = [rand((6, 5)), rand((2, 3, 5), 1)]
    _check(fd, inputs)
    assert fd.last_scheduler() is SchedulerType.pointwise


@pytest.mark.parametrize("groups", [2, 4])
def test_nan_in_a_group_stays_in_its_group(groups: int) -> None:
    fd = groupnorm_fd(groups)
    x = rand((2, 4, 3, 3))
    x[1, 2, 0, 1] = np.nan
    (out,) = _check(fd, [x, rand((4,), 1), rand((4,), 2)])
    assert fd.last_scheduler() is IP
    group = slice(2, 3) if groups == 4 else slice(2, 4)
    assert np.isnan(out[1, group]).all()
    assert not np.isnan(np.delete(out[1], range(group.start, group.stop), axis=0)).any()
    assert not np.isnan(out[0]).any()


def test_nan_in_the_weight_stays_in_its_channel() -> None:
    fd = groupnorm_fd(2)
    w = rand((6,), 1)
    w[4] = np.nan
    (out,) = _check(fd, [rand((2, 6, 3, 2)), w, rand((6,), 2)])
    assert np.isnan(out[:, 4]).all() and not np.isnan(np.delete(out, 4, axis=1)).any()


def weighted_groups_fd(groups: int, weight_first: bool = False) -> FusionDefinition:
    """The per-channel weight applied before the statistics: the reduction itself reads
    the weight along part of the row (held with the row, not only streamed). weight_first:
    the weight is the kernel's first operand, whose sizes give the row's length."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1] * 4, dtype=DataType.Float)
        w = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        n, c, h, wd = (fd.ops.size(x, i) for i in range(4))
        per = fd.ops.div(c, fd.define_scalar(groups, dtype=DataType.Int))
        operands = [
            fd.ops.reshape(x, new_shape=[n, groups, per, h, wd]),
            fd.ops.reshape(w, new_shape=[1, groups, per, 1, 1]),
        ]
        xw = fd.ops.mul(*(operands[::-1] if weight_first else operands))
        mx = fd.ops.max(xw, dims=[2, 3, 4], keepdim=True)
        e = fd.ops.exp(fd.ops.sub(xw, mx))
        y = fd.ops.div(e, fd.ops.sum(e, dims=[2, 3, 4], keepdim=True))
        fd.add_output(fd.ops.reshape(y, new_shape=[n, c, h, wd]))
    return fd


@pytest.mark.parametrize("weight_first", [False, True])
@pytest.mark.parametrize("shape", [(2, 4, 3, 7), (1, 4, 48, 160)])
def test_split_operand_read_by_the_reductions(shape: tuple[int, ...], weight_first: bool) -> None:
    """Short rows (held in registers) and rows long enough to be held in shared memory."""
    fd = weighted_groups_fd(2, weight_first)
    _check(fd, [rand(shape), rand((shape[1],), 1)])
    assert fd.last_scheduler() is IP
    if shape[2] > 3:
        assert fd.last_program().params.smem_persistent


def test_scalar_input_changes_between_calls() -> None:
    """A scalar input of the folded kernel is the call's own: new values on the cached
    Program and on its fast path."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Float)
        eps = fd.define_scalar(dtype=DataType.Double)
        a, b, k = (fd.ops.size(x, i) for i in range(3))
        rows = fd.ops.reshape(x, new_shape=[fd.ops.mul(a, b), k])
        var, mean = fd.ops.var_mean(rows, dims=[1], correction=0, keepdim=True)
        y = fd.ops.mul(fd.ops.sub(rows, mean), fd.ops.rsqrt(fd.ops.add(var, eps)))
        fd.add_output(fd.ops.reshape(y, new_shape=[a, b, k]))
    x = rand((2, 3, 4)) * 1e-3
    for value in (1e-5, 1.0, 100.0, 1e-5):
        _check(fd, [x, value])
        assert fd.last_scheduler() is IP


def test_output_and_its_reshape() -> None:
    """One value as two outputs, one of them reshaped: both written by the kernel."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        y = fd.ops.softmax(x, -1)
        fd.add_output(y)
        fd.add_output(fd.ops.reshape(y, new_shape=[-1]))
    (flat_y, flat) = _check(fd, [rand((3, 5))])
    assert fd.last_scheduler() is IP
    np.testing.assert_array_equal(flat_y.reshape(-1), flat)


def test_reshaped_output_that_the_fusion_reads_again() -> None:
    """An output made by a reshape whose result other expressions read (here cast and
    permuted into a second output) keeps its reshape: folding it left those expressions
    reading a value nothing computed (a KeyError, found by the campaign's group norms)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, 6, -1], dtype=DataType.Float)
        n, s = fd.ops.size(x, 0), fd.ops.size(x, 2)
        grouped = fd.ops.reshape(x, new_shape=[n, 2, 3, s])
        var, mean = fd.ops.var_mean(grouped, [2, 3], correction=0, keepdim=True)
        y = fd.ops.mul(fd.ops.sub(grouped, mean), fd.ops.rsqrt(fd.ops.add(var, 1e-5)))
        out = fd.ops.reshape(y, new_shape=[n, 6, s])
        fd.add_output(fd.ops.permute(fd.ops.cast(out, DataType.BFloat16), dims=[1, 2, 0]))
        fd.add_output(out)
    _check(fd, [rand((3, 6, 5))])


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize(
    ("groups", "shape"),
    [(1, (8, 64, 28, 28)), (32, (8, 64, 28, 28)), (64, (8, 64, 28, 28)), (4, (3, 12, 17, 9))],
)
@pytest.mark.parametrize("dtype", [DataType.BFloat16, DataType.Float])
def test_groupnorm_on_the_gpu(groups: int, shape: tuple[int, ...], dtype: DataType) -> None:
    """One inner_persistent kernel on the GPU, right against the reference; with the input
    every other sample too (strided, still one kernel), and channels-last (segmented)."""
    from kfuse.dtypes import to_torch_dtype

    torch = cuda_torch()
    kind = to_torch_dtype(dtype)
    fd = groupnorm_fd(groups, dtype)
    c = shape[1]
    gen = torch.Generator(device="cuda").manual_seed(0)
    w, b = (torch.randn(c, device="cuda", generator=gen).to(kind) for _ in range(2))
    x = torch.randn(shape, device="cuda", generator=gen).to(kind)
    strided = torch.randn((2 * shape[0], *shape[1:]), device="cuda", generator=gen).to(kind)[::2]
    for inputs in ([x, w, b], [strided, w, b]):
        for _ in range(3):  # compiled, cached, then the host fast path
            assert_outputs_close(fd, fd.execute(inputs), evaluate(fd.fusion, inputs), inputs)
            assert fd.last_scheduler() is IP
        assert fd._executor_cache.fast_calls(inputs, None) is not None
    channels_last = x.contiguous(memory_format=torch.channels_last)
    inputs = [channels_last, w, b]
    assert_outputs_close(fd, fd.execute(inputs), evaluate(fd.fusion, inputs), inputs)


def test_reshape_of_a_reshaped_input_to_an_output() -> None:
    """reshape(reshape(x)) as an output: both fold, and the kernel copies the input's view
    into the output beside its other output."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        grouped = fd.ops.reshape(x, new_shape=[2, -1])
        fd.add_output(fd.ops.reshape(grouped, new_shape=[-1]))
        fd.add_output(fd.ops.exp(grouped))
    _check(fd, [rand((4, 3))])
    assert fd.last_scheduler() is SchedulerType.pointwise


@pytest.mark.parametrize("shape", [(2, 4, 3, 5), (1, 6, 7, 9), (2, 4, 1, 8), (2, 4, 2, 6)])
def test_weight_varying_along_two_parts_of_the_row(shape: tuple[int, ...]) -> None:
    """A weight per channel and column, [C, W] as [1, G, C / G, 1, W]: its row sub-axes
    [C / G, H, W] are walked, broadcast, walked, so a vector's lanes carry through all
    three (odd extents cut vectors anywhere)."""
    groups = 2
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1] * 4, dtype=DataType.Float)
        w = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        n, c, h, wd = (fd.ops.size(x, i) for i in range(4))
        per = fd.ops.div(c, fd.define_scalar(groups, dtype=DataType.Int))
        xg = fd.ops.reshape(x, new_shape=[n, groups, per, h, wd])
        wg = fd.ops.reshape(w, new_shape=[1, groups, per, 1, wd])
        var, mean = fd.ops.var_mean(fd.ops.mul(xg, wg), dims=[2, 3, 4], correction=0, keepdim=True)
        y = fd.ops.add(fd.ops.mul(fd.ops.sub(xg, mean), fd.ops.rsqrt(fd.ops.add(var, 1e-5))), wg)
        fd.add_output(fd.ops.reshape(y, new_shape=[n, c, h, wd]))
    _check(fd, [rand(shape), rand((shape[1], shape[3]), 1)])
    assert fd.last_scheduler() is IP
    if shape == (2, 4, 2, 6):  # vectors of 4 lanes, the weight's columns wrap inside them
        assert fd.last_program().params.vectorize_reduction == 4
    source = fd.last_cuda_source()
    if fd.last_program().params.vectorize_reduction == 1:  # a lane is a vector: one load
        assert "kf_one" in source and "kf_c2 = 0" not in source
    elif shape[2] > 1:
        assert "kf_c2 = 0" in source  # three sub-axes


def test_elementwise_chain_before_the_reshape_is_one_kernel() -> None:
    """An intermediate reshaped next to a reduction: exp(x) * 0.5 reshaped into groups. The
    canonical form reshapes x itself (kfuse.ir.canonical_rules), a view, so one kernel."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Float)
        a, b, k = (fd.ops.size(x, i) for i in range(3))
        e = fd.ops.mul(fd.ops.exp(x), 0.5)
        rows = fd.ops.reshape(e, new_shape=[fd.ops.mul(a, b), k])
        fd.add_output(fd.ops.softmax(rows, -1))
    _check(fd, [rand((3, 4, 9))])
    assert fd.last_scheduler() is IP


@pytest.mark.parametrize("rolled", [False, True])
def test_cat_part_that_a_later_segment_reads_reshaped(rolled: bool) -> None:
    """cat([m, not(m)]) of a reduction's mask m beside reshape(f(reshape(m))): the segment
    after the reduction writes m into its window of the cat and passes reshape(m) on to the
    rest. That reshape is not folded: folded, m was its output twice and the window's strides
    (kept by value) were used for the reshaped array as well: an internal error where they
    reach past it (the campaign's find), the elements written elsewhere where they do not.
    With the roll (a cat of the merged axis's slices), reshape(m) goes to another segment."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Float)
        s = fd.ops.sum(x, dims=[0, 2])
        m = fd.ops.isinf(fd.ops.broadcast(s, is_broadcast_dim=[True, False, True]))
        n0, n1, n2 = (fd.ops.size(m, dim=k) for k in range(3))
        flat = fd.ops.reshape(m, new_shape=[n0, fd.ops.mul(n1, n2)])
        if rolled:
            head = fd.ops.slice(flat, [0, 0], [n0, 3])
            tail = fd.ops.slice(flat, [0, 3], [n0, fd.ops.mul(n1, n2)])
            worked = fd.ops.cat([tail, head], dim=1)
        else:
            worked = fd.ops.logical_not(flat)
        fd.add_output(fd.ops.reshape(worked, new_shape=[n0, n1, n2]))
        fd.add_output(fd.ops.cat([m, fd.ops.logical_not(m)], dim=2))
    x = rand((1, 7, 8))
    x[0, 2, 3] = np.inf
    out = _check(fd, [x])
    mask = np.isinf(x.sum(axis=(0, 2))).reshape(1, 7, 1)
    expected = np.roll(mask.reshape(1, 7), -3, 1) if rolled else ~mask.reshape(1, 7)
    np.testing.assert_array_equal(out[0].reshape(1, 7), expected)
    np.testing.assert_array_equal(out[1], np.concatenate([mask, ~mask], axis=2))
