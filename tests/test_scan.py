"""fd.ops.cumsum (and cumprod, cummax, cummin): nvFuser's definition rules, the scan kernel
on the emulator (every dtype, rows of one element, odd lengths, rows longer than a block's
chunk, scans along outer axes, prologue and epilogue fused, special values, integer
wrapping), the segmenter splitting other work off a scan, pinned params, and NVRTC compiling
the kernel without a GPU."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from kfuse import DataType, FusionDefinition, SchedulerType
from kfuse.campaign.property import check_outputs
from kfuse.errors import DefinitionError, SchedulerError
from kfuse.ir.exprs import ScanOp

NUMPY = {
    DataType.Int32: np.int32,
    DataType.Int: np.int64,
    DataType.Half: np.float16,
    DataType.BFloat16: ml_dtypes.bfloat16,
    DataType.Float: np.float32,
    DataType.Double: np.float64,
}


def _cumsum_fd(rank: int, dim: int, dtype: DataType) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1] * rank, dtype=dtype)
        fd.add_output(fd.ops.cumsum(x, dim))
    return fd


def _values(shape: tuple[int, ...], dtype: DataType, seed: int = 0) -> Any:
    rng = np.random.default_rng(seed)
    if dtype.is_integral:
        return rng.integers(-50, 50, shape).astype(NUMPY[dtype])
    return rng.standard_normal(shape).astype(NUMPY[dtype])


def _scan_launches(fd: FusionDefinition) -> list[Any]:
    return [k for k in fd.last_program().launches if k.scheduler is SchedulerType.scan]


# ---- definition (nvFuser's rules) ----
def test_the_result_keeps_the_input_dtype_and_shape() -> None:
    for dtype in NUMPY:
        with FusionDefinition() as fd:
            x = fd.define_tensor(shape=[-1, 4], dtype=dtype)
            y = fd.ops.cumsum(x, -1)
            fd.add_output(y)
        assert y.dtype is dtype and y.ndim == 2
        (scan,) = [e for e in fd.fusion.exprs if isinstance(e, ScanOp)]
        assert scan.dim == 1  # a negative dim counts from the end


@pytest.mark.parametrize("dim", [2, -3])
def test_a_dim_out_of_range_is_a_definition_error(dim: int) -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        with pytest.raises(DefinitionError, match=f"cumsum: dim {dim} is out of range"):
            fd.ops.cumsum(x, dim)
        fd.add_output(x)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda fd, x, s: fd.ops.cumsum(x, 0.5), "dim 0.5 is not an integer"),
        (lambda fd, x, s: fd.ops.cumsum(s, 0), "is 0-d: it has no axis to scan"),
        (lambda fd, x, s: fd.ops.cumsum(fd.ops.gt(x, 0.0), 0), "cast it to Int"),
        (lambda fd, x, s: fd.ops.cumsum(x, 0, init=1.0), "init=1.0"),
    ],
)
def test_bad_calls_are_definition_errors_naming_what_is_wrong(call: Any, match: str) -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[4, 4])
        s = fd.define_tensor(shape=[])
        with pytest.raises(DefinitionError, match=match):
            call(fd, x, s)
        fd.add_output(x)


def test_float8_is_a_definition_error() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Float8_e4m3fn)
        with pytest.raises(DefinitionError, match="Float8_e4m3fn, which kfuse does not scan"):
            fd.ops.cumsum(x, 0)
        fd.add_output(x)


def test_a_scan_along_a_broadcast_axis_is_the_value_itself() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, 1])
        fd.add_output(fd.ops.cumsum(x, 1))
    assert not any(isinstance(e, ScanOp) for e in fd.fusion.exprs)
    a = _values((5, 1), DataType.Float)
    (out,) = fd.execute([a])
    np.testing.assert_array_equal(out, a)


def test_the_printed_definition_rebuilds_the_fusion() -> None:
    fd = _cumsum_fd(3, -2, DataType.Float)
    assert "fd.ops.cumsum(T0, dim=1)" in repr(fd)
    namespace: dict[str, Any] = {}
    exec(repr(fd), {"FusionDefinition": FusionDefinition, "DataType": DataType}, namespace)
    assert namespace["fd"].fusion.structure() == fd.fusion.structure()


# ---- the kernel on the emulator ----
@pytest.mark.parametrize("dtype", list(NUMPY), ids=lambda d: d.value)
@pytest.mark.parametrize(
    "shape, dim",
    [((1, 1), 1), ((3, 1), 1), ((1, 37), -1), ((5, 129), 1), ((2, 5001), 1), ((33, 6), 0)],
)
def test_cumsum_matches_the_reference(dtype: DataType, shape: tuple, dim: int) -> None:
    """Rows of one element, odd lengths, rows over a chunk (5001 elements: a block of 1024
    threads scans 4096 or 8192 a chunk), along an outer axis."""
    fd = _cumsum_fd(len(shape), dim, dtype)
    a = _values(shape, dtype)
    check_outputs(fd, [a])
    assert fd.last_scheduler() is SchedulerType.scan
    if dtype.is_integral:  # exact, as torch's and NumPy's (the dtype kept: nvFuser's)
        (out,) = fd.execute([a])
        assert out.dtype == a.dtype
        np.testing.assert_array_equal(out, np.cumsum(a, axis=dim, dtype=a.dtype))


def test_nvfuser_test_cumsum() -> None:
    """nvFuser's tests/python/direct test_cumsum: [8, 16] along both axes."""
    a = _values((8, 16), DataType.Float, seed=3)
    for dim in (0, 1):
        fd = _cumsum_fd(2, dim, DataType.Float)
        (out,) = fd.execute([a])
        np.testing.assert_allclose(out, np.cumsum(a.astype(np.float64), axis=dim), rtol=1e-5)


