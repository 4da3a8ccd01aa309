"""pow(x, c) by a constant 1, 2 or 3 is generated as products (nvFuser's fusions spell x * x
as pow(x, 2)): no powf in the kernel, and the values of the float64 reference, special
values included."""

from __future__ import annotations

import numpy as np
import pytest

from kfuse.dtypes import DataType
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.testing import assert_outputs_close


@pytest.mark.parametrize("exponent", [1.0, 2.0, 3.0, 2])
def test_small_constant_powers_are_products(exponent: float) -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        fd.add_output(fd.ops.pow(x, exponent))
    special = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -3.5, 1e12, -1e12, 7.0]
    x = np.concatenate([np.array(special), np.linspace(-4, 4, 54)]).astype(np.float32)
    out = fd.execute([x])
    assert "kf::pow" not in fd.last_cuda_source().split('extern "C"')[-1]
    assert_outputs_close(fd, out, evaluate(fd.fusion, [x]), [x])
    if exponent != 3.0:  # x * x is correctly rounded, as NumPy's float32 square is
        with np.errstate(over="ignore", invalid="ignore"):
            np.testing.assert_array_equal(out[0], np.power(x, np.float32(exponent)))


def test_other_powers_still_call_pow() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        fd.add_output(fd.ops.pow(x, 2.5))
    x = np.linspace(0.5, 4, 64).astype(np.float32)
    out = fd.execute([x])
    assert "kf::pow" in fd.last_cuda_source()
    assert_outputs_close(fd, out, evaluate(fd.fusion, [x]), [x])
