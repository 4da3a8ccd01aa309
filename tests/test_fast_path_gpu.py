"""The host fast path: cached GPU calls skip validation and shape inference, and stay right."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from kfuse import FusionDefinition
from kfuse.engine.signature import input_layouts


def add_mul() -> FusionDefinition:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1])
        b = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.mul(fd.ops.add(a, b), 2.0))
    return fd


def test_host_arrays_never_take_the_fast_path() -> None:
    assert input_layouts([np.zeros(3, np.float32)]) is None


@pytest.mark.gpu
def test_cached_torch_call_skips_validation_and_is_correct(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    import kfuse.engine.executor as executor

    fd = add_mul()
    a, b = torch.randn(300, 257, device="cuda"), torch.randn(300, 257, device="cuda")
    fd.execute([a, b])
    assert fd._executor_cache.fast_calls is None  # one call of a layout builds nothing yet
    fd.execute([a, b])  # the second builds its FastCall

    def no_slow_path(*args: object, **kw: object) -> None:
        raise AssertionError("the slow path ran for a cached layout")

    monkeypatch.setattr(executor, "build_runtime_info", no_slow_path)
    a2, b2 = torch.randn_like(a), torch.randn_like(b)  # same layout, new data
    (out,) = fd.execute([a2, b2])
    torch.testing.assert_close(out, (a2 + b2) * 2)
    monkeypatch.undo()
    # A different layout (a transposed view) is a miss that goes through the checks again.
    (out_t,) = fd.execute([a2.t().contiguous().t(), b2])
    torch.testing.assert_close(out_t, (a2 + b2) * 2)


@pytest.mark.gpu
def test_cached_cupy_call_is_correct_on_a_user_stream() -> None:
    cupy = pytest.importorskip("cupy")
    fd = add_mul()
    a = cupy.random.standard_normal((64, 1000), dtype=cupy.float32)
    b = cupy.random.standard_normal((64, 1000), dtype=cupy.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    cupy.cuda.Device().synchronize()  # the inputs were written on another stream
    for _ in range(3):  # compiles; builds the FastCall; a fast-path hit
        (out,) = fd.execute([a, b], stream=stream.ptr)
    stream.synchronize()
    cupy.testing.assert_allclose(out, (a + b) * 2, rtol=1e-6)


def outer_sum_and_total() -> tuple[FusionDefinition, FusionDefinition]:
    """col + row (an output shaped like neither input) and the sum of a vector (a grid
    reduction with a workspace): between them, every kind of buffer a hit allocates."""
    from kfuse import DataType

    with FusionDefinition() as fd:
        col = fd.define_tensor(shape=[-1, 1])
        row = fd.define_tensor(shape=[1, -1])
        fd.add_output(fd.ops.add(col, row))
    with FusionDefinition() as total:
        x = total.define_tensor(shape=[-1], dtype=DataType.Float)
        total.add_output(total.ops.sum(x, [0]))
    return fd, total


@pytest.mark.gpu
def test_fast_path_hits_are_right_for_every_allocation_kind() -> None:
    """Outputs shaped like an input (empty_like), outputs of another shape (empty_strided) and
    a grid reduction's workspace all come out right on repeated cached calls."""
    torch = pytest.importorskip("torch")
    fd, total = outer_sum_and_total()
    col_t, row_t = torch.randn(300, 1, device="cuda"), torch.randn(1, 77, device="cuda")
    big = torch.randn(1 << 22, device="cuda")
    for _ in range(3):
        (outer,) = fd.execute([col_t, row_t])
        (s,) = total.execute([big])
    torch.testing.assert_close(outer, col_t + row_t)
    torch.testing.assert_close(s, big.double().sum().float(), rtol=1e-4, atol=1e-2)
    col_t.copy_(torch.randn_like(col_t))
    (outer,) = fd.execute([col_t, row_t])  # same layout, new values: still a hit, still right
    torch.testing.assert_close(outer, col_t + row_t)


