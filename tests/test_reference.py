"""The eager reference against direct NumPy/torch expressions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from kfuse.dtypes import DataType, to_numpy_dtype
from kfuse.errors import InputError
from kfuse.frontend import FusionDefinition
from kfuse.ir.ops import OPS
from kfuse.reference import evaluate
from kfuse.testing import assert_close, assert_outputs_close, fusions, inputs_for

_erf = np.vectorize(math.erf)
_sig = lambda a: 1 / (1 + np.exp(-a))  # noqa: E731

# name -> (numpy expression on float64 operands, domain of the operands)
EXPECTED = {
    "abs": np.abs,
    "neg": np.negative,
    "exp": np.exp,
    "exp2": np.exp2,
    "expm1": np.expm1,
    "log": np.log,
    "log2": np.log2,
    "log10": np.log10,
    "log1p": np.log1p,
    "sqrt": np.sqrt,
    "rsqrt": lambda a: 1 / np.sqrt(a),
    "reciprocal": lambda a: 1 / a,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "erf": _erf,
    "erfc": lambda a: 1 - _erf(a),
    "sigmoid": _sig,
    "silu": lambda a: a * _sig(a),
    "gelu": lambda a: 0.5 * a * (1 + _erf(a / math.sqrt(2))),
    "gelu_tanh": lambda a: 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a**3))),
    "relu": lambda a: np.maximum(a, 0),
    "set": lambda a: a.copy(),  # a copy as a new value
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.rint,
    "trunc": np.trunc,
    "frac": lambda a: a - np.trunc(a),
    "sign": lambda a: np.where(np.isnan(a), 0, np.sign(a)),  # torch.sign's NaN -> 0
    "isnan": np.isnan,
    "isinf": np.isinf,
    "isfinite": np.isfinite,
    "isposinf": np.isposinf,
    "isneginf": np.isneginf,
    "isreal": lambda a: np.ones(a.shape, np.bool_),
    "signbit": np.signbit,
    "logical_not": lambda a: a == 0,
    "bitwise_not": np.invert,
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "fmod": np.fmod,
    "mod": np.fmod,  # of integers: C's %
    "remainder": np.remainder,
    "pow": np.power,
    "atan2": np.arctan2,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "logical_and": lambda a, b: (a != 0) & (b != 0),
    "logical_or": lambda a, b: (a != 0) | (b != 0),
    "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
    "where": lambda c, a, b: np.where(c, a, b),
    "clamp": lambda x, lo, hi: np.clip(x, lo, hi),
    "lerp": lambda s, e, w: s + w * (e - s),
    "real": np.real,
    "imag": np.imag,
    "complex": lambda re, im: re + 1j * im,
    "threshold": lambda x, t, v: np.where(x <= t, v, x),
    "erfinv": lambda a: torch.special.erfinv(torch.from_numpy(a)).numpy(),
    "erfcinv": lambda a: torch.special.erfinv(torch.from_numpy(1 - a)).numpy(),
    "lgamma": np.vectorize(math.lgamma),
    # a Float op's next value is float32's, whatever precision the reference holds it in
    "nextafter": lambda a, b: np.nextafter(a.astype(np.float32), b.astype(np.float32)),
    "gcd": np.gcd,
    "bitwise_left_shift": lambda a, s: np.where((s >= 0) & (s < 32), a << np.clip(s, 0, 31), 0),
    "bitwise_right_shift": lambda a, s: np.where(
        (s >= 0) & (s < 32), a >> np.clip(s, 0, 31), np.where(a < 0, -1, 0)
    ),
    "logical_right_shift": lambda a, s: np.where(
        (s >= 0) & (s < 32),
        (a.view(np.uint32) >> np.clip(s, 0, 31).astype(np.uint32)).view(np.int32),
        np.where((s == 32) | (a >= 0), 0, -1),
    ),
}
_POSITIVE = {"log", "log2", "log10", "sqrt", "rsqrt", "log1p", "pow"}


def _operands(op: str, rng: np.random.Generator) -> tuple[list[np.ndarray], DataType]:
    n = 37
    if OPS[op].category == "bitwise" and not OPS[op].accepts_bool:  # gcd, the shifts
        a = rng.integers(-(2**31), 2**31 - 1, n).astype(np.int32)
        a[:3] = [-(2**31) + 1, 0, -1]  # (np.gcd's abs of the least int32 overflows)
        return [a, rng.integers(-3, 36, n).astype(np.int32)], DataType.Int32
    if OPS[op].category == "bitwise":
        return [
            rng.integers(-50, 50, n).astype(np.int32) for _ in range(OPS[op].arity)
        ], DataType.Int32
    if not OPS[op].accepts_float:  # mod: integers, divisors away from 0, signs mixed
        a, b = rng.integers(-50, 50, n).astype(np.int32), rng.integers(1, 9, n).astype(np.int32)
        return [a, np.where(rng.integers(0, 2, n) == 1, -b, b).astype(np.int32)], DataType.Int32
    if OPS[op].complex_only:  # imag
        parts = rng.normal(size=(2, n))
        return [(parts[0] + 1j * parts[1]).astype(np.complex64)], DataType.ComplexFloat
    if op == "where":
        return [
            rng.integers(0, 2, n).astype(np.bool_),
            rng.normal(size=n).astype(np.float32),
            rng.normal(size=n).astype(np.float32),
        ], DataType.Float
    lo, hi = (
        (0.1, 3.0)
        if op in _POSITIVE
        else (-0.9, 0.9)
        if op in ("asin", "acos", "atanh")
        else (1.1, 4.0)
        if op == "acosh"
        else (-0.99, 0.99)
        if op == "erfinv"
        else (0.01, 1.99)
        if op == "erfcinv"
        else (-3.0, 3.0)
    )
    arrays = [rng.uniform(lo, hi, n).astype(np.float32) for _ in range(OPS[op].arity)]
    if op in ("fmod", "remainder", "div"):
        arrays[1] = np.where(np.abs(arrays[1]) < 0.3, 0.5, arrays[1]).astype(np.float32)
    if op == "clamp":
        arrays[1], arrays[2] = np.minimum(arrays[1], arrays[2]), np.maximum(arrays[1], arrays[2])
    if op == "frac":
        arrays[0][:5] = [-0.0, np.inf, -2.0, 2.5, np.nan]
    if op == "threshold":
        arrays[0][:3] = [np.nan, arrays[1][3], -np.inf]  # NaN, x equal to its threshold
    if op in ("isnan", "isinf", "isfinite", "isposinf", "isneginf", "isreal"):
        arrays[0][:3] = [np.nan, np.inf, -np.inf]
    if op == "signbit":
        arrays[0][:4] = [-0.0, 0.0, np.nan, -np.nan]
    if op == "sign":
        arrays[0][:4] = [-0.0, np.nan, -np.inf, np.inf]
    return arrays, DataType.Float


@pytest.mark.parametrize("op", sorted(OPS))
def test_every_op_matches_numpy(op: str) -> None:
    arrays, dtype = _operands(op, np.random.default_rng(sum(map(ord, op))))
    with FusionDefinition() as fd:
        ins = [
            fd.define_tensor(shape=[-1], dtype=DataType.Bool if a.dtype == np.bool_ else dtype)
            for a in arrays
        ]
        out = (
            fd.ops.gelu(ins[0], approximate="tanh")
            if op == "gelu_tanh"
            else getattr(fd.ops, op)(*ins)
        )
        fd.add_output(out)
    (got,) = evaluate(fd, arrays)
    wider = {np.float32: np.float64, np.complex64: np.complex128}
    expected = EXPECTED[op](*[a.astype(wider.get(a.dtype.type, a.dtype)) for a in arrays])
    assert_close(got, expected, out.dtype if not out.dtype.is_floating else DataType.Double)
    (got32,) = evaluate(fd, arrays, accumulate="same")
    assert_close(got32, expected, out.dtype)
    (got_torch,) = evaluate(fd, [torch.from_numpy(a) for a in arrays])
    assert_close(got_torch, expected, out.dtype if not out.dtype.is_floating else DataType.Float)


def test_reductions_and_composites_match_torch() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 6, 7)).astype(np.float32)
    w = rng.normal(size=(7,)).astype(np.float32)
    with FusionDefinition() as fd:
        tx = fd.define_tensor(shape=[-1, -1, -1])
        tw = fd.define_tensor(shape=[-1])
        o = fd.ops
        outs = [
            o.sum(tx, [0, 2]),
            o.prod(o.add(o.mul(tx, 0.01), 1.0), [1]),
            o.max(tx, [1], keepdim=True),
            o.min(tx, [0]),
            o.mean(tx, [1, 2]),
            o.var(tx, [2]),
            o.var(tx, [0, 1], correction=0),
            o.softmax(tx, 1),
            o.log_softmax(tx, 2),
            o.layer_norm(tx, tw, tw),
            o.rms_norm(tx, tw),
        ]
        for out in outs:
            fd.add_output(out)
    t, tw_ = torch.from_numpy(x).double(), torch.from_numpy(w).double()
    ln = torch.nn.functional.layer_norm(t, (7,), tw_, tw_, 1e-5)
    rms = t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * tw_
    expected = [
        t.sum((0, 2)),
        (t * 0.01 + 1).prod(1),
        t.amax(1, keepdim=True),
        t.amin(0),
        t.mean((1, 2)),
        t.var(2),
        t.var((0, 1), correction=0),
        t.softmax(1),
        t.log_softmax(2),
        ln,
        rms,
    ]
    got = evaluate(fd, [x, w])
    for g, e in zip(got, expected, strict=False):
        assert_close(g, e, DataType.Double)
    assert_outputs_close(fd, evaluate(fd, [x, w], accumulate="same"), expected, [x, w])


def test_bfloat16_numpy_and_torch_agree() -> None:
    """NumPy's bf16 arrays are ml_dtypes.bfloat16; a float32 array for a BFloat16 input is
    refused, as kfuse's execute refuses it."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4, 9)).astype(ml_dtypes.bfloat16)
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        fd.add_output(t * 3.0 + 1.0)
        fd.add_output(fd.ops.sum(t, [1]))
    tx = torch.from_numpy(x.astype(np.float32)).bfloat16()
    for mode in ("float64", "same"):
        a = evaluate(fd, [x], accumulate=mode)
        b = evaluate(fd, [tx], accumulate=mode)
        for u, v in zip(a, b, strict=False):
            assert_close(u, v, DataType.BFloat16, reduction_size=9)
    assert evaluate(fd, [x], accumulate="same")[0].dtype == ml_dtypes.bfloat16
    with pytest.raises(InputError, match="BFloat16"):
        evaluate(fd, [x.astype(np.float32)])
    assert evaluate(fd, [tx], accumulate="same")[0].dtype == torch.bfloat16


