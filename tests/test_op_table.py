"""Every row of the op table (kfuse.ir.ops) is generated, evaluated, printed, drawn and
documented, and fd.ops checks every pointwise op's arguments the same way.

A row missing one of these fails the test of that part, named by the op
(docs/guides/add-an-op.md lists the steps that make them pass).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings

from kfuse.dtypes import DataType, to_numpy_dtype
from kfuse.errors import DefinitionError
from kfuse.frontend import FusionDefinition
from kfuse.ir.exprs import BinaryOp, TernaryOp, UnaryOp
from kfuse.ir.ops import OPS, fd_call
from kfuse.ir.scalar_eval import eval_scalar
from kfuse.reference import evaluate
from kfuse.testing import assert_outputs_close, fusions
from kfuse.testing.strategies.generator import build

ROOT = Path(__file__).resolve().parent.parent
OP_LIST = ROOT / "docs" / "guides" / "ops.md"

# Operand ranges inside each domain class (kfuse.ir.op_info.DOMAINS).
_RANGES = {
    "pos": (0.5, 3.0),
    "nonneg": (0.0, 3.0),
    "ge1": (1.5, 4.0),
    "unit": (-0.9, 0.9),
    "zero_two": (0.1, 1.9),
    "tan": (-1.0, 1.0),
}


def _operands(name: str, n: int = 29) -> tuple[list[np.ndarray], list[DataType]]:
    """Arrays for op `name`'s operands, inside its domain, with some special values."""
    row = OPS[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    if row.complex_only:  # imag: parts drawn as a Float operand's are
        parts = [_operands("add", n)[0][0] for _ in range(2)]
        return [(parts[0] + 1j * parts[1]).astype(np.complex64)], [DataType.ComplexFloat]
    dtype = DataType.Float if row.accepts_float else DataType.Int32
    lo, hi = _RANGES.get(row.domain or "", (-3.0, 3.0))
    arrays: list[np.ndarray] = []
    dtypes: list[DataType] = []
    for i in range(row.arity):
        if row.has_condition and i == 0:
            arrays.append(rng.integers(0, 2, n).astype(np.bool_))
            dtypes.append(DataType.Bool)
            continue
        if dtype is DataType.Int32:
            a = rng.integers(-50, 50, n).astype(np.int32)
        else:
            a = rng.uniform(lo, hi, n).astype(np.float32)
        if row.draw == "divide" and i == 1:
            a = np.where(np.abs(a) < 0.5, 0.75, a).astype(a.dtype)  # away from 0
        arrays.append(a)
        dtypes.append(dtype)
    if row.draw == "clamp":  # lo <= hi
        arrays[1], arrays[2] = np.minimum(arrays[1], arrays[2]), np.maximum(arrays[1], arrays[2])
    if row.domain is None and dtype is DataType.Float and row.arity == 1:
        arrays[0][:2] = [-0.0, 0.0]
    return arrays, dtypes


def _definition(name: str, dtypes: list[DataType]) -> FusionDefinition:
    with FusionDefinition() as fd:
        ins = [fd.define_tensor(shape=[-1], dtype=dt) for dt in dtypes]
        fd.add_output(build(fd, name, ins))
    return fd


def _template_marker(name: str, kind: str) -> str | None:
    """The function a row's template calls (kf::exp, signbit), if it calls one."""
    template = OPS[name].template(kind)
    m = re.match(r"([\w:]+)\(", template or "")
    return m.group(1) + "(" if m else None


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_op_is_generated_and_matches_the_reference(name: str) -> None:
    arrays, dtypes = _operands(name)
    fd = _definition(name, dtypes)
    expected = evaluate(fd, arrays)
    actual = fd.execute(arrays)  # NumPy inputs: the host emulator runs the generated CUDA
    source = fd.last_cuda_source()
    assert source is not None, f"{name}: no kernel generated"
    kind = "int" if dtypes[-1] is DataType.Int32 else "float"
    marker = _template_marker(name, "complex" if dtypes[-1].is_complex else kind)
    if marker is not None:
        assert marker in source, f"{name}: the kernel does not call {marker}"
    assert_outputs_close(fd.fusion, actual, expected, arrays)


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_op_folds_scalars_as_the_reference_evaluates(name: str) -> None:
    """The row's scalar function (constant folding) and its reference function agree."""
    arrays, dtypes = _operands(name, n=7)
    wider = {np.float32: np.float64, np.complex64: np.complex128}
    arrays = [a.astype(wider.get(a.dtype.type, a.dtype)) for a in arrays]
    widened = {DataType.Float: DataType.Double, DataType.ComplexFloat: DataType.ComplexDouble}
    dtypes = [widened.get(dt, dt) for dt in dtypes]
    fd = _definition(name, dtypes)
    (reference,) = evaluate(fd, arrays)
    out_dtype = fd.fusion.outputs[0].dtype
    for k in range(len(reference)):
        operands = [a[k].item() for a in arrays]
        want, got = reference[k].item(), eval_scalar(name, operands, out_dtype)
        same = want == got or (isinstance(want, float) and math.isclose(want, got, rel_tol=1e-12))
        assert same or (want != want and got != got), f"{name}{tuple(operands)}: {got} != {want}"


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_op_prints_a_definition_that_rebuilds_it(name: str) -> None:
    _, dtypes = _operands(name)
    fd = _definition(name, dtypes)
    text = repr(fd)
    method, _ = fd_call(name)
    assert f"fd.ops.{method}(" in text, f"{name}: not printed"
    namespace: dict[str, Any] = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(text, namespace)  # noqa: S102 - the printer's own output
    assert repr(namespace["fd"]) == text, f"{name}: the printed definition rebuilds another"


def _ops_of(fd: FusionDefinition) -> set[str]:
    return {e.op for e in fd.fusion.exprs if isinstance(e, (UnaryOp, BinaryOp, TernaryOp))}


class _Drawn(Exception):
    """Raised by the first example that draws the op asked for: the search ends there."""


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_op_is_drawn_by_the_strategies(name: str) -> None:
    """The op is drawn within 30 examples. The first example that draws it ends the search
    (generation only: nothing to shrink), instead of all 30 being drawn every time."""

    @settings(
        max_examples=30,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(fd=fusions(ops=(name,), max_ops=4))
    def draw(fd: FusionDefinition) -> None:
        if name in _ops_of(fd):
            raise _Drawn

    try:
        draw()
    except _Drawn:
        return
    pytest.fail(f"{name}: kfuse.testing.fusions(ops=({name!r},)) never draws it")


def test_every_op_is_documented() -> None:
    text = OP_LIST.read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \|[^|]*\| (.*?) \|$", text, re.M))
    for name, row in OPS.items():
        assert rows.get(name) == row.doc, f"{name}: docs/guides/ops.md lacks its line {row.doc!r}"
    assert set(rows) <= set(OPS), f"ops.md lists ops the table has not: {set(rows) - set(OPS)}"


# ---- argument checks (the row's OpInfo.bind) ----
def _x(fd: FusionDefinition) -> Any:
    return fd.define_tensor(shape=[-1], dtype=DataType.Float)


@pytest.mark.parametrize("name", sorted(n for n, r in OPS.items() if r.method_name is not None))
def test_a_missing_operand_is_a_definition_error_naming_it(name: str) -> None:
    row = OPS[name]
    with FusionDefinition() as fd:
        x = _x(fd)
        with pytest.raises(DefinitionError, match=rf"^{name} takes {row.arity} operand.*missing"):
            getattr(fd.ops, name)(*[x] * (row.arity - 1))
        with pytest.raises(DefinitionError, match=rf"^{name} takes {row.arity} operand"):
            getattr(fd.ops, name)(*[x] * (row.arity + 1))
        with pytest.raises(DefinitionError, match=rf"^{name}: unexpected keyword argument 'bogus'"):
            getattr(fd.ops, name)(*[x] * row.arity, bogus=1)
        fd.add_output(x)


def test_gelu_checks_approximate() -> None:
    with FusionDefinition() as fd:
        x = _x(fd)
        with pytest.raises(DefinitionError, match=r"^gelu takes 1 operand \(x\), got 0"):
            fd.ops.gelu()
        with pytest.raises(DefinitionError, match="approximate must be one of 'none', 'tanh'"):
            fd.ops.gelu(x, approximate=np.array(["tanh"]))
        with pytest.raises(DefinitionError, match="got 'erf'"):
            fd.ops.gelu(x, approximate="erf")
        fd.add_output(fd.ops.gelu(x, approximate="tanh"))
    assert _ops_of(fd) == {"gelu_tanh"}


def test_truediv_checks_its_operands() -> None:
    with FusionDefinition() as fd:
        x = _x(fd)
        with pytest.raises(DefinitionError, match=r"^truediv takes 2 operands \(a, b\), got 1"):
            fd.ops.truediv(x)
        fd.add_output(x)


def test_an_operand_of_another_kind_is_a_definition_error() -> None:
    with FusionDefinition() as fd:
        x = _x(fd)
        with pytest.raises(DefinitionError, match="exp: operand 0 is"):
            fd.ops.exp("x")
        with pytest.raises(DefinitionError, match="bitwise_and: operand 0 .* is floating"):
            fd.ops.bitwise_and(x, 1)
        with pytest.raises(DefinitionError, match="where: the condition .* must be Bool"):
            fd.ops.where(x, x, x)
        fd.add_output(x)


# ---- signbit ----
@pytest.mark.parametrize("dtype", [DataType.Float, DataType.Double, DataType.Half])
def test_signbit_is_true_for_negative_zero_and_negative_nan(dtype: DataType) -> None:
    values = np.array([-0.0, 0.0, -1.5, 2.0, np.nan, -np.nan, -np.inf, np.inf])
    x = values.astype(to_numpy_dtype(dtype))
    fd = _definition("signbit", [dtype])
    (got,) = fd.execute([x])
    want = [True, False, True, False, False, True, True, False]
    assert got.dtype == np.bool_ and got.tolist() == want
    assert evaluate(fd, [x])[0].tolist() == want


def test_signbit_of_integers_is_x_below_zero() -> None:
    x = np.array([-3, 0, 5, -(2**31)], dtype=np.int32)
    fd = _definition("signbit", [DataType.Int32])
    assert fd.execute([x])[0].tolist() == [True, False, False, True]


def test_signbit_folds_constants() -> None:
    with FusionDefinition() as fd:
        x = _x(fd)
        fd.add_output(fd.ops.where(fd.ops.signbit(fd.define_scalar(-0.0)), x, fd.ops.neg(x)))
    (got,) = evaluate(fd, [np.array([1.0, -2.0], dtype=np.float32)])
    assert got.tolist() == [1.0, -2.0]


# ---- sign of NaN ----
@pytest.mark.parametrize("dtype", [DataType.Float, DataType.BFloat16])
def test_sign_of_nan_is_zero_in_the_kernel_the_reference_and_folding(dtype: DataType) -> None:
    """torch.sign(NaN) is 0, and so is the kernels' (x > 0) - (x < 0); the reference (NumPy's
    sign gives NaN) and constant folding follow them, so that a NaN input is not a mismatch."""
    x = np.array([np.nan, -0.0, 0.0, -np.inf, np.inf, -2.5], dtype=np.float32)
    x = x.astype(to_numpy_dtype(dtype))
    fd = _definition("sign", [dtype])
    want = [0.0, 0.0, 0.0, -1.0, 1.0, -1.0]
    assert fd.execute([x])[0].astype(np.float32).tolist() == want
    assert evaluate(fd, [x])[0].astype(np.float32).tolist() == want
    torch = pytest.importorskip("torch")
    (ref,) = evaluate(
        fd,
        [
            torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16)
            if dtype is DataType.BFloat16
            else torch.from_numpy(x)
        ],
    )
    assert ref.float().tolist() == want
    with FusionDefinition() as folded:
        y = _x(folded)
        folded.add_output(folded.ops.mul(y, folded.ops.sign(folded.define_scalar(float("nan")))))
    (got,) = evaluate(folded, [np.array([3.0], dtype=np.float32)])
    assert got.tolist() == [0.0]


# ---- frac, isposinf, isneginf, isreal, mod, threshold: nvFuser's ops, against torch ----
_SPECIALS = [-0.0, 0.0, -2.0, 2.75, -1.25, 1e4 + 0.5, np.nan, -np.inf, np.inf, 0.5]


@pytest.mark.parametrize("dtype", [DataType.Float, DataType.BFloat16, DataType.Half])
@pytest.mark.parametrize("name", ["frac", "isposinf", "isneginf", "isreal"])
def test_nvfusers_unary_tests_match_torch_in_the_kernel(name: str, dtype: DataType) -> None:
    """torch.frac (x - trunc(x): NaN for infinities, a whole number's is 0), torch.isposinf,
    torch.isneginf, torch.isreal, in the kernel's dtype, special values included."""
    torch = pytest.importorskip("torch")
    x = np.array(_SPECIALS, dtype=np.float32).astype(to_numpy_dtype(dtype))
    fd = _definition(name, [dtype])
    (got,) = fd.execute([x])
    t = torch.from_numpy(np.array(_SPECIALS, dtype=np.float32)).to(
        {DataType.Float: torch.float32, DataType.BFloat16: torch.bfloat16}.get(dtype, torch.half)
    )
    want = getattr(torch, name)(t).float().numpy()
    np.testing.assert_array_equal(np.asarray(got, dtype=np.float32), want)
    np.testing.assert_array_equal(np.asarray(evaluate(fd, [x])[0], dtype=np.float32), want)


def test_frac_and_the_tests_of_integers() -> None:
    x = np.array([-7, 0, 5, 2**31 - 1], dtype=np.int32)
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], dtype=DataType.Int32)
        for name in ("frac", "isposinf", "isneginf", "isreal"):
            fd.add_output(getattr(fd.ops, name)(t))
    frac, pos, neg, real = fd.execute([x])
    assert frac.dtype == np.int32 and frac.tolist() == [0, 0, 0, 0]
    assert pos.tolist() == neg.tolist() == [False] * 4 and real.tolist() == [True] * 4