@pytest.mark.parametrize(
    "shape, dim",
    [
        ((4, 4), 0),
        ((5,), 0),
        ((8, 1, 6), 1),
        ((8, 7, 5, 1), 2),
        ((8, 7, 5, 1), -1),
        ((8, 7, 5, 1), -2),
    ],
)
def test_nvfuser_opinfo_samples(shape: tuple, dim: int) -> None:
    """nvFuser's cumsum OpInfo samples (values in [-2, 3), its float dtypes): against
    torch.cumsum's results, computed by NumPy in float64."""
    for dtype in (DataType.Float, DataType.Half, DataType.BFloat16, DataType.Double):
        fd = _cumsum_fd(len(shape), dim, dtype)
        a = np.random.default_rng(1).uniform(-2, 3, shape).astype(NUMPY[dtype])
        check_outputs(fd, [a])


@pytest.mark.parametrize("method", ["cumprod", "cummax", "cummin"])
def test_nvfuser_tests_of_the_other_scans(method: str) -> None:
    """nvFuser's tests/python/direct test_cumprod, test_cummin and test_cummax: [8, 16] along
    both axes (cummax and cummin: torch's values, nvFuser returns no indices)."""
    a = _values((8, 16), DataType.Float, seed=4)
    wide = a.astype(np.float64)
    expected = {
        "cumprod": np.cumprod,
        "cummax": np.maximum.accumulate,
        "cummin": np.minimum.accumulate,
    }[method]
    for dim in (0, 1):
        with FusionDefinition() as fd:
            x = fd.define_tensor(shape=[-1, -1])
            fd.add_output(getattr(fd.ops, method)(x, dim))
        assert f"fd.ops.{method}(T0, dim={dim})" in repr(fd)
        (out,) = fd.execute([a])
        np.testing.assert_allclose(out, expected(wide, axis=dim), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("method", ["cumprod", "cummax", "cummin"])
@pytest.mark.parametrize("dtype", list(NUMPY), ids=lambda d: d.value)
def test_the_other_scans_match_the_reference(method: str, dtype: DataType) -> None:
    for shape, dim in [((4, 33), 0), ((2, 5001), -1)]:
        with FusionDefinition() as fd:
            x = fd.define_tensor(shape=[-1, -1], dtype=dtype)
            fd.add_output(getattr(fd.ops, method)(x, dim))
        if method == "cumprod" and not dtype.is_integral:  # factors near 1 keep it in range
            a = (1 + 1e-3 * _values(shape, DataType.Double)).astype(NUMPY[dtype])
        else:
            a = _values(shape, dtype)
        check_outputs(fd, [a])
        if dtype.is_integral or method != "cumprod":  # exact: products wrap as NumPy's
            (out,) = fd.execute([a])
            wide = a if dtype.is_integral else a.astype(np.float64)
            if method == "cumprod":
                expected = np.cumprod(a, axis=dim, dtype=a.dtype)
            else:
                ufunc = np.maximum if method == "cummax" else np.minimum
                expected = ufunc.accumulate(wide, axis=dim)
            np.testing.assert_array_equal(out.astype(np.float64), expected.astype(np.float64))


def test_running_maxima_and_minima_propagate_nan() -> None:
    a = np.array([[1.0, 3.0, np.nan, 5.0, -np.inf], [np.inf, -1.0, 2.0, 7.0, 0.5]], np.float32)
    for method, ufunc in (("cummax", np.maximum), ("cummin", np.minimum)):
        with FusionDefinition() as fd:
            x = fd.define_tensor(shape=[-1, -1])
            fd.add_output(getattr(fd.ops, method)(x, 1))
        (out,) = fd.execute([a])
        np.testing.assert_array_equal(out, ufunc.accumulate(a, axis=1))


def test_a_sum_of_negative_zeros_keeps_its_sign() -> None:
    """torch's sequential sum starts from the first element: -0.0 stays -0.0 until a +0.0
    comes (the kernel starts from -0.0, not +0.0)."""
    fd = _cumsum_fd(1, 0, DataType.Float)
    (out,) = fd.execute([np.array([-0.0, -0.0, 0.0, -0.0], np.float32)])
    assert np.signbit(out).tolist() == [True, True, False, False]


def test_prologue_and_epilogue_run_in_the_scan_kernel() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Half)
        w = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        scaled = fd.ops.mul(fd.ops.cast(x, DataType.Float), fd.ops.broadcast(w, [True, False]))
        c = fd.ops.cumsum(scaled, 1)
        fd.add_output(fd.ops.cast(fd.ops.sub(c, scaled), DataType.Half))  # exclusive
        fd.add_output(c)
    a, b = _values((7, 300), DataType.Half), _values((300,), DataType.Float, seed=1)
    check_outputs(fd, [a, b])
    assert len(fd.last_program().launches) == 1 and len(_scan_launches(fd)) == 1
    exclusive, inclusive = fd.execute([a, b])
    expected = np.cumsum(a.astype(np.float64) * b, axis=1)
    np.testing.assert_allclose(inclusive, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(exclusive[:, 0], 0.0, atol=1e-3)


def test_half_and_bfloat16_accumulate_in_float() -> None:
    """4096 halves: a Half accumulator stops at 1024 (1024 + 0.5 rounds back to it); torch's
    float accumulation, each prefix rounded once, counts on to 2048."""
    for dtype in (DataType.Half, DataType.BFloat16):
        fd = _cumsum_fd(1, 0, dtype)
        a = np.full(4096, 0.5, NUMPY[dtype])
        (out,) = fd.execute([a])
        expected = (np.arange(1, 4097) * 0.5).astype(NUMPY[dtype])
        np.testing.assert_array_equal(out.astype(np.float64), expected.astype(np.float64))


def test_nan_and_infinities_propagate_as_torch_does() -> None:
    a = np.ones((2, 300), np.float32)
    a[0, 10] = np.inf
    a[0, 200] = -np.inf  # inf - inf: NaN from there on
    a[1, 150] = np.nan
    fd = _cumsum_fd(2, 1, DataType.Float)
    (out,) = fd.execute([a])
    with np.errstate(invalid="ignore"):
        expected = np.cumsum(a, axis=1)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(expected))
    np.testing.assert_array_equal(out[np.isinf(expected)], expected[np.isinf(expected)])
    np.testing.assert_array_equal(out[:, :10], expected[:, :10])


