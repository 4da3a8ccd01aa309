"""nvFuser's composite ops that kfuse builds, as nvFuser does, of other ops in the IR:
addcmul of pointwise ops, triu of iotas, a comparison and a where. Each is then an ordinary
part of a pointwise kernel (triu's iotas are generated reads, kfuse.ir.generated), so a triu
of an input is one kernel that reads the input once.
"""

from __future__ import annotations

from typing import Any

from kfuse.dtypes import DataType, promote_types
from kfuse.errors import DefinitionError
from kfuse.ir.builder import describe
from kfuse.ir.generated import build_iota
from kfuse.ir.values import Scalar, TensorView, Val


def build_addcmul(b: Any, x: Any, tensor1: Any, tensor2: Any, value: Any) -> Val:
    """fd.ops.addcmul: x + tensor1 * (tensor2 * value), nvFuser's order of the products, in
    the dtype x, tensor1 and tensor2 promote to (value, a scalar, is converted to it)."""
    vals = [b.operand(v, "addcmul", i) for i, v in enumerate((x, tensor1, tensor2))]
    if isinstance(value, TensorView):
        raise DefinitionError(f"addcmul: value is {describe(value)}; it must be a scalar")
    scale = b.operand(value, "addcmul", 3)
    dtype = promote_types(
        [v.dtype for v in vals if isinstance(v, TensorView)],
        [v.dtype for v in vals if not isinstance(v, TensorView)],
    )
    x, tensor1, tensor2, scale = (b.cast(v, dtype, op="addcmul") for v in (*vals, scale))
    product = b.pointwise("mul", [tensor1, b.pointwise("mul", [tensor2, scale])])
    return b.pointwise("add", [x, product])


def build_triu(b: Any, x: Any, diagonal: Any) -> TensorView:
    """fd.ops.triu: x where column - row >= diagonal over its last two axes, else 0 (of x's
    dtype). As nvFuser: the mask compares an iota of the rows with one of the columns
    started at -diagonal, each broadcast along the other axis."""
    v = b.tensor(x, "triu")
    if v.ndim < 2:
        raise DefinitionError(
            f"triu: the input {describe(v)} has {v.ndim} axes; triu needs 2 or more"
        )
    start = _negated_offset(b, diagonal)
    rows = build_iota(b, b.size(v, v.ndim - 2, op="triu"), 0, 1, DataType.Int)
    cols = build_iota(b, b.size(v, v.ndim - 1, op="triu"), start, 1, DataType.Int)
    mask = b.pointwise(
        "le",
        [b.broadcast(rows, [False, True], op="triu"), b.broadcast(cols, [True, False], op="triu")],
    )
    zero = b.cast(False if v.dtype is DataType.Bool else 0, v.dtype, op="triu")
    out = b.pointwise("where", [mask, v, zero])
    assert isinstance(out, TensorView)
    return out


def _negated_offset(b: Any, diagonal: Any) -> Any:
    """-diagonal: an int, or an Int scalar of the definition."""
    if isinstance(diagonal, int) and not isinstance(diagonal, bool):
        return -diagonal
    if (
        isinstance(diagonal, Scalar)
        and diagonal.dtype.is_integral
        and not diagonal.dtype.is_boolean
    ):
        offset = b.operand(diagonal, "triu", 1)
        return b.pointwise("neg", [b.cast(offset, DataType.Int, op="triu")])
    raise DefinitionError(
        f"triu: diagonal is {describe(diagonal)}; it must be an int or an integer scalar"
    )
