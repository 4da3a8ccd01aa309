"""Sums that cancel are judged by their terms' magnitudes (kfuse.reference.sum_magnitudes and
assert_close's `magnitude`). A GPU campaign (seed 2402, shard 0/6, d95d7e0) reported a kernel's
-3.05e-5 where float64 gives exactly 0: sum over 5 of sinh(x) for x = 8, 0, 6, -6, -8 adds
+-1490.48 and +-201.71, and float32 rounding of those partial sums is worth more than the
result's tolerance. The comparison was wrong, not the kernel: the same check must pass
kernel-sized rounding and still fail a real error."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_support import requires_gpu
from kfuse import DataType, FusionDefinition
from kfuse.campaign.property import check_outputs
from kfuse.reference import conditioning, evaluate, sum_magnitudes
from kfuse.testing import assert_outputs_close


def sum_of_sinh() -> FusionDefinition:
    # The campaign's definition (its repro failure-1955-1051.py), shrunk by Hypothesis.
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Int32)
        t1 = fd.ops.cast(t0, dtype=DataType.Float)
        t3 = fd.ops.sum(fd.ops.sinh(t1), dims=[0], keepdim=False, dtype=DataType.Float)
        fd.add_output(fd.ops.exp(fd.ops.cast(t0, dtype=DataType.Float)))
        fd.add_output(t3)
    return fd


def cancelling_input() -> np.ndarray:
    x = np.random.default_rng(0).integers(-8, 9, (5, 5, 255)).astype(np.int32)
    x[:, 0, 152] = [8, 0, 6, -6, -8]
    return x


def test_magnitudes_follow_sums_through_linear_ops() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        s = fd.ops.sum(x, dims=[1])
        mean = fd.ops.mul(s, 0.5)
        centred = fd.ops.sub(x, fd.ops.broadcast(mean, [False, True]))
        fd.add_output(mean)
        fd.add_output(centred)
        fd.add_output(fd.ops.exp(s))  # not linear: the sum's, times exp's slope there
        fd.add_output(fd.ops.neg(x))  # no sum at all
    x = np.array([[3.0, -3.0], [1.0, 2.0]], np.float32)
    mean_m, centred_m, exp_m, neg_m = sum_magnitudes(fd, [x])
    np.testing.assert_allclose(mean_m, [3.0, 1.5])  # (|3| + |-3|) / 2, (1 + 2) / 2
    np.testing.assert_allclose(centred_m, [[6.0, 6.0], [2.5, 3.5]])  # |x| + the mean's
    np.testing.assert_allclose(exp_m, [6.0 * np.exp(0.0), 3.0 * np.exp(3.0)], rtol=1e-5)
    assert neg_m is None


def test_kernel_sized_rounding_of_a_cancelling_sum_passes_and_a_real_error_fails() -> None:
    fd, x = sum_of_sinh(), cancelling_input()
    expected = evaluate(fd, [x])
    assert expected[1][0, 152] == 0.0
    magnitudes = sum_magnitudes(fd, [x])
    assert magnitudes[1][0, 152] == pytest.approx(2 * (1490.4788257895502 + 201.71315737027922))
    actual = [e.astype(np.float32) for e in expected]
    actual[1][0, 152] = -3.0517578125e-05  # what the H200's kernel returned
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(fd, actual, expected, [x])  # judged by the result alone
    assert_outputs_close(fd, actual, expected, [x], magnitudes=magnitudes)
    actual[1][0, 152] = -0.05  # a real error: an ulp of 1490 is 1.2e-4
    with pytest.raises(AssertionError, match=r"output 1 \(T3\).*allowed there"):
        assert_outputs_close(fd, actual, expected, [x], magnitudes=magnitudes)


@pytest.mark.gpu
@requires_gpu
def test_the_campaign_check_passes_the_cancelling_sum_on_the_gpu() -> None:
    torch = pytest.importorskip("torch")
    fd = sum_of_sinh()
    x = torch.from_numpy(cancelling_input()).cuda()
    check_outputs(fd, [x])


def test_the_campaign_check_passes_the_cancelling_sum_on_the_emulator() -> None:
    check_outputs(sum_of_sinh(), [cancelling_input()])


def normalized_times_infinite_weight() -> tuple[FusionDefinition, list[np.ndarray]]:
    """The GPU campaign's layer norm (seed 2410, shard 1/6, 5a2bb1a): rows of 0 and +-c whose
    sum is exactly 0, so x - mean is 0 for x = 0 in exact arithmetic and a rounding residue
    of either sign in each precision; times an infinite weight the element is +inf, -inf or
    NaN by that residue. The H200 gave -inf where float64 gave +inf and float32 NaN."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int32)
        w = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        c = fd.ops.cast(fd.ops.clamp(x, -1, 1), DataType.Float)
        t = fd.ops.atanh(fd.ops.mul(fd.ops.tanh(c), 0.9))
        fd.add_output(fd.ops.layer_norm(t, w, normalized_ndim=1))
    rows = np.array([np.random.default_rng(k).integers(-1, 2, 13) for k in range(200)])
    weight = np.random.default_rng(0).standard_normal(13).astype(np.float32)
    weight[4], weight[7] = np.inf, -np.inf
    return fd, [rows.astype(np.int32), weight]