def test_a_cancelling_cumsum_is_judged_by_its_terms_magnitudes() -> None:
    """1e8 + 1 rounds to 1e8 in float: after - 1e8 the float prefix is 0 where the exact one
    is 1. The conditioning's prefix magnitudes (2e8 there) bound that rounding; without them
    the comparison would call it a mismatch."""
    from kfuse.reference import conditioning, evaluate
    from kfuse.testing import assert_outputs_close

    fd = _cumsum_fd(1, 0, DataType.Float)
    a = np.array([1e8, 1.0, -1e8, 1.0, 2.0], np.float32)
    (out,) = fd.execute([a])
    assert out[2] != 1.0  # the float sum lost the 1
    expected = evaluate(fd.fusion, [a])
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(fd, [out], expected, [a])
    magnitudes = conditioning(fd.fusion, [a]).magnitudes
    np.testing.assert_array_equal(magnitudes[0], np.cumsum(np.abs(a.astype(np.float64))))
    assert_outputs_close(fd, [out], expected, [a], magnitudes=magnitudes)
    check_outputs(fd, [a])


@pytest.mark.parametrize("dtype", [DataType.Int32, DataType.Int], ids=lambda d: d.value)
def test_integer_sums_wrap_around(dtype: DataType) -> None:
    info = np.iinfo(NUMPY[dtype])
    a = np.array([info.max, 1, 1, info.min, -1], NUMPY[dtype])
    fd = _cumsum_fd(1, 0, dtype)
    (out,) = fd.execute([a])
    np.testing.assert_array_equal(out, np.cumsum(a, dtype=a.dtype))


