"""Run-time complex scalars: a symbolic ComplexFloat/ComplexDouble input
(define_scalar(DataType.ComplexDouble), whose value execute takes per call), and a run-time
real scalar promoted to complex by a complex tensor (a complex tensor scaled by a factor given
per call). Kernels take no complex parameter: such a scalar reaches them as its real and
imaginary parts, computed on the host each call. On the host emulator against torch, the
reference evaluator and the fast path's scalar program; the GPU tests (marked gpu) run torch
tensors and CuPy arrays."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from kfuse import DataType, FusionDefinition
from kfuse.dtypes import from_array_dtype
from kfuse.errors import DefinitionError, InputError
from kfuse.reference import evaluate

TORCH_OF = {DataType.ComplexFloat: torch.complex64, DataType.ComplexDouble: torch.complex128}


def _complex(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=dtype, generator=g)


def _close(got: Any, want: torch.Tensor) -> None:
    got = torch.as_tensor(got)
    assert got.dtype == want.dtype
    tol = {"rtol": 1e-5, "atol": 1e-5} if want.dtype == torch.complex64 else {}
    torch.testing.assert_close(got, want, **tol)


def _close_reference(got: Any, want: torch.Tensor) -> None:
    """The reference evaluator holds floating values in float64 (complex128): its values, in
    the output's dtype."""
    _close(torch.as_tensor(got).to(want.dtype), want)


# op -> (kfuse's op of a tensor and a run-time scalar, torch's of a tensor and a number)
BINARY: dict[str, tuple[Callable[[Any, Any, Any], Any], Callable[[Any, Any], Any]]] = {
    "mul": (lambda fd, t, s: fd.ops.mul(t, s), lambda t, s: t * s),
    "add": (lambda fd, t, s: fd.ops.add(s, t), lambda t, s: s + t),
    "sub": (lambda fd, t, s: fd.ops.sub(s, t), lambda t, s: s - t),
    "div": (lambda fd, t, s: fd.ops.div(t, s), lambda t, s: t / s),
    "eq": (lambda fd, t, s: fd.ops.eq(t, s), lambda t, s: t == s),
}


@pytest.mark.parametrize("dtype", list(TORCH_OF))
@pytest.mark.parametrize("op", sorted(BINARY))
def test_a_complex_scalar_input_with_a_complex_tensor(op: str, dtype: DataType) -> None:
    """Each call's value is the one used (two calls, two values), as torch computes with it
    and as the reference evaluator does."""
    z = _complex((5, 40), TORCH_OF[dtype])
    z[0, 0] = 1.5 - 2j  # eq has something to find
    build, expect = BINARY[op]
    with FusionDefinition() as fd:
        x = fd.from_pytorch(z)
        fd.add_output(build(fd, x, fd.define_scalar(DataType.ComplexDouble)))
    for value in (1.5 - 2j, -0.25 + 3j):
        (got,) = fd.execute([z, value])
        want = expect(z, value)
        _close(got, want)
        (reference,) = evaluate(fd, [z, value])
        _close_reference(reference, want)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_a_complex_tensor_scaled_by_a_run_time_real_factor(dtype: torch.dtype) -> None:
    """The commonest case: z * alpha with alpha a Double given per call (promoted to z's
    complex dtype, imaginary part 0), in a pointwise kernel and before a reduction."""
    z = _complex((6, 70), dtype)
    with FusionDefinition() as fd:
        x = fd.from_pytorch(z)
        alpha = fd.define_scalar(DataType.Double)
        scaled = fd.ops.mul(x, alpha)
        fd.add_output(scaled)
        fd.add_output(fd.ops.sum(fd.ops.add(scaled, alpha), [1]))
    for value in (2.5, -0.125):
        scaled_, total = fd.execute([z, value])
        _close(scaled_, z * value)
        _close(total, (z * value + value).sum(1))
        for got, want in zip(evaluate(fd, [z, value]), (z * value, (z * value + value).sum(1))):
            _close_reference(got, want)


