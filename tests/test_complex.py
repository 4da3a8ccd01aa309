"""Complex dtypes (ComplexFloat, ComplexDouble) end to end on the host emulator: each op that
takes complex operands against torch and NumPy, promotion as torch.result_type, casts, the
reductions, and the DefinitionErrors of ops with no complex meaning."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from kfuse import DataType, FusionDefinition
from kfuse.errors import ComplexCastWarning, DefinitionError, InputError
from kfuse.reference import evaluate
from kfuse.testing import assert_outputs_close

COMPLEX = {torch.complex64: DataType.ComplexFloat, torch.complex128: DataType.ComplexDouble}


def _complex(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=dtype, generator=g)


def _run(build: Callable[[FusionDefinition, list[Any]], Any], inputs: list[Any]) -> list[Any]:
    with FusionDefinition() as fd:
        ins = [
            fd.from_pytorch(x)
            if isinstance(x, torch.Tensor)
            else fd.define_tensor(shape=[-1] * x.ndim, dtype=x.dtype)
            for x in inputs
        ]
        out = build(fd, ins)
        for o in out if isinstance(out, (list, tuple)) else [out]:
            fd.add_output(o)
    return list(fd.execute(inputs))


# op -> (kfuse call, torch's), for operands a, b of a complex dtype
UNARY: dict[str, Callable[[Any], Any]] = {
    "neg": torch.neg,
    "abs": torch.abs,
    "reciprocal": torch.reciprocal,
    "exp": torch.exp,
    "log": torch.log,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "sin": torch.sin,
    "cos": torch.cos,
    "tanh": torch.tanh,
    "real": torch.real,
    "imag": torch.imag,
    "set": lambda x: x,
    "isnan": torch.isnan,
    "isinf": torch.isinf,
    "isfinite": torch.isfinite,
    "isreal": torch.isreal,
}
BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "eq": torch.eq,
    "ne": torch.ne,
}


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype
    if want.dtype == torch.bool:
        assert torch.equal(got, want)
    else:
        torch.testing.assert_close(got, want, equal_nan=True)


@pytest.mark.parametrize("dtype", list(COMPLEX))
@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_op_matches_torch(op: str, dtype: torch.dtype) -> None:
    x = _complex((7, 33), dtype)
    x[0, :3] = torch.tensor([complex(float("nan"), 1), complex(float("inf"), 0), 2 + 0j])
    x[1, :2] = torch.tensor([0j, -1 + 0j])  # the branch cut's edge and zero
    if op in ("log", "sqrt", "rsqrt", "reciprocal"):
        x[1, :2] = torch.tensor([0.5 + 0j, -1 + 1e-3j])  # no pole
    (got,) = _run(lambda fd, t: getattr(fd.ops, op)(t[0]), [x])
    want = UNARY[op](x)
    finite = torch.isfinite(x).all(dim=1)  # special values' results are the library's own
    if op.startswith("is"):
        finite[:] = True
    _close(got[finite], want[finite])


@pytest.mark.parametrize("dtype", list(COMPLEX))
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_op_matches_torch(op: str, dtype: torch.dtype) -> None:
    a, b = _complex((5, 40), dtype, 1), _complex((5, 40), dtype, 2)
    b[0, :4] = a[0, :4]  # equal elements for eq and ne
    (got,) = _run(lambda fd, t: getattr(fd.ops, op)(t[0], t[1]), [a, b])
    _close(got, BINARY[op](a, b))


def test_numpy_arrays_in_and_out() -> None:
    rng = np.random.default_rng(0)
    a = (rng.standard_normal(100) + 1j * rng.standard_normal(100)).astype(np.complex64)
    b = rng.standard_normal(100).astype(np.float32)
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.ComplexFloat)
        y = fd.define_tensor(shape=[-1], dtype=np.float32)
        fd.add_output(fd.ops.mul(x, y))
        fd.add_output(fd.ops.abs(fd.ops.sub(x, 1j)))
    prod, modulus = fd.execute([a, b])
    assert prod.dtype == np.complex64 and modulus.dtype == np.float32
    np.testing.assert_allclose(prod, a * b, rtol=1e-6)
    np.testing.assert_allclose(modulus, np.abs(a - 1j), rtol=1e-6)
    assert_outputs_close(fd.fusion, [prod, modulus], evaluate(fd, [a, b]), [a, b])


def test_complex_of_parts_and_its_parts() -> None:
    re, im = torch.randn(3, 17, dtype=torch.float64), torch.randn(3, 17, dtype=torch.float64)
    im[0, 0] = float("inf")  # built part by part: re stays re
    got = _run(
        lambda fd, t: [fd.ops.complex(t[0], t[1]), fd.ops.imag(fd.ops.complex(t[0], t[1]))],
        [re, im],
    )
    assert got[0].dtype == torch.complex128
    assert torch.equal(got[0].real, re) and torch.equal(got[0].imag, im)
    assert torch.equal(got[1], im)


def test_real_of_a_real_value_is_a_copy_and_imag_of_one_an_error() -> None:
    x = torch.randn(9)
    (got,) = _run(lambda fd, t: fd.ops.real(t[0]), [x])
    assert torch.equal(got, x)
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        with pytest.raises(DefinitionError, match="imag: .* is not complex"):
            fd.ops.imag(t)
        fd.add_output(t)


@pytest.mark.parametrize(
    ("tensor", "other", "want"),
    [
        (torch.float32, 1j, torch.complex64),
        (torch.float64, 1j, torch.complex128),
        (torch.int32, 2 - 1j, torch.complex64),
        (torch.bool, 1j, torch.complex64),
        (torch.complex64, 2.5, torch.complex64),
        (torch.complex64, torch.float64, torch.complex128),
        (torch.complex128, torch.float32, torch.complex128),
        (torch.complex64, torch.int64, torch.complex64),
    ],
)
def test_promotion_is_torchs(tensor: torch.dtype, other: Any, want: torch.dtype) -> None:
    a = torch.ones(4, dtype=tensor)
    b = torch.full((4,), 2, dtype=other) if isinstance(other, torch.dtype) else other
    assert torch.result_type(a, b) == want
    inputs = [a, b] if isinstance(b, torch.Tensor) else [a]

    def build(fd: FusionDefinition, t: list[Any]) -> Any:
        return fd.ops.add(t[0], t[1] if len(t) > 1 else other)

    (got,) = _run(build, inputs)
    _close(got, a + b)


def test_casts_as_torch() -> None:
    z = _complex((20,), torch.complex64)
    z[:2] = torch.tensor([0j, 1j])  # to Bool: true where either part is nonzero
    f = torch.randn(20, dtype=torch.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _run(
            lambda fd, t: [
                fd.ops.cast(t[0], DataType.Float),
                fd.ops.cast(t[0], DataType.Bool),
                fd.ops.cast(t[0], DataType.Int32),
                fd.ops.cast(t[0], DataType.ComplexDouble),
                fd.ops.cast(t[1], DataType.ComplexFloat),
                fd.ops.cast(fd.ops.cast(t[1], DataType.Half), DataType.ComplexFloat),
            ],
            [z, f],
        )
    # Where the imaginary part is dropped (not to Bool, whether either part is nonzero).
    assert [str(w.message) for w in caught if w.category is ComplexCastWarning] == [
        "cast: casting ComplexFloat to Float discards the imaginary part",
        "cast: casting ComplexFloat to Int32 discards the imaginary part",
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's own warning of the same casts
        wants = [
            z.to(torch.float32),
            z.to(torch.bool),
            z.to(torch.int32),
            z.to(torch.complex128),
            f.to(torch.complex64),
            f.half().to(torch.complex64),
        ]
    for g, w in zip(got, wants, strict=True):
        _close(g, w)


def test_float8_casts_go_through_float_as_torchs() -> None:
    z = _complex((16,), torch.complex128) * 50
    e4m3 = torch.linspace(-400, 400, 16).to(torch.float8_e4m3fn)
    with pytest.warns(ComplexCastWarning, match="ComplexDouble to Float8_e4m3fn"):
        got = _run(
            lambda fd, t: [
                fd.ops.cast(t[0], DataType.Float8_e4m3fn),
                fd.ops.cast(t[1], DataType.ComplexFloat),
            ],
            [z, e4m3],
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's own warning
        want = z.to(torch.float8_e4m3fn)
    assert torch.equal(got[0].view(torch.uint8), want.view(torch.uint8))
    _close(got[1], e4m3.to(torch.complex64))


@pytest.mark.parametrize("dtype", list(COMPLEX))
@pytest.mark.parametrize(("shape", "dims"), [((4, 300), [1]), ((300, 6), [0]), ((5000,), [0])])
def test_sum_and_mean(dtype: torch.dtype, shape: tuple[int, ...], dims: list[int]) -> None:
    x = _complex(shape, dtype)
    total, mean = _run(lambda fd, t: [fd.ops.sum(t[0], dims), fd.ops.mean(t[0], dims)], [x])
    tol = {"rtol": 1e-5, "atol": 1e-4} if dtype == torch.complex64 else {}
    torch.testing.assert_close(total, x.sum(dims), **tol)
    torch.testing.assert_close(mean, x.mean(dims), **tol)


@pytest.mark.parametrize("dtype", list(COMPLEX))
@pytest.mark.parametrize(
    ("shape", "dims"), [((4, 30), [1]), ((300, 6), [0]), ((3000,), [0]), ((3, 4, 5), [0, 2])]
)
def test_prod(dtype: torch.dtype, shape: tuple[int, ...], dims: list[int]) -> None:
    """nvFuser's prod of complex values: the complex product (factors near 1, so that the
    products of 3000 stay finite)."""
    x = 1 + 0.05 * _complex(shape, dtype)
    (got,) = _run(lambda fd, t: fd.ops.prod(t[0], dims), [x])
    want = x
    for d in sorted(dims, reverse=True):
        want = want.prod(d)
    tol = {"rtol": 2e-5, "atol": 1e-5} if dtype == torch.complex64 else {}
    torch.testing.assert_close(got, want, **tol)


@pytest.mark.parametrize("dtype", list(COMPLEX))
@pytest.mark.parametrize(("shape", "dim"), [((4, 30), 1), ((300, 6), 0), ((5000,), 0)])
def test_cumsum_and_cumprod(dtype: torch.dtype, shape: tuple[int, ...], dim: int) -> None:
    """The scans of complex values: each prefix's complex sum and product (the warp's
    lanes move the two parts, kf::detail::shfl_up)."""
    x = _complex(shape, dtype)
    near_one = 1 + 0.05 * x
    sums, products = _run(
        lambda fd, t: [fd.ops.cumsum(t[0], dim), fd.ops.cumprod(t[1], dim)], [x, near_one]
    )
    tol = {"rtol": 1e-5, "atol": 1e-4} if dtype == torch.complex64 else {}
    torch.testing.assert_close(sums, x.cumsum(dim), **tol)
    torch.testing.assert_close(products, near_one.cumprod(dim), **tol)


def test_indexed_read_of_complex_values() -> None:
    """The campaign's find: a gather of a part of a complex input reads the complex input at
    the gathered positions (kf::index_fill's zero of a complex value)."""
    x = _complex((16, 3, 8), torch.complex64)
    index = torch.tensor([[[5], [0], [15]]], dtype=torch.int32)

    def build(fd: FusionDefinition, t: list[Any]) -> Any:
        part = fd.ops.cosh(fd.ops.real(t[0]))
        return fd.ops.sum(fd.ops.take_along_axis(part, t[1], dim=0), [0])

    (got,) = _run(build, [x, index])
    want = torch.take_along_dim(torch.cosh(x.real), index.long(), dim=0).sum(0)
    torch.testing.assert_close(got, want)
    (direct,) = _run(lambda fd, t: fd.ops.take_along_axis(t[0], t[1], dim=0), [x, index])
    _close(direct, torch.take_along_dim(x, index.long(), dim=0))


def test_factories_and_layout_ops_of_complex_values() -> None:
    x = _complex((4, 6), torch.complex64)

    def build(fd: FusionDefinition, t: list[Any]) -> Any:
        filled = fd.ops.full([4, 6], 1 - 2j, DataType.ComplexFloat)
        return [
            fd.ops.add(t[0], filled),
            fd.ops.pad(t[0], [1, 1]),
            fd.ops.cat([t[0], fd.ops.zeros([4, 6], DataType.ComplexFloat)], 0),
            fd.ops.permute(fd.ops.mul(t[0], 1j), [1, 0]),
        ]

    added, padded, joined, turned = _run(build, [x])
    _close(added, x + (1 - 2j))
    _close(padded, torch.nn.functional.pad(x, [1, 1]))
    _close(joined, torch.cat([x, torch.zeros_like(x)], 0))
    _close(turned, (x * 1j).T)


def test_where_with_complex_constants() -> None:
    c = torch.tensor([True, False, True])
    x = _complex((3,), torch.complex64)
    (got,) = _run(lambda fd, t: fd.ops.where(t[0], t[1], 2 - 1j), [c, x])
    _close(got, torch.where(c, x, torch.tensor(2 - 1j, dtype=torch.complex64)))


def test_complex_constant_arithmetic_is_folded() -> None:
    """Kernels take no complex parameter: arithmetic on complex constants is a constant."""
    x = _complex((6,), torch.complex128)

    def build(fd: FusionDefinition, t: list[Any]) -> Any:
        c = fd.ops.mul(fd.define_scalar(1 + 2j), fd.define_scalar(3.0))
        assert c.is_constant and c.value == 3 + 6j
        return fd.ops.add(t[0], c)

    (got,) = _run(build, [x])
    _close(got, x + (3 + 6j))


def test_printed_definition_rebuilds_the_fusion() -> None:
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], dtype=DataType.ComplexFloat)
        fd.add_output(fd.ops.mul(t, fd.define_scalar(1.5 - 2j, DataType.ComplexFloat)))
        fd.add_output(fd.ops.add(t, complex(float("inf"), float("nan"))))
        fd.add_output(fd.ops.abs(t))
    text = repr(fd)
    namespace: dict[str, Any] = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(text, namespace)  # noqa: S102 - the printer's own output
    assert repr(namespace["fd"]) == text
    assert "complex(float('inf'), float('nan'))" in text


