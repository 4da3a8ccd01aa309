"""fd.ops.embedding_fwd: torch.nn.functional.embedding's forward, as nvFuser's direct
bindings spell it (input, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq,
sparse), built from ops kfuse generates: the ids flattened to one axis, the weight's rows
read at them (index_select, an indexed row load inside the kernel), the result reshaped to
the ids' shape + [embedding_dim]. No host synchronisation: an id outside the table is the
kernel's flagged read, the InputError index_select gives.

The arguments, as torch's forward treats them (nvFuser evaluates the op with torch):
padding_idx, scale_grad_by_freq and sparse change only the backward; max_norm scales each
row whose norm_type-norm (2 by default) exceeds it by max_norm / (norm + 1e-7), in float
(torch renormalizes the weight's rows in place first; kfuse leaves the weight as it is and
scales the rows it returns, the same values).
"""

from __future__ import annotations

from typing import Any

from kfuse.dtypes import DataType
from kfuse.errors import DefinitionError
from kfuse.ir.builder import describe
from kfuse.ir.index_ops import build_index_select
from kfuse.ir.values import Scalar, TensorView, Val

OP = "embedding_fwd"
RENORM_EPSILON = 1e-7  # torch's embedding_renorm_: max_norm / (norm + 1e-7)
_POSITIONS = {"padding_idx": 2, "max_norm": 3, "norm_type": 4, "scale_grad_by_freq": 5, "sparse": 6}


def build_embedding_fwd(
    b: Any,
    input: Any,
    weight: Any,
    padding_idx: Any,
    max_norm: Any,
    norm_type: Any,
    scale_grad_by_freq: Any,
    sparse: Any,
) -> TensorView:
    """fd.ops.embedding_fwd (see the module docstring)."""
    ids = b.tensor(input, OP, 0)
    table = b.tensor(weight, OP, 1)
    if not ids.dtype.is_integral:
        raise DefinitionError(f"{OP}: input {describe(ids)} is not an integer tensor of ids")
    if ids.ndim < 1:
        raise DefinitionError(f"{OP}: input {describe(ids)} must have at least one axis")
    if table.ndim != 2:
        raise DefinitionError(
            f"{OP}: weight {describe(table)} must have 2 axes (num_embeddings, embedding_dim)"
        )
    _optional_scalar(b, padding_idx, "padding_idx", integral=True)
    _optional_scalar(b, scale_grad_by_freq, "scale_grad_by_freq", boolean=True)
    _optional_scalar(b, sparse, "sparse", boolean=True)
    limit = _optional_scalar(b, max_norm, "max_norm")
    p = _optional_scalar(b, norm_type, "norm_type")
    flat = ids if ids.ndim == 1 else b.reshape(ids, [-1], op=OP)
    rows: Val = build_index_select(b, table, flat, 0, op=OP)
    if limit is not None:
        rows = _renormed(b, rows, limit, b.operand(2.0, OP, 4) if p is None else p)
    if ids.ndim == 1:
        return rows  # type: ignore[return-value]
    shape = [b.size(ids, i, op=OP) for i in range(ids.ndim)] + [b.size(table, 1, op=OP)]
    return b.reshape(rows, shape, op=OP)  # type: ignore[no-any-return]


def _optional_scalar(
    b: Any, x: Any, name: str, *, integral: bool = False, boolean: bool = False
) -> Val | None:
    """None, or the argument as a scalar of the definition (Python numbers made constants):
    a bool for the flags, an integer for padding_idx, a number for the norms."""
    if x is None:
        return None
    if isinstance(x, TensorView):
        raise DefinitionError(f"{OP}: {name} must be a scalar, got the tensor {describe(x)}")
    v = b.operand(x, OP, _POSITIONS[name])
    assert isinstance(v, Scalar)
    if boolean and v.dtype is not DataType.Bool:
        raise DefinitionError(f"{OP}: {name} must be a bool, got {describe(x)}")
    if integral and not (v.dtype.is_integral and v.dtype is not DataType.Bool):
        raise DefinitionError(f"{OP}: {name} must be an integer, got {describe(x)}")
    if not (integral or boolean) and v.dtype is DataType.Bool:
        raise DefinitionError(f"{OP}: {name} must be a number, got {describe(x)}")
    return v


def _renormed(b: Any, rows: Val, limit: Val, p: Val) -> Val:
    """`rows` [n, d] with each row whose p-norm exceeds `limit` scaled to it, computed in
    float (torch's accumulate type for the reduced floats) and returned in rows' dtype."""
    dtype = rows.dtype
    x = b.cast(rows, DataType.Float, op=OP) if dtype.is_reduced_float else rows
    if isinstance(p, Scalar) and p.is_constant and p.value == 2.0:
        norm = b.pointwise("sqrt", [b.reduction("sum", b.pointwise("mul", [x, x]), [1], True)])
    elif isinstance(p, Scalar) and p.is_constant and p.value == 1.0:
        norm = b.reduction("sum", b.pointwise("abs", [x]), [1], True)
    else:
        powered = b.pointwise("pow", [b.pointwise("abs", [x]), p])
        inverse = b.true_divide(1.0, p)
        norm = b.pointwise("pow", [b.reduction("sum", powered, [1], True), inverse])
    scale = b.true_divide(limit, b.pointwise("add", [norm, RENORM_EPSILON]))
    scaled = b.pointwise("mul", [x, scale])
    out = b.pointwise("where", [b.pointwise("gt", [norm, limit]), scaled, x])
    return b.cast(out, dtype, op=OP) if out.dtype is not dtype else out
