"""Two mismatches of an H100 campaign (seed 3907987690, at 3c16389; their repros in
tests/data/repros/2026-12-08-h100/) were the reference's and the comparison's, not the
kernels':

* failure-3604-46: rsqrt(|x + y * nextafter(z, y)| + 0.5) with x = -inf, y = -1.78, z = -inf.
  The float64 reference computed nextafter in float64: float64's largest (-1.8e308) where
  the kernel's Float op gives float32's (-3.4e38); times y that is +inf, and NaN against x,
  where the kernel's value is -inf and the output 0. A Float nextafter is now computed in
  float32 (as OpInfo.scalar_of_dtype says its value depends on the dtype).
* failure-3604-958: a float32 cumulative sum of 98,989 terms cast to Half, at 65504 in float64
  and past 65520 (where Half's rounding overflows) in the kernel's order: inf. Elements whose
  value is within their rounding bound of a narrowing cast's overflow may be either
  (kfuse.reference.order_marks: `order_decides`, any value right there); every other element
  is still judged.

The same marks cover a double product that a kernel fuses into a sum (kfuse.codegen.
contraction) past float64's range, where the reference's product is an infinity and the fma's
exact.
"""

from __future__ import annotations

import numpy as np
import pytest

from kfuse import DataType, FusionDefinition
from kfuse.campaign.property import check_outputs
from kfuse.reference import conditioning, evaluate
from kfuse.testing import assert_outputs_close


def test_nextafter_of_a_float_is_float32s() -> None:
    with FusionDefinition() as fd:
        a, b = (fd.define_tensor(shape=[-1], dtype=DataType.Float) for _ in range(2))
        fd.add_output(fd.ops.nextafter(a, b))
    a = np.array([-np.inf, np.inf, 0.0, 1.0], np.float32)
    b = np.array([0.0, 0.0, 1.0, 2.0], np.float32)
    (expected,) = evaluate(fd, [a, b])
    np.testing.assert_array_equal(expected, np.nextafter(a, b).astype(np.float64))
    check_outputs(fd, [a, b])  # on the emulator


def test_a_product_of_nextafter_of_an_infinity_matches_the_kernel() -> None:
    """failure-3604-46 shrunk: the fused sum's value is -inf, its rsqrt 0."""
    with FusionDefinition() as fd:
        x, y, z = (fd.define_tensor(shape=[-1], dtype=DataType.Float) for _ in range(3))
        total = fd.ops.add(x, fd.ops.mul(y, fd.ops.nextafter(z, y)))
        fd.add_output(fd.ops.rsqrt(fd.ops.add(fd.ops.abs(total), 0.5)))
    inputs = [np.array([v], np.float32) for v in (-np.inf, -1.783203125, -np.inf)]
    (expected,) = evaluate(fd, inputs)
    assert expected[0] == 0.0
    check_outputs(fd, inputs)


def test_a_fused_double_product_past_float64s_range_may_be_either_value() -> None:
    with FusionDefinition() as fd:
        x, y, z = (fd.define_tensor(shape=[-1], dtype=DataType.Double) for _ in range(3))
        fd.add_output(fd.ops.add(x, fd.ops.mul(y, z)))
    x = np.array([-np.inf, 1.0, 1.0])
    y = np.array([1e200, 2.0, 1e200])
    z = np.array([1e200, 3.0, -1e100])
    inputs = [x, y, z]
    (expected,) = evaluate(fd, inputs)
    assert np.isnan(expected[0])  # inf - inf in float64; the fma gives -inf
    (order,) = conditioning(fd, inputs).order_decides
    np.testing.assert_array_equal(order, [True, False, False])
    actual = expected.copy()
    actual[0] = -np.inf
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(fd, [actual], [expected], inputs)
    assert_outputs_close(fd, [actual], [expected], inputs, order_decides=[order])
    actual[1] = 7.5  # a product inside the range is still judged
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(fd, [actual], [expected], inputs, order_decides=[order])
    check_outputs(fd, inputs)


def cast_of_sum_definition() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        fd.add_output(fd.ops.cast(fd.ops.cumsum(x, dim=0), dtype=DataType.Half))
        fd.add_output(fd.ops.cast(x, dtype=DataType.Half))
    return fd


def test_a_sum_within_its_rounding_of_half_overflow_may_be_either_value() -> None:
    fd = cast_of_sum_definition()
    x = np.full(1000, 65.52, np.float32)  # the last prefix sums are about 65520
    (expected, _) = evaluate(fd, [x])
    order, exact = conditioning(fd, [x]).order_decides
    # 1000 terms of float32 rounding: within 31 of 65520 (the last prefix) either side is
    # reachable; the one before, 65454.5, is not
    assert order[-1] and not order[-2] and not order[500]
    assert exact is None or not exact.any()  # a cast of an input is exact: judged
    actual = expected.astype(np.float16)
    actual[-1] = np.inf if np.isfinite(actual[-1]) else np.float16(65504.0)
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(fd, [actual, x.astype(np.float16)], [expected, _], [x])
    assert_outputs_close(
        fd, [actual, x.astype(np.float16)], [expected, _], [x], order_decides=[order, exact]
    )
    actual[500] = np.float16(-1.0)  # far from the boundary: still judged
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(
            fd, [actual, x.astype(np.float16)], [expected, _], [x], order_decides=[order, exact]
        )
    check_outputs(fd, [x])


def test_an_exact_value_near_half_overflow_is_judged() -> None:
    """An input cast to Half is rounded once, the same way everywhere: 65519 is 65504 and
    65521 inf, and nothing there is marked."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        fd.add_output(fd.ops.cast(x, dtype=DataType.Half))
    x = np.array([65519.0, 65521.0], np.float32)
    (order,) = conditioning(fd, [x]).order_decides
    assert order is None or not order.any()
    (expected,) = evaluate(fd, [x])
    actual = np.array([np.inf, np.inf], np.float16)
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(fd, [actual], [expected], [x])


def test_lgamma_of_gelu_of_a_negative_value_may_meet_its_pole() -> None:
    """An emulator campaign (seed 8203, failure-6830-196 in tests/data/repros/2026-12-08-
    emulator/) met log(|lgamma(gelu(x))| + 0.5) at x = -5.548: float32's gelu (the kernels',
    and torch's) is x * 0.5 * (1 + erf(x / sqrt(2))), whose sum cancels to 0 there: -0.0, and
    lgamma's pole; float64's gelu is -8.0e-8 and lgamma 16.3. gelu's value is accurate to a
    few ulps of |x| (kfuse.reference.function_bounds.OPERAND_SCALED_ERRORS), so lgamma of it
    may be anything past 16 there; at x = -1 or 2 it is judged."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        fd.add_output(fd.ops.lgamma(fd.ops.gelu(fd.ops.mul(x, 1.0))))
    x = np.array([-5.548276, -1.0, 2.0], np.float32)
    (expected,) = evaluate(fd, [x])
    assert 16 < expected[0] < 17
    (order,) = conditioning(fd, [x]).order_decides
    np.testing.assert_array_equal(order, [True, False, False])
    actual = expected.astype(np.float32)
    actual[0] = np.inf
    assert_outputs_close(fd, [actual], [expected], [x], order_decides=[order])
    actual[1] *= 1.01
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(fd, [actual], [expected], [x], order_decides=[order])
    check_outputs(fd, [x])