# (tensor dtype, scalar input dtype, its value): the result's dtype is torch.result_type of
# the tensor and the value as a Python number (a scalar is weak, as nvFuser's are).
PROMOTIONS = [
    (torch.float32, DataType.ComplexDouble, 1.5 - 2j),
    (torch.float64, DataType.ComplexFloat, 1.5 - 2j),
    (torch.int32, DataType.ComplexDouble, 2 + 1j),
    (torch.bool, DataType.ComplexFloat, -1j),
    (torch.bfloat16, DataType.ComplexDouble, 0.5 + 0.5j),
    (torch.complex64, DataType.Double, 2.5),
    (torch.complex128, DataType.Float, 2.5),
    (torch.complex64, DataType.Int, 3),
    (torch.complex64, DataType.ComplexDouble, 1 - 1j),
]


@pytest.mark.parametrize(("tensor_dtype", "scalar_dtype", "value"), PROMOTIONS)
def test_promotion_with_run_time_scalars_is_torchs(
    tensor_dtype: torch.dtype, scalar_dtype: DataType, value: Any
) -> None:
    t = (torch.arange(1, 9) % 3).to(tensor_dtype)
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=from_array_dtype(tensor_dtype))
        out = fd.ops.mul(x, fd.define_scalar(scalar_dtype))
        fd.add_output(out)
    want = t * value
    assert TORCH_OF[out.dtype] == want.dtype
    (got,) = fd.execute([t, value])
    _close(got, want)


def test_execute_takes_any_number_for_a_complex_scalar() -> None:
    """Python complex, int and float numbers, NumPy complex scalars and 0-d arrays and
    tensors; anything else is an InputError naming the input."""
    z = _complex((7,), torch.complex64)
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.mul(fd.from_pytorch(z), fd.define_scalar(DataType.ComplexFloat)))
    for value in (2, -0.5, 1 + 2j, np.complex64(3 - 1j), np.complex128(-2j), np.array(1j)):
        (got,) = fd.execute([z, value])
        _close(got, z * complex(value))
    (got,) = fd.execute([z, torch.tensor(0.5 + 0.5j)])
    _close(got, z * (0.5 + 0.5j))
    for bad in ("1j", True, None):
        with pytest.raises(InputError, match=r"input 1 \(S0\) is a scalar input of dtype Complex"):
            fd.execute([z, bad])
    with pytest.raises(InputError, match=r"input 1 \(S0\) is a scalar input; got an array"):
        fd.execute([z, np.ones(2, np.complex64)])
    with FusionDefinition() as real:
        real.add_output(real.ops.mul(real.from_pytorch(z), real.define_scalar(DataType.Double)))
    with pytest.raises(InputError, match="dtype Double; got 1j"):
        real.execute([z, 1j])  # a real input loses no imaginary part silently


def test_scalar_arithmetic_makes_run_time_complex_values() -> None:
    """Complex arithmetic between run-time scalars is computed on the host each call: the
    complex of two Doubles, exp of a product, abs (a real result), and a full of a run-time
    complex fill value."""
    z = _complex((3, 16), torch.complex128)
    with FusionDefinition() as fd:
        x = fd.from_pytorch(z)
        re, im = fd.define_scalar(DataType.Double), fd.define_scalar(DataType.Double)
        w = fd.ops.complex(re, im)
        fd.add_output(fd.ops.mul(x, fd.ops.exp(fd.ops.mul(w, re))))
        fd.add_output(fd.ops.add(fd.ops.abs(x), fd.ops.abs(w)))
        fd.add_output(fd.ops.full([2, 3], w, DataType.ComplexFloat))
        fd.add_output(fd.ops.where(fd.ops.gt(fd.ops.real(x), 0.0), w, x))
    for a, b in ((0.5, -1.0), (-2.0, 0.25)):
        w_ = complex(a, b)
        want = [
            z * complex(np.exp(w_ * a)),
            z.abs() + abs(w_),
            torch.full((2, 3), w_, dtype=torch.complex64),
            torch.where(z.real > 0, torch.tensor(w_, dtype=torch.complex128), z),
        ]
        for got, expected in zip(fd.execute([z, a, b]), want, strict=True):
            _close(got, expected)
        for got, expected in zip(evaluate(fd, [z, a, b]), want, strict=True):
            _close_reference(got, expected)