@pytest.mark.gpu
def test_cupy_fast_path_hits_allocate_outputs_and_workspaces() -> None:
    """CuPy hits allocate through cupy.ndarray: a broadcast output and a grid reduction's
    float64 workspace come out right, as CuPy arrays of the right shape and dtype."""
    cupy = pytest.importorskip("cupy")
    fd, total = outer_sum_and_total()
    col_c = cupy.random.standard_normal((300, 1), dtype=cupy.float32)
    row_c = cupy.random.standard_normal((1, 77), dtype=cupy.float32)
    big = cupy.random.standard_normal(1 << 22, dtype=cupy.float32)
    for _ in range(3):  # compiles; builds the FastCall; a fast-path hit
        (outer,) = fd.execute([col_c, row_c])
        (s,) = total.execute([big])
    assert isinstance(outer, cupy.ndarray) and outer.shape == (300, 77)
    assert outer.dtype == cupy.float32 and s.dtype == cupy.float32
    assert fd._executor_cache.fast_calls([col_c, row_c], None) is not None
    cupy.testing.assert_allclose(outer, col_c + row_c, rtol=1e-6)
    cupy.testing.assert_allclose(s, big.astype(cupy.float64).sum(), rtol=1e-4, atol=1e-2)


@pytest.mark.gpu
def test_scalar_inputs_take_the_fast_path_with_each_calls_values() -> None:
    """Scalar inputs of every kind (used directly, through the casts the frontend inserts and
    through scalar arithmetic) may change on every cached call: each result is the checked
    path's, bit for bit, and the calls are fast-path hits."""
    torch = pytest.importorskip("torch")
    from kfuse import DataType

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        a = fd.define_scalar(dtype=DataType.Double)
        f = fd.define_scalar(dtype=DataType.Float)
        k = fd.define_scalar(dtype=DataType.Int)
        flag = fd.define_scalar(dtype=DataType.Bool)
        y = fd.ops.add(fd.ops.mul(x, a), f)
        z = fd.ops.add(fd.ops.mul(y, k), fd.ops.mul(a, 2.0))  # a * 2 is computed on the host
        fd.add_output(fd.ops.where(flag, z, fd.ops.neg(z)))
    t = torch.randn(64, 1000, device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    for _ in range(2):  # compiles, then builds the FastCall; later calls are hits
        fd.execute([t, 1.0, 1.0, 1, True])
    for values in [
        (1.5, 0.25, 3, True),
        (-2.0, 1e-3, -7, False),
        (0.5, 3.0, 0, True),
        (1e3, -1.0, 2**33, False),
    ]:
        inputs = [t, *values]
        assert fd._executor_cache.fast_calls(inputs, None) is not None
        (fast,) = fd.execute(inputs)
        (checked,) = fd._executor_cache.execute(inputs, try_fast=False)
        assert torch.equal(fast, checked)
        a_, f_, k_, flag_ = values
        z_ = (t.double() * a_ + f_) * k_ + 2.0 * a_
        expected = z_ if flag_ else -z_
        # The kernel computes in float32, one rounding per op (no contraction): each rounds by
        # at most 2^-24 of its result, and x * a + f is then multiplied by k (2^33 in one
        # case), so where x * a + f nearly cancels the error is that bound, not a fraction of
        # the result (an unseeded draw failed rtol=1e-5 this way).
        bound = 1e-3 + 1e-5 * expected.abs()
        bound += 2.0**-22 * ((t.double() * a_).abs() + abs(f_)) * abs(k_) + 2.0**-22 * abs(2 * a_)
        assert ((fast.double() - expected).abs() <= bound).all(), values


@pytest.mark.gpu
def test_a_scalar_out_of_its_parameters_range_fails_as_on_the_checked_path() -> None:
    torch = pytest.importorskip("torch")
    from kfuse import DataType, InputError

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Int32)
        k = fd.define_scalar(dtype=DataType.Int32)  # a 4-byte kernel parameter
        fd.add_output(fd.ops.add(x, k))
    t = torch.arange(100, dtype=torch.int32, device="cuda")
    fd.execute([t, 5])
    fd.execute([t, 6])
    assert fd._executor_cache.fast_calls([t, 7], None) is not None
    assert torch.equal(fd.execute([t, 7])[0], t + 7)
    with pytest.raises(InputError, match="outside its range"):
        fd.execute([t, 2**40])
    assert torch.equal(fd.execute([t, -3])[0], t - 3)
    with pytest.raises(InputError):  # not a number: the checked path names the input
        fd.execute([t, "3"])