def test_cast_rounds_even_in_float64_mode() -> None:
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], dtype=DataType.Double)
        fd.add_output(fd.ops.cast(fd.ops.cast(t, DataType.BFloat16), DataType.Double) - t)
    (got,) = evaluate(fd, [np.array([1 + 2**-10], np.float64)])
    assert got[0] == -(2**-10)


def test_input_errors() -> None:
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], dtype=DataType.Int32)
        fd.add_output(t + 1)
    with pytest.raises(InputError, match="input 0 .T0. has dtype Float"):
        evaluate(fd, [np.zeros(3, np.float32)])
    with pytest.raises(InputError, match="mix array frameworks"):
        with FusionDefinition() as fd2:
            a, b = fd2.define_tensor(shape=[-1]), fd2.define_tensor(shape=[-1])
            fd2.add_output(a + b)
        evaluate(fd2, [np.zeros(2, np.float32), torch.zeros(2)])


def test_outputs_do_not_alias_inputs() -> None:
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1])
        fd.add_output(t)
    x = np.ones(3, np.float32)
    (out,) = evaluate(fd, [x], accumulate="same")
    out[0] = 5
    assert x[0] == 1


@given(st.data())
def test_numpy_and_torch_references_agree_on_random_fusions(data: st.DataObject) -> None:
    fd = data.draw(fusions(kinds={"pointwise", "reduction", "normalization", "multi_reduction"}))
    ins = data.draw(inputs_for(fd, framework="torch", max_elements=2048))
    as_numpy = [
        i.float().numpy().astype(to_numpy_dtype(DataType.BFloat16))
        if isinstance(i, torch.Tensor) and i.dtype == torch.bfloat16
        else i.numpy()
        if isinstance(i, torch.Tensor)
        else i
        for i in ins
    ]
    golden = evaluate(fd, as_numpy)
    # References compute values (row major): no output layouts to compare.
    assert_outputs_close(fd, evaluate(fd, ins), golden, as_numpy, layouts=False)
    same = evaluate(fd, as_numpy, accumulate="same")
    assert_outputs_close(fd, same, golden, as_numpy, layouts=False)