def test_strided_and_transposed_inputs() -> None:
    base = _values((40, 70), DataType.Float)
    fd = _cumsum_fd(2, 1, DataType.Float)
    for a in (base[::2, ::3], base.T):
        check_outputs(fd, [a])


def test_outer_axis_scans_of_many_rows_take_a_row_a_thread() -> None:
    """[3, 40, 3000] along axis 1: 9000 rows side by side in memory, each thread scanning one
    (block_x 1), in torch's order; a few rows stay with the warps."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Half)
        fd.add_output(fd.ops.cumsum(fd.ops.mul(x, 2.0), 1))
    a = _values((3, 40, 3000), DataType.Half)
    check_outputs(fd, [a])
    assert [k.block for k in _scan_launches(fd)] == [(1, 256, 1)]
    check_outputs(fd, [a[:, :, :5].copy()])
    assert [k.block[0] for k in _scan_launches(fd)] == [32]


def test_an_empty_axis_gives_an_empty_output() -> None:
    fd = _cumsum_fd(2, 1, DataType.Float)
    (out,) = fd.execute([np.zeros((3, 0), np.float32)])
    assert out.shape == (3, 0)


# ---- segmentation ----
def test_the_segmenter_splits_reductions_and_second_scans_off() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        c = fd.ops.cumsum(fd.ops.exp(x), 1)
        fd.add_output(fd.ops.sum(fd.ops.cumsum(c, 0), [1]))
        fd.add_output(fd.ops.div(c, fd.ops.broadcast(fd.ops.sum(x, [1]), [False, True])))
    a = _values((9, 50), DataType.Float)
    segments = fd.segments([a])
    assert [s.scheduler for s in segments].count(SchedulerType.scan) == 2
    assert SchedulerType.reduction in [s.scheduler for s in segments]
    check_outputs(fd, [a])


def test_a_scan_read_through_a_permute_is_written_and_read_back() -> None:
    """The scan kernel reads its result only where it computes it: a transposed use of it
    takes a segment of its own (the scan's segment writes it)."""
    from kfuse import schedule

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.permute(fd.ops.cumsum(x, 1), [1, 0]))
    a = _values((6, 40), DataType.Float)
    ok, why = schedule.can_schedule(fd.fusion, SchedulerType.scan, [a])
    assert not ok and "read through a view of other axes" in why
    assert [s.scheduler for s in fd.segments([a])][0] is SchedulerType.scan
    check_outputs(fd, [a])


