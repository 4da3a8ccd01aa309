"""kfuse.codegen.contraction: a floating sum of a product that nothing else reads is one
kf::fma, rounded once, the same value on the emulator as computed exactly (tests/exact_fma.py)
and wherever a kernel computes it again; a product read elsewhere stays rounded, and with
switches.FMA_CONTRACT off the kernels round twice as before."""

from __future__ import annotations

import contextlib
import math
import re

import numpy as np
import pytest

from exact_fma import exact_fma
from gpu_support import requires_gpu
from kfuse import DataType, switches
from kfuse.codegen.contraction import products
from kfuse.frontend import FusionDefinition
from kfuse.reference import conditioning, evaluate
from kfuse.schedule import SchedulerType
from kfuse.schedule.sub_fusion import build_sub_fusion
from kfuse.testing import assert_outputs_close

DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, requires_gpu])]
NP = {DataType.Float: np.float32, DataType.Double: np.float64}
BITS = {np.float32: np.uint32, np.float64: np.uint64}

# form -> (the sum of product p and c: an fd.ops or np function, the fma it is of a, b, c)
FORMS = {
    "a*b+c": (lambda ops, p, c: ops.add(p, c), lambda a, b, c: exact_fma(a, b, c)),
    "c+a*b": (lambda ops, p, c: ops.add(c, p), lambda a, b, c: exact_fma(a, b, c)),
    "a*b-c": (lambda ops, p, c: ops.subtract(p, c), lambda a, b, c: exact_fma(a, b, -c)),
    "c-a*b": (lambda ops, p, c: ops.subtract(c, p), lambda a, b, c: exact_fma(-a, b, c)),
}


def _operands(n: int, np_dtype: type, seed: int = 0) -> list[np.ndarray]:
    """a, b, c of every kind an fma treats apart from two roundings: sums that cancel the
    product to its last bits, signed zeros, subnormal and overflowing products."""
    rng = np.random.default_rng(seed)
    tiny = -140 if np_dtype is np.float32 else -1070
    a = (rng.standard_normal(n) * 2.0 ** rng.integers(tiny, 60, n)).astype(np_dtype)
    b = (rng.standard_normal(n) * 2.0 ** rng.integers(-30, 60, n)).astype(np_dtype)
    with np.errstate(over="ignore"):
        c = -(a * b) * (1 + rng.choice([0.0, 1e-7, -1e-7, 1e-3], n)).astype(np_dtype)
    c[~np.isfinite(c)] = 1.0
    c[::7] = rng.standard_normal(len(c[::7]))
    c[::11], c[::13], a[::17] = 0.0, -0.0, -0.0
    return [a, b, c]


def _bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).view(BITS[np.asarray(x).dtype.type])


class _FdOps:
    """fd.ops under NumPy's names of the two ops FORMS use."""

    def __init__(self, fd: FusionDefinition) -> None:
        self.add, self.subtract = fd.ops.add, fd.ops.sub


def _mul_add(dtype: DataType, form: str) -> FusionDefinition:
    with FusionDefinition() as fd:
        a, b, c = (fd.define_tensor(shape=[-1], dtype=dtype) for _ in range(3))
        fd.add_output(FORMS[form][0](_FdOps(fd), fd.ops.mul(a, b), c))
    return fd


def _to(device: str, arrays: list[np.ndarray]) -> list:
    if device == "cpu":
        return arrays
    import torch

    return [torch.from_numpy(x).to(device) for x in arrays]


def _numpy(x: object) -> np.ndarray:
    return x.cpu().numpy() if hasattr(x, "cpu") else np.asarray(x)  # type: ignore[union-attr]


def _fma_cross() -> list:
    """Every (dtype, form, device). On the emulator the README's command runs each form
    once, the dtypes in turn (float: a*b+c and a*b-c, double: c+a*b and c-a*b); the other
    four (a kernel each) are CI's extended step. The GPU keeps the whole cross."""
    cases = []
    for dtype in [DataType.Float, DataType.Double]:
        for k, form in enumerate(FORMS):
            quick = (k % 2 == 0) == (dtype is DataType.Float)
            cases.append(
                pytest.param(dtype, form, "cpu", marks=() if quick else pytest.mark.extended)
            )
            cases.append(pytest.param(dtype, form, "cuda", marks=[pytest.mark.gpu, requires_gpu]))
    return cases