def test_erfc_does_not_cancel_for_large_arguments() -> None:
    """erfc(6) is 2.2e-17; 1 - erf(6) is 0, which made a kernel's right answer look wrong."""
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.erfc(fd.define_tensor(shape=[-1], dtype=DataType.Double)))
    x = [6.0, 8.0, 10.0, -3.0]
    want = np.array([math.erfc(v) for v in x])
    for a in (np.array(x), torch.tensor(x, dtype=torch.float64)):
        (got,) = evaluate(fd.fusion, [a])
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)


def test_lgamma_is_inf_where_it_passes_the_largest_double() -> None:
    """C's lgamma (and the kernels') is +inf at the poles and beyond about 2.6e305; Python's
    math.lgamma raises there. A campaign's float64 reference took lgamma of
    nextafter(inf, x) = 1.8e308 and stopped with OverflowError (failure-19995-212)."""
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.lgamma(fd.define_tensor(shape=[-1], dtype=DataType.Double)))
    x = [1.7976931348623157e308, 2.6e305, -1e300, 0.0, 2.5e305, 3.0]
    want = [math.inf, math.inf, math.inf, math.inf, math.lgamma(2.5e305), math.log(2.0)]
    for a in (np.array(x), torch.tensor(x, dtype=torch.float64)):
        (got,) = evaluate(fd.fusion, [a])
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-15)