def test_a_cpu_scalar_tensor_of_a_complex_dtype_is_a_run_time_scalar() -> None:
    """nvFuser's is_cpu 0-d tensor (from_pytorch of a 0-d CPU tensor) of a complex dtype."""
    z = _complex((9,), torch.complex64)
    c = torch.tensor(2 - 3j, dtype=torch.complex64)
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.sub(fd.from_pytorch(z), fd.from_pytorch(c)))
    (got,) = fd.execute([z, c])
    _close(got, z - c)


def test_printed_definitions_with_run_time_complex_scalars_rebuild_the_fusion() -> None:
    """kfuse's printout rebuilds the fusion as it is (the parts each kernel reads are in it);
    nvFuser's printout (kfuse.nvfuser_direct) rebuilds one that computes the same."""
    import kfuse.nvfuser_direct as nvfuser_direct

    z = _complex((10,), torch.complex64)
    for definition in (FusionDefinition, nvfuser_direct.FusionDefinition):
        with definition() as fd:
            t = fd.define_tensor(shape=[-1], dtype=DataType.ComplexFloat)
            alpha = fd.define_scalar(DataType.Double)
            s = fd.define_scalar(DataType.ComplexDouble)
            fd.add_output(fd.ops.mul(t, alpha))
            fd.add_output(fd.ops.sub(s, t))
            fd.add_output(fd.ops.full([3], s, DataType.ComplexDouble))
        text = repr(fd)
        namespace: dict[str, Any] = {"FusionDefinition": definition, "DataType": DataType}
        if definition is FusionDefinition:
            exec(text, namespace)  # noqa: S102 - the printer's own output
            assert repr(namespace["fd"]) == text
        else:  # nvFuser's printout defines nvfuser_fusion(fd) and numbers scalars as made
            exec(text + "with FusionDefinition() as fd:\n    nvfuser_fusion(fd)\n", namespace)  # noqa: S102
        inputs = [z, 0.5, 1 - 4j]
        for again, got in zip(namespace["fd"].execute(inputs), fd.execute(inputs), strict=True):
            assert torch.equal(again, got)


def test_the_fast_paths_program_computes_each_calls_parts() -> None:
    """A cached call's scalar program (kfuse.engine.fast_path) computes the parts the kernel
    reads from each call's complex value: two calls, two values. The emulator's launch packs
    as a GPU's does, so the slots are checked without one."""
    from kfuse.engine.fast_path import ScalarProgram, launch_slots
    from kfuse.engine.signature import scalar_spec
    from kfuse.runtime.info import build_runtime_info

    z = _complex((64,), torch.complex64).numpy()
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.ComplexFloat)
        fd.add_output(fd.ops.mul(x, fd.define_scalar(DataType.ComplexDouble)))
    fd.execute([z, 1 + 2j])
    (launch,) = fd.last_program().launches
    info = build_runtime_info(fd.fusion, [z, 1 + 2j])
    program = ScalarProgram.of(fd.fusion, info.extents)
    assert program is not None
    kinds = sorted(kind for _, kind, _, _ in launch_slots(launch, program))
    assert kinds == ["input", "output", "scalar", "scalar"]  # the real and imaginary parts
    assert scalar_spec(1 + 2j) == (complex,)  # a Python complex takes the fast path
    assert scalar_spec(np.complex128(1 + 2j)) is None  # NumPy's, as its other scalars, not
    assert sorted(program([z, 1 + 2j])) == [1.0, 2.0]
    assert sorted(program([z, -3.5 + 0.5j])) == [-3.5, 0.5]


