"""fd.ops.div of two integer scalars is nvFuser's Int division (an integer, rounded toward
zero), so a size divided by a group count is a reshape extent; fd.ops.truediv and Python's
`/` still divide them as Floats. Integer tensors divide the same way
(tests/test_nvfuser_spellings.py); div of anything else is true division."""

from __future__ import annotations

import numpy as np
import pytest

from kfuse import DataType, FusionDefinition
from kfuse.errors import InputError
from kfuse.reference import evaluate


def _quotient_fusion(divide: str) -> FusionDefinition:
    """[1]-shaped output holding a / b for scalar inputs a, b (Int), computed by `divide`."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Double)
        a = fd.define_scalar(dtype=DataType.Int)
        b = fd.define_scalar(dtype=DataType.Int)
        q = {"div": fd.ops.div, "truediv": fd.ops.truediv, "/": lambda p, q: p / q}[divide](a, b)
        fd.add_output(fd.ops.add(x, fd.ops.cast(q, DataType.Double)))
    return fd


@pytest.mark.parametrize(
    ("a", "b", "quotient"), [(7, 2, 3), (-7, 2, -3), (7, -2, -3), (-7, -2, 3), (6, 3, 2), (0, 5, 0)]
)
def test_div_of_int_scalars_rounds_toward_zero(a: int, b: int, quotient: int) -> None:
    fd = _quotient_fusion("div")
    x = np.zeros(1)
    (out,) = fd.execute([x, a, b])
    assert out[0] == quotient
    assert evaluate(fd.fusion, [x, a, b])[0][0] == quotient


@pytest.mark.parametrize("divide", ["truediv", "/"])
def test_true_division_of_int_scalars_is_float(divide: str) -> None:
    fd = _quotient_fusion(divide)
    (out,) = fd.execute([np.zeros(1), -7, 2])
    assert out[0] == -3.5


def test_dtypes() -> None:
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], dtype=DataType.Int)
        i = fd.define_scalar(dtype=DataType.Int32)
        n = fd.define_scalar(dtype=DataType.Int)
        flag = fd.define_scalar(dtype=DataType.Bool)
        assert fd.ops.div(i, i).dtype is DataType.Int32
        assert fd.ops.div(n, i).dtype is DataType.Int
        assert fd.ops.div(n, 2.0).dtype is DataType.Double
        assert fd.ops.div(flag, flag).dtype is DataType.Float
        assert fd.ops.div(t, n).dtype is DataType.Int  # tensors too, as nvFuser's div
        assert fd.ops.div(t, 2.0).dtype is DataType.Float
        assert fd.ops.truediv(t, n).dtype is DataType.Float
        fd.add_output(t)


def test_division_by_zero_is_an_input_error() -> None:
    fd = _quotient_fusion("div")
    with pytest.raises(InputError, match="by 0"):
        fd.execute([np.zeros(1), 3, 0])


def test_group_size_as_a_reshape_extent_and_printed_round_trip() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        g = fd.define_scalar(3, dtype=DataType.Int)
        y = fd.ops.reshape(x, [fd.ops.size(x, 0), g, fd.ops.div(fd.ops.size(x, 1), g)])
        fd.add_output(fd.ops.sum(y, dims=[2]))
    x_in = np.arange(24, dtype=np.float32).reshape(2, 12)
    (out,) = fd.execute([x_in])
    np.testing.assert_array_equal(out, x_in.reshape(2, 3, 4).sum(axis=2))
    namespace: dict = {"DataType": DataType, "FusionDefinition": FusionDefinition}
    exec(repr(fd), namespace)  # noqa: S102 - kfuse's own printed definition
    assert namespace["fd"].fusion == fd.fusion
