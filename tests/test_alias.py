"""In-place updates: fd.ops.set and fd.add_output(out, alias_input=inp), with nvFuser's rules.

The aliased output is written into the input's storage in the input's layout; it is returned
only when it was also added as an ordinary output (then as the input itself); no kernel or
segment reads the input after its new values are stored; an input that cannot be written is
a clear error. Ported from nvFuser's python frontend tests (test_alias_output_to_input,
test_returning_aliased_outputs, test_inplace_update_on_non_contiguous_inputs) and written
for kfuse's two ways of writing (in place in a pointwise kernel, staged after a segmented
run).
"""

from __future__ import annotations

import numpy as np
import pytest

from kfuse import FusionDefinition
from kfuse.dtypes import DataType
from kfuse.errors import DefinitionError, InputError
from kfuse.schedule.types import SchedulerType


def _add_one_into_input() -> FusionDefinition:
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1])
        t1 = fd.ops.add(t0, fd.define_scalar(1.0))
        fd.add_output(t1, alias_input=t0)
    return fd


def test_alias_output_to_input_returns_nothing_and_writes_the_input() -> None:
    fd = _add_one_into_input()
    a = np.ones((4, 4), np.float32)
    assert fd.execute([a]) == []
    np.testing.assert_array_equal(a, np.full((4, 4), 2.0, np.float32))
    # One pointwise kernel stores straight into the input: no copy afterwards.
    program = fd.last_program()
    assert program.scheduler is SchedulerType.pointwise and len(program.launches) == 1
    assert program.in_place == ((0, 0),)


def test_returning_aliased_outputs_returns_the_input() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    expected = np.where(x > 0, x, 0).astype(np.float32)
    with FusionDefinition() as fd:
        inp = fd.define_tensor(shape=[-1, -1, -1, -1])
        zero = fd.define_scalar(0.0)
        out = fd.ops.where(fd.ops.gt(inp, zero), inp, zero)
        fd.add_output(out, alias_input=inp)
        fd.add_output(out)  # now also an ordinary output: returned
    (result,) = fd.execute([x])
    assert result is x
    np.testing.assert_array_equal(x, expected)


def test_a_later_ordinary_output_keeps_its_own_position() -> None:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1])
        b = fd.define_tensor(shape=[-1])
        s = fd.ops.add(a, b)
        fd.add_output(fd.ops.mul(b, 3.0))
        fd.add_output(s, alias_input=a)
        fd.add_output(fd.ops.neg(s))
    a0, b0 = np.arange(5, dtype=np.float32), np.ones(5, np.float32)
    a1 = a0.copy()
    tripled, negated = fd.execute([a1, b0])
    np.testing.assert_array_equal(tripled, 3 * b0)
    np.testing.assert_array_equal(negated, -(a0 + b0))
    np.testing.assert_array_equal(a1, a0 + b0)


def test_the_printed_definition_rebuilds_the_aliases() -> None:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1])
        out = fd.ops.mul(a, 2.0)
        fd.add_output(out)
        fd.add_output(out, alias_input=a)
        fd.add_output(fd.ops.exp(a), alias_input=fd.define_tensor(shape=[-1]))
    text = repr(fd)
    assert "fd.add_output(T1)\n    fd.add_output(T1, alias_input=T0)" in text
    namespace: dict = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(text, namespace)
    again = namespace["fd"]
    assert again.fusion == fd.fusion
    assert again.fusion.hidden_outputs == fd.fusion.hidden_outputs == (1,)


def test_a_set_copies_an_input_written_into_another() -> None:
    with FusionDefinition() as fd:
        src = fd.define_tensor(shape=[-1, -1])
        dst = fd.define_tensor(shape=[-1, -1])
        fd.add_output(src, alias_input=dst)
    src_a = np.arange(12, dtype=np.float32).reshape(3, 4)
    dst_a = np.zeros((3, 4), np.float32)
    assert fd.execute([src_a, dst_a]) == []
    np.testing.assert_array_equal(dst_a, src_a)
    assert "set" in repr(fd)  # the copy nvFuser's aliasOutputToInput inserts