def test_a_new_value_needs_no_new_program_and_a_segmented_call_replays() -> None:
    """The parts are fill values, kernel parameters: every value runs the Program compiled
    for the first, and a segmented fusion's planned calls (kfuse.engine.segmented_replay)
    compute each call's parts."""
    z = _complex((40,), torch.complex64)
    with FusionDefinition() as fd:
        x = fd.from_pytorch(z)
        fd.add_output(fd.ops.mul(x, fd.define_scalar(DataType.ComplexDouble)))
    for value in (1j, 2 - 1j, 0.5 + 3j):
        (got,) = fd.execute([z, value])
        _close(got, z * value)
    assert len(fd._executor()._compiled) == 1
    a = torch.randn(3, 3, generator=torch.Generator().manual_seed(1))
    with FusionDefinition() as fd:
        t = fd.from_pytorch(a)
        s = fd.define_scalar(DataType.ComplexDouble)
        fd.add_output(fd.ops.sum(fd.ops.mul(fd.ops.matmul(t, t), s), dims=[0]))
    values = (1 + 1j, 2j, -4 + 0.5j, 0.5 - 2j)
    for value in values:  # planned on the second call, replayed on the third and fourth
        (got,) = fd.execute([a, value])
        _close(got, ((a @ a) * value).sum(0).to(torch.complex64))
    assert len(fd.segments([a, 1j])) == 2
    assert fd._executor().replays.hits == 2


def test_ops_that_take_no_run_time_complex_scalar_say_so() -> None:
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], dtype=DataType.ComplexFloat)
        s = fd.define_scalar(DataType.ComplexDouble)
        with pytest.raises(DefinitionError, match="run-time ComplexFloat scalar, which PadOp"):
            fd.ops.pad(t, [1, 1], s)
        with pytest.raises(DefinitionError, match="lt: complex operands"):
            fd.ops.lt(t, s)
        fd.add_output(t)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_cuda_run_time_complex_scalars(dtype: torch.dtype) -> None:
    """Torch tensors: each cached call (the fast path from the third call of a layout on)
    uses that call's values; a reduction of a product with a run-time complex scalar."""
    a = torch.randn(300, 129, dtype=dtype, device="cuda")
    with FusionDefinition() as fd:
        x = fd.from_pytorch(a)
        s = fd.define_scalar(DataType.ComplexDouble)
        alpha = fd.define_scalar(DataType.Double)
        fd.add_output(fd.ops.add(fd.ops.mul(x, alpha), s))
    for k, (s_, alpha_) in enumerate([(1 - 2j, 0.5), (3j, -2.0), (0.25 + 0j, 4.0), (-1 + 1j, 1.5)]):
        inputs = [a, s_, alpha_]
        if k >= 2:  # compiled on the first call, the FastCall built on the second
            assert fd._executor_cache.fast_calls(inputs, None) is not None
        (shifted,) = fd.execute(inputs)
        torch.testing.assert_close(shifted, a * alpha_ + s_)
    with FusionDefinition() as fd:
        x = fd.from_pytorch(a)  # inputs come in definition order: [a, s_]
        s = fd.define_scalar(DataType.ComplexDouble)
        fd.add_output(fd.ops.sum(fd.ops.mul(x, s), [1]))
    for s_ in (1 - 2j, 0.5j):
        (total,) = fd.execute([a, s_])
        torch.testing.assert_close(total, (a * s_).sum(1), rtol=1e-5, atol=1e-4)


@pytest.mark.gpu
def test_cuda_run_time_complex_scalars_with_cupy() -> None:
    cupy = pytest.importorskip("cupy")
    z = cupy.random.standard_normal((64, 1000)) + 1j * cupy.random.standard_normal((64, 1000))
    z = z.astype(cupy.complex64)
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.ComplexFloat)
        fd.add_output(fd.ops.mul(x, fd.define_scalar(DataType.ComplexFloat)))
    for value in (2 - 1j, np.complex64(-0.5j)):
        (got,) = fd.execute([z, value])
        assert isinstance(got, cupy.ndarray) and got.dtype == cupy.complex64
        cupy.testing.assert_allclose(got, z * cupy.complex64(value), rtol=1e-6)
