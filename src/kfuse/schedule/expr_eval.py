"""The expr_eval scheduler: fusions of ops kfuse does not generate code for.

matmul and linear run through the inputs' framework library (torch.matmul /
torch.nn.functional.linear, cupy.matmul, numpy.matmul) on the caller's stream, and topk,
argsort, scatter, flash attention and grouped_mm as kfuse.schedule.library_calls says;
reshape runs as the framework's reshape (a copy), a slice that no kernel reads through its
operands (a slice of a computed value that the canonical form could not move to the inputs) as the
framework's indexing, copied when it leaves the segment; pad and cat as a new array of the
pad value (or zeros) with the inputs copied into their windows; index_select, gather and
take_along_axis as the arrays' own indexing, once every position is checked to be inside
its axis. Casts may sit between them. Everything else (pointwise work,
reductions) belongs to generated segments, which the segmenter splits off around these ops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kfuse.dtypes import DataType
from kfuse.errors import SchedulerError
from kfuse.ir.exprs import (
    LIBRARY_EXPRS,
    ArgsortOp,
    CastOp,
    CatOp,
    Expr,
    GatherOp,
    GroupedMmOp,
    IndexSelectOp,
    LinearOp,
    MatmulOp,
    PadOp,
    ReshapeOp,
    ScatterOp,
    SdpaBwdOp,
    SdpaFwdOp,
    SegmentSetOp,
    SliceOp,
    StrideOrderOp,
    TopKOp,
)
from kfuse.ir.fusion import Fusion
from kfuse.ir.index_ops import check_positions, positions
from kfuse.ir.resize_ops import joined, padded, slice_ranges
from kfuse.ir.structural import structural_classes
from kfuse.ir.values import Scalar, TensorView
from kfuse.runtime.capture import refuse_under_capture
from kfuse.runtime.info import RuntimeInfo
from kfuse.schedule.library_calls import run_library_call
from kfuse.schedule.types import Rejection, SchedulerType

EVALUATED_EXPRS = (*LIBRARY_EXPRS, ReshapeOp, *structural_classes("resize", "indexing"))
"""Exprs this scheduler exists for (the library ops, reshapes, and the resize and indexing
ops of kfuse.ir.structural); CastOps are accepted alongside them."""
CALLED_EXPRS = (TopKOp, ArgsortOp, ScatterOp, SdpaFwdOp, SdpaBwdOp, GroupedMmOp)
"""Library ops run by kfuse.schedule.library_calls (one call, any number of outputs)."""
NEW_ARRAY_EXPRS = (*LIBRARY_EXPRS, PadOp, CatOp, IndexSelectOp, GatherOp)
"""Exprs whose result is a new array (the others' may be views of their inputs)."""
HOST_CHECKED_EXPRS = (IndexSelectOp, GatherOp, ScatterOp, GroupedMmOp)
"""Exprs whose positions (offsets for grouped_mm) are checked on the host before anything
reads through them: the check reads device data back, which CUDA graph capture forbids."""


def library_expr(fusion: Fusion) -> Expr | None:
    """The first expr of `fusion` that only a library runs (None when there is none)."""
    return next((e for e in fusion.exprs if isinstance(e, LIBRARY_EXPRS)), None)


_LIBRARY_NAMES = {
    MatmulOp: "matmul",
    LinearOp: "linear",
    TopKOp: "topk",
    ArgsortOp: "argsort",
    ScatterOp: "scatter",
    SdpaFwdOp: "sdpfa_fwd",
    SdpaBwdOp: "sdpfa_bwd",
    GroupedMmOp: "grouped_mm",
}


def describe_library_expr(expr: Expr) -> str:
    """ "a matmul (T3)" for rejection messages."""
    return f"a {_LIBRARY_NAMES[type(expr)]} ({expr.outputs[0].name})"


class ExprEvalScheduler:
    """Runs matmul / linear / topk / argsort / scatter / sdpfa_fwd / sdpfa_bwd / grouped_mm /
    reshape / slice / pad / cat / index_select / gather (and casts) through the inputs'
    framework."""

    scheduler_type = SchedulerType.expr_eval
    generates_kernels = False

    def check(self, fusion: Fusion, info: RuntimeInfo | None) -> None:
        tensor_exprs = [e for e in fusion.exprs if isinstance(e.outputs[0], TensorView)]
        if not any(isinstance(e, EVALUATED_EXPRS) for e in tensor_exprs):
            raise Rejection(
                "fusion has no op that runs through a library (matmul, linear, topk, argsort, "
                "scatter, sdpfa_fwd, sdpfa_bwd, grouped_mm, reshape, slice, pad, cat, "
                "index_select, gather)"
            )
        for e in tensor_exprs:
            # A stride_order or segment_set is a kernel's copy: the framework's cast would
            # return a row-major array, or keep the boundary in one segment.
            if not isinstance(e, (*EVALUATED_EXPRS, CastOp)) or isinstance(
                e, (SegmentSetOp, StrideOrderOp)
            ):
                raise Rejection(
                    f"{e.outputs[0].name} = {e._math()} is generated work; "
                    "expr_eval takes only library ops (matmul, linear, topk, argsort, scatter, "
                    "sdpfa_fwd, sdpfa_bwd, grouped_mm, reshape, slice, pad, cat, index_select, "
                    "gather) and casts"
                )

    def heuristics(self, fusion: Fusion, info: RuntimeInfo) -> Any:
        from kfuse._C import HeuristicParams

        return HeuristicParams(SchedulerType.expr_eval)

    def kernels(self, fusion: Fusion, info: RuntimeInfo, params: Any) -> list[Any]:
        """None: the compiler never asks (generates_kernels is False), it runs `runner`."""
        raise SchedulerError("expr_eval generates no kernels: its ops run as library calls")

    def runner(
        self, fusion: Fusion, info: RuntimeInfo, params: Any
    ) -> Callable[[RuntimeInfo, int | None], list[Any]]:
        """The callable the executor runs instead of kernel launches."""
        return lambda call_info, stream: run_expr_eval(fusion, call_info, stream)


def _capture_refusal(expr: Expr) -> tuple[str, str]:
    """What refuse_under_capture says of `expr`, a host-checked op (HOST_CHECKED_EXPRS)."""
    from kfuse.ir.index_ops import op_name

    if isinstance(expr, (IndexSelectOp, GatherOp)):
        name = op_name(expr)
    else:
        name = _LIBRARY_NAMES[type(expr)]
    checked = "offsets" if isinstance(expr, GroupedMmOp) else "index positions"
    return (
        f"{name} to {expr.outputs[0].name} runs as a library call (an expr_eval segment) "
        f"whose {checked} kfuse checks on the host first, reading them back from the GPU: "
        "that waits for the GPU, which a capture forbids, and a replay would not check again",
        "Run this fusion outside the captured region",
    )


def run_expr_eval(fusion: Fusion, info: RuntimeInfo, stream: int | None) -> list[Any]:
    """Evaluate the fusion's exprs with the framework of the inputs; new output arrays."""
    return BoundExprEval(fusion, info)(info.inputs, stream)


class BoundExprEval:
    """run_expr_eval of `fusion` for the framework, device and extents of `info`, each
    expr's call chosen once (its op, dtype, shape, slice bounds, pad value). A replayed
    segmented call (kfuse.engine.segmented_replay) binds its library segments once per
    signature and runs them as these calls alone. What depends on the call's data stays per
    call: an indexing op's positions are checked before any read, and a host check is
    refused under CUDA graph capture (kfuse.runtime.capture)."""

    def __init__(self, fusion: Fusion, info: RuntimeInfo) -> None:
        self.framework, self.device = info.framework, info.device_index
        ops = _FRAMEWORK_OPS[info.framework]()
        slots = {id(v): k for k, v in enumerate(fusion.inputs)}
        fresh: set[int] = set()
        # (the call, its array arguments' slots, its outputs' slots; several outputs: the
        # call returns a sequence of them), in order
        self.calls: list[tuple[Callable[..., Any], list[int], list[int] | int]] = []
        for expr in fusion.exprs:
            out = expr.outputs[0]
            if not isinstance(out, TensorView):
                continue  # scalar values are in info.extents
            args = [slots[id(v)] for v in expr.inputs if isinstance(v, TensorView)]
            call = _bound_call(expr, info, ops)
            if isinstance(expr, HOST_CHECKED_EXPRS):
                call = _refusing_under_capture(call, expr, info)
            for o in expr.outputs:
                slots[id(o)] = len(slots)
            if isinstance(expr, CALLED_EXPRS):
                self.calls.append((call, args, [slots[id(o)] for o in expr.outputs]))
                fresh.update(id(o) for o in expr.outputs)
                continue
            self.calls.append((call, args, slots[id(out)]))
            if isinstance(expr, NEW_ARRAY_EXPRS):
                fresh.add(id(out))
        self.width = len(slots)
        # Outputs are new arrays: views of inputs and repeated outputs are copied.
        self.outputs: list[tuple[int, bool]] = []
        seen: set[int] = set()
        for out in fusion.outputs:
            self.outputs.append((slots[id(out)], id(out) not in fresh or id(out) in seen))
            seen.add(id(out))
        self.copy = ops.copy
        # The call alone where it is the whole segment (a matmul of the two inputs, its
        # product the output): no slots to fill.
        self.whole: Callable[..., Any] | None = None
        if len(self.calls) == 1 and self.outputs == [(len(fusion.inputs), False)]:
            call, args, outs = self.calls[0]
            if args == list(range(len(fusion.inputs))) and isinstance(outs, int):
                self.whole = call

    def __call__(self, inputs: list[Any], stream: int | None) -> list[Any]:
        """The outputs for `inputs` (the fusion's inputs' arrays and scalar values), run on
        CUDA stream `stream` (None: the framework's current one)."""
        if stream is None or self.device < 0:  # stream_context's null context
            if self.whole is not None:
                return [self.whole(*inputs)]
            return self._run(inputs)
        from kfuse.runtime.arrays import stream_context

        with stream_context(self.framework, self.device, stream):
            return self._run(inputs)

    def _run(self, inputs: list[Any]) -> list[Any]:
        values = [*inputs, *[None] * (self.width - len(inputs))]
        for call, args, outs in self.calls:
            result = call(*[values[k] for k in args])
            if isinstance(outs, int):
                values[outs] = result
            else:
                for k, a in zip(outs, result, strict=True):
                    values[k] = a
        copy = self.copy
        return [copy(values[k]) if copied else values[k] for k, copied in self.outputs]


def _refusing_under_capture(call: Callable[..., Any], expr: Expr, info: RuntimeInfo) -> Any:
    """`call` after a kfuse error, not a synchronizing read, when the call is captured."""
    framework, device = info.framework, info.device_index
    what, way_out = _capture_refusal(expr)

    def refusing(*args: Any) -> Any:
        refuse_under_capture(framework, device, what, way_out)
        return call(*args)

    return refusing


def _bound_call(expr: Expr, info: RuntimeInfo, ops: Any) -> Callable[..., Any]:
    """`expr`'s work as a call of its array arguments, for `info`'s extents."""
    out = expr.outputs[0]
    assert isinstance(out, TensorView)
    if isinstance(expr, CALLED_EXPRS):
        framework = info.framework
        scalars = [_scalar_value(v, info) for v in expr.inputs if isinstance(v, Scalar)]
        return lambda *args: run_library_call(framework, expr, list(args), scalars)
    dtype = out.dtype
    if isinstance(expr, MatmulOp):
        return ops.matmul_of(dtype)
    if isinstance(expr, LinearOp):
        return lambda *args: ops.linear(list(args), dtype)
    if isinstance(expr, CastOp):
        if expr.inputs[0].dtype.is_floating and dtype.is_integral:
            return lambda a: ops.float_to_int(a, dtype)
        return lambda a: ops.cast(a, dtype)
    if isinstance(expr, SliceOp):
        index = _index(expr, info)
        return lambda a: a[index]  # a view; copied if an output
    if isinstance(expr, PadOp):
        fill = expr.inputs[1]
        assert isinstance(fill, Scalar)
        value = fill.value if fill.is_constant else info.extents[fill]
        extents = info.extents
        return lambda a: padded(expr, a, extents, value, ops.full_like(a))
    if isinstance(expr, CatOp):
        return lambda *args: joined(expr, list(args), ops.full_like(args[0]))
    if isinstance(expr, (IndexSelectOp, GatherOp)):
        indexed = expr

        def index_into(a: Any, index: Any) -> Any:
            check_positions(indexed, index, a.shape[indexed.dim])  # before any read
            return a[positions(indexed, a.shape, index, ops.arange(a))]

        return index_into
    shape = info.shape(out)
    return lambda a: ops.reshape(a, shape)


def _scalar_value(v: Scalar, info: RuntimeInfo) -> Any:
    return v.value if v.is_constant else info.extents[v]


def _index(expr: SliceOp, info: RuntimeInfo) -> tuple[slice, ...]:
    """The Python index that slices `expr`'s input as this call's bounds say (every
    framework takes Python slices with a positive step)."""
    source = expr.inputs[0]
    assert isinstance(source, TensorView)
    in_shape = info.shape(source)
    ranges = slice_ranges(expr, in_shape, info.extents)
    return tuple(slice(*r) for r in ranges)


class _TorchOps:
    def __init__(self) -> None:
        import torch

        self.torch = torch

    def matmul(self, a: Any, b: Any, dtype: DataType) -> Any:
        return self.torch.matmul(a, b)

    def matmul_of(self, dtype: DataType) -> Callable[[Any, Any], Any]:
        """matmul of `dtype` operands as one call of two arrays."""
        return self.torch.matmul

    def linear(self, args: list[Any], dtype: DataType) -> Any:
        return self.torch.nn.functional.linear(*args)

    def cast(self, a: Any, dtype: DataType) -> Any:
        from kfuse.dtypes import to_torch_dtype

        return a.to(to_torch_dtype(dtype))

    def float_to_int(self, a: Any, dtype: DataType) -> Any:
        return _float_to_int(self.torch, a, dtype, lambda v: self.cast(v, dtype))

    def reshape(self, a: Any, shape: tuple[int, ...]) -> Any:
        return a.reshape(shape)

    def copy(self, a: Any) -> Any:
        return a.clone(memory_format=self.torch.contiguous_format)

    def full_like(self, like: Any) -> Any:
        """(shape, value) -> a new array of that value, of `like`'s dtype and device."""
        return lambda shape, value: self.torch.full(
            shape, value, dtype=like.dtype, device=like.device
        )

    def arange(self, like: Any) -> Any:
        return lambda n: self.torch.arange(n, device=like.device)


class _NumpyLikeOps:
    """NumPy and CuPy (NumPy BFloat16 is ml_dtypes.bfloat16). Half/BFloat16 products are
    accumulated in float32, as a GPU library does."""

    def __init__(self, xp: Any) -> None:
        self.xp = xp
        # DataType -> the framework's dtype, looked up once (a bound library segment runs
        # its ops on every replayed call).
        self._dtypes: dict[DataType, Any] = {}

    def _target(self, dtype: DataType) -> Any:
        target = self._dtypes.get(dtype)
        if target is None:
            from kfuse.dtypes import to_numpy_dtype

            target = self._dtypes[dtype] = to_numpy_dtype(dtype)
        return target

    def _finish(self, value: Any, dtype: DataType) -> Any:
        return value.astype(self._target(dtype), copy=False)

    def _wide(self, a: Any, dtype: DataType) -> Any:
        return a.astype(self.xp.float32) if dtype in (DataType.Half, DataType.BFloat16) else a

    def matmul(self, a: Any, b: Any, dtype: DataType) -> Any:
        return self._finish(self.xp.matmul(self._wide(a, dtype), self._wide(b, dtype)), dtype)

    def matmul_of(self, dtype: DataType) -> Callable[[Any, Any], Any]:
        """matmul of `dtype` operands as one call of two arrays: the library's own matmul
        and the cast to `dtype` (a no-op where it is the product's), unless the operands are
        widened first."""
        if dtype in (DataType.Half, DataType.BFloat16):
            return lambda a, b: self.matmul(a, b, dtype)
        matmul, target = self.xp.matmul, self._target(dtype)
        return lambda a, b: matmul(a, b).astype(target, copy=False)

    def linear(self, args: list[Any], dtype: DataType) -> Any:
        x, w = self._wide(args[0], dtype), self._wide(args[1], dtype)
        y = self.xp.matmul(x, w.T)
        if len(args) == 3:
            y = y + self._wide(args[2], dtype)
        return self._finish(y, dtype)

    def cast(self, a: Any, dtype: DataType) -> Any:
        return self._finish(a, dtype)

    def float_to_int(self, a: Any, dtype: DataType) -> Any:
        import numpy

        # Half's range ends below the integer limits: NumPy warns as it widens them.
        with numpy.errstate(over="ignore", invalid="ignore"):
            return _float_to_int(self.xp, a, dtype, lambda v: self._finish(v, dtype))

    def reshape(self, a: Any, shape: tuple[int, ...]) -> Any:
        return self.xp.reshape(a, shape)

    def copy(self, a: Any) -> Any:
        return self.xp.array(a, copy=True, order="C")

    def full_like(self, like: Any) -> Any:
        return lambda shape, value: self.xp.full(shape, value, dtype=like.dtype)

    def arange(self, like: Any) -> Any:
        return self.xp.arange


def _float_to_int(xp: Any, a: Any, dtype: DataType, convert: Callable[[Any], Any]) -> Any:
    """A cast of a floating value to the integer `dtype` (Int32, Int) as kfuse's kernels
    convert it (CUDA's cvt.rzi): toward zero, NaN to 0, out-of-range values to the type's
    nearest end. Chosen by the cast's DataTypes when the segment's ops are bound, not by the
    array (NumPy's bfloat16 arrays, ml_dtypes', have dtype kind "V"). A plain conversion is
    undefined there (x86 gives the lowest integer for all three), and a cast in a library
    segment must agree with the same cast in a kernel. `convert` is the framework's
    conversion of in-range values."""
    limit = float(2 ** (8 * dtype.itemsize - 1))  # exact in every floating type
    nan, high, low = xp.isnan(a), a >= limit, a < -limit
    inside = convert(xp.where(nan | high | low, 0.0, a))
    return xp.where(low, -int(limit), xp.where(high, int(limit) - 1, inside))


def _numpy_ops() -> _NumpyLikeOps:
    import numpy

    return _NumpyLikeOps(numpy)


def _cupy_ops() -> _NumpyLikeOps:
    import cupy

    return _NumpyLikeOps(cupy)


_FRAMEWORK_OPS: dict[str, Callable[[], Any]] = {
    "torch": _TorchOps,
    "numpy": _numpy_ops,
    "cupy": _cupy_ops,
}