def test_set_is_a_new_value() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1])
        y = fd.ops.set(x)
        fd.add_output(y)
        fd.add_output(fd.ops.add(x, 1.0), alias_input=x)
    x_a = np.arange(4, dtype=np.float32)
    (copied,) = fd.execute([x_a])
    # The copy holds x's old values, although x was written in the same kernel.
    np.testing.assert_array_equal(copied, np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(x_a, np.arange(4, dtype=np.float32) + 1)
    assert copied is not x_a


def test_a_reduction_reads_all_of_the_input_before_it_is_written() -> None:
    # out = inp + sum(inp), written into inp: the reduction must see every old value. A
    # write during the pointwise part, before the sum had read the row, would add new values.
    with FusionDefinition() as fd:
        inp = fd.define_tensor(shape=[-1, -1])
        total = fd.ops.broadcast_in_dim(fd.ops.sum(inp, dims=[1]), [3, 4096], [0])
        fd.add_output(fd.ops.add(inp, total), alias_input=inp)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4096)).astype(np.float32)
    expected = x.astype(np.float64) + x.astype(np.float64).sum(axis=1, keepdims=True)
    assert fd.execute([x]) == []
    np.testing.assert_allclose(x, expected, rtol=1e-4, atol=1e-3)
    assert fd.last_program().scheduler is not SchedulerType.pointwise


def test_a_segmented_fusion_writes_after_every_segment() -> None:
    with FusionDefinition() as fd:
        inp = fd.define_tensor(shape=[-1, -1])
        m = fd.ops.max(inp, dims=[0], keepdim=True)
        s = fd.ops.sum(inp, dims=[1], keepdim=True)
        fd.add_output(fd.ops.add(fd.ops.sub(inp, m), s), alias_input=inp)
        fd.add_output(s)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 96)).astype(np.float32)
    x64 = x.astype(np.float64)
    expected = x64 - x64.max(axis=0, keepdims=True) + x64.sum(axis=1, keepdims=True)
    (sums,) = fd.execute([x])
    np.testing.assert_allclose(sums, x64.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(x, expected, rtol=1e-4, atol=1e-3)


def test_a_transposed_read_of_the_input_is_staged() -> None:
    # out[i, j] = inp[j, i] + inp[i, j]: storing in place would clobber elements another
    # thread reads.
    with FusionDefinition() as fd:
        inp = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.add(inp, fd.ops.permute(inp, [1, 0])), alias_input=inp)
    x = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    expected = x + x.T
    fd.execute([x])
    np.testing.assert_array_equal(x, expected)
    assert not getattr(fd.last_program(), "in_place", ())


def test_the_input_keeps_its_layout() -> None:
    with FusionDefinition() as fd:
        inp = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.mul(inp, 2.0), alias_input=inp)
    base = np.arange(6 * 8, dtype=np.float32).reshape(6, 8)
    before = base.copy()
    view = base.T  # column-major: the result must land where each element lives
    fd.execute([view])
    np.testing.assert_array_equal(base, 2 * before)
    strided = base[:, ::2]  # every other column; the others stay
    fd.execute([strided])
    np.testing.assert_array_equal(base[:, ::2], 4 * before[:, ::2])
    np.testing.assert_array_equal(base[:, 1::2], 2 * before[:, 1::2])


def test_cached_calls_write_into_the_input_of_each_call() -> None:
    fd = _add_one_into_input()
    arrays = [np.full((8, 16), float(k), np.float32) for k in range(3)]
    for k, a in enumerate(arrays):
        assert fd.execute([a]) == []
        np.testing.assert_array_equal(a, np.full((8, 16), k + 1.0, np.float32))
        for j in range(k + 1, 3):  # the later calls' inputs are untouched so far
            np.testing.assert_array_equal(arrays[j], np.full((8, 16), float(j), np.float32))