@pytest.mark.parametrize("dtype", [DataType.Int32, DataType.Int])
def test_mod_of_integers_is_cs_remainder_and_zero_for_a_zero_divisor(dtype: DataType) -> None:
    """nvFuser's mod is C's % of integers: the remainder has the dividend's sign (torch.fmod),
    unlike Python's % (fd.ops.remainder); a zero divisor gives 0 in a kernel, as div's does."""
    torch = pytest.importorskip("torch")
    a = np.array([7, -7, 7, -7, 0, 13, -(2**31) + 1, 5], dtype=to_numpy_dtype(dtype))
    b = np.array([3, 3, -3, -3, 4, 1, 7, 0], dtype=to_numpy_dtype(dtype))
    fd = _definition("mod", [dtype, dtype])
    (got,) = fd.execute([a, b])
    want = torch.fmod(torch.from_numpy(a[:-1]), torch.from_numpy(b[:-1])).tolist()
    assert got.tolist() == [*want, 0] and want[:4] == [1, -1, 1, -1]


def test_mod_of_floats_is_a_definition_error_naming_fmod() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1])
        with pytest.raises(DefinitionError, match="mod"):
            fd.ops.mod(x, x)
        fd.add_output(fd.ops.fmod(x, x))


@pytest.mark.parametrize("dtype", [DataType.Float, DataType.BFloat16, DataType.Int32])
def test_threshold_is_torchs(dtype: DataType) -> None:
    """torch.nn.functional.threshold(x, t, v): x where x > t, else v; NaN stays NaN; a value
    equal to the threshold is replaced."""
    torch = pytest.importorskip("torch")
    values = [-1.0, 0.5, 0.25, 3.0, -np.inf, np.inf, np.nan] if dtype.is_floating else [-1, 0, 1, 5]
    x = np.array(values, dtype=np.float32).astype(to_numpy_dtype(dtype))
    t, v = (0.5, -9.0) if dtype.is_floating else (1, -9)
    with FusionDefinition() as fd:
        tv = fd.define_tensor(shape=[-1], dtype=dtype)
        fd.add_output(fd.ops.threshold(tv, t, v))
    (got,) = fd.execute([x])
    want = torch.nn.functional.threshold(torch.from_numpy(np.array(values, np.float32)), t, v)
    np.testing.assert_array_equal(np.asarray(got, dtype=np.float32), want.numpy())
    assert got.dtype == x.dtype
