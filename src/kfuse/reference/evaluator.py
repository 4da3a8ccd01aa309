"""Eager reference evaluation of a Fusion, op by op, with the inputs' array framework.

    evaluate(fusion, inputs, accumulate="float64" | "same") -> list of output arrays

NumPy (and CuPy) inputs are evaluated with NumPy-style functions, torch inputs with torch
functions, on the inputs' device. This is an implementation independent of the code generator.

accumulate="float64" (the default, "golden" values): floating tensors are held and computed in
float64; only CastOps round (a cast to Float/Half/BFloat16 rounds the value to that precision,
kept in float64 storage). Floating outputs are returned as float64 arrays; integer and Bool
outputs in their declared dtype.

accumulate="same": every op computes in its declared dtype, Half and BFloat16 computed in
float32 and rounded at each op's output, as a kernel that stores every intermediate would.
Outputs have their declared dtype.

conditioning(fusion, inputs) -> per output, what float64 cannot judge alone: the magnitudes
of the terms its sums added, the elements whose infinity or NaN rounding decides and those
whose value a product's order decides (kfuse.reference.conditions; kfuse.testing.
assert_close's `magnitude`, `indeterminate` and `order_decides`).
sum_magnitudes(fusion, inputs) -> its magnitudes alone.

BFloat16 with NumPy: inputs and "same"-mode outputs are ml_dtypes.bfloat16 arrays (computed in
float32 storage in between); torch bf16 tensors are used as they are.
Scalar inputs are Python numbers (or 0-d arrays).
"""

from __future__ import annotations

from typing import Any, NamedTuple, cast

from kfuse.dtypes import REDUCED_FLOATS, DataType, from_array_dtype
from kfuse.errors import DefinitionError, InputError
from kfuse.ir.exprs import (
    LIBRARY_EXPRS,
    BinaryOp,
    CastOp,
    Expr,
    GeneratedOp,
    LinearOp,
    MatmulOp,
    ReductionOp,
    ScanOp,
    SizeOp,
    TernaryOp,
    UnaryOp,
    WelfordOp,
)
from kfuse.ir.fusion import Fusion
from kfuse.ir.generated import generated_reference, generated_shape
from kfuse.ir.ops import OPS
from kfuse.ir.random_ops import is_random, is_stateful
from kfuse.ir.scalar_eval import eval_scalar, to_python
from kfuse.ir.structural import structural_info
from kfuse.ir.values import Scalar, TensorView, Val
from kfuse.reference.backends import NumpyLikeBackend, backend_for
from kfuse.reference.conditions import ConditionTracker
from kfuse.reference.philox import generated_values


def evaluate(fusion: Any, inputs: list[Any], *, accumulate: str = "float64") -> list[Any]:
    """Run `fusion` (a Fusion or FusionDefinition) on `inputs`; see the module docstring."""
    if not isinstance(fusion, Fusion):
        fusion = getattr(fusion, "fusion", fusion)
    if accumulate not in ("float64", "same"):
        raise ValueError(f"accumulate must be 'float64' or 'same', got {accumulate!r}")
    inputs = list(inputs)
    run = _run(fusion, inputs, accumulate == "float64", track_conditions=False)
    return [run.output(v) for v in fusion.outputs]


class Conditioning(NamedTuple):
    """Per output of a fusion (kfuse.reference.conditions): `magnitudes`, the float64 sum
    of the absolute values of the terms its sums added (None where no sum feeds it
    linearly); `indeterminate`, a Bool array of the elements that are an infinity or NaN of a
    kind rounding decides (None where there is none); `order_decides`, a Bool array of the
    elements whose value the order of a product's multiplications decides (None where there
    is none)."""

    magnitudes: list[Any | None]
    indeterminate: list[Any | None]
    order_decides: list[Any | None]


def conditioning(fusion: Any, inputs: list[Any]) -> Conditioning:
    """What rounding may do to `fusion`'s outputs on `inputs` (Conditioning)."""
    if not isinstance(fusion, Fusion):
        fusion = getattr(fusion, "fusion", fusion)
    run = _run(fusion, list(inputs), True, track_conditions=True)
    cond = run.conditions
    assert cond is not None
    magnitudes = [
        run.be.to_output(cond.magnitudes[v]) if v in cond.magnitudes else None
        for v in fusion.outputs
    ]
    indeterminate = [
        run.be.to_output(cond.indeterminate[v] > 0) if v in cond.indeterminate else None
        for v in fusion.outputs
    ]
    order_decides = [
        run.be.to_output(cond.order_decides[v] > 0) if v in cond.order_decides else None
        for v in fusion.outputs
    ]
    return Conditioning(magnitudes, indeterminate, order_decides)