def _adam() -> FusionDefinition:
    """One Adam step (torch.optim.Adam's update, bias corrections given as scalars)."""
    with FusionDefinition() as fd:
        param = fd.define_tensor(shape=[-1])
        grad = fd.define_tensor(shape=[-1])
        exp_avg = fd.define_tensor(shape=[-1])
        exp_avg_sq = fd.define_tensor(shape=[-1])
        lr, beta1, beta2, eps = (fd.define_scalar(dtype=DataType.Float) for _ in range(4))
        bias1, bias2_sqrt = (fd.define_scalar(dtype=DataType.Float) for _ in range(2))
        o = fd.ops
        m = o.add(o.mul(exp_avg, beta1), o.mul(grad, o.sub(1.0, beta1)))
        v = o.add(o.mul(exp_avg_sq, beta2), o.mul(o.mul(grad, grad), o.sub(1.0, beta2)))
        denom = o.add(o.div(o.sqrt(v), bias2_sqrt), eps)
        p = o.sub(param, o.mul(o.div(lr, bias1), o.div(m, denom)))
        fd.add_output(m, alias_input=exp_avg)
        fd.add_output(v, alias_input=exp_avg_sq)
        fd.add_output(p, alias_input=param)
    return fd


def _adam_reference(p, g, m, v, lr, b1, b2, eps, step):  # noqa: ANN001, ANN202
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    bias1, bias2 = 1 - b1**step, 1 - b2**step
    p = p - lr / bias1 * (m / (np.sqrt(v) / np.sqrt(bias2) + eps))
    return p, m, v


def test_adam_step_is_one_kernel_reading_four_arrays_and_writing_three() -> None:
    fd = _adam()
    rng = np.random.default_rng(4)
    n = 5000
    p, g = rng.standard_normal(n), rng.standard_normal(n)
    m, v = rng.standard_normal(n) * 0.1, rng.random(n) * 0.01
    arrays = [a.astype(np.float32) for a in (p, g, m, v)]
    expected = [p.copy(), m.copy(), v.copy()]
    lr, b1, b2, eps = 1e-3, 0.9, 0.999, 1e-8
    for step in (1, 2, 3):  # the second and third find the program cached
        expected = list(_adam_reference(expected[0], g, *expected[1:], lr, b1, b2, eps, step))
        scalars = [lr, b1, b2, eps, 1 - b1**step, float(np.sqrt(1 - b2**step))]
        assert fd.execute([*arrays, *scalars]) == []
        for got, want in zip((arrays[0], arrays[2], arrays[3]), expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)
    program = fd.last_program()
    assert program.scheduler is SchedulerType.pointwise
    (launch,) = program.launches
    assert sorted(program.in_place) == [(0, 2), (1, 3), (2, 0)]
    source = program.cuda_source()
    assert source.count("kf::load_vec<") >= 4 and source.count("kf::store_vec<") >= 3


# ---- errors ----


def test_a_read_only_numpy_input_cannot_be_written() -> None:
    fd = _add_one_into_input()
    a = np.ones((2, 3), np.float32)
    a.setflags(write=False)
    with pytest.raises(InputError, match="read-only NumPy array"):
        fd.execute([a])


def test_an_expanded_view_cannot_be_written() -> None:
    fd = _add_one_into_input()
    row = np.ones((1, 3), np.float32)
    with pytest.raises(InputError, match="expanded"):
        fd.execute([np.broadcast_to(row, (4, 3))])