NO_COMPLEX_MEANING: dict[str, Callable[[Any, Any], Any]] = {
    "lt": lambda fd, t: fd.ops.lt(t, t),
    "maximum": lambda fd, t: fd.ops.maximum(t, 1.0),
    "floor": lambda fd, t: fd.ops.floor(t),
    "clamp": lambda fd, t: fd.ops.clamp(t, 0.0, 1.0),
    "sigmoid": lambda fd, t: fd.ops.sigmoid(t),
    "bitwise_and": lambda fd, t: fd.ops.bitwise_and(t, t),
    "max": lambda fd, t: fd.ops.max(t, [0]),
    "var": lambda fd, t: fd.ops.var(t, [0]),
    "softmax": lambda fd, t: fd.ops.softmax(t, 0),
    "topk": lambda fd, t: fd.ops.topk(t, 1),
    "argsort": lambda fd, t: fd.ops.argsort(t),
    "cummax": lambda fd, t: fd.ops.cummax(t, 0),
    "cummin": lambda fd, t: fd.ops.cummin(t, 0),
}


@pytest.mark.parametrize("op", sorted(NO_COMPLEX_MEANING))
def test_an_op_with_no_complex_meaning_is_a_definition_error(op: str) -> None:
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], dtype=DataType.ComplexFloat)
        with pytest.raises(DefinitionError, match=rf"{op}.*ComplexFloat"):
            NO_COMPLEX_MEANING[op](fd, t)
        fd.add_output(t)


