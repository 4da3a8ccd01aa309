"""Generated values: tensors made from no tensor (fd.ops.full, zeros, ones, iota), one row
(GeneratorInfo) per generator of the table GENERATORS, all built as one Expr class
(kfuse.ir.exprs.GeneratedOp).

A generated value's element is a function of its linear index in the op's own output shape
(row-major) and of the op's scalar parameters alone: full's is its value, iota's
start + index * step. So a kernel reads it like an input whose strides are its shape's
contiguous strides, with no memory: the kernel's offset arithmetic (broadcasts, permutes,
merged axes) gives the index, and the row's `cuda` expression of it replaces the load
(kfuse.codegen.generated). A new generator is one more row: its parameters, its printed
call, its reference and its CUDA expression. The random ones (uniform, normal:
kfuse.ir.random_ops) are rows too; their reference is computed by the reference layer
(kfuse.reference.philox), which ir cannot import.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kfuse.dtypes import DataType, as_dtype
from kfuse.errors import DefinitionError, InputError
from kfuse.ir.builder import as_index, describe
from kfuse.ir.complex_rules import as_complex_tensor
from kfuse.ir.exprs import GeneratedOp
from kfuse.ir.random_ops import (
    RANDOM_OPS,
    check_random_dtype,
    check_seed_and_offset,
    random_cuda,
)
from kfuse.ir.values import Axis, Scalar, TensorView, Val

# (backend, the linear indices (an int64 array of the output's shape), the parameters'
# values, the storage dtype, an array of the call (None where there is none)) -> the values.
Reference = Callable[[Any, Any, list[Any], Any, Any], Any]
# (the element's linear index, the parameters as CUDA expressions, the value's DataType)
# -> the value as a CUDA expression of the dtype's compute type.
Cuda = Callable[[str, list[str], DataType], str]


@dataclass(frozen=True)
class GeneratorInfo:
    """One generator: see the module docstring."""

    name: str
    params: tuple[str, ...]  # the parameters' names, as fd.ops spells them
    doc: str
    reference: Reference
    cuda: Cuda
    # Whether the value depends on the element's index (full's does not).
    uses_index: bool = True


def _full_reference(be: Any, index: Any, params: list[Any], storage: Any, like: Any) -> Any:
    return be.full(tuple(index.shape), params[0], storage, like)


def _full_cuda(index: str, params: list[str], dtype: DataType) -> str:
    return params[0]


def _iota_reference(be: Any, index: Any, params: list[Any], storage: Any, like: Any) -> Any:
    start, step = params
    return be.astype(index * step + start, storage)


def _iota_cuda(index: str, params: list[str], dtype: DataType) -> str:
    start, step = params
    if dtype.is_floating:  # in double: the float64 value, rounded once to the dtype
        return f"((double){start} + (double){index} * (double){step})"
    ctype = dtype.cuda_type
    return f"(({ctype}){start} + ({ctype}){index} * ({ctype}){step})"


def _random_reference(be: Any, index: Any, params: list[Any], storage: Any, like: Any) -> Any:
    # Reached only by a caller that skips the reference layer's dispatch (evaluator.py).
    raise NotImplementedError("random values are computed by kfuse.reference.philox")


def _random_cuda(name: str) -> Cuda:
    def cuda(index: str, params: list[str], dtype: DataType) -> str:
        return random_cuda(name, index, params, dtype)

    return cuda


GENERATORS: dict[str, GeneratorInfo] = {
    row.name: row
    for row in (
        GeneratorInfo(
            "full",
            ("fill_value",),
            "a tensor of the given shape holding fill_value",
            _full_reference,
            _full_cuda,
            uses_index=False,
        ),
        GeneratorInfo(
            "iota",
            ("start", "step"),
            "the 1-D tensor start, start + step, ..., of the given length",
            _iota_reference,
            _iota_cuda,
        ),
        *(
            GeneratorInfo(
                name,
                (*info.params, "rng_seed", "rng_offset"),
                f"random numbers ({name}({', '.join(info.params)})) of the given shape",
                _random_reference,
                _random_cuda(name),
            )
            for name, info in RANDOM_OPS.items()
        ),
    )
}
"""Every generator by name (GeneratedOp.op)."""


# ---- building (fd.ops' definition-time halves) ----
def _as_dtype(dtype: Any, op: str) -> DataType:
    return as_dtype(dtype, what=f"{op}: dtype")


def _factory_dtype(dtype: Any, op: str) -> DataType:
    dt = _as_dtype(dtype, op)
    if dt.is_float8:
        raise DefinitionError(f"{op}: {dt.value} tensors cannot be generated; make a Float one")
    return dt


def _extents(b: Any, shape: Any, op: str) -> list[Scalar]:
    """A factory's `shape` (a list of ints and Int Scalars) as Int Scalars."""
    if not isinstance(shape, (list, tuple)):
        raise DefinitionError(f"{op}: shape must be a list of sizes, got {describe(shape)}")
    return [_extent(b, e, op, i) for i, e in enumerate(shape)]


