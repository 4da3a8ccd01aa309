"""The canonical form (kfuse.ir.canonicalize): each rule's rewritten IR, its values on the
host emulator against the float64 reference of the definition (NaN, infinities and signed
zeros included), merged subexpressions, dead code, and that the definition itself is never
changed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kfuse.dtypes import DataType
from kfuse.frontend import FusionDefinition
from kfuse.ir.canonical_rules import is_power_of_two
from kfuse.ir.canonicalize import canonical_fusion
from kfuse.ir.exprs import CastOp, SizeOp
from kfuse.reference import evaluate
from kfuse.testing import assert_outputs_close

SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 3.5, -3.5, 1e12, -1e12, 0.25]


def _values(dtype: Any = np.float32) -> np.ndarray:
    return np.concatenate([SPECIAL, np.linspace(-4, 4, 52)]).astype(dtype)


def _unary_fusion(
    body: Callable[[FusionDefinition, Any], Any], dtype: DataType = DataType.Float
) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=dtype)
        fd.add_output(body(fd, x))
    return fd


def _ops(fd: FusionDefinition) -> list[str]:
    """The canonical form's exprs, each as its op name (or class name)."""
    return [getattr(e, "op", type(e).__name__) for e in canonical_fusion(fd.fusion).exprs]


def _same_values(a: np.ndarray, b: np.ndarray) -> None:
    """Equal values, NaN where NaN, and the same sign on every zero and infinity."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
    np.testing.assert_array_equal(np.signbit(a[~np.isnan(a)]), np.signbit(b[~np.isnan(b)]))
    np.testing.assert_allclose(a, b, rtol=1e-14, atol=0, equal_nan=True)


def _check_values(fd: FusionDefinition, inputs: list[Any]) -> list[Any]:
    """The emulator's outputs match the definition's reference (and the canonical form's
    reference has the definition's values)."""
    expected = evaluate(fd.fusion, inputs)
    for got, want in zip(evaluate(canonical_fusion(fd.fusion), inputs), expected, strict=True):
        _same_values(got, want)
    out = fd.execute(inputs)
    assert_outputs_close(fd, out, expected, inputs)
    return out


# ---- pow ----


@pytest.mark.parametrize(
    ("exponent", "ops"),
    [
        (1.0, []),
        (2.0, ["mul"]),
        (2, ["mul"]),
        (-1.0, ["reciprocal"]),
        (0.5, ["add", "sqrt", "eq", "where"]),
        (3.0, ["pow"]),  # the code generator's products (test_small_powers)
        (2.5, ["pow"]),
        (-0.5, ["pow"]),  # rsqrt(-0.0) is -inf where pow gives +inf
    ],
)
def test_pow_by_constants(exponent: float, ops: list[str]) -> None:
    fd = _unary_fusion(lambda fd, x: fd.ops.pow(x, exponent))
    assert _ops(fd) == ops
    x = _values()
    out = _check_values(fd, [x])
    if ops != ["pow"]:
        source = fd.last_cuda_source()
        assert source is not None and "kf::pow" not in source.split('extern "C"')[-1]
    with np.errstate(all="ignore"):
        want = np.power(x.astype(np.float64), np.full(x.shape, float(exponent)))
    if exponent in (1.0, 2.0, -1.0, 0.5):  # correctly rounded forms: the exact float32 values
        _same_values(out[0], want.astype(np.float32))


def test_pow_half_keeps_pow_special_values() -> None:
    """pow(-0.0, 0.5) is +0.0 and pow(-inf, 0.5) is +inf (sqrt: -0.0 and NaN)."""
    fd = _unary_fusion(lambda fd, x: fd.ops.pow(x, 0.5))
    x = np.array([-0.0, -np.inf, np.inf, 0.0, 4.0, -4.0, np.nan], dtype=np.float32)
    (out,) = fd.execute([x])
    _same_values(out, np.array([0.0, np.inf, np.inf, 0.0, 2.0, np.nan, np.nan]))
    (ref,) = evaluate(fd.fusion, [x])
    _same_values(ref, out)


def test_pow_in_bfloat16_squares_in_float() -> None:
    fd = _unary_fusion(lambda fd, x: fd.ops.pow(x, 2.0), DataType.BFloat16)
    assert _ops(fd) == ["mul"]
    import ml_dtypes

    _check_values(fd, [_values(ml_dtypes.bfloat16)])


# ---- reciprocal(sqrt(x)) ----


def test_reciprocal_of_sqrt_is_rsqrt() -> None:
    fd = _unary_fusion(lambda fd, x: fd.ops.reciprocal(fd.ops.sqrt(x)))
    assert _ops(fd) == ["rsqrt"]  # the sqrt no output needs is dropped
    _check_values(fd, [_values()])


def test_sqrt_still_needed_stays() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        root = fd.ops.sqrt(x)
        fd.add_output(fd.ops.reciprocal(root))
        fd.add_output(root)
    assert _ops(fd) == ["sqrt", "rsqrt"]
    _check_values(fd, [_values()])


# ---- division by a constant ----


@pytest.mark.parametrize(
    ("divisor", "dtype", "rewritten"),
    [
        (2.0, DataType.Float, True),
        (-0.25, DataType.Float, True),
        (2.0**126, DataType.Float, True),
        (2.0**-126, DataType.Float, True),
        (2.0**127, DataType.Float, False),  # 2**-127 is subnormal in float
        (2.0**-127, DataType.Float, False),  # subnormal itself; 2**127 is fine but c is not
        (3.0, DataType.Float, False),
        (0.1, DataType.Float, False),
        (2.0**200, DataType.Double, True),
        (2.0**200, DataType.Float, False),
        (8.0, DataType.BFloat16, True),  # computed in float
    ],
)
def test_division_by_a_power_of_two(divisor: float, dtype: DataType, rewritten: bool) -> None:
    import ml_dtypes

    fd = _unary_fusion(lambda fd, x: fd.ops.div(x, divisor), dtype)
    assert _ops(fd) == (["mul"] if rewritten else ["div"])
    if rewritten:
        (e,) = canonical_fusion(fd.fusion).exprs
        assert e.inputs[1].value == 1.0 / divisor  # type: ignore[attr-defined]
    storage = {DataType.Float: np.float32, DataType.Double: np.float64}.get(dtype)
    x = _values(storage or ml_dtypes.bfloat16)
    for got, want in zip(
        evaluate(canonical_fusion(fd.fusion), [x]), evaluate(fd.fusion, [x]), strict=True
    ):
        _same_values(got, want)
    (out,) = fd.execute([x])
    # The kernel's division: IEEE x / c in the compute type (float for BFloat16), rounded
    # to the dtype; huge or tiny divisors overflow there, as the float64 reference does not.
    compute = storage or np.float32
    with np.errstate(all="ignore"):
        want = (x.astype(compute) / compute(divisor)).astype(x.dtype)
    _same_values(out, want)


def test_power_of_two_limits() -> None:
    assert is_power_of_two(1.0, "float") and is_power_of_two(-0.5, "float")
    assert not is_power_of_two(0.0, "float") and not is_power_of_two(np.inf, "double")
    assert not is_power_of_two(float("nan"), "float") and not is_power_of_two(6.0, "double")
    assert is_power_of_two(2.0**1022, "double") and not is_power_of_two(2.0**1023, "double")


# ---- casts ----


def test_exact_round_trip_cast_is_removed() -> None:
    import ml_dtypes

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.BFloat16)
        wide = fd.ops.cast(x, DataType.Float)
        fd.add_output(fd.ops.cast(wide, DataType.BFloat16))
        fd.add_output(fd.ops.cast(wide, DataType.Half))
    canon = canonical_fusion(fd.fusion)
    assert canon.outputs[0] is canon.inputs[0]
    (only,) = canon.exprs
    assert isinstance(only, CastOp) and only.inputs[0] is canon.inputs[0]
    assert only.dtype is DataType.Half
    _check_values(fd, [_values(ml_dtypes.bfloat16)])