def test_complex_values_refused_where_kfuse_cannot_hold_them() -> None:
    """Run-time complex scalars are taken (tests/test_complex_scalars.py); a complex number
    in a real dtype and complex parts of an integer type are not."""
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], dtype=DataType.ComplexFloat)
        assert not fd.define_scalar(DataType.ComplexDouble).is_constant
        assert fd.ops.add(t, fd.define_scalar(DataType.Double)).dtype is DataType.ComplexFloat
        with pytest.raises(DefinitionError, match="complex number"):
            fd.define_scalar(1j, DataType.Float)
        with pytest.raises(DefinitionError, match="Float or Double"):
            fd.ops.complex(fd.define_tensor(shape=[-1], dtype=DataType.Int), 1)
        fd.add_output(t)


def test_kernels_vectorize_complex_loads() -> None:
    """A complex64 element is 8 bytes: two of them move as one 16-byte access."""
    x = _complex((4096,), torch.complex64)
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.neg(fd.from_pytorch(x)))
    (got,) = fd.execute([x])
    _close(got, -x)
    assert "kf::Vec<kf::complex<float>, 2>" in (fd.last_cuda_source() or "")


def test_a_complex_array_aligned_below_its_size_is_an_input_error() -> None:
    """kf::complex<T> is aligned to its size (torch's c10::complex too): a NumPy view of
    float64 storage from an odd element is 8-byte aligned, which a ComplexDouble load cannot
    take (torch refuses such a view itself)."""
    view = np.arange(11, dtype=np.float64)[1:].view(np.complex128)
    assert view.ctypes.data % 16 == 8
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.neg(fd.define_tensor(shape=[-1], dtype=DataType.ComplexDouble)))
    with pytest.raises(InputError, match="ComplexDouble array must be aligned to 16 bytes"):
        fd.execute([view])
    (got,) = fd.execute([view.copy()])
    np.testing.assert_array_equal(got, -view)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(COMPLEX))
