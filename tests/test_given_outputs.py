"""fd.execute(inputs, outputs=[...]): the fusion's outputs written into arrays the caller
allocated, returned as the result (the same objects), the same values as an allocating call;
every array that does not fit is an InputError naming the output, and a refused call writes
nothing. On the host emulator (NumPy and CPU torch); tests/test_cuda_graphs.py uses it on a GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from gpu_support import cuda_torch, requires_gpu
from kfuse import FusionDefinition
from kfuse.dtypes import DataType
from kfuse.engine.program import SegmentedProgram, SegmentKernelsProgram
from kfuse.errors import InputError
from small_fusions import relu_of_matmul, scaled_sum, sums_over_both_axes

SENTINEL = -7.0


def _arrays(framework: str, *shapes: tuple[int, ...], seed: int = 0) -> list[Any]:
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    return [torch.from_numpy(a) for a in arrays] if framework == "torch" else arrays


def _empty_like(framework: str, array: Any) -> Any:
    if framework == "torch":
        return torch.full_like(array, SENTINEL)
    return np.full_like(array, SENTINEL)


def _run_both_ways(
    make: Callable[[], FusionDefinition], framework: str, inputs: list[Any]
) -> tuple[list[Any], list[Any], list[Any]]:
    """(the allocating call's outputs, the given arrays, what the call with them returned),
    each call on a definition of its own."""
    expected = make().execute(inputs)
    given = [_empty_like(framework, e) for e in expected]
    fd = make()
    returned = fd.execute(inputs, outputs=given)
    return expected, given, returned


def _assert_written(expected: list[Any], given: list[Any], returned: list[Any]) -> None:
    assert len(returned) == len(given)
    for k, (e, g, r) in enumerate(zip(expected, given, returned, strict=True)):
        assert r is g, f"output {k}: execute returned a new array, not the one given"
        np.testing.assert_array_equal(
            np.asarray(g), np.asarray(e), err_msg=f"output {k} differs from the allocating call"
        )


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_a_pointwise_kernel_writes_the_given_array(framework: str) -> None:
    inputs = _arrays(framework, (5, 7), (5, 7))
    expected, given, returned = _run_both_ways(scaled_sum, framework, inputs)
    _assert_written(expected, given, returned)


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_a_segmented_fusion_of_kernels_writes_the_given_arrays(framework: str) -> None:
    inputs = _arrays(framework, (30, 50))
    fd = sums_over_both_axes()
    expected = sums_over_both_axes().execute(inputs)
    given = [_empty_like(framework, e) for e in expected]
    _assert_written(expected, given, fd.execute(inputs, outputs=given))
    # Its segments run as one KernelProgram, whose kernels store into the given arrays.
    assert isinstance(fd.last_program(), SegmentKernelsProgram)


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_a_library_segment_result_is_copied_into_the_given_array(framework: str) -> None:
    inputs = _arrays(framework, (4, 6), (6, 3))
    fd = relu_of_matmul()
    expected = relu_of_matmul().execute(inputs)
    given = [_empty_like(framework, e) for e in expected]
    _assert_written(expected, given, fd.execute(inputs, outputs=given))
    assert isinstance(fd.last_program(), SegmentedProgram)


def test_a_library_program_result_is_copied_into_the_given_array() -> None:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1])
        b = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.matmul(a, b))
    inputs = _arrays("torch", (4, 6), (6, 3))
    given = [torch.full((4, 3), SENTINEL)]
    (result,) = fd.execute(inputs, outputs=given)
    assert result is given[0]
    torch.testing.assert_close(result, inputs[0] @ inputs[1])


def test_a_stride_ordered_output_takes_an_array_in_its_order() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.stride_order(fd.ops.exp(x), [0, 1]))  # column major
    (x,) = _arrays("numpy", (6, 4))
    column_major = np.asfortranarray(np.full((6, 4), SENTINEL, np.float32))
    (result,) = fd.execute([x], outputs=[column_major])
    assert result is column_major
    np.testing.assert_allclose(result, np.exp(x), rtol=1e-6)
    row_major = np.full((6, 4), SENTINEL, np.float32)
    with pytest.raises(InputError, match=r"stride order \[0, 1\]"):
        fd.execute([x], outputs=[row_major])
    assert (row_major == SENTINEL).all()


def test_several_calls_reuse_the_given_arrays() -> None:
    fd = scaled_sum()
    out = np.empty((3, 3), np.float32)
    for k in range(3):
        a = np.full((3, 3), float(k), np.float32)
        (result,) = fd.execute([a, a], outputs=[out])
        assert result is out
        np.testing.assert_array_equal(out, np.full((3, 3), 4.0 * k, np.float32))


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_empty_and_single_element_axes_take_any_strides(framework: str) -> None:
    """Frameworks give such axes different strides; no element's address depends on them."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1])
        fd.add_output(fd.ops.neg(x))
    (empty,) = _arrays(framework, (0, 4, 3))
    (x,) = _arrays(framework, (2, 1, 3))
    if framework == "torch":
        odd = torch.full((2, 3), SENTINEL).as_strided((2, 1, 3), (3, 99, 1))
    else:
        buffer = np.full((2, 3), SENTINEL, np.float32)
        odd = np.lib.stride_tricks.as_strided(buffer, (2, 1, 3), (12, 396, 4))
    for inp, given in [(empty, _empty_like(framework, empty)), (x, odd)]:
        (result,) = fd.execute([inp], outputs=[given])
        assert result is given
        np.testing.assert_array_equal(np.asarray(given), -np.asarray(inp), err_msg=f"{inp.shape}")


def _bad_outputs() -> list[tuple[str, Callable[[list[Any]], Any], str]]:
    """(case, outputs made from the inputs [a, b] of scaled_sum on (4, 8), the error)."""
    f32 = np.float32
    return [
        ("not a list", lambda _: np.zeros((4, 8), f32), "outputs must be a list"),
        ("too many", lambda _: [np.zeros((4, 8), f32)] * 2, r"returns 1 output\(s\), but 2"),
        ("none", lambda _: [], r"returns 1 output\(s\), but 0"),
        ("dtype", lambda _: [np.zeros((4, 8), np.float64)], "dtype Double; the output is Float"),
        ("shape", lambda _: [np.zeros((8, 4), f32)], r"shape \(8, 4\); the output has shape"),
        ("framework", lambda _: [torch.zeros(4, 8)], "must be a numpy array like the inputs"),
        ("not an array", lambda _: [[0.0] * 32], "must be a numpy array like the inputs"),
        ("transposed", lambda _: [np.zeros((8, 4), f32).T], r"strides \(1, 4\).*row major"),
        ("strided", lambda _: [np.zeros((4, 16), f32)[:, ::2]], r"strides \(16, 2\)"),
        ("misaligned", lambda _: [np.zeros(33, f32)[1:].reshape(4, 8)], "multiple of 16 bytes"),
        ("an input", lambda ins: [ins[1]], "shares memory with input"),
        ("inside an input", lambda ins: [ins[0][:, :]], "shares memory with input"),
    ]


@pytest.mark.parametrize(
    ("case", "make", "message"), _bad_outputs(), ids=[c[0] for c in _bad_outputs()]
)
def test_an_output_that_does_not_fit_is_an_input_error(
    case: str, make: Callable[[list[Any]], Any], message: str
) -> None:
    fd = scaled_sum()
    inputs = [np.ones((4, 8), np.float32), np.ones((4, 8), np.float32)]
    before = [a.copy() for a in inputs]
    outputs = make(inputs)
    kept = [_copy(o) for o in outputs] if isinstance(outputs, list) else []
    with pytest.raises(InputError, match=message):
        fd.execute(inputs, outputs=outputs)
    for a, b in zip(inputs, before, strict=True):
        np.testing.assert_array_equal(a, b, err_msg=f"{case}: a refused call wrote an input")
    for o, k in zip(outputs if isinstance(outputs, list) else [], kept, strict=True):
        np.testing.assert_array_equal(np.asarray(o), k, err_msg=f"{case}: a refused call wrote")


def _copy(array: Any) -> Any:
    return array.clone() if isinstance(array, torch.Tensor) else np.array(array, copy=True)


def test_two_outputs_in_one_array_are_refused_and_nothing_is_written() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1])
        fd.add_output(fd.ops.exp(x))
        fd.add_output(fd.ops.neg(x))
    shared = np.full(8, SENTINEL, np.float32)
    with pytest.raises(
        InputError, match=r"outputs\[1\] \(output .*\) shares memory with outputs\[0\]"
    ):
        fd.execute([np.ones(8, np.float32)], outputs=[shared, shared])
    assert (shared == SENTINEL).all()