# ---- params ----
def test_pinned_params_run_as_given() -> None:
    from kfuse import schedule

    fd = _cumsum_fd(2, 1, DataType.Float)
    a = _values((5, 1000), DataType.Float)
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.scan, [a])
    assert hp.scheduler_type is SchedulerType.scan
    hp.block_x, hp.block_y, hp.unroll_factor, hp.grid_x = 64, 2, 3, 2
    (out,) = fd.manual_execute([a], heuristic_params=hp)
    np.testing.assert_allclose(out, np.cumsum(a.astype(np.float64), axis=1), rtol=1e-5, atol=1e-4)
    (launch,) = fd.last_program().launches
    assert launch.block == (64, 2, 1) and launch.grid == (2, 1, 1)
    hp.block_x, hp.block_y, hp.unroll_factor = 1, 3, 1  # a row a thread
    (out,) = fd.manual_execute([a], heuristic_params=hp)
    np.testing.assert_allclose(out, np.cumsum(a.astype(np.float64), axis=1), rtol=1e-5, atol=1e-4)
    hp.block_x = 48
    with pytest.raises(SchedulerError, match="block_x is 48; the scan kernel needs whole warps"):
        fd.manual_execute([a], heuristic_params=hp)


# ---- NVRTC, no GPU needed ----
@pytest.mark.parametrize("dtype", [DataType.BFloat16, DataType.Int, DataType.Double])
@pytest.mark.parametrize("rows", [70, 9000], ids=["chunked", "serial"])
def test_nvrtc_compiles_the_scan_kernel(dtype: DataType, rows: int) -> None:
    from kfuse.runtime.backends.cuda import compile_to_ptx, nvrtc_options

    fd = _cumsum_fd(2, 0, dtype)
    fd.execute([_values((3, rows), dtype)])
    source = fd.last_cuda_source()
    (launch,) = _scan_launches(fd)
    assert (launch.block[0] == 1) == (rows == 9000)
    ptx = compile_to_ptx(source, launch.name, "sm_90", nvrtc_options())
    assert f".entry {launch.name}" in ptx
    assert ("shfl.sync.up" in ptx) == (rows == 70)  # the serial layout needs no shuffle


# ---- on a GPU (the lead runs them) ----
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(NUMPY), ids=lambda d: d.value)
def test_gpu_cumsum_matches_torch(dtype: DataType) -> None:
    import torch

    torch_dtype = {
        DataType.Int32: torch.int32,
        DataType.Int: torch.int64,
        DataType.Half: torch.float16,
        DataType.BFloat16: torch.bfloat16,
        DataType.Float: torch.float32,
        DataType.Double: torch.float64,
    }[dtype]
    for shape, dim in [((1, 1), 1), ((300, 7), 0), ((64, 100_003), 1), ((4096, 33), -1)]:
        fd = _cumsum_fd(len(shape), dim, dtype)
        if dtype.is_integral:
            x = torch.randint(-50, 50, shape, device="cuda", dtype=torch_dtype)
        else:
            x = torch.randn(shape, device="cuda").to(torch_dtype)
        check_outputs(fd, [x])
        (out,) = fd.execute([x])
        if dtype.is_integral:
            assert torch.equal(out, torch.cumsum(x, dim).to(torch_dtype))


@pytest.mark.gpu
def test_gpu_fused_scan_is_one_kernel() -> None:
    import torch

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        c = fd.ops.cumsum(fd.ops.exp(fd.ops.cast(x, DataType.Float)), -1)
        fd.add_output(fd.ops.cast(fd.ops.log(c), DataType.BFloat16))  # a logcumsumexp
    x = torch.randn(512, 4000, device="cuda", dtype=torch.bfloat16)
    check_outputs(fd, [x])
    assert len(fd.last_program().launches) == 1


# ---- the campaign's strategies ----
def test_the_scan_kind_draws_a_cumsum_in_every_fusion_and_kfuse_matches() -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from kfuse.testing import fusions, inputs_for

    @settings(max_examples=4, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        fd = data.draw(fusions(kinds={"scan"}, max_ops=4))
        assert any(isinstance(e, ScanOp) for e in fd.fusion.exprs)
        check_outputs(fd, data.draw(inputs_for(fd, max_elements=256)))

    check()
