"""Factories (fd.ops.full, zeros, ones, iota: kfuse.ir.generated): nvFuser's semantics, the
emulated kernels against NumPy, printing that rebuilds the fusion, and the errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kfuse import DataType, FusionDefinition, SchedulerType
from kfuse.errors import DefinitionError, InputError
from kfuse.ir.printer import fusion_to_python
from kfuse.reference import evaluate


def _rebuilt(fd: FusionDefinition) -> FusionDefinition:
    """The fusion its printed definition builds (nvFuser's tests re-run printed ones)."""
    scope: dict[str, Any] = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(fusion_to_python(fd.fusion), scope)
    return scope["fd"]


def _check(fd: FusionDefinition, inputs: list[Any], expected: list[Any]) -> None:
    """The kernel's outputs, the reference's and the rebuilt fusion's are `expected`."""
    got = fd.execute(inputs)
    for g, want, ref in zip(got, expected, evaluate(fd, inputs)):
        assert g.dtype == want.dtype and g.shape == want.shape
        np.testing.assert_array_equal(g, want)
        np.testing.assert_array_equal(ref.astype(want.dtype), want)
    again = _rebuilt(fd)
    assert fusion_to_python(again.fusion) == fusion_to_python(fd.fusion)
    for g, want in zip(again.execute(inputs), expected):
        np.testing.assert_array_equal(g, want)


def test_iota_defaults_to_int_from_zero_by_one() -> None:
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.iota(10))
    _check(fd, [], [np.arange(10, dtype=np.int64)])


def test_a_floating_iota_defaults_to_zero_by_one_and_takes_int_literals() -> None:
    """A Python int is exact in a floating dtype: the defaults and literals like 2 work."""
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.iota(4, dtype=DataType.Float))
        fd.add_output(fd.ops.iota(3, 2, 3, dtype=DataType.Double))
    _check(fd, [], [np.arange(4, dtype=np.float32), np.array([2.0, 5.0, 8.0])])


@pytest.mark.parametrize(
    ("dtype", "start", "step", "np_dtype"),
    [
        (DataType.Int, 3, -2, np.int64),
        (DataType.Int32, -5, 7, np.int32),
        (DataType.Float, 0.5, 0.25, np.float32),
        (DataType.Double, -1.0, 0.1, np.float64),
        (DataType.Half, 1.0, 0.5, np.float16),
    ],
)
def test_iota_is_start_plus_index_times_step(
    dtype: DataType, start: Any, step: Any, np_dtype: Any
) -> None:
    # nvFuser's test_iota: length, start and step as scalar inputs of the call.
    with FusionDefinition() as fd:
        n = fd.define_scalar(None, dtype=DataType.Int)
        kind = DataType.Int if dtype in (DataType.Int, DataType.Int32) else DataType.Double
        a = fd.define_scalar(None, dtype=kind)
        b = fd.define_scalar(None, dtype=kind)
        fd.add_output(fd.ops.iota(n, a, b, dtype=dtype))
    for length in (13, 1000, 0):
        want = (start + np.arange(length, dtype=np.float64) * step).astype(np_dtype)
        _check(fd, [length, start, step], [want])


def test_full_zeros_ones_fill_their_shape_in_their_dtype() -> None:
    with FusionDefinition() as fd:
        n = fd.define_scalar(None, dtype=DataType.Int)
        fd.add_output(fd.ops.full([n, 3], 0.1, DataType.Float))
        fd.add_output(fd.ops.zeros([n, 3], DataType.BFloat16))
        fd.add_output(fd.ops.ones([n, 3], DataType.Int32))
        fd.add_output(fd.ops.full([n, 3], True, DataType.Bool))
    got = fd.execute([4])
    assert [g.shape for g in got] == [(4, 3)] * 4
    np.testing.assert_array_equal(got[0], np.full((4, 3), 0.1, dtype=np.float32))
    assert got[1].astype(np.float32).tolist() == [[0.0] * 3] * 4
    np.testing.assert_array_equal(got[2], np.ones((4, 3), dtype=np.int32))
    assert got[3].dtype == np.bool_ and got[3].all()
    _check(fd, [2], [np.asarray(g)[:2] for g in got])


def test_a_constant_extent_of_one_is_a_broadcast_axis() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        bias = fd.ops.full([1, fd.ops.size(x, 1)], 2.0, DataType.Float)
        fd.add_output(fd.ops.add(x, bias))
    assert fd.fusion.exprs[-2].outputs[0].axes[0].is_broadcast
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    _check(fd, [x], [x + 2])