def test_the_output_must_have_the_inputs_dtype_rank_and_shape() -> None:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], dtype=DataType.Half)
        with pytest.raises(DefinitionError, match="dtype and rank must match"):
            fd.add_output(fd.ops.cast(a, DataType.Float), alias_input=a)
        b = fd.define_tensor(shape=[-1])
        with pytest.raises(DefinitionError, match="dtype and rank must match"):
            fd.add_output(fd.ops.sum(a, dims=[1]), alias_input=b)
        c = fd.define_tensor(shape=[-1, -1])
        t = fd.ops.add(c, 1.0)
        with pytest.raises(DefinitionError, match="must be a tensor input"):
            fd.add_output(t, alias_input=t)
        fd.add_output(t, alias_input=c)
        with pytest.raises(DefinitionError, match="already receives"):
            fd.add_output(fd.ops.mul(c, 2.0), alias_input=c)
    with FusionDefinition() as fd2:
        x = fd2.define_tensor(shape=[-1, -1])
        y = fd2.define_tensor(shape=[-1, -1])
        fd2.add_output(fd2.ops.add(x, fd2.ops.sum(y, dims=[1], keepdim=True)), alias_input=y)
    with pytest.raises(InputError, match="has shape"):
        fd2.execute([np.ones((4, 3), np.float32), np.ones((4, 5), np.float32)])


# ---- GPU ----


@pytest.mark.gpu
@pytest.mark.parametrize("framework", ["torch", "cupy"])
def test_gpu_arrays_are_updated_in_place_on_every_call(framework: str) -> None:
    if framework == "torch":
        torch = pytest.importorskip("torch")

        def make(a: np.ndarray):  # noqa: ANN202
            return torch.from_numpy(a).cuda()

        def host(a):  # noqa: ANN001, ANN202
            return a.cpu().numpy()
    else:
        cupy = pytest.importorskip("cupy")
        make, host = cupy.asarray, cupy.asnumpy
    fd = _adam()
    rng = np.random.default_rng(5)
    n = 1 << 16
    p, g = rng.standard_normal(n), rng.standard_normal(n)
    m, v = rng.standard_normal(n) * 0.1, rng.random(n) * 0.01
    arrays = [make(a.astype(np.float32)) for a in (p, g, m, v)]
    pointers = [int(a.data_ptr()) if framework == "torch" else a.data.ptr for a in arrays]
    expected = [p, m, v]
    lr, b1, b2, eps = 1e-3, 0.9, 0.999, 1e-8
    for step in (1, 2, 3, 4):  # the third and fourth take the host fast path
        expected = list(_adam_reference(expected[0], g, *expected[1:], lr, b1, b2, eps, step))
        scalars = [lr, b1, b2, eps, 1 - b1**step, float(np.sqrt(1 - b2**step))]
        assert fd.execute([*arrays, *scalars]) == []
        for got, want in zip((arrays[0], arrays[2], arrays[3]), expected, strict=True):
            np.testing.assert_allclose(host(got), want, rtol=2e-5, atol=1e-6)
    assert fd._executor_cache.fast_calls is not None
    after = [int(a.data_ptr()) if framework == "torch" else a.data.ptr for a in arrays]
    assert after == pointers
    # A staged write (a reduction reads the input) on the same framework.
    with FusionDefinition() as fd2:
        inp = fd2.define_tensor(shape=[-1, -1])
        total = fd2.ops.sum(inp, dims=[1], keepdim=True)
        fd2.add_output(fd2.ops.add(inp, total), alias_input=inp)
    x = rng.standard_normal((8, 3000)).astype(np.float32)
    xd = make(x.T.copy()).T  # a column-major input keeps its layout
    for _ in range(3):
        want = x.astype(np.float64) + x.astype(np.float64).sum(axis=1, keepdims=True)
        fd2.execute([xd])
        np.testing.assert_allclose(host(xd), want, rtol=1e-4, atol=1e-2)
        x = host(xd)


def test_an_output_in_a_stride_order_written_into_an_input_keeps_the_inputs_layout() -> None:
    """The kernel writes a stride_order output in its order; the input (row major) takes
    the values at its own strides, on every call (a copy, not the kernel's store)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1, -1], dtype=DataType.Float)
        fd.add_output(fd.ops.stride_order(fd.ops.mul(x, 2.0), [3, 0, 2, 1]), alias_input=x)
    x = np.random.default_rng(5).random((2, 3, 4, 5), np.float32)
    for _ in range(3):
        target = x.copy()
        assert fd.execute([target]) == []
        np.testing.assert_array_equal(target, x * 2)