@pytest.mark.parametrize(
    ("source", "middle"),
    [
        (DataType.Float, DataType.BFloat16),
        (DataType.Float, DataType.Half),
        (DataType.Int32, DataType.Float),
        (DataType.Int, DataType.Double),
        (DataType.Double, DataType.Float),
        (DataType.Half, DataType.BFloat16),
    ],
)
def test_rounding_round_trip_cast_stays(source: DataType, middle: DataType) -> None:
    fd = _unary_fusion(lambda fd, x: fd.ops.cast(fd.ops.cast(x, middle), source), source)
    assert _ops(fd) == ["CastOp", "CastOp"]


def test_bool_round_trip_through_float() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        flag = fd.ops.gt(x, 0.0)
        fd.add_output(fd.ops.cast(fd.ops.cast(flag, DataType.Float), DataType.Int))
    assert _ops(fd) == ["gt", "CastOp"]
    _check_values(fd, [_values()])


# ---- merged subexpressions and dead code ----


def test_identical_exprs_are_merged() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        a = fd.ops.mul(fd.ops.exp(x), 2.0)
        b = fd.ops.mul(fd.ops.exp(x), 2.0)
        c = fd.ops.add(x, 0.0)
        d = fd.ops.add(x, -0.0)  # another constant: not merged
        n = fd.ops.add(fd.ops.size(x, 0), fd.ops.size(x, 0))
        fd.add_output(fd.ops.add(fd.ops.add(a, b), fd.ops.sub(c, d)))
        fd.add_output(fd.ops.expand(fd.ops.broadcast(fd.ops.sum(x, dims=[0, 1]), [True]), [n]))
    canon = canonical_fusion(fd.fusion)
    ops = _ops(fd)
    assert ops.count("exp") == 1 and ops.count("mul") == 1 and ops.count("add") == 5
    assert sum(isinstance(e, SizeOp) for e in canon.exprs) == 1
    x_in = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    _check_values(fd, [x_in])