def _extent(b: Any, e: Any, op: str, i: int) -> Scalar:
    """A shape entry as an Int Scalar: a constant >= 0, or an integer Scalar of the call."""
    what = "length" if i < 0 else f"shape entry {i}"
    if isinstance(e, Scalar):
        b.operand(e, op, max(i, 0))
        if not e.dtype.is_integral:
            raise DefinitionError(f"{op}: {what} {describe(e)} is not an integer")
        if not e.is_constant:
            return e
        e = e.value
    try:
        n = as_index(e, op, what)
    except DefinitionError:
        raise DefinitionError(
            f"{op}: {what} is {describe(e)}, expected an int or an integer scalar"
        ) from None
    if n < 0:
        raise DefinitionError(f"{op}: {what} is {n}; sizes are >= 0")
    return b.constant(n, DataType.Int, op=op)


def _param(b: Any, x: Any, dtype: DataType, op: str, what: str, exact_kind: bool) -> Scalar:
    """A parameter as a Scalar of `dtype`: a number (made a constant of it) or a Scalar of
    the definition (cast to it). `exact_kind`: as nvFuser's iota, a Scalar must be of the
    dtype's kind (integer or floating) and a float is no integer parameter."""
    if isinstance(x, TensorView):
        raise DefinitionError(f"{op}: {what} is {describe(x)}, expected a scalar or a number")
    v = b.operand(x, op, 1)
    assert isinstance(v, Scalar)
    # A Python int is exact in a floating dtype (iota(n, 0, 1, dtype=Float) as users write it).
    int_literal = isinstance(x, int) and not isinstance(x, bool) and dtype.is_floating
    mismatched = v.dtype.is_integral != dtype.is_integral or v.dtype.is_boolean
    if exact_kind and mismatched and not int_literal:
        raise DefinitionError(
            f"{op}: {what} {describe(x)} does not match dtype {dtype.value} "
            f"({'an integer' if dtype.is_integral else 'a floating'} value is needed)"
        )
    if v.is_constant:
        return b.constant(v.value, dtype, op=op)
    return v if v.dtype is dtype else b.cast(v, dtype, op=op)


def _generated(
    b: Any, name: str, shape: list[Scalar], params: list[Scalar], dtype: DataType
) -> TensorView:
    axes = [
        Axis(True, 1)
        if s.is_constant and s.value == 1
        else Axis(False, s.value if s.is_constant else None)
        for s in shape
    ]
    out = b.new_tensor(dtype, axes)
    inputs = tuple(v for v in (*shape, *params) if not v.is_constant)
    b.add(
        GeneratedOp(
            inputs=inputs,
            outputs=(out,),
            op=name,
            shape=tuple(shape),
            params=tuple(params),
            dtype=dtype,
        )
    )
    return out


def build_full(b: Any, shape: Any, fill_value: Any, dtype: Any, op: str = "full") -> TensorView:
    """fd.ops.full: a tensor of `shape` (ints and Int Scalars) holding `fill_value` (a
    number or a Scalar, converted to `dtype`)."""
    dt = _factory_dtype(dtype, op)
    if dt.is_complex and isinstance(fill_value, Scalar) and not fill_value.is_constant:
        b.operand(fill_value, op, 1)

        def part(s: Scalar, part_dtype: DataType) -> TensorView:
            return build_full(b, shape, s, part_dtype, op)

        return as_complex_tensor(b, fill_value, dt, part, op)
    extents = _extents(b, shape, op)
    fill = _param(b, fill_value, dt, op, "fill_value", exact_kind=False)
    return _generated(b, "full", extents, [fill], dt)


def build_iota(b: Any, length: Any, start: Any, step: Any, dtype: Any) -> TensorView:
    """fd.ops.iota: the 1-D tensor start + i * step, i < length, of an integer or floating
    `dtype` (start and step 0 and 1 where not given)."""
    dt = _factory_dtype(dtype, "iota")
    if dt.is_boolean or not (dt.is_integral or dt.is_floating):
        raise DefinitionError(f"iota: dtype {dt.value} is not an integer or floating type")
    n = _extent(b, length, "iota", -1)
    first = _param(b, 0 if start is None else start, dt, "iota", "start", exact_kind=True)
    by = _param(b, 1 if step is None else step, dt, "iota", "step", exact_kind=True)
    return _generated(b, "iota", [n], [first, by], dt)