def test_cuda_tensors(dtype: torch.dtype) -> None:
    a = torch.randn(1000, 33, dtype=dtype, device="cuda")
    b = torch.randn(1000, 33, dtype=dtype, device="cuda")
    with FusionDefinition() as fd:
        x, y = fd.from_pytorch(a), fd.from_pytorch(b)
        fd.add_output(fd.ops.exp(fd.ops.mul(x, y)))
        fd.add_output(fd.ops.abs(fd.ops.div(x, y)))
        fd.add_output(fd.ops.sum(fd.ops.sqrt(x), [1]))
        near_one = fd.ops.add(fd.ops.mul(y, 0.05), 1.0)
        fd.add_output(fd.ops.prod(near_one, [1]))
        fd.add_output(fd.ops.cumsum(x, 0))
        fd.add_output(fd.ops.cumprod(near_one, 0))
    prod, quotient, total, product, sums, products = fd.execute([a, b])
    assert prod.device.type == "cuda" and prod.dtype == dtype
    torch.testing.assert_close(prod, torch.exp(a * b))
    torch.testing.assert_close(quotient, torch.abs(a / b))
    torch.testing.assert_close(total, torch.sqrt(a).sum(1))
    torch.testing.assert_close(product, (b * 0.05 + 1).prod(1))
    torch.testing.assert_close(sums, a.cumsum(0), rtol=1e-5, atol=2e-4)
    torch.testing.assert_close(products, (b * 0.05 + 1).cumprod(0), rtol=1e-5, atol=2e-4)