def test_an_infinity_whose_sign_a_cancelling_mean_decides_is_indeterminate() -> None:
    fd, inputs = normalized_times_infinite_weight()
    (expected,) = evaluate(fd, inputs)
    (magnitude,), (indeterminate,), _ = conditioning(fd, inputs)
    rows = inputs[0]
    cancels = (rows.sum(axis=1) == 0)[:, None] & (rows == 0)
    infinite_weight = np.isinf(inputs[1])[None, :]
    np.testing.assert_array_equal(indeterminate, cancels & infinite_weight)
    assert magnitude is not None  # the Welford mean's terms follow it to the output

    at = tuple(int(i[0]) for i in np.nonzero(indeterminate))
    actual = expected.astype(np.float32)
    for flipped in (-np.inf if expected[at] != -np.inf else np.inf, np.nan):
        actual[at] = flipped
        with pytest.raises(AssertionError, match="not close"):
            assert_outputs_close(fd, [actual], [expected], inputs, magnitudes=[magnitude])
        assert_outputs_close(
            fd, [actual], [expected], inputs, magnitudes=[magnitude], indeterminate=[indeterminate]
        )
    actual[at] = 1.0  # a finite value there is wrong whatever the rounding
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(fd, [actual], [expected], inputs, indeterminate=[indeterminate])
    # An infinity whose sign x - mean decides clearly stays judged.
    actual = expected.astype(np.float32)
    clear = tuple(int(i[0]) for i in np.nonzero(np.isinf(expected) & ~indeterminate))
    actual[clear] = -actual[clear]
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(fd, [actual], [expected], inputs, indeterminate=[indeterminate])


def test_the_campaign_check_passes_infinities_rounding_decides_on_the_emulator() -> None:
    fd, inputs = normalized_times_infinite_weight()
    check_outputs(fd, inputs)


@pytest.mark.gpu
@requires_gpu
def test_the_campaign_check_passes_infinities_rounding_decides_on_the_gpu() -> None:
    torch = pytest.importorskip("torch")
    fd, inputs = normalized_times_infinite_weight()
    check_outputs(fd, [torch.from_numpy(a).cuda() for a in inputs])