def test_an_output_written_into_an_input_cannot_be_given() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1])
        y = fd.ops.add(x, fd.define_scalar(1.0))
        fd.add_output(y, alias_input=x)
        fd.add_output(y)  # returned, as the input itself
    given = np.full(4, SENTINEL, np.float32)
    x = np.zeros(4, np.float32)
    with pytest.raises(InputError, match="alias_input"):
        fd.execute([x], outputs=[given])
    assert (given == SENTINEL).all() and (x == 0).all()


def test_hidden_aliased_outputs_leave_the_others_to_the_given_arrays() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1])
        y = fd.ops.add(x, fd.define_scalar(1.0))
        fd.add_output(y, alias_input=x)  # written into x, not returned
        fd.add_output(fd.ops.mul(x, fd.define_scalar(3.0)))
    x = np.ones(4, np.float32)
    given = np.full(4, SENTINEL, np.float32)
    (result,) = fd.execute([x], outputs=[given])
    assert result is given
    np.testing.assert_array_equal(given, np.full(4, 3.0, np.float32))
    np.testing.assert_array_equal(x, np.full(4, 2.0, np.float32))


def test_the_error_names_the_output_and_both_dtypes() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Half)
        fd.add_output(fd.ops.cast(x, DataType.Float))
    given = np.zeros(3, np.float16)
    with pytest.raises(InputError, match=r"outputs\[0\] \(output T\d+\) has dtype Half"):
        fd.execute([np.ones(3, np.float16)], outputs=[given])