def _rng_scalar(b: Any, x: Any, op: str, what: str) -> Scalar:
    """rng_seed or rng_offset: an Int Scalar of the definition, or an int (a constant)."""
    if isinstance(x, TensorView) or isinstance(x, bool) or isinstance(x, float):
        raise DefinitionError(f"{op}: {what} is {describe(x)}, expected an Int scalar or an int")
    v = b.operand(x, op, 1)
    assert isinstance(v, Scalar)
    if not v.dtype.is_integral or v.dtype.is_boolean:
        raise DefinitionError(f"{op}: {what} {describe(x)} is not an integer scalar")
    if v.is_constant:
        return b.constant(v.value, DataType.Int, op=op)
    return v if v.dtype is DataType.Int else b.cast(v, DataType.Int, op=op)


def _random_params(b: Any, op: str, a: Any, c: Any, rng_seed: Any, rng_offset: Any) -> list[Scalar]:
    """[a, c] as Double Scalars (nvFuser keeps them as given; the kernel rounds them to the
    compute type), then the seed and offset where given (a stateless op)."""
    check_seed_and_offset(rng_seed, rng_offset, op)
    names = RANDOM_OPS[op].params
    params = [_param(b, x, DataType.Double, op, n, exact_kind=False) for x, n in zip((a, c), names)]
    if rng_seed is not None:
        params.append(_rng_scalar(b, rng_seed, op, "rng_seed"))
        params.append(_rng_scalar(b, rng_offset, op, "rng_offset"))
    return params


def build_random(
    b: Any, op: str, a: Any, c: Any, shape: Any, rng_seed: Any, rng_offset: Any, dtype: Any
) -> TensorView:
    """fd.ops.uniform(minval, maxval, shape) and fd.ops.normal(mean, std, shape): random
    numbers of a floating `dtype`, stateless where rng_seed and rng_offset are given."""
    dt = _as_dtype(dtype, op)
    check_random_dtype(dt, op)
    extents = _extents(b, shape, op)
    return _generated(b, op, extents, _random_params(b, op, a, c, rng_seed, rng_offset), dt)


def build_random_like(
    b: Any, op: str, x: Any, rng_seed: Any, rng_offset: Any, name: str
) -> TensorView:
    """fd.ops.rand_like(x) / randn_like(x) (`name`): uniform(0, 1) / normal(0, 1) numbers of
    x's shape (its broadcast axes kept) and dtype, which must be floating."""
    v = b.tensor(x, name)
    if not v.dtype.is_floating or v.dtype.is_float8:
        raise DefinitionError(
            f"{name}: {describe(v)} is not a Float, Double, Half or BFloat16 tensor"
        )
    extents = [
        b.size(v, i, op=name) if ax.extent is None else b.constant(ax.extent, DataType.Int)
        for i, ax in enumerate(v.axes)
    ]
    return _generated(b, op, extents, _random_params(b, op, 0, 1, rng_seed, rng_offset), v.dtype)


# ---- sizes, printing, reference ----
def generated_shape(expr: GeneratedOp, values: Mapping[Val, Any]) -> tuple[int, ...]:
    """The output's shape on a call (`values`: the call's scalar values); InputError for a
    negative extent."""
    shape = []
    for i, s in enumerate(expr.shape):
        n = s.value if s.is_constant else values.get(s)
        if n is None or int(n) < 0:
            raise InputError(
                f"{expr.op} to {expr.outputs[0].name}: extent {s.name} of axis {i} is {n}, "
                "not a size"
            )
        shape.append(int(n))
    return tuple(shape)


def generated_call(expr: GeneratedOp, literal: Callable[[Val], str]) -> str:
    """The fd.ops call that rebuilds `expr` (`literal`: an operand's printed form)."""
    dtype = f"dtype={expr.dtype!r}"
    if expr.op == "iota":
        start, step = (literal(v) for v in expr.params)
        return f"fd.ops.iota({literal(expr.shape[0])}, {start}, {step}, {dtype})"
    shape = "[" + ", ".join(literal(s) for s in expr.shape) + "]"
    params = ", ".join(f"{n}={literal(v)}" for n, v in zip(GENERATORS[expr.op].params, expr.params))
    return f"fd.ops.{expr.op}(shape={shape}, {params}, {dtype})"


def generated_reference(
    be: Any, expr: GeneratedOp, values: Mapping[Val, Any], storage: Any, like: Any
) -> Any:
    """The generated tensor on a call, in `storage` of backend `be`."""
    shape = generated_shape(expr, values)
    index = be.reshape(be.arange(like)(math.prod(shape)), shape)
    params = [v.value if v.is_constant else values[v] for v in expr.params]
    return GENERATORS[expr.op].reference(be, index, params, storage, like)


def factory_names() -> Sequence[str]:
    """The fd.ops methods that build generated values."""
    return ("full", "zeros", "ones", "iota", *RANDOM_OPS, "rand_like", "randn_like")
