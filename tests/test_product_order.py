"""Products whose order decides their value are judged as such (kfuse.reference.conditioning's
`order_decides`, assert_close's). An H100 campaign (seed 5120, f19f2a9, the repro
failure-1620-7) reported inf where float64 gives 1.3e-80: a prod over a [7, 77172] input of
1 + 0.001 tanh(x), whose rows multiply to 3.2e33, 3.2e33 and five values near 1e-30. The
kernel's split order multiplied the two large rows first (1e67: inf in float32, and inf times
anything after it stays inf); float64 and the reference in the kernel's precision multiply in
another order and give 0. Every answer from 0 to inf is some order's float32 product, so the
comparison was wrong, not the kernel: the check must let such elements be anything, and still
judge every product whose partial products stay inside float32's range."""

from __future__ import annotations

import numpy as np
import pytest

from kfuse import DataType, FusionDefinition
from kfuse.campaign.property import check_outputs
from kfuse.reference import conditioning, evaluate
from kfuse.testing import assert_outputs_close


def product_then_padded() -> FusionDefinition:
    """The campaign's definition, shrunk to the product and what carried it to the output."""
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        t3 = fd.ops.add(fd.ops.mul(fd.ops.tanh(t0), 0.001), 1.0)
        t4 = fd.ops.prod(t3, dims=[0, 1], keepdim=False, dtype=DataType.Float)
        t5 = fd.ops.broadcast(t4, is_broadcast_dim=[True, True])
        fd.add_output(fd.ops.pad(t5, pad_widths=[1, 2, 0, 0], value=0.0))
    return fd


def rows(values: list[float], length: int) -> np.ndarray:
    """A [len(values), length] input each of whose rows holds one value (a stride-0 view,
    as the campaign drew it)."""
    return np.broadcast_to(np.array(values, np.float32)[:, None], (len(values), length))


def test_a_product_whose_partial_products_leave_float32_is_any_value() -> None:
    fd = product_then_padded()
    # tanh(10) is 1 in float32: (1.001)^77172 = 3.2e33 twice, then (0.999)^77172 five times.
    x = rows([10.0, 10.0, -10.0, -10.0, -10.0, -10.0, -10.0], 77172)
    (expected,) = evaluate(fd, [x])
    assert 0 < expected[0, 1] < 1e-80
    (order,) = conditioning(fd, [x]).order_decides
    # The padding is exact; the product's element, carried through broadcast and pad, is not.
    np.testing.assert_array_equal(order, [[False, True, False, False]])
    actual = expected.astype(np.float32)
    actual[0, 1] = np.inf  # the kernel's order
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(fd, [actual], [expected], [x])
    assert_outputs_close(fd, [actual], [expected], [x], order_decides=[order])
    actual[0, 2] = 1.0  # the padding is still judged
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(fd, [actual], [expected], [x], order_decides=[order])
    check_outputs(fd, [x])  # the campaign's check, on the emulator


def test_a_product_inside_float32_is_still_judged() -> None:
    fd = product_then_padded()
    x = rows([10.0, -10.0, 0.5], 4096)  # partial products within 2^6 of 1
    (expected,) = evaluate(fd, [x])
    (order,) = conditioning(fd, [x]).order_decides
    assert order is not None and not order.any()
    actual = expected.astype(np.float32)
    actual[0, 1] *= 1.01
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(fd, [actual], [expected], [x], order_decides=[order])


def test_a_product_with_a_nan_factor_is_nan_in_any_order() -> None:
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        fd.add_output(fd.ops.prod(t0, dims=[0]))
    x = np.full(300, 1e30, np.float32)
    x[7] = np.nan
    (order,) = conditioning(fd, [x]).order_decides
    assert not order.any()
    x[7] = 1e30  # no NaN: 1e9000 in float64, inf in float32, any order can reach it
    (order,) = conditioning(fd, [x]).order_decides
    assert order.all()


def test_order_follows_the_product_into_what_is_computed_from_it() -> None:
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        p = fd.ops.prod(t0, dims=[1])  # a product per row
        fd.add_output(fd.ops.gt(fd.ops.broadcast(p, [False, True]), t0))  # Bool, per row
        fd.add_output(fd.ops.sum(p, dims=[0]))
    x = np.ones((3, 200), np.float32)
    x[1] = 1e20  # row 1's product leaves float32; rows 0 and 2 are exactly 1
    compared, total = conditioning(fd, [x]).order_decides
    np.testing.assert_array_equal(compared, np.broadcast_to([[False], [True], [False]], (3, 200)))
    assert total.shape == () and bool(total)


