"""Every structural Expr class (views, resizes, indexing ops) has a row in the structural op
table (kfuse.ir.structural) and the per-concern handlers that docs/guides/add-an-op.md
lists, and each row's shape inference, printing and reference evaluation work on an example
of its op. A class without a row or a handler fails here, named."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kfuse.codegen.domain import VIEW_OPERANDS
from kfuse.dtypes import DataType
from kfuse.frontend import FusionDefinition
from kfuse.ir.exprs import (
    EXPR_CLASSES,
    GENERATED_EXPRS,
    LIBRARY_EXPRS,
    POINTWISE_EXPRS,
    Expr,
    ReductionOp,
    ScanOp,
    SizeOp,
    WelfordOp,
)
from kfuse.ir.structural import KINDS, STRUCTURAL, structural_info
from kfuse.reference import evaluate
from kfuse.testing.inputs import AXIS_RULES

# The Expr classes that compute values or sizes; every other one is structural.
COMPUTING = {
    *POINTWISE_EXPRS,
    *GENERATED_EXPRS,
    *LIBRARY_EXPRS,
    ReductionOp,
    WelfordOp,
    ScanOp,
    SizeOp,
}
STRUCTURAL_CLASSES = [c for c in EXPR_CLASSES if c not in COMPUTING]

F = DataType.Float
X = np.arange(12, dtype=np.float32).reshape(3, 4)
ROW = np.arange(7, dtype=np.float32) - 2.5
ONE_ROW = np.array([[1.5, -2.0, 3.25]], dtype=np.float32)
INDEX = np.array([2, 0, 2, 1], dtype=np.int64)
GATHER_INDEX = np.array([[3, 0], [1, 1], [0, 2]], dtype=np.int64)


def _example(name: str) -> tuple[Callable[[FusionDefinition], Any], list[Any], Any]:
    """(a definition's body returning the op's output, the inputs, the expected output)."""

    def tensor(fd: FusionDefinition, shape: list[int], dtype: DataType = F) -> Any:
        return fd.define_tensor(shape=shape, dtype=dtype)

    examples: dict[str, tuple[Callable[[FusionDefinition], Any], list[Any], Any]] = {
        "BroadcastOp": (
            lambda fd: fd.ops.broadcast(tensor(fd, [-1]), is_broadcast_dim=[True, False]),
            [ROW],
            ROW[None, :],
        ),
        "ExpandOp": (
            lambda fd: fd.ops.expand(tensor(fd, [1, -1]), shape=[2, -1]),
            [ONE_ROW],
            np.broadcast_to(ONE_ROW, (2, 3)),
        ),
        "SqueezeOp": (
            lambda fd: fd.ops.squeeze(tensor(fd, [1, -1]), dims=[0]),
            [ONE_ROW],
            ONE_ROW[0],
        ),
        "PermuteOp": (lambda fd: fd.ops.permute(tensor(fd, [-1, -1]), dims=[1, 0]), [X], X.T),
        "ReshapeOp": (
            lambda fd: fd.ops.reshape(tensor(fd, [-1, -1]), new_shape=[2, -1]),
            [X],
            X.reshape(2, 6),
        ),
        "SliceOp": (
            lambda fd: fd.ops.slice(
                tensor(fd, [-1]), start_indices=[1], end_indices=[6], strides=[2]
            ),
            [ROW],
            ROW[1:6:2],
        ),
        "PadOp": (
            lambda fd: fd.ops.pad(tensor(fd, [-1]), pad_widths=[1, 2], value=0.5),
            [ROW],
            np.pad(ROW, (1, 2), constant_values=0.5),
        ),
        "CatOp": (
            lambda fd: fd.ops.cat([tensor(fd, [-1, -1]), tensor(fd, [-1, -1])], dim=0),
            [X, X[:1] * 2],
            np.concatenate([X, X[:1] * 2]),
        ),
        "IndexSelectOp": (
            lambda fd: fd.ops.index_select(
                tensor(fd, [-1, -1]), tensor(fd, [-1], DataType.Int), dim=1
            ),
            [X, INDEX],
            X[:, INDEX],
        ),
        "GatherOp": (
            lambda fd: fd.ops.take_along_axis(
                tensor(fd, [-1, -1]), tensor(fd, [-1, -1], DataType.Int), dim=1
            ),
            [X, GATHER_INDEX],
            np.take_along_axis(X, GATHER_INDEX, axis=1),
        ),
    }
    if name not in examples:
        pytest.fail(f"{name}: no example in tests/test_structural_ops.py")
    return examples[name]


def _defined(body: Callable[[FusionDefinition], Any]) -> FusionDefinition:
    with FusionDefinition() as fd:
        fd.add_output(body(fd))
    return fd


def _rebuilt(fd: FusionDefinition) -> FusionDefinition:
    namespace = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(repr(fd), namespace)
    return namespace["fd"]


def _the_op(fd: FusionDefinition, cls: type[Expr]) -> Expr:
    return next(e for e in fd.fusion.exprs if type(e) is cls)


def test_the_structural_classes_are_the_tables() -> None:
    # The table's classes are the Expr classes that neither compute values nor sizes; a
    # new class without a row is named here.
    missing = [c.__name__ for c in STRUCTURAL_CLASSES if c not in STRUCTURAL]
    assert not missing, f"no row in kfuse.ir.structural for {missing}"
    assert set(STRUCTURAL) == set(STRUCTURAL_CLASSES)
    assert {row.kind for row in STRUCTURAL.values()} == set(KINDS)


@pytest.mark.parametrize("cls", STRUCTURAL_CLASSES, ids=lambda c: c.__name__)
def test_every_concern_has_a_handler(cls: type[Expr]) -> None:
    row = STRUCTURAL.get(cls)
    assert row is not None, f"{cls.__name__}: no row in kfuse.ir.structural"
    assert cls in AXIS_RULES, f"{cls.__name__}: no rule in kfuse.testing.inputs.AXIS_RULES"
    # The code generator maps the views that keep axes through VIEW_OPERANDS.
    wants_view = row.is_view and row.keeps_axes
    assert (cls in VIEW_OPERANDS) == wants_view, (
        f"{cls.__name__}: kfuse.codegen.domain.VIEW_OPERANDS should "
        + ("list it" if wants_view else "not list it")
    )


@pytest.mark.parametrize("cls", STRUCTURAL_CLASSES, ids=lambda c: c.__name__)
def test_a_row_infers_prints_and_evaluates_its_op(cls: type[Expr]) -> None:
    body, inputs, expected = _example(cls.__name__)
    fd = _defined(body)
    expr = _the_op(fd, cls)
    row = structural_info(expr)
    assert row is not None and row.cls is cls
    # Shape inference
    shapes = fd.fusion.infer_shapes(inputs)
    assert shapes[expr.outputs[0]] == expected.shape
    # Printing: the printed definition rebuilds an equal fusion, printed the same.
    text = repr(fd)
    assert f"fd.ops.{row.printed_method(expr)}(" in text
    again = _rebuilt(fd)
    assert again.fusion == fd.fusion
    assert repr(again) == text
    # Reference evaluation, in float64 and in the declared dtype.
    (golden,) = evaluate(fd, inputs)
    np.testing.assert_array_equal(golden, expected.astype(np.float64))
    (same,) = evaluate(fd, inputs, accumulate="same")
    assert same.dtype == expected.dtype
    np.testing.assert_array_equal(same, expected)


def test_gather_prints_the_method_that_made_it() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=F)
        i = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int)
        fd.add_output(fd.ops.gather(x, i, dim=0))
        fd.add_output(fd.ops.take_along_axis(x, i, dim=1))
    text = repr(fd)
    assert "fd.ops.gather(" in text and "fd.ops.take_along_axis(" in text
    assert _rebuilt(fd).fusion == fd.fusion


def test_the_flags_say_what_the_ops_do() -> None:
    by_name = {c.__name__: row for c, row in STRUCTURAL.items()}
    assert [n for n, r in by_name.items() if r.is_view] == [
        "BroadcastOp",
        "ExpandOp",
        "SqueezeOp",
        "PermuteOp",
        "ReshapeOp",
    ]
    assert [n for n, r in by_name.items() if r.reads_positions] == ["IndexSelectOp", "GatherOp"]
    assert [n for n, r in by_name.items() if r.changes_extents] == ["SliceOp", "PadOp", "CatOp"]
    assert [n for n, r in by_name.items() if not r.keeps_axes] == ["ReshapeOp"]
    assert [n for n, r in by_name.items() if r.joins] == ["CatOp"]
    assert [n for n, r in by_name.items() if r.fill_input is not None] == ["PadOp"]