def sum_magnitudes(fusion: Any, inputs: list[Any]) -> list[Any | None]:
    """Per output of `fusion`, the float64 array bounding the magnitudes its sums added, or
    None (conditioning's `magnitudes`)."""
    return conditioning(fusion, inputs).magnitudes


def _run(fusion: Fusion, inputs: list[Any], wide: bool, *, track_conditions: bool) -> _Evaluator:
    shapes = fusion.infer_shapes(inputs)
    arrays = [a for v, a in zip(fusion.inputs, inputs, strict=False) if isinstance(v, TensorView)]
    run = _Evaluator(backend_for(arrays), wide, shapes)
    if track_conditions:
        run.conditions = ConditionTracker(run)
    for pos, (val, arg) in enumerate(zip(fusion.inputs, inputs, strict=False)):
        run.env[val] = run.load_input(pos, val, arg)
    with run.be.errstate():
        for expr in fusion.exprs:
            run.run(expr)
            if run.conditions is not None:
                run.conditions.track(expr)
    return run


class _Evaluator:
    def __init__(self, be: NumpyLikeBackend, wide: bool, shapes: dict[Val, Any]) -> None:
        self.be = be
        self.wide = wide
        self.shapes = shapes
        self.env: dict[Val, Any] = {}
        self.like: Any = None  # an input array: device for constants (torch)
        self.conditions: ConditionTracker | None = None  # conditioning's, when asked for

    # ---- storage ----
    def storage(self, dtype: DataType) -> Any:
        return self.be.storage_dtype(dtype, self.wide)

    def compute_storage(self, dtype: DataType) -> Any:
        if dtype in REDUCED_FLOATS and not self.wide:
            return self.be.storage_dtype(DataType.Float, False)
        return self.storage(dtype)

    def store(self, a: Any, dtype: DataType) -> Any:
        """Convert a computed array to the storage of `dtype` (rounding bf16 and float8 for
        NumPy and CuPy, which hold them as float32). A complex value stored in a real dtype
        keeps its real part (as torch's conversion, without its warning), in Bool whether it
        is nonzero."""
        if not dtype.is_complex and self.be.is_complex(a):
            a = (a != 0) if dtype is DataType.Bool else self.be.xp.real(a)
        if dtype.is_integral and dtype is not DataType.Bool and self.be.is_floating(a):
            return self.be.to_int_saturating(a, dtype)
        out = self.be.astype(a, self.storage(dtype))
        held_as_float = dtype is DataType.BFloat16 or dtype.is_float8
        if held_as_float and not self.wide and self.be.name != "torch":
            out = self.be.round_to(out, dtype)
        return out

    def load_input(self, pos: int, val: Val, arg: Any) -> Any:
        if isinstance(val, Scalar):
            value = arg.item() if hasattr(arg, "item") else arg
            if not isinstance(value, (bool, int, float, complex)):
                raise InputError(
                    f"input {pos} ({val.name}) must be a number, got {type(arg).__name__}"
                )
            return to_python(value, val.dtype)
        try:
            got = from_array_dtype(arg.dtype)
        except DefinitionError:
            raise InputError(f"input {pos} ({val.name}): unsupported dtype {arg.dtype}") from None
        if got is not val.dtype:
            raise InputError(
                f"input {pos} ({val.name}) has dtype {got.value} but was defined "
                f"as {val.dtype.value}"
            )
        if self.like is None:
            self.like = arg
        return self.be.astype(arg, self.storage(val.dtype))

    def output(self, v: TensorView) -> Any:
        out = self.be.to_output(self.env[v])
        held_as_float = v.dtype is DataType.BFloat16 or v.dtype.is_float8
        if held_as_float and not self.wide and self.be.name == "numpy":
            from kfuse.dtypes import to_numpy_dtype

            out = out.astype(to_numpy_dtype(v.dtype))  # exact: the values are rounded already
        return out

    def operand(self, v: Val, compute: DataType) -> Any:
        """A tensor operand in its compute storage, or a scalar as a 0-d array."""
        value = v.value if isinstance(v, Scalar) and v.is_constant else self.env[v]
        if isinstance(v, Scalar):
            return self.be.constant(value, self.compute_storage(compute), self.like)
        return self.be.astype(value, self.compute_storage(compute))

    # ---- exprs ----
    def run(self, expr: Expr) -> None:
        out = expr.outputs[0]
        if not isinstance(out, TensorView):
            self.env[out] = self.scalar(expr)
        elif isinstance(expr, (UnaryOp, BinaryOp, TernaryOp)):
            self.env[out] = self.store(self.pointwise(expr), out.dtype)
        elif isinstance(expr, CastOp):
            self.env[out] = self.cast(expr)
        elif isinstance(expr, ReductionOp):
            a = self.env[expr.inputs[0]]
            # torch reduces its own storage types but for sum/prod, and has no float8 max/min
            if self.be.name != "torch" or expr.op in ("sum", "prod") or expr.dtype.is_float8:
                a = self.be.astype(a, self.compute_storage(expr.dtype))
            red = self.be.reduce(expr.op, a, expr.dims, self.compute_storage(expr.dtype))
            self.env[out] = self.store(red, out.dtype)
        elif isinstance(expr, WelfordOp):
            self.welford(expr)
        elif isinstance(expr, ScanOp):  # in float64, or float for Half/BFloat16 when "same"
            a = self.be.astype(self.env[expr.inputs[0]], self.compute_storage(out.dtype))
            scanned = self.be.scan(expr.op, a, expr.dim, self.compute_storage(out.dtype))
            self.env[out] = self.store(scanned, out.dtype)
        elif isinstance(expr, (MatmulOp, LinearOp)):
            self.env[out] = self.store(self.library(expr), out.dtype)
        elif isinstance(expr, LIBRARY_EXPRS):
            self.library_call(expr)
        elif isinstance(expr, GeneratedOp):
            storage = self.compute_storage(out.dtype)
            if is_random(expr):
                made = self.random(expr, storage)
            else:
                made = generated_reference(self.be, expr, self.shapes, storage, self.like)
            if out.dtype.is_floating and self.wide:  # the kernels round it to the dtype
                made = self.be.round_to(made, out.dtype)
            self.env[out] = self.store(made, out.dtype)
        else:
            self.env[out] = self.structural(expr)

    def random(self, expr: GeneratedOp, storage: Any) -> Any:
        """A random op's numbers, exactly the kernels' (kfuse.reference.philox). A stateful
        op's seed and offset are the generator's at launch time, which no reference knows:
        the reference of such a fusion is its stateless twin's (the tests' way)."""
        if is_stateful(expr):
            raise InputError(
                f"{expr.op} to {expr.outputs[0].name} draws from the generator (no rng_seed "
                "and rng_offset): its numbers have no reference"
            )
        params = [v.value if v.is_constant else self.shapes[v] for v in expr.params]
        made = generated_values(expr.op, generated_shape(expr, self.shapes), params, expr.dtype)
        # float64 holds every value of the narrower types exactly
        return self.be.from_numpy(made.astype("float64"), storage, self.like)

    def scalar(self, expr: Expr) -> Any:
        if isinstance(expr, SizeOp):
            return self.shapes[expr.outputs[0]]
        args = [self.value(v) for v in expr.inputs]
        if isinstance(expr, CastOp):
            return to_python(args[0], expr.dtype)
        return eval_scalar(cast(Any, expr).op, args, expr.outputs[0].dtype)

    def cast(self, expr: CastOp) -> Any:
        src = (
            self.env[expr.inputs[0]]
            if not (isinstance(expr.inputs[0], Scalar) and expr.inputs[0].is_constant)
            else None
        )
        if (expr.dtype.is_floating or expr.dtype.is_complex) and self.wide:
            held = self.store(src, expr.dtype)
            return self.be.round_to(held, expr.dtype)
        return self.store(src, expr.dtype)

    def pointwise(self, expr: Expr) -> Any:
        row = OPS[cast(Any, expr).op]
        values = expr.inputs[1:] if row.has_condition else expr.inputs
        compute = values[0].dtype
        args = [self.operand(v, compute) for v in values]
        if row.has_condition:
            args = [self.operand(expr.inputs[0], DataType.Bool), *args]
        kind = "bool" if compute is DataType.Bool else "int" if compute.is_integral else ""
        if kind in row.identity_on:
            return args[0]
        if row.scalar_of_dtype is not None and self.wide and compute is DataType.Float:
            narrow = self.be.storage_dtype(DataType.Float, False)
            value = self.be.fn(row.name)(*(self.be.astype(a, narrow) for a in args))
            return self.be.astype(value, self.compute_storage(compute))
        if row.reference is not None:
            return row.reference(self.be, *args)
        return self.be.fn(row.name)(*args)

    def library(self, expr: Expr) -> Any:
        """matmul / linear in the output's compute storage (float64 when golden)."""
        args = [self.operand(v, expr.outputs[0].dtype) for v in expr.inputs]
        if isinstance(expr, MatmulOp):
            return self.be.matmul(args[0], args[1])
        y = self.be.matmul(args[0], self.be.permute(args[1], (1, 0)))
        return y + args[2] if len(args) == 3 else y

    def library_call(self, expr: Expr) -> None:
        """topk, argsort, scatter, attention, grouped_mm (kfuse.reference.library): floating
        operands in their compute storage (float64 when golden), each output stored."""
        from kfuse.reference.library import library_reference

        args = [
            self.operand(v, v.dtype) if v.dtype.is_floating else self.env[v]
            for v in expr.inputs
            if isinstance(v, TensorView)
        ]
        scalars = [self.value(v) for v in expr.inputs if isinstance(v, Scalar)]
        results = library_reference(self.be, expr, args, scalars)
        for o, result in zip(expr.outputs, results, strict=True):
            self.env[o] = self.store(result, o.dtype)

    def welford(self, expr: WelfordOp) -> None:
        be = self.be
        avg_v, m2_v, count_v = expr.outputs
        a = be.astype(self.env[expr.inputs[0]], self.compute_storage(avg_v.dtype))
        in_shape = self.shapes[expr.inputs[0]]
        count = 1
        for d in expr.dims:
            count *= in_shape[d]
        out_shape = self.shapes[avg_v]
        storage = self.compute_storage(avg_v.dtype)
        if count == 0:
            nan = be.full(out_shape, float("nan"), storage, self.like)
            avg, m2 = nan, nan
        else:
            # Measured from each row's first value (when finite), as the kernels do: a row of
            # equal values has exactly that value as its mean, so x - mean is exactly 0 even
            # where sum / n would round (a float64 value times 3 does).
            first = a[tuple(slice(0, 1) if d in expr.dims else slice(None) for d in range(a.ndim))]
            zero = be.full(tuple(first.shape), 0, storage, self.like)
            shift = be.where(be.fn("isfinite")(first), first, zero)
            avg = (
                be.squeeze(shift, expr.dims)
                + be.reduce("sum", a - shift, expr.dims, storage) / count
            )
            diff = a - be.expand_dims(avg, expr.dims)
            m2 = be.reduce("sum", diff * diff, expr.dims, storage)
        self.env[avg_v] = self.store(avg, avg_v.dtype)
        self.env[m2_v] = self.store(m2, m2_v.dtype)
        self.env[count_v] = be.full(out_shape, count, self.storage(DataType.Int), self.like)

    def _full_like(self, a: Any) -> Any:
        """(shape, value) -> an array of that value in `a`'s storage (pad's and cat's)."""
        return lambda shape, value: self.be.full(shape, value, a.dtype, self.like)

    def structural(self, expr: Expr) -> Any:
        """A structural op (kfuse.ir.structural) by its row's reference evaluation."""
        row = structural_info(expr)
        if row is None:  # pragma: no cover - run() sends only structural ops here
            raise InputError(f"the reference cannot evaluate {type(expr).__name__}")
        args = [self.value(v) for v in expr.inputs]
        return row.reference(self.be, expr, args, self.shapes, self._full_like(args[0]))

    def value(self, v: Val) -> Any:
        """A tensor's array, or a scalar's value."""
        return v.value if isinstance(v, Scalar) and v.is_constant else self.env[v]