@pytest.mark.parametrize(("dtype", "form", "device"), _fma_cross())
def test_a_sum_of_a_product_is_one_fma(device: str, form: str, dtype: DataType) -> None:
    np_dtype = NP[dtype]
    a, b, c = _operands(3000, np_dtype)
    fd = _mul_add(dtype, form)
    (out,) = fd.execute(_to(device, [a, b, c]))
    out = _numpy(out)
    source = fd.last_cuda_source()
    assert source.count("kf::fma(") == 1 and not re.search(r"\(x\d \* x\d\)", source)
    want = FORMS[form][1](a, b, c)
    np.testing.assert_array_equal(_bits(out), _bits(want))
    with np.errstate(over="ignore", invalid="ignore"):
        twice = FORMS[form][0](np, a * b, c)  # NumPy's two roundings
    assert (out != twice).sum() > len(out) // 10  # so the test tells the two apart


def test_a_product_read_elsewhere_stays_rounded() -> None:
    """x = a * b is an output and the sum's operand: the sum adds that rounded x."""
    with FusionDefinition() as fd:
        a, b, c = (fd.define_tensor(shape=[-1], dtype=DataType.Float) for _ in range(3))
        x = fd.ops.mul(a, b)
        fd.add_output(x)
        fd.add_output(fd.ops.sub(x, c))
    a, b, c = _operands(2000, np.float32)
    x, y = fd.execute([a, b, c])
    assert "kf::fma" not in fd.last_cuda_source()
    np.testing.assert_array_equal(_bits(x), _bits(a * b))
    np.testing.assert_array_equal(_bits(y), _bits(a * b - c))


def test_a_sum_of_two_products_fuses_the_left_one() -> None:
    with FusionDefinition() as fd:
        a, b, c, d = (fd.define_tensor(shape=[-1], dtype=DataType.Float) for _ in range(4))
        fd.add_output(fd.ops.sub(fd.ops.mul(a, b), fd.ops.mul(c, d)))
    a, b, c, d = np.random.default_rng(1).standard_normal((4, 2000)).astype(np.float32)
    (out,) = fd.execute([a, b, c, d])
    assert fd.last_cuda_source().count("kf::fma(") == 1
    np.testing.assert_array_equal(_bits(out), _bits(exact_fma(a, b, -(c * d))))


def test_the_switch_off_rounds_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(switches, "FMA_CONTRACT", False)
    a, b, c = _operands(2000, np.float32)
    fd = _mul_add(DataType.Float, "c-a*b")
    (out,) = fd.execute([a, b, c])
    assert "kf::fma" not in fd.last_cuda_source()
    np.testing.assert_array_equal(_bits(out), _bits(c - a * b))


def test_half_values_are_not_fused() -> None:
    """A Half product is rounded to Half before the sum reads it (PyTorch's rounding): an
    fma would skip that rounding."""
    with FusionDefinition() as fd:
        a, b, c = (fd.define_tensor(shape=[-1], dtype=DataType.Half) for _ in range(3))
        fd.add_output(fd.ops.add(fd.ops.mul(a, b), c))
    assert not products(fd.fusion)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [1, 3, 1000])