@pytest.mark.gpu
def test_bad_input_after_a_cached_call_is_still_rejected() -> None:
    torch = pytest.importorskip("torch")
    from kfuse import InputError

    fd = add_mul()
    a, b = torch.randn(8, 8, device="cuda"), torch.randn(8, 8, device="cuda")
    fd.execute([a, b])
    fd.execute([a, b])
    with pytest.raises(InputError):
        fd.execute([a, b.double()])
    with pytest.raises(InputError):
        fd.execute([a, b.cpu()])
    with pytest.raises(InputError):
        fd.execute([a])


@pytest.mark.gpu
def test_cached_torch_call_runs_on_the_current_stream() -> None:
    torch = pytest.importorskip("torch")
    fd = add_mul()
    a, b = torch.randn(512, 512, device="cuda"), torch.randn(512, 512, device="cuda")
    fd.execute([a, b])
    fd.execute([a, b])  # the layout's FastCall exists from the second call
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        torch.cuda._sleep(50_000_000)  # holds the side stream back
        a.add_(1.0)  # queued behind the sleep
        (out,) = fd.execute([a, b])  # sees the new `a` only if queued on the same stream
    stream.synchronize()
    torch.testing.assert_close(out, (a + b) * 2)


@pytest.mark.gpu
def test_scalar_inputs_read_directly_give_the_checked_paths_values() -> None:
    """A scalar input used as it is given, or cast to Float by the frontend, is read by the
    FastCall without the scalar program (ScalarProgram.direct): its value, rounded to
    float32 in C++, must be the program's bit for bit, including values that round to zero
    or to float32's largest, beyond its range (the program's) and NaN."""
    torch = pytest.importorskip("torch")
    from kfuse import DataType

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        s = fd.define_scalar(dtype=DataType.Double)  # cast to Float where it meets x
        k = fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.add(fd.ops.mul(x, s), k))
    t = torch.ones(256, device="cuda")
    for _ in range(2):  # compiles, then builds the FastCall; later calls are hits
        fd.execute([t, 1.0, 0])
    # above float32's largest by less than half its last place: rounds down to it (the
    # program's; the C++ reads only values within the range)
    just_above_largest = float(np.finfo(np.float32).max) * (1 + 2.0**-26)
    for s_ in (0.1, 1 / 3, -0.0, 1e-46, just_above_largest, 3.5e38, 1e300, float("nan"), -2.5):
        inputs = [t, s_, 3]
        assert fd._executor_cache.fast_calls(inputs, None) is not None
        (fast,) = fd.execute(inputs)
        (checked,) = fd._executor_cache.execute(inputs, try_fast=False)
        assert torch.equal(fast.view(torch.int32), checked.view(torch.int32)), s_
        # x * s + k in float32: s rounded to float32 (to nearest; beyond the largest float32
        # by half its last place, infinite), the sum rounded again
        try:
            s32 = struct.unpack("f", struct.pack("f", s_))[0]
        except OverflowError:
            s32 = math.copysign(math.inf, s_)
        with np.errstate(over="ignore"):
            expected = float(np.float32(np.float32(s32) + np.float32(3)))
        assert np.isnan(expected) or fast[0].item() == expected, s_
