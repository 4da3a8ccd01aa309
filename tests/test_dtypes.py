"""DataType properties, framework mappings, bf16 rounding and PyTorch-compatible promotion."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from kfuse.dtypes import (
    ALL_DTYPES,
    DataType,
    as_dtype,
    promote_types,
    round_to_bfloat16,
    to_numpy_dtype,
    to_torch_dtype,
)
from kfuse.errors import DefinitionError
from kfuse.frontend import FusionDefinition

ALL = list(ALL_DTYPES)


def test_properties() -> None:
    assert [d.itemsize for d in ALL] == [1, 4, 8, 2, 2, 4, 8, 1, 1, 8, 16]
    assert {d for d in ALL if d.is_complex} == {DataType.ComplexFloat, DataType.ComplexDouble}
    assert {d for d in ALL if d.is_floating} == {
        DataType.Half,
        DataType.BFloat16,
        DataType.Float,
        DataType.Double,
        DataType.Float8_e4m3fn,
        DataType.Float8_e5m2,
    }
    assert {d for d in ALL if d.is_float8} == {DataType.Float8_e4m3fn, DataType.Float8_e5m2}
    assert {d for d in ALL if d.is_integral} == {DataType.Int32, DataType.Int}
    assert [d for d in ALL if d.is_boolean] == [DataType.Bool]
    assert DataType.BFloat16.cuda_type == "kf::bfloat16"
    assert DataType.Int.cuda_type == "long long"
    assert DataType.ComplexFloat.cuda_type == "kf::complex<float>"


@pytest.mark.parametrize("dtype", [d for d in ALL if d is not DataType.BFloat16])
def test_numpy_and_torch_mapping_round_trip(dtype: DataType) -> None:
    assert as_dtype(to_numpy_dtype(dtype)) is dtype
    assert as_dtype(to_torch_dtype(dtype)) is dtype


def test_bfloat16_is_ml_dtypes_in_numpy_and_torch_own() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    assert to_numpy_dtype(DataType.BFloat16) == np.dtype(ml_dtypes.bfloat16)
    assert as_dtype(np.dtype(ml_dtypes.bfloat16)) is DataType.BFloat16
    assert to_torch_dtype(DataType.BFloat16) is torch.bfloat16


@given(st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=50))
def test_round_to_bfloat16_matches_torch(values: list[float]) -> None:
    a = np.array(values, dtype=np.float32)
    expected = torch.from_numpy(a).to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(round_to_bfloat16(a), expected)


def _result(op: str, *args: object) -> DataType:
    with FusionDefinition() as fd:
        vals = [
            fd.define_tensor(shape=[-1], dtype=a) if isinstance(a, DataType) else a for a in args
        ]
        out = getattr(fd.ops, op)(*vals)
        fd.add_output(out)
    return out.dtype


def _torch_arg(a: object) -> object:
    return torch.zeros(3, dtype=to_torch_dtype(a)) if isinstance(a, DataType) else a


@given(st.sampled_from(ALL), st.sampled_from(ALL))
def test_tensor_promotion_matches_torch(a: DataType, b: DataType) -> None:
    try:
        expected = torch.result_type(_torch_arg(a), _torch_arg(b))
    except RuntimeError:  # float8 with another dtype: torch refuses, so does kfuse
        assert a.is_float8 or b.is_float8
        with pytest.raises(DefinitionError, match="float8"):
            _result("add", a, b)
        return
    assert to_torch_dtype(_result("add", a, b)) == expected
    if a.is_complex or b.is_complex:  # no order: torch refuses these too
        for op in ("maximum", "lt"):
            with pytest.raises(DefinitionError, match=f"{op}: complex operands"):
                _result(op, a, b)
        assert to_torch_dtype(_result("truediv", a, b)) == expected
        return
    assert to_torch_dtype(_result("maximum", a, b)) == expected
    assert _result("lt", a, b) is DataType.Bool
    if a.is_float8:  # torch has no float8 arithmetic; kfuse's result dtype is the promoted one
        assert _result("div", a, b) is a
        return
    true_quotient = torch.true_divide(_torch_arg(a), _torch_arg(b)).dtype
    assert to_torch_dtype(_result("truediv", a, b)) == true_quotient
    # div of operands promoting to an integer dtype is nvFuser's integer division
    # (torch.div(rounding_mode="trunc"), of the promoted dtype); else true division.
    integral = not expected.is_floating_point and expected != torch.bool
    assert to_torch_dtype(_result("div", a, b)) == (expected if integral else true_quotient)


@given(st.sampled_from(ALL), st.sampled_from([True, 3, -2, 0.5, 2.0, 1j, 0.5 - 2j]), st.booleans())
def test_scalar_promotion_matches_torch(a: DataType, scalar: object, scalar_first: bool) -> None:
    args = (scalar, a) if scalar_first else (a, scalar)
    try:
        expected = torch.result_type(*[_torch_arg(x) for x in args])
    except RuntimeError:  # float8 with a complex scalar: torch refuses, so does kfuse
        assert a.is_float8 and isinstance(scalar, complex)
        with pytest.raises(DefinitionError, match="complex scalar"):
            _result("mul", *args)
        return
    if expected == torch.complex32:  # a complex scalar with Half: kfuse has no ComplexHalf
        expected = torch.complex64
    assert to_torch_dtype(_result("mul", *args)) == expected


@given(st.sampled_from([d for d in ALL if not d.is_float8]))  # torch has no float8 exp
def test_float_math_on_integers_gives_float(a: DataType) -> None:
    expected = torch.exp(torch.zeros(2, dtype=to_torch_dtype(a))).dtype
    assert to_torch_dtype(_result("exp", a)) == expected


def test_promote_types_documented_corners() -> None:
    assert promote_types([DataType.Half, DataType.BFloat16]) is DataType.Float
    assert promote_types([DataType.Int32], [DataType.Double]) is DataType.Float
    assert promote_types([DataType.Bool], [DataType.Int]) is DataType.Int
    assert promote_types([DataType.Half], [DataType.Double]) is DataType.Half
    assert promote_types([], [DataType.Int, DataType.Double]) is DataType.Double