def test_repeated_output_after_merging() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        fd.add_output(fd.ops.exp(x))
        fd.add_output(fd.ops.exp(x))
    canon = canonical_fusion(fd.fusion)
    assert len(canon.exprs) == 1 and canon.outputs[0] is canon.outputs[1]
    first, second = _check_values(fd, [_values()])
    assert first is not second
    first[0] = 7.0
    assert second[0] != 7.0


def test_unchanged_fusion_is_the_definition() -> None:
    fd = _unary_fusion(lambda fd, x: fd.ops.exp(fd.ops.mul(x, 3.0)))
    assert canonical_fusion(fd.fusion) is fd.fusion


def test_definition_is_never_changed() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        xf = fd.ops.cast(x, DataType.Float)
        ms = fd.ops.div(fd.ops.sum(fd.ops.pow(xf, 2.0), dims=[1], keepdim=True), 4.0)
        y = fd.ops.mul(xf, fd.ops.reciprocal(fd.ops.sqrt(fd.ops.add(ms, 1e-6))))
        fd.add_output(fd.ops.cast(y, DataType.BFloat16))
    printed, text, structure = repr(fd), str(fd.fusion), fd.fusion.structure()
    canon = canonical_fusion(fd.fusion)
    assert canon is not fd.fusion and canonical_fusion(fd.fusion) is canon  # computed once
    assert "rsqrt" in str(canon) and "pow" not in str(canon)
    import ml_dtypes

    _check_values(fd, [np.linspace(-2, 2, 16).astype(ml_dtypes.bfloat16).reshape(4, 4)])
    assert (repr(fd), str(fd.fusion), fd.fusion.structure()) == (printed, text, structure)
    names = [v.name for v in canon.vals]
    assert len(names) == len(set(names))
    kept = {v.name for v in fd.fusion.vals}
    assert {v.name for v in canon.inputs} == {v.name for v in fd.fusion.inputs}
    assert {v.name for v in canon.outputs} <= kept


def test_scheduling_api_answers_for_the_canonical_form() -> None:
    from kfuse import schedule
    from kfuse.schedule.types import SchedulerType

    fd = _unary_fusion(lambda fd, x: fd.ops.pow(x, 2.0))
    x = _values()
    assert schedule.find_compatible_schedulers(fd, [x])[0] is SchedulerType.pointwise
    params = schedule.compute_heuristics(fd, SchedulerType.pointwise, [x])
    (out,) = fd.manual_execute([x], heuristic_params=params)
    source = fd.last_cuda_source()
    assert source is not None and "kf::pow" not in source.split('extern "C"')[-1]
    _same_values(out, np.square(x))