def test_a_value_computed_twice_is_the_same_value(device: str, n: int) -> None:
    """y = a * b + c, normalized over rows of equal values: the persistent kernel computes y
    in the statistics' stage and again for the output; both are the one fma, so y - mean is
    exactly 0 (NaN times the infinite weight), not a residue of two roundings (+-inf)."""
    with FusionDefinition() as fd:
        a, b, c = (fd.define_tensor(shape=[-1, -1]) for _ in range(3))
        w = fd.define_tensor(shape=[-1])
        y = fd.ops.add(fd.ops.mul(a, b), c)
        mean, m2, _ = fd.ops.welford(y, dims=[1])
        inv = fd.ops.rsqrt(fd.ops.add(fd.ops.div(m2, float(n)), 1e-5))
        centred = fd.ops.sub(y, fd.ops.broadcast(mean, is_broadcast_dim=[False, True]))
        normed = fd.ops.mul(centred, fd.ops.broadcast(inv, is_broadcast_dim=[False, True]))
        fd.add_output(fd.ops.mul(normed, fd.ops.broadcast(w, is_broadcast_dim=[True, False])))
    rows = 40
    rng = np.random.default_rng(n)
    a, b, c = (rng.standard_normal((rows, 1)).repeat(n, axis=1).astype(np.float32) for _ in "abc")
    w = np.linspace(0.5, 2.0, n).astype(np.float32)
    w[n // 2] = math.inf
    (out,) = fd.execute(_to(device, [a, b, c, w]))
    assert fd.last_scheduler() is SchedulerType.inner_persistent
    assert "kf::fma(" in fd.last_cuda_source()
    expected = np.zeros((rows, n), np.float32)
    expected[:, n // 2] = np.nan
    np.testing.assert_array_equal(_numpy(out), expected)


def test_a_row_invariant_product_is_fused_where_its_sum_is() -> None:
    """s * s + x, s a row's sum: the product is the same all along the row, but its sum is
    not, so the row's prelude passes s and each element computes the fma."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        s = fd.ops.sum(x, dims=[1])
        spread = fd.ops.broadcast(s, is_broadcast_dim=[False, True])
        fd.add_output(fd.ops.add(fd.ops.mul(spread, spread), x))
        fd.add_output(s)
    x = np.random.default_rng(0).standard_normal((64, 300)).astype(np.float32)
    y, s = fd.execute([x])
    assert fd.last_scheduler() is SchedulerType.inner_persistent
    assert "kf::fma(h" in fd.last_cuda_source()
    np.testing.assert_array_equal(_bits(y), _bits(exact_fma(s[:, None], s[:, None], x)))


def test_a_segment_fuses_only_what_its_whole_fusion_fuses() -> None:
    """A segment holding a product's one sum, whose fusion reads the product elsewhere too,
    keeps it rounded: segments that compute the sum again all compute it alike."""

    def parent(product_read_twice: bool) -> FusionDefinition:
        with FusionDefinition() as fd:
            a, b, c = (fd.define_tensor(shape=[-1], dtype=DataType.Float) for _ in range(3))
            x = fd.ops.mul(a, b)
            fd.add_output(fd.ops.add(x, c))
            if product_read_twice:
                fd.add_output(fd.ops.mul(x, 2.0))
        return fd

    subs = []
    for read_twice in (True, False):
        fusion = parent(read_twice).fusion
        product, total = fusion.exprs[0], fusion.exprs[1]
        outputs = [total.outputs[0]]
        sub, _ = build_sub_fusion([product, total], list(fusion.inputs), outputs, fusion)
        subs.append(sub)
    kept, fused = subs
    assert not products(kept) and len(kept.rounded_products) == 1
    assert len(products(fused)) == 1 and not fused.rounded_products
    assert kept.structure() != fused.structure()  # a cache key tells them apart


@pytest.mark.parametrize("contract", [True, False])
def test_the_reference_accepts_what_one_rounding_leaves_of_a_cancelling_sum(
    contract: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """a * b - b * a fused is the rounding of b * a, where float64 and two roundings give 0
    (and times an infinite w: +-inf for NaN): the reference's conditioning (what the
    campaign's comparison judges by) bounds it as a sum's rounding, only where the kernels
    fuse."""
    monkeypatch.setattr(switches, "FMA_CONTRACT", contract)
    with FusionDefinition() as fd:
        a, b, w = (fd.define_tensor(shape=[-1], dtype=DataType.Float) for _ in range(3))
        d = fd.ops.sub(fd.ops.mul(a, b), fd.ops.mul(b, a))
        fd.add_output(d)
        fd.add_output(fd.ops.mul(d, w))
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((2, 1000)) * 1000).astype(np.float32)
    inputs = [a, b, np.full(1000, np.inf, np.float32)]
    out = fd.execute(inputs)
    assert bool(np.count_nonzero(out[0]) > 900) == contract
    expected = evaluate(fd.fusion, inputs)
    cond = conditioning(fd.fusion, inputs)
    assert (cond.magnitudes[0] is not None) is contract
    with pytest.raises(AssertionError) if contract else contextlib.nullcontext():
        assert_outputs_close(fd, out, expected, inputs)  # float64 alone: 0 and NaN
    assert_outputs_close(
        fd,
        out,
        expected,
        inputs,
        alternative=evaluate(fd.fusion, inputs, accumulate="same"),
        magnitudes=cond.magnitudes,
        indeterminate=cond.indeterminate,
        order_decides=cond.order_decides,
    )