def test_float_to_integer_casts_saturate_as_the_kernels_do() -> None:
    """NaN becomes 0 and values beyond the integer's range its nearest end, toward zero
    inside it (CUDA's cvt.rzi, torch on the GPU, kfuse's kernels and emulator): the reference
    agrees in NumPy and torch, where x86's conversion gives the lowest integer for all three."""
    values = [float("nan"), float("inf"), -float("inf"), 3e9, -3e9, 2.7, -2.7, 1e19, -1e19]
    for dtype, array_dtype in ((DataType.Float, np.float32), (DataType.Double, np.float64)):
        for target, bits in ((DataType.Int32, 32), (DataType.Int, 64)):
            with FusionDefinition() as fd:
                x = fd.define_tensor(shape=[-1], dtype=dtype)
                fd.add_output(fd.ops.cast(x, target))
            a = np.array(values, dtype=array_dtype)
            top, bottom = 2 ** (bits - 1) - 1, -(2 ** (bits - 1))
            big = [top, bottom] if bits == 32 else [3_000_000_000, -3_000_000_000]
            want = [0, top, bottom, *big, 2, -2, top, bottom]
            assert evaluate(fd, [a])[0].tolist() == want
            assert evaluate(fd, [torch.from_numpy(a)])[0].tolist() == want
            assert fd.execute([a])[0].tolist() == want