def test_scalar_arithmetic_is_not_rewritten() -> None:
    """Scalars are evaluated on the host (Python's math.sqrt raises where C's gives NaN)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Double)
        s = fd.define_scalar(dtype=DataType.Double)
        fd.add_output(fd.ops.mul(x, fd.ops.pow(s, 0.5)))
    assert "pow" in _ops(fd)
    x = np.linspace(-1, 1, 8)
    (out,) = fd.execute([x, 4.0])
    np.testing.assert_array_equal(out, x * 2.0)


def _promoted_weight_fd(dtype: DataType) -> FusionDefinition:
    """A weight widened, then reshaped (as benchmarks/models/groupnorm.py promotes it), and
    the widened weight also used as it is."""
    with FusionDefinition() as fd:
        w = fd.define_tensor(shape=[-1], dtype=dtype)
        wf = fd.ops.cast(w, DataType.Float)
        grouped = fd.ops.reshape(wf, new_shape=[2, -1])
        fd.add_output(fd.ops.mul(grouped, grouped))
        fd.add_output(wf)
    return fd


def test_reshape_of_a_cast_input_reshapes_the_input() -> None:
    """reshape(cast(w)) -> cast(reshape(w)) for an input w: the reshape reads the input
    (a view of its layout where the layout allows), and every value is the same."""
    fd = _promoted_weight_fd(DataType.Half)
    form = canonical_fusion(fd.fusion)
    reshape = next(e for e in form.exprs if type(e).__name__ == "ReshapeOp")
    assert reshape.inputs[0] is form.inputs[0]
    assert reshape.outputs[0].dtype is DataType.Half
    w = np.array([1.5, -0.0, np.inf, np.nan, 65504.0, 2.0**-24], np.float16)
    _check_values(fd, [w])


def test_reshape_of_a_cast_intermediate_stays() -> None:
    """Only a cast of an input: a reshape making an output after its cast keeps making it."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        y = fd.ops.cast(fd.ops.exp(x), DataType.Half)
        fd.add_output(fd.ops.reshape(y, new_shape=[2, -1]))
    form = canonical_fusion(fd.fusion)
    assert form is fd.fusion


def test_reshape_of_an_elementwise_chain_of_an_input_reshapes_the_input() -> None:
    """reshape(exp(cast(x) * 2)) -> exp(cast(reshape(x)) * 2): the chain of element-wise ops
    with one tensor operand moves after the reshape, which then reads the input; values
    (special ones included) stay."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Half)
        y = fd.ops.exp(fd.ops.mul(fd.ops.cast(x, DataType.Float), 2.0))
        grouped = fd.ops.reshape(y, new_shape=[2, -1])
        fd.add_output(fd.ops.sum(grouped, dims=[1]))
    form = canonical_fusion(fd.fusion)
    first = form.exprs[0]
    assert type(first).__name__ == "ReshapeOp" and first.inputs[0] is form.inputs[0]
    w = np.array([1.5, -0.0, np.inf, np.nan, 65504.0, -3.0], np.float16)
    _check_values(fd, [w])


def test_reshape_of_a_function_of_two_inputs_reshapes_both() -> None:
    """reshape(x + y) -> reshape(x) + reshape(y) where x and y have one shape (Hugging Face
    attention's scores + mask, then [batch * heads, s, s]); values stay."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        y = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        grouped = fd.ops.reshape(fd.ops.add(x, fd.ops.mul(y, x)), new_shape=[2, -1])
        fd.add_output(fd.ops.sum(grouped, dims=[1]))
    form = canonical_fusion(fd.fusion)
    reshapes = [e for e in form.exprs if type(e).__name__ == "ReshapeOp"]
    assert {e.inputs[0].name for e in reshapes} == {"T0", "T1"}
    assert form.exprs.index(reshapes[-1]) < 2  # both before the arithmetic
    values = np.array([1.5, -0.0, np.inf, np.nan, 3.0, -3.0], np.float32)
    _check_values(fd, [values, values[::-1].copy()])


def test_reshape_of_a_value_with_a_broadcast_operand_stays() -> None:
    """x + broadcast(w) has an operand of another shape: the reshape stays after it."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        w = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        summed = fd.ops.add(x, fd.ops.broadcast(w, is_broadcast_dim=[True, False]))
        fd.add_output(fd.ops.sum(fd.ops.reshape(summed, new_shape=[-1]), dims=[0]))
    assert canonical_fusion(fd.fusion) is fd.fusion


def test_an_output_cast_of_a_reshape_of_a_computed_value_casts_first() -> None:
    """cast(reshape(v)) as an output, v computed (here x - its row sums) -> reshape(cast(v)):
    the output is a reshape, a view of its allocation (Hugging Face attention backward's
    last two steps)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        centred = fd.ops.sub(x, fd.ops.sum(x, dims=[1], keepdim=True))
        y = fd.ops.reshape(centred, new_shape=[-1])
        fd.add_output(fd.ops.cast(y, DataType.Half))
    form = canonical_fusion(fd.fusion)
    assert type(form.outputs[0].definition).__name__ == "ReshapeOp"
    _check_values(fd, [np.array([[0.5, -0.0], [np.inf, np.nan]], np.float32)])
