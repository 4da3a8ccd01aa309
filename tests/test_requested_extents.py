"""Sizes a definition asks of axes that are not broadcast (expand, broadcast_in_dim) are
checked at execute: a mismatch is an InputError naming the axis and both sizes. They used to
be ignored, and the result silently took the input's size (the reference agreed)."""

from __future__ import annotations

import numpy as np
import pytest

from kfuse.errors import DefinitionError, InputError
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate


def ones(*shape: int) -> np.ndarray:
    return np.ones(shape, np.float32)


def test_expand_checks_a_constant_size_of_a_symbolic_axis() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[1, -1])
        fd.add_output(fd.ops.expand(x, shape=[5, 7]))
    with pytest.raises(InputError, match=r"axis 1 has size 4, but axis 1 was asked to be 7"):
        fd.execute([ones(1, 4)])
    with pytest.raises(InputError, match="asked to be 7"):
        evaluate(fd.fusion, [ones(1, 4)])  # the reference checks the same
    (out,) = fd.execute([ones(1, 7)])
    assert out.shape == (5, 7)


def test_broadcast_in_dim_checks_the_axes_it_keeps() -> None:
    """The issue's case: w of length 10 placed along the 4 columns of x."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        w = fd.define_tensor(shape=[-1])
        fd.add_output(fd.ops.broadcast_in_dim(w, shape=fd.ops.shape(x), broadcast_dims=[1]))
    with pytest.raises(
        InputError,
        match=r"input 1 \(T1\) axis 0 has size 10, but axis 1 was "
        r"asked to be S\d+ \(size 1 of T0\) = 4",
    ):
        fd.execute([ones(3, 4), ones(10)])
    (out,) = fd.execute([ones(3, 4), np.arange(4, dtype=np.float32)])
    assert out.shape == (3, 4) and (out == np.arange(4)).all()


def test_a_checked_size_keeps_the_definition_printable() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[1, -1])
        fd.add_output(fd.ops.expand(x, shape=[5, 7]))
    from kfuse import DataType

    scope: dict = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(repr(fd), scope)  # noqa: S102 - the printed definition is Python that rebuilds it
    again = scope["fd"]
    with pytest.raises(InputError, match="asked to be 7"):
        again.execute([ones(1, 4)])


def test_fixed_sizes_are_checked_where_they_are_defined() -> None:
    with pytest.raises(DefinitionError, match="has size 3, cannot expand it to 4"):
        with FusionDefinition() as fd:
            x = fd.define_tensor(shape=[1, 3])
            fd.ops.expand(x, shape=[2, 4])


@pytest.mark.parametrize("size", [2**63, 2**64])
def test_sizes_beyond_int64_are_definition_errors(size: int) -> None:
    with pytest.raises(DefinitionError, match="at most 2\\*\\*63 - 1"):
        with FusionDefinition() as fd:
            fd.ops.expand(fd.define_tensor(shape=[1]), shape=[size])