@pytest.mark.gpu
@requires_gpu
def test_a_cached_gpu_call_with_outputs_writes_the_given_array() -> None:
    """A layout the C++ fast path has cached: a call given outputs= takes it there (each
    output fits exactly) and writes, and returns, the given array."""
    cuda = cuda_torch()
    fd = scaled_sum()
    a, b = cuda.randn(64, 32, device="cuda"), cuda.randn(64, 32, device="cuda")
    for _ in range(3):
        fd.execute([a, b])
    assert fd._executor_cache.fast_calls is not None, "three calls built no fast-path entry"
    out = cuda.full((64, 32), SENTINEL, device="cuda")
    (result,) = fd.execute([a, b], outputs=[out])
    assert result is out
    cuda.testing.assert_close(out, (a + b) * 2)
    out.fill_(SENTINEL)
    hit = fd._executor_cache.fast_calls.call_into([a, b], [out])
    assert hit is not None, "the fast path did not take a given output that fits exactly"
    assert hit[1][0] is out
    cuda.testing.assert_close(out, (a + b) * 2, msg=lambda m: f"written by the fast path: {m}")
    # One that does not fit goes to the checked path, which says why.
    with pytest.raises(InputError, match=r"strides \(1, 64\)"):
        fd.execute([a, b], outputs=[cuda.empty(32, 64, device="cuda").t()])


@pytest.mark.gpu
@requires_gpu
def test_an_output_on_another_device_is_an_input_error() -> None:
    cuda = cuda_torch()
    fd = scaled_sum()
    a = cuda.ones(4, 8, device="cuda")
    host = cuda.full((4, 8), SENTINEL)
    with pytest.raises(InputError, match=r"outputs\[0\] \(output T\d+\) is in host memory"):
        fd.execute([a, a], outputs=[host])
    assert (host == SENTINEL).all()