def gelu_of_centred_times_weight() -> tuple[FusionDefinition, list[np.ndarray]]:
    """The GPU campaign's normalization (seed 2604, shard 2/12, a0b78f4): x is one value
    expanded over 128 elements, so x - mean is exactly 0 in float64 and gelu of it 0, NaN times
    an infinite w; the kernel's float32 sum left a residue, and its gelu times w was -inf."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        w = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        mean = fd.ops.div(fd.ops.sum(x, dims=[0]), fd.ops.cast(fd.ops.size(x, 0), DataType.Float))
        centred = fd.ops.sub(x, fd.ops.broadcast(mean, [True]))
        out = fd.ops.mul(fd.ops.gelu(centred, approximate="tanh"), w)
        fd.add_output(fd.ops.cast(out, DataType.Half))
    x = np.broadcast_to(np.float32(0.0472865), (128,))
    w = np.random.default_rng(1).standard_normal(128).astype(np.float32)
    w[[3, 34, 90]] = [np.inf, -np.inf, np.inf]
    return fd, [x, w]


def test_a_function_of_a_cancelling_sum_keeps_it_near_zero() -> None:
    fd, inputs = gelu_of_centred_times_weight()
    (expected,) = evaluate(fd, inputs)
    assert np.isnan(expected[[3, 34, 90]]).all()
    (magnitude,), (indeterminate,), _ = conditioning(fd, inputs)
    np.testing.assert_array_equal(indeterminate, np.isinf(inputs[1]))
    actual = expected.copy()
    actual[[3, 34, 90]] = [-np.inf, np.inf, -np.inf]  # a residue of -1e-9 in the kernel
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(fd, [actual], [expected], inputs)
    assert_outputs_close(
        fd, [actual], [expected], inputs, magnitudes=[magnitude], indeterminate=[indeterminate]
    )
    actual[5] = 1.0  # where w is finite, gelu of the residue is about 0: 1 is wrong
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(
            fd, [actual], [expected], inputs, magnitudes=[magnitude], indeterminate=[indeterminate]
        )


def test_functions_without_a_bounded_slope_carry_it_by_their_slope_there() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        centred = fd.ops.sub(x, fd.ops.broadcast(fd.ops.sum(x, dims=[0]), [True]))
        fd.add_output(fd.ops.tanh(centred))
        fd.add_output(fd.ops.sinh(centred))  # its slope grows without bound: cosh there
        fd.add_output(fd.ops.log(centred))  # a pole inside the bound at 0: nothing allowed
    x = np.array([1.0, -3.0, 2.0], np.float32)
    tanh_m, sinh_m, log_m = sum_magnitudes(fd, [x])
    np.testing.assert_allclose(tanh_m, np.abs(x) + 6.0)
    centred = x.astype(np.float64)  # x - sum(x), and sum(x) is 0
    np.testing.assert_allclose(sinh_m, np.cosh(centred) * (np.abs(x) + 6.0), rtol=1e-5)
    assert np.isfinite(log_m).all() and log_m[1] == 0.0  # log(-3): NaN either side


def lgamma_of_a_fused_difference() -> tuple[FusionDefinition, list[np.ndarray]]:
    """The form of an emulator campaign's mismatch (seed 53777451; its fusion had more
    outputs): lgamma(1 - x * sum(x)), whose product the kernel fuses into the difference as
    one fma. The difference rounds within its terms' magnitudes either way; lgamma's slope
    (steep near its poles) moves that rounding past lgamma's own tolerance, and there the
    float32 reference, rounding twice, came out nearer float64 than the kernel's one
    rounding."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        total = fd.ops.broadcast(fd.ops.sum(x, dims=[1]), [False, True])
        fd.add_output(fd.ops.lgamma(fd.ops.sub(1.0, fd.ops.mul(x, total))))
    x = np.random.default_rng(3).standard_normal((64, 3)).astype(np.float32)
    return fd, [x]


def test_lgamma_of_a_fused_difference_is_judged_by_the_rounding_it_carries() -> None:
    fd, inputs = lgamma_of_a_fused_difference()
    (expected,) = evaluate(fd, inputs)
    (magnitude,), _, _ = conditioning(fd, inputs)
    assert magnitude is not None and np.isfinite(magnitude).all()
    moved = expected.astype(np.float32)
    steep = np.unravel_index(int(np.argmax(magnitude)), magnitude.shape)
    # An error of the size the difference's rounding makes through lgamma's slope passes...
    moved[steep] += np.float32(4 * 2.0**-23 * magnitude[steep])
    assert_outputs_close(fd, [moved], [expected], inputs, magnitudes=[magnitude])
    # ...a thousand times that does not.
    moved[steep] = expected[steep] + 1000 * 4 * 2.0**-23 * magnitude[steep] + 1e-3
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(fd, [moved], [expected], inputs, magnitudes=[magnitude])


