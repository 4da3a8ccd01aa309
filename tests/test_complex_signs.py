"""Complex results whose sign C leaves unspecified are marked indeterminate by the reference
(kfuse.reference.complex_signs), so the comparison takes either infinity there: an emulator
campaign met imag(sqrt(-complex(inf, NaN))) at -inf in the kernel and +inf in the float64
reference (failure-513-20, replayed as a test from tests/data/repros/2026-12-07-emulator/)."""

from __future__ import annotations

import numpy as np
import pytest

from kfuse.dtypes import DataType
from kfuse.frontend import FusionDefinition
from kfuse.reference import conditioning
from kfuse.testing import assert_outputs_close

INF, NAN = float("inf"), float("nan")


def root_fd() -> FusionDefinition:
    """imag(sqrt(complex(x, y)) + w) and real(-sqrt(complex(x, y))), w real."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        y = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        w = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        root = fd.ops.sqrt(fd.ops.complex(x, y))
        shifted = fd.ops.add(root, fd.ops.cast(w, DataType.ComplexFloat))
        fd.add_output(fd.ops.imag(shifted))
        fd.add_output(fd.ops.real(fd.ops.neg(root)))
    return fd


def test_the_root_of_minus_infinity_and_nan_is_marked() -> None:
    """Only -inf + i NaN is marked (+inf + i NaN, -inf + i y and NaN + i inf have the
    signs C gives them), through the add, the cast's sum, neg, imag and real."""
    x = np.array([-INF, INF, -INF, NAN, 1.0], np.float32)
    y = np.array([NAN, NAN, 2.0, INF, NAN], np.float32)
    w = np.ones(5, np.float32)
    marks = conditioning(root_fd().fusion, [x, y, w]).indeterminate
    for mark in marks:
        assert mark is not None
        np.testing.assert_array_equal(mark, [True, False, False, False, False])


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_either_infinity_passes_there_and_a_finite_value_does_not(sign: float) -> None:
    fd = root_fd()
    inputs = [np.array([-INF], np.float32), np.array([NAN], np.float32), np.ones(1, np.float32)]
    expected = [np.array([sign * INF]), np.array([NAN])]
    cond = conditioning(fd.fusion, inputs)
    for got in (INF, -INF):
        actual = [np.array([got], np.float32), np.array([NAN], np.float32)]
        assert_outputs_close(fd, actual, expected, inputs, indeterminate=cond.indeterminate)
    finite = [np.array([1.0], np.float32), np.array([NAN], np.float32)]
    with pytest.raises(AssertionError):
        assert_outputs_close(fd, finite, expected, inputs, indeterminate=cond.indeterminate)