@pytest.mark.gpu
def test_cuda_complex_of_parts_and_mean() -> None:
    re = torch.randn(64, 1000, device="cuda")
    im = torch.randn(64, 1000, device="cuda")
    with FusionDefinition() as fd:
        z = fd.ops.complex(fd.from_pytorch(re), fd.from_pytorch(im))
        fd.add_output(fd.ops.mean(z, [0]))
        fd.add_output(fd.ops.real(fd.ops.tanh(z)))
    mean, real_tanh = fd.execute([re, im])
    want = torch.complex(re, im)
    torch.testing.assert_close(mean, want.mean(0))
    torch.testing.assert_close(real_tanh, torch.tanh(want).real)


def test_infinite_parts_add_and_subtract_part_by_part() -> None:
    """A campaign's fusion (seed 6501, 37ed737): complex(2, x) + x - x at x = -inf is
    nan-infj part by part, whose abs is inf (C's hypot); torch's CPU complex subtraction made it
    nan+nanj, and the reference took torch's. kfuse's kernel and its reference both add and
    subtract each part."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        as_complex = fd.ops.cast(x, dtype=DataType.ComplexFloat)
        joined = fd.ops.add(fd.ops.complex(2.0, x), as_complex)
        fd.add_output(fd.ops.abs(fd.ops.sub(joined, as_complex)))
    x = torch.tensor([-float("inf"), 1.5])
    (actual,) = fd.execute([x])
    (expected,) = evaluate(fd, [x])
    torch.testing.assert_close(actual, torch.tensor([float("inf"), (4 + 1.5**2) ** 0.5]))
    torch.testing.assert_close(expected.float(), actual)