def lerp_towards_an_infinity_by_a_cancelling_weight() -> tuple[FusionDefinition, list[np.ndarray]]:
    """The GPU campaign's normalization (seed 251012496, round 61, e57f505), shrunk: a column
    of 63 equal values (one row expanded), f(x) - mean(f(x)) exactly 0 in float64 and a
    rounding residue of either sign in float32; lerp(x, f(x), that) where x = inf is
    inf + w * -inf: NaN for w = 0 (float64; kfuse on the emulator), NaN for a
    positive residue, +inf for a negative one (torch's and the float32 reference's)."""
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        t3 = fd.ops.acos(fd.ops.mul(fd.ops.tanh(t0), 0.9))
        n = fd.ops.cast(fd.ops.size(t3, dim=0), dtype=DataType.Float)
        mean = fd.ops.div(fd.ops.sum(t3, dims=[0], keepdim=False, dtype=DataType.Float), n)
        centred = fd.ops.sub(t3, fd.ops.broadcast(mean, is_broadcast_dim=[True, False]))
        fd.add_output(fd.ops.lerp(t0, t3, centred))
    row = np.array([1.38029921, -1.35610759, np.inf], dtype=np.float32)
    return fd, [np.broadcast_to(row, (63, 3))]


def test_a_lerp_whose_weight_cancels_towards_an_infinity_is_indeterminate() -> None:
    fd, inputs = lerp_towards_an_infinity_by_a_cancelling_weight()
    (expected,) = evaluate(fd, inputs)
    _, (indeterminate,), _ = conditioning(fd, inputs)
    np.testing.assert_array_equal(indeterminate, np.isinf(inputs[0]))
    actual = expected.astype(np.float32)
    actual[:, 2] = np.inf  # the float32 reference's answer: accepted there, as NaN is
    assert_outputs_close(fd, [actual], [expected], inputs, indeterminate=[indeterminate])
    actual[:, 2] = 1.0  # a finite value there is wrong whatever the rounding
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(fd, [actual], [expected], inputs, indeterminate=[indeterminate])
    check_outputs(fd, inputs)  # the campaign's check, on the emulator