def test_a_causal_mask_of_two_iotas_is_one_kernel_with_no_input_read() -> None:
    # nvFuser's causal mask: row index >= column index, then a masked fill.
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        rows = fd.ops.iota(fd.ops.size(x, 0), dtype=DataType.Int)
        cols = fd.ops.iota(fd.ops.size(x, 1), dtype=DataType.Int)
        keep = fd.ops.ge(
            fd.ops.broadcast(rows, [False, True]), fd.ops.broadcast(cols, [True, False])
        )
        fd.add_output(fd.ops.where(keep, x, float("-inf")))
    x = np.random.default_rng(0).standard_normal((37, 45)).astype(np.float32)
    _check(fd, [x], [np.where(np.tril(np.ones((37, 45), dtype=bool)), x, -np.inf)])
    assert len(fd.segments([x])) == 1
    program = fd.last_program()
    assert program is not None and "kf::cast<long long>" in program.cuda_source()


def test_a_fusion_of_factories_alone_runs_with_no_input() -> None:
    with FusionDefinition() as fd:
        mask = fd.ops.lt(
            fd.ops.broadcast(fd.ops.iota(4), [True, False]),
            fd.ops.broadcast(fd.ops.iota(3, 1, 1), [False, True]),
        )
        fd.add_output(mask)
        fd.add_output(fd.ops.full([3, 4], -2, DataType.Int))
    want = np.arange(4)[None, :] < np.arange(1, 4)[:, None]
    _check(fd, [], [want, np.full((3, 4), -2, dtype=np.int64)])


def test_a_generated_value_feeding_a_reduction_is_computed_in_its_kernel() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        w = fd.ops.iota(fd.ops.size(x, 1), 0.0, 1.0, dtype=DataType.Float)
        fd.add_output(fd.ops.sum(fd.ops.mul(x, fd.ops.broadcast(w, [True, False])), dims=[1]))
    x = np.ones((5, 8), dtype=np.float32)
    np.testing.assert_array_equal(fd.execute([x])[0], np.full(5, 28.0, dtype=np.float32))
    assert fd.last_program().schedulers() == [SchedulerType.reduction]


def test_a_scalar_extent_is_read_per_call() -> None:
    with FusionDefinition() as fd:
        n = fd.define_scalar(None, dtype=DataType.Int)
        fd.add_output(fd.ops.iota(n, dtype=DataType.Int))
    for length in (5, 3, 5, 0):
        np.testing.assert_array_equal(fd.execute([length])[0], np.arange(length))
    with pytest.raises(InputError, match="not a size"):
        fd.execute([-1])


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda fd: fd.ops.iota(-3), "sizes are >= 0"),
        (lambda fd: fd.ops.iota(2.5), "expected an int"),
        (lambda fd: fd.ops.iota(4, dtype=DataType.Bool), "not an integer or floating"),
        (lambda fd: fd.ops.iota(4, 0.5, dtype=DataType.Int), "does not match dtype"),
        (
            lambda fd: fd.ops.full(
                fd.define_tensor([2], dtype=DataType.Float), 1.0, DataType.Float
            ),
            "shape must be a list",
        ),
        (
            lambda fd: fd.ops.full([fd.define_tensor([2], dtype=DataType.Float)], 1, DataType.Int),
            "expected an int",
        ),
        (lambda fd: fd.ops.full([2, -1], 1.0, DataType.Float), "sizes are >= 0"),
        (lambda fd: fd.ops.full([fd.define_scalar(2.0)], 1.0, DataType.Float), "not an integer"),
        (
            lambda fd: fd.ops.full(
                [2], fd.define_tensor([2], dtype=DataType.Float), DataType.Float
            ),
            "expected a scalar",
        ),
        (lambda fd: fd.ops.zeros([2], "quaternion"), "not a kfuse DataType"),
        (lambda fd: fd.ops.full([2], 1.5, DataType.Int), "not an integer"),
    ],
)
def test_bad_arguments_are_definition_errors(build: Any, message: str) -> None:
    with pytest.raises(DefinitionError, match=message), FusionDefinition() as fd:
        build(fd)


@pytest.mark.gpu
def test_factories_on_the_gpu_match_numpy() -> None:
    torch = pytest.importorskip("torch")
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        rows = fd.ops.iota(fd.ops.size(x, 0), dtype=DataType.Int)
        cols = fd.ops.iota(fd.ops.size(x, 1), dtype=DataType.Int)
        keep = fd.ops.ge(
            fd.ops.broadcast(rows, [False, True]), fd.ops.broadcast(cols, [True, False])
        )
        fd.add_output(fd.ops.where(keep, x, float("-inf")))
        fd.add_output(fd.ops.full(fd.ops.shape(x), 0.25, DataType.Half))
        fd.add_output(fd.ops.iota(fd.ops.size(x, 1), 1.0, 0.5, dtype=DataType.Float))
    host = np.random.default_rng(1).standard_normal((129, 1000)).astype(np.float32)
    masked, quarter, ramp = fd.execute([torch.from_numpy(host).cuda()])
    np.testing.assert_array_equal(
        masked.cpu().numpy(), np.where(np.tril(np.ones(host.shape, dtype=bool)), host, -np.inf)
    )
    assert quarter.dtype == torch.float16 and bool((quarter == 0.25).all())
    np.testing.assert_array_equal(
        ramp.cpu().numpy(), (1.0 + np.arange(1000) * 0.5).astype(np.float32)
    )
