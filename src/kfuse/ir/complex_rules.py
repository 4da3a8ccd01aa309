"""The builder's rules for complex values: which ops take them, the dtype an op on them gives,
the casts to and from them (kfuse.ir.ops_complex holds the rows)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from kfuse.dtypes import COMPLEX_OF, REAL_OF, DataType
from kfuse.errors import ComplexCastWarning, DefinitionError
from kfuse.ir.exprs import CastOp, Expr
from kfuse.ir.op_info import OpInfo
from kfuse.ir.ops import OPS
from kfuse.ir.scalar_eval import eval_scalar, to_python
from kfuse.ir.values import Scalar, TensorView, Val

if TYPE_CHECKING:
    from kfuse.ir.builder import Builder

COMPLEX_REDUCTIONS = ("sum", "prod")
"""The reductions of complex values, as nvFuser's: a sum (and mean, a sum divided) and a
product have their complex meaning (the runtime's SumOp and ProdOp combine kf::complex values
with its + and *); max, min, var and welford have none (an order; a variance's real result)."""


def check_complex_operands(op: str, promoted: DataType, operands: Sequence[str]) -> None:
    """DefinitionError where pointwise `op`'s operands (described) promote to `promoted` and
    the op refuses that: complex operands of an op with no complex meaning, real operands of
    an op only for complex ones (imag)."""
    row = OPS[op]
    if promoted.is_complex and row.on_complex is None:
        raise DefinitionError(
            f"{op}: complex operands ({', '.join(operands)}) are not supported: {op} has no "
            f"meaning on {promoted.value} in kfuse (take fd.ops.real / fd.ops.imag / "
            "fd.ops.abs first)"
        )
    if row.complex_only and not promoted.is_complex:
        raise DefinitionError(
            f"{op}: the operand ({', '.join(operands)}) is not complex; {op} takes "
            "ComplexFloat or ComplexDouble only (as nvFuser's)"
        )


def result_dtype(row: OpInfo, compute: DataType) -> DataType:
    """The dtype of pointwise `row`'s result when its operands have the compute dtype."""
    if row.result == "bool":
        return DataType.Bool
    if row.result == "complex":
        return COMPLEX_OF[compute]
    if compute.is_complex and row.on_complex == "real":
        return REAL_OF[compute]
    return compute


def check_complex_reduction(op: str, dtype: DataType) -> None:
    """DefinitionError for a reduction `op` of complex values other than COMPLEX_REDUCTIONS."""
    if dtype.is_complex and op not in COMPLEX_REDUCTIONS:
        raise DefinitionError(
            f"{op}: reductions of {dtype.value} values are not supported (kfuse reduces "
            f"complex values with {', '.join(COMPLEX_REDUCTIONS)} only; reduce fd.ops.real "
            "and fd.ops.imag apart)"
        )


def complex_cast(builder: Builder, v: Val, dtype: DataType, op: str) -> Val:
    """`builder`'s cast of `v` to `dtype` where one of the two is complex: a constant re-made,
    else a CastOp. A complex value to a real dtype keeps its real part (ComplexCastWarning,
    as torch and nvFuser warn; Bool, whether either part is nonzero, drops nothing). Between
    a float8 type and a complex one the cast goes through Float, as torch's does."""
    if v.dtype.is_complex and not (dtype.is_complex or dtype is DataType.Bool):
        warnings.warn(
            f"{op}: casting {v.dtype.value} to {dtype.label} discards the imaginary part",
            ComplexCastWarning,
            stacklevel=4,
        )
    if v.dtype.is_float8 or dtype.is_float8:
        with warnings.catch_warnings():  # warned above, where it is so
            warnings.simplefilter("ignore", ComplexCastWarning)
            return builder.cast(builder.cast(v, DataType.Float, op=op), dtype, op=op)
    if isinstance(v, Scalar) and v.is_constant:
        return builder.constant(to_python(v.value, dtype), dtype, op=op)
    out: Val = (
        builder.new_tensor(dtype, v.axes)
        if isinstance(v, TensorView)
        else builder.new_scalar(dtype)
    )
    builder.add(CastOp(inputs=(v,), outputs=(out,), dtype=dtype))
    return out


def check_kernel_operands(expr: Expr) -> None:
    """DefinitionError where tensor op `expr` would read a run-time complex scalar as it is:
    a kernel takes no complex parameter (the launches pack real numbers), so such a scalar
    reaches tensors as its parts (as_complex_tensor); an op that has not made it so (a pad's
    value, an index_fill's) refuses it."""
    if not any(isinstance(o, TensorView) for o in expr.outputs):
        return  # a scalar expression: evaluated on the host
    op = getattr(expr, "op", type(expr).__name__)
    for v in expr.inputs:
        if isinstance(v, Scalar) and not v.is_constant and v.dtype.is_complex:
            raise DefinitionError(
                f"{op}: {v.name} is a run-time {v.dtype.value} scalar, which {op} does not "
                "take in kfuse (kernels take no complex parameter; pointwise ops and "
                "fd.ops.full take run-time complex scalars)"
            )


def as_complex_tensor(
    builder: Builder,
    v: Scalar,
    dtype: DataType,
    make_part: Callable[[Scalar, DataType], TensorView],
    op: str,
) -> TensorView:
    """A tensor of complex `dtype` holding run-time scalar `v` (a complex one, or a real one
    promoted to complex: its imaginary part 0). Kernels take real parameters only, so each
    part is a generated tensor (`make_part(scalar, part dtype)`: fd.ops.full of the shape
    wanted, no memory) whose fill value the host computes from `v` per call (real(v) and
    imag(v) are scalar expressions); the kernel joins them where it reads them."""
    part = REAL_OF[dtype]
    if not v.dtype.is_complex:
        return cast(TensorView, builder.cast(make_part(v, part), dtype, op=op))
    re, im = (cast(Scalar, builder.pointwise(which, [v])) for which in ("real", "imag"))
    parts = [make_part(re, part), make_part(im, part)]
    return cast(TensorView, builder.pointwise("complex", parts))


def complex_operand(builder: Builder, v: Val, compute: DataType, op: str) -> Val:
    """Operand `v` of a tensor op computed in complex `compute`: a run-time scalar as a 0-d
    tensor of that dtype (as_complex_tensor), anything else as it is. The caller has decided
    the promotion with `v` a scalar, as torch.result_type decides it."""
    if not isinstance(v, Scalar) or v.is_constant:
        return v
    from kfuse.ir.generated import build_full  # generated builds on the builder, and so on this

    def part(s: Scalar, dtype: DataType) -> TensorView:
        return build_full(builder, [], s, dtype, op=op)

    return as_complex_tensor(builder, v, compute, part, op)


def complex_constant(value: Any, dtype: DataType, op: str) -> complex:
    """The value of a constant of complex `dtype`; DefinitionError for a complex `value` of a
    real dtype."""
    if not dtype.is_complex:
        raise DefinitionError(
            f"{op}: {value!r} is a complex number; {dtype.label} holds no complex value "
            "(give DataType.ComplexFloat or ComplexDouble, or no dtype)"
        )
    return complex(value)


def folded_value(op: str, vals: Sequence[Val], dtype: DataType) -> Any:
    """The value pointwise `op` gives on constant scalar operands where complex values are
    involved: a constant (its complex value needs no kernel or host expression)."""
    return eval_scalar(op, [cast(Scalar, v).value for v in vals], dtype)


def all_constant(vals: Sequence[Val]) -> bool:
    """Whether every operand is a constant scalar."""
    return all(isinstance(v, Scalar) and v.is_constant for v in vals)