def lgamma_of_a_normalized_column() -> tuple[FusionDefinition, list[np.ndarray]]:
    """A GPU campaign's normalization (seed 31200006, 330d816, failure-3149-223), its form:
    lgamma of (x - mean) / std over columns. Where a column's x - mean is exactly 0 in
    float64 (column 0: equal values) lgamma is inf, and the kernel's sum may round to a
    residue of either sign instead (lgamma 15.5 in the campaign: a residue of 1.8e-7)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        mean, var, _ = fd.ops.welford(x, dims=[0])
        n = fd.ops.cast(fd.ops.size(x, 0), DataType.Float)
        centred = fd.ops.sub(x, fd.ops.broadcast(mean, [True, False]))
        scale = fd.ops.rsqrt(fd.ops.add(fd.ops.div(var, n), 1e-5))
        normed = fd.ops.mul(centred, fd.ops.broadcast(scale, [True, False]))
        fd.add_output(fd.ops.cast(fd.ops.lgamma(normed), DataType.Half))
        fd.add_output(fd.ops.log(fd.ops.sub(fd.ops.abs(normed), 9.0)))  # NaN either way
    x = np.random.default_rng(5).standard_normal((33, 4)).astype(np.float32)
    x[:, 0] = np.float32(0.78539819)
    return fd, [x]


def test_a_pole_within_an_operands_rounding_is_any_value() -> None:
    fd, inputs = lgamma_of_a_normalized_column()
    expected, logs = evaluate(fd, inputs)
    assert np.isposinf(expected[:, 0]).all() and np.isfinite(expected[:, 1:]).all()
    _, _, (order, log_order) = conditioning(fd, inputs)
    np.testing.assert_array_equal(order[:, 0], True)  # the pole, inside the sums' rounding
    assert not order[:, 1:].any()  # finite, away from any pole: judged as always
    assert np.isnan(logs).all() and (log_order is None or not log_order.any())
    actual = expected.astype(np.float16)
    actual[:, 0] = 15.5  # a residue's lgamma, as the kernel's was
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(fd, [actual, logs], [expected, logs], inputs)
    assert_outputs_close(
        fd, [actual, logs], [expected, logs], inputs, order_decides=[order, log_order]
    )
    actual[3, 2] += 1.0  # away from the pole a wrong value still fails
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(
            fd, [actual, logs], [expected, logs], inputs, order_decides=[order, log_order]
        )
    check_outputs(fd, inputs)  # the campaign's check, on the emulator


def clamped_log_of_a_cumsum() -> FusionDefinition:
    # A GPU campaign's definition (a6898e1, seed 3061487043, failure-3524-16.py):
    # a cumulative sum of sinh of integers that cancels to about 0, clamped below 2, then
    # log(|.| + 0.5). The kernel's prefix sums rounded to 1.7e-4 where float64's is 0.
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int32)
        t3 = fd.ops.cumsum(fd.ops.sinh(fd.ops.cast(t0, dtype=DataType.Float)), dim=0)
        t6 = fd.ops.add(fd.ops.abs(fd.ops.minimum(t3, 2.0)), 0.5)
        fd.add_output(fd.ops.log(t6))
    return fd


def test_minimum_carries_a_cancelling_scan_to_the_log_after_it() -> None:
    fd = clamped_log_of_a_cumsum()
    x = np.zeros((13, 3), np.int32)
    x[:, 1] = [-6, -2, -6, -7, -1, 2, 5, 0, 6, 6, 7, 1, -5]  # the campaign's column
    (magnitude,) = sum_magnitudes(fd, [x])
    # the prefix's terms' magnitudes (about 2000), times log's slope at 0.5
    assert magnitude is not None and magnitude[12, 1] > 2000
    (expected,) = evaluate(fd, [x])
    actual = np.array(expected, dtype=np.float32)
    actual[12, 1] = np.log(np.float32(0.5) + np.float32(1.68e-4))  # what the kernel gave
    assert_outputs_close(fd, [actual], [expected], [x], magnitudes=[magnitude])
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(fd, [actual], [expected], [x])  # without the magnitude: fails
    actual[12, 1] = np.log(np.float32(0.5) + np.float32(0.05))  # a real error
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(fd, [actual], [expected], [x], magnitudes=[magnitude])


def lerp_far_past_a_cancelling_start() -> FusionDefinition:
    # An emulator campaign's definition (08b9aee, seed 7211, failure-7980-632.py), its output
    # T22 alone: lerp(x - x * sum(x * x), y, float(t << 33)). With t = 1 the weight is 2^33
    # and end - start about 5e-4, so start's rounding (x * sum(x * x) is about 1.23) comes
    # out 2^33 times larger: the kernel's -4248575 against float64's -4252787.
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Half)
        y = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        t = fd.define_tensor(shape=[-1, 1, 1, 1], dtype=DataType.Int)
        xf = fd.ops.cast(x, dtype=DataType.Float)
        square_sum = fd.ops.sum(fd.ops.mul(xf, xf), dims=[2], keepdim=False)
        start = fd.ops.sub(xf, fd.ops.mul(xf, fd.ops.broadcast(square_sum, [False, False, True])))
        weight = fd.ops.cast(
            fd.ops.bitwise_left_shift(fd.ops.squeeze(t, dims=[0]), 33), DataType.Float
        )
        fd.add_output(fd.ops.lerp(start, fd.ops.broadcast(y, [True, True, False]), weight))
    return fd


def test_lerp_carries_its_starts_rounding_times_its_weight() -> None:
    fd = lerp_far_past_a_cancelling_start()
    x = np.full((1, 1, 32), -0.337158203125, np.float16)  # the campaign's row: equal values
    y = np.full(32, 0.8888004422187805, np.float32)
    t = np.ones((1, 1, 1, 1), np.int64)
    (magnitude,) = sum_magnitudes(fd, [x, y, t])
    # start's magnitude (|x| + |x| * 32 x^2, 1.56) and |y| (0.89), times 1 + 2^33
    assert magnitude is not None and magnitude[0, 0, 3] > 2.0e10
    (expected,) = evaluate(fd, [x, y, t])
    assert abs(float(expected[0, 0, 3]) + 4252787.1) < 1.0
    actual = np.array(expected, dtype=np.float32)
    actual[0, 0, 3] = -4248575.0  # what the emulated kernel gave
    assert_outputs_close(fd, [actual], [expected], [x, y, t], magnitudes=[magnitude])
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(fd, [actual], [expected], [x, y, t])  # without the magnitude
    actual[0, 0, 3] = -4.7e6  # a real error (10%)
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(fd, [actual], [expected], [x, y, t], magnitudes=[magnitude])
    check_outputs(fd, [x, y, t])  # the campaign's check, on the emulator


def lgamma_near_a_pole() -> FusionDefinition:
    # An emulator campaign's definition (h200 profile, seed 7301, failure-19995-409): lgamma
    # of a computed value near the pole at -1, where an ulp of the operand moves lgamma by
    # about 1 / (operand + 1) ulps of 1.
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        v = fd.ops.asin(fd.ops.mul(fd.ops.tanh(x), 0.9))
        fd.add_output(fd.ops.lgamma(v))
        fd.add_output(fd.ops.exp(v))  # well conditioned: judged about as before
    return fd


def test_a_function_of_a_computed_value_carries_the_values_rounding() -> None:
    fd = lgamma_near_a_pole()
    # asin(0.9 tanh(x)) = -0.99983 at x = atanh(sin(-0.99983) / 0.9)
    x = np.array([np.arctanh(np.sin(-0.99983) / 0.9), 0.3, -0.2], np.float32)
    expected = evaluate(fd, [x])
    assert 8.0 < expected[0][0] < 9.5  # near the pole: -log(1.7e-4)
    lgamma_m, exp_m = sum_magnitudes(fd, [x])
    # the operand's 4-ulp bound, 4.8e-7, times lgamma's slope there (about 6000)
    assert 1e3 < lgamma_m[0] < 1e5 and lgamma_m[1] < 10.0
    assert (exp_m < 4 * np.abs(expected[1])).all()  # a few of |exp| itself: ulps of tolerance
    actual = [e.astype(np.float32) for e in expected]
    actual[0][0] += 5.6e-4  # 1.5 ulps of the operand, as the campaign's kernel differed
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(fd, actual, expected, [x])  # judged by the result alone
    assert_outputs_close(fd, actual, expected, [x], magnitudes=[lgamma_m, exp_m])
    actual[0][0] += 0.05  # a real error
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(fd, actual, expected, [x], magnitudes=[lgamma_m, exp_m])
    actual[0][0] = expected[0][0]
    actual[1][1] *= 1.0 + 1e-4  # exp's tolerance is still its dtype's
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(fd, actual, expected, [x], magnitudes=[lgamma_m, exp_m])


def test_a_pole_inside_a_wide_rounding_bound_is_any_value() -> None:
    """A GPU campaign (478c30a, failure-3131-105): lgamma of x - x * sum(x * x) over a long
    row. The float32 sum may round by far more than 1, so the operand's bound holds poles of
    lgamma (the integers <= 0) between its ends, where lgamma is finite; the kernel's value
    landed on one (inf), float64's did not (-1.7e7). Elements whose bound holds a pole are any
    value; the others are still judged."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        s = fd.ops.sum(fd.ops.mul(x, x), dims=[1])
        v = fd.ops.sub(x, fd.ops.mul(x, fd.ops.broadcast(s, [False, True])))
        fd.add_output(fd.ops.lgamma(v))
    x = np.random.default_rng(3).standard_normal((2, 4096)).astype(np.float32)
    x[1] *= 1e-4  # a row whose sum is small: its bound holds no pole
    (expected,) = evaluate(fd, [x])
    _, _, (order,) = conditioning(fd, [x])
    assert order[0][x[0] > 0.1].all()  # v <= -400: its bound (about 8 |x| here) holds poles
    assert not order[1].any()
    actual = expected.astype(np.float32)
    actual[0, np.argmax(x[0])] = np.inf  # the kernel's value on a pole
    assert_outputs_close(fd, [actual], [expected], [x], order_decides=[order])
    actual[1, 5] = expected[1, 5] + 1.0  # a wrong value where no pole is near still fails
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(fd, [actual], [expected], [x], order_decides=[order])