def test_a_cumprod_within_its_rounding_of_float32s_largest_may_overflow() -> None:
    """An H100 campaign (seed 6401, 65fe8f6) met a cumprod over 278,045 factors of 1 +-
    0.00076 whose prefix products climb to -3.397e38, 0.2% under float32's largest value:
    the kernel's prefixes rounded past it to -inf. n multiplications round the product by up
    to n units of float32's precision (1.4% here), so prefixes that close to the end of the
    range may be anything; those well inside it are still judged."""
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        fd.add_output(fd.ops.cumprod(t0, dim=0))
    factor = np.float32(1.00044)
    n = int(np.log(3.39e38) / np.log(np.float64(factor)))  # the whole product: 3.39e38
    x = np.full(n, factor, np.float32)
    (expected,) = evaluate(fd, [x])
    assert 3.38e38 < expected[-1] < 3.39e38
    (order,) = conditioning(fd, [x]).order_decides
    assert order[-1] and not order[n // 2]  # 1.8e19 halfway: far from the range's end
    assert not order[int(n * 0.999)]  # 3.2e38 (6% under): its rounding cannot reach inf
    actual = expected.astype(np.float32)
    actual[-1] = np.inf
    assert_outputs_close(fd, [actual], [expected], [x], order_decides=[order])
    actual[n // 2] *= 1.5
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(fd, [actual], [expected], [x], order_decides=[order])


def column_sums() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        fd.add_output(fd.ops.sum(x, dims=[0]))
    return fd


def test_a_sum_whose_partial_sums_can_leave_float32_either_way_is_any_value() -> None:
    """An emulator campaign's find (seed 7100, its nextafter of +-inf made +-3.4e38 terms):
    four terms of float32's largest and two of its negative sum to inf in float64 and in a
    sequential float32 sum, to NaN where the kernel's order met +inf and -inf partials."""
    big = np.finfo(np.float32).max
    x = np.ones((6, 3), np.float32)
    x[:, 0] = [big, big, -big, big, -big, big]  # both signs past the range: any order decides
    x[:, 1] = [big, big, 1.0, 2.0, 3.0, 4.0]  # one sign only: inf in every order
    x[:2, 2] = [1e30, -1e30]  # partial sums within the range: judged
    fd = column_sums()
    (expected,) = evaluate(fd, [x])
    (order,) = conditioning(fd, [x]).order_decides
    (same,) = evaluate(fd, [x], accumulate="same")  # float32: inf where float64 is 6.8e38
    np.testing.assert_array_equal(order, [True, False, False])
    with np.errstate(over="ignore"):  # 6.8e38 is inf in float32, as the kernel's
        actual = expected.astype(np.float32)
    actual[0] = np.nan  # the kernel's order
    assert_outputs_close(fd, [actual], [expected], [x], alternative=[same], order_decides=[order])
    actual[1] = 1.0  # an overflow every order gives is still an infinity
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(
            fd, [actual], [expected], [x], alternative=[same], order_decides=[order]
        )
    actual[1], actual[2] = np.inf, 1e29  # and a sum within the range is still judged
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(
            fd, [actual], [expected], [x], alternative=[same], order_decides=[order]
        )
    check_outputs(fd, [x])  # the campaign's check, on the emulator


def column_variances() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        mean, m2, _ = fd.ops.welford(x, dims=[0])
        fd.add_output(mean)
        fd.add_output(fd.ops.div(m2, 15.0))
    return fd


def test_a_welford_whose_partial_means_can_differ_past_float32_is_any_value() -> None:
    """An emulator campaign's find (CI's seed 19, round 38, at 417243d; nextafter of +-inf
    toward a finite value made +-3.4e38): the variance of 16 floats with float32's largest and
    its negative among them is 1.5e76 in float64, inf in float32 taken in order, and NaN in
    the kernel's tree of merges, where the difference of two partial means overflowed."""
    big = np.finfo(np.float32).max
    x = np.linspace(-2.0, 2.0, 48, dtype=np.float32).reshape(16, 3)
    x[[3, 9], 0] = [big, -big]  # the partial means can be 6.8e38 apart: any order decides
    x[3, 1] = 1e30  # the variance overflows in every order (1e60), the means' differences not
    fd = column_variances()
    mean, var = evaluate(fd, [x])
    order_mean, order_var = conditioning(fd, [x]).order_decides
    np.testing.assert_array_equal(order_mean, [True, False, False])
    np.testing.assert_array_equal(order_var, [True, False, False])
    same = evaluate(fd, [x], accumulate="same")
    with np.errstate(over="ignore"):
        actual = [mean.astype(np.float32), var.astype(np.float32)]
    actual[1][0] = np.nan  # the kernel's tree of merges
    orders = [order_mean, order_var]
    assert_outputs_close(fd, actual, [mean, var], [x], alternative=list(same), order_decides=orders)
    actual[1][1] = np.nan  # an overflow every order gives is still an infinity
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(
            fd, actual, [mean, var], [x], alternative=list(same), order_decides=orders
        )
    check_outputs(fd, [x])  # the campaign's check, on the emulator
