"""Outputs that are views of other outputs (kfuse.engine.output_views): a reshape of another
output to a shape of numbers is returned as a view of that
output's array, as nvFuser returns it (its AliasTest.OutputAliasesAnotherOutput test),
and the value is stored once."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kfuse import DataType, FusionDefinition, InputError
from kfuse.engine.program import KernelProgram
from kfuse.reference import evaluate
from kfuse.testing import assert_outputs_close


def cat_and_its_reshape() -> FusionDefinition:
    """Thunder's attention backward's last step: the q, k, v gradients' cat, returned with
    its 2-D reshape."""
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[2, 4, 6], dtype=DataType.Float)
        b = fd.define_tensor(shape=[2, 4, 6], dtype=DataType.Float)
        c = fd.ops.cat([fd.ops.add(a, b), fd.ops.mul(a, b), fd.ops.neg(a)], dim=2)
        fd.add_output(c)
        fd.add_output(fd.ops.reshape(c, new_shape=[8, 18]))
    return fd


def inputs(seed: int = 0) -> list[Any]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((2, 4, 6), dtype=np.float32) for _ in range(2)]


def check(fd: FusionDefinition, args: list[Any]) -> list[Any]:
    out = fd.execute(args)
    assert_outputs_close(fd, out, evaluate(fd.fusion, args), args)
    return out


def test_a_reshape_of_an_output_is_a_view_of_it_and_the_cat_one_kernel() -> None:
    fd = cat_and_its_reshape()
    for seed in range(3):  # compiled, cached, then replayed: each assembles the views
        cat, flat = check(fd, inputs(seed))
        assert flat.shape == (8, 18) and np.shares_memory(cat, flat)
    program = fd.last_program()
    # With the reshape a view, no expression reads the cat: its parts are written in place.
    assert isinstance(program, KernelProgram) and len(program.launches) == 1
    assert [s.scheduler.name for s in fd.segments(inputs())] == ["pointwise"]


def test_an_output_added_twice_stays_two_arrays() -> None:
    """A value added twice is two arrays (kfuse's own rule, tests/test_written_outputs.py),
    its reshape beside it too."""
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[3, 4], dtype=DataType.Float)
        s = fd.ops.sin(a)
        flat = fd.ops.reshape(s, [12])
        fd.add_output(s)
        fd.add_output(flat)
        fd.add_output(flat)
    x = np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)
    for _ in range(3):
        s, flat, again = check(fd, [x])
        assert not np.shares_memory(flat, again)
    assert fd._executor().views is None


def stored_twice(make_source: Any, make_second: Any) -> None:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        c = make_source(fd, fd.ops.exp(a))
        fd.add_output(c)
        fd.add_output(make_second(fd, c))
    x = np.linspace(0, 1, 24, dtype=np.float32).reshape(4, 6)
    first, second = check(fd, [x])
    assert fd._executor().views is None
    assert not np.shares_memory(first, second)


def test_a_reshape_to_run_time_sizes_is_stored() -> None:
    """No shape to make a view of without the call's sizes."""
    stored_twice(lambda fd, c: c, lambda fd, c: fd.ops.reshape(c, [fd.ops.size(c, 0), -1]))


def test_a_reshape_of_a_stride_ordered_output_is_stored() -> None:
    """Stored in another memory order, the output's reshape is no view of its array."""
    stored_twice(
        lambda fd, c: fd.ops.stride_order(c, [0, 1]), lambda fd, c: fd.ops.reshape(c, [24])
    )


def test_given_outputs_are_each_written() -> None:
    """outputs= promises the kernels write every given array: the whole fusion runs."""
    fd = cat_and_its_reshape()
    args = inputs()
    expected = evaluate(fd.fusion, args)
    for _ in range(3):
        cat, flat = np.empty((2, 4, 18), np.float32), np.empty((8, 18), np.float32)
        got = fd.execute(args, outputs=[cat, flat])
        assert got[0] is cat and got[1] is flat and not np.shares_memory(cat, flat)
        assert_outputs_close(fd, got, expected, args)
    with pytest.raises(InputError, match="returns 2 output"):
        fd.execute(args, outputs=[np.empty((2, 4, 18), np.float32)])


def test_a_view_output_of_a_segmented_fusion() -> None:
    """A library segment (a matmul) before the output and its reshape: replayed calls
    assemble the view too."""
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[4, 6], dtype=DataType.Float)
        b = fd.define_tensor(shape=[6, 3], dtype=DataType.Float)
        m = fd.ops.relu(fd.ops.matmul(fd.ops.exp(a), b))
        fd.add_output(m)
        fd.add_output(fd.ops.reshape(m, new_shape=[12]))
    rng = np.random.default_rng(1)
    args = [rng.standard_normal((4, 6), dtype=np.float32), rng.standard_normal((6, 3), np.float32)]
    for _ in range(4):
        m, flat = check(fd, args)
        assert np.shares_memory(m, flat) and flat.shape == (12,)


def test_torch_outputs_are_views_too() -> None:
    torch = pytest.importorskip("torch")
    fd = cat_and_its_reshape()
    args = [torch.from_numpy(x) for x in inputs()]
    for _ in range(3):
        cat, flat = fd.execute(args)
        assert flat.data_ptr() == cat.data_ptr() and flat.shape == (8, 18)
        torch.testing.assert_close(flat, cat.reshape(8, 18))


@pytest.mark.gpu
def test_view_outputs_on_the_gpu_fast_path() -> None:
    """Third and later calls take the C++ fast path, which returns the core's outputs: the
    views are made of them there too."""
    torch = pytest.importorskip("torch")
    fd = cat_and_its_reshape()
    for seed in range(4):
        args = [torch.from_numpy(x).cuda() for x in inputs(seed)]
        cat, flat = fd.execute(args)
        assert flat.data_ptr() == cat.data_ptr() and flat.shape == (8, 18)
        expected = evaluate(fd.fusion, args)
        assert_outputs_close(fd, [cat, flat], expected, args)
    assert fd._executor().fast_calls is not None and len(fd._executor().fast_calls) == 1