def test_lgamma_near_its_zeros_is_accurate_to_ulps_of_one() -> None:
    """A GPU campaign (478c30a, failure-3126-211): lgamma(lgamma(u)) in double, u near 1,
    thresholded, then gelu. The inner lgamma is 2.1e-7 there, which the kernel and float64
    compute to about 4 ulps of 1 (not of 2.1e-7), and the outer lgamma's slope of 5e6 makes
    that 2.5e-10 of the result (rtol 1e-10): ABSOLUTE_NEAR_ZEROS; threshold carries it."""
    with FusionDefinition() as fd:
        u = fd.define_tensor(shape=[-1], dtype=DataType.Double)
        inner = fd.ops.lgamma(fd.ops.lgamma(u))
        fd.add_output(fd.ops.gelu(fd.ops.threshold(inner, 0.0, 1.0), approximate="tanh"))
    u = np.array([1.0 - 2.1e-7 / 0.5772156649, 0.5, 3.5])
    (expected,) = evaluate(fd, [u])
    assert 15.0 < expected[0] < 16.0
    (magnitude,) = sum_magnitudes(fd, [u])
    actual = expected.copy()
    actual[0] -= 3.9e-9  # the campaign's kernel: 3.7 ulps of 1 in the inner lgamma
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(fd, [actual], [expected], [u])  # judged by the result alone
    assert_outputs_close(fd, [actual], [expected], [u], magnitudes=[magnitude])
    actual[0] = expected[0] - 1e-6  # a real error still fails
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(fd, [actual], [expected], [u], magnitudes=[magnitude])
    actual[0], actual[2] = expected[0], expected[2] * (1 + 1e-9)  # away from the pole too
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(fd, [actual], [expected], [u], magnitudes=[magnitude])


def test_the_poles_an_interval_holds() -> None:
    from kfuse.reference.backends import backend_for
    from kfuse.reference.function_bounds import holds_pole

    be = backend_for([np.zeros(1)])
    lo = np.array([-1e6 - 0.3, -2.7, -2.3, 0.2, 0.5, np.nan])
    hi = lo + np.array([0.6, 0.8, 0.2, 0.5, 2.0, 1.0])
    np.testing.assert_array_equal(
        holds_pole(be, "lgamma", lo, hi), [True, True, False, False, False, False]
    )
    tan_lo = np.array([1.5, 1.6, -1.6, 4.6, 0.0])
    tan_hi = np.array([1.6, 4.8, -1.5, 4.8, 1.5])
    np.testing.assert_array_equal(
        holds_pole(be, "tan", tan_lo, tan_hi), [True, True, True, True, False]
    )
    np.testing.assert_array_equal(
        holds_pole(be, "reciprocal", np.array([-1.0, 0.0, 1.0]), np.array([1.0, 0.5, 2.0])),
        [True, True, False],
    )
    assert holds_pole(be, "exp", lo, hi) is None
