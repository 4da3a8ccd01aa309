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

from kfuse.dtypes import DataType, from_array_dtype
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


def _refuse_host_check_under_capture(expr: Expr, info: RuntimeInfo) -> None:
    """A kfuse error, not a synchronizing read, when the call is being captured."""
    from kfuse.ir.index_ops import op_name

    if isinstance(expr, (IndexSelectOp, GatherOp)):
        name = op_name(expr)
    else:
        name = _LIBRARY_NAMES[type(expr)]
    checked = "offsets" if isinstance(expr, GroupedMmOp) else "index positions"
    refuse_under_capture(
        info.framework,
        info.device_index,
        f"{name} to {expr.outputs[0].name} runs as a library call (an expr_eval segment) "
        f"whose {checked} kfuse checks on the host first, reading them back from the GPU: "
        "that waits for the GPU, which a capture forbids, and a replay would not check again",
        "Run this fusion outside the captured region",
    )


def run_expr_eval(fusion: Fusion, info: RuntimeInfo, stream: int | None) -> list[Any]:
    """Evaluate the fusion's exprs with the framework of the inputs; new output arrays."""
    from kfuse.runtime.arrays import stream_context

    ops = _FRAMEWORK_OPS[info.framework]()
    env: dict[int, Any] = {id(v): a for v, a in zip(fusion.inputs, info.inputs, strict=True)}
    fresh: set[int] = set()
    with stream_context(info.framework, info.device_index, stream):
        for expr in fusion.exprs:
            out = expr.outputs[0]
            if not isinstance(out, TensorView):
                continue  # scalar values are in info.extents
            args = [env[id(v)] for v in expr.inputs if isinstance(v, TensorView)]
            if isinstance(expr, HOST_CHECKED_EXPRS):
                _refuse_host_check_under_capture(expr, info)
            if isinstance(expr, CALLED_EXPRS):
                scalars = [_scalar_value(v, info) for v in expr.inputs if isinstance(v, Scalar)]
                results = run_library_call(info.framework, expr, args, scalars)
                for o, result in zip(expr.outputs, results, strict=True):
                    env[id(o)] = result
                    fresh.add(id(o))
                continue
            if isinstance(expr, MatmulOp):
                env[id(out)] = ops.matmul(args[0], args[1], out.dtype)
            elif isinstance(expr, LinearOp):
                env[id(out)] = ops.linear(args, out.dtype)
            elif isinstance(expr, CastOp):
                env[id(out)] = ops.cast(args[0], out.dtype)
            elif isinstance(expr, SliceOp):
                env[id(out)] = args[0][_index(expr, info)]  # a view; copied if an output
            elif isinstance(expr, PadOp):
                fill = expr.inputs[1]
                assert isinstance(fill, Scalar)
                value = fill.value if fill.is_constant else info.extents[fill]
                env[id(out)] = padded(expr, args[0], info.extents, value, ops.full_like(args[0]))
            elif isinstance(expr, CatOp):
                env[id(out)] = joined(expr, args, ops.full_like(args[0]))
            elif isinstance(expr, (IndexSelectOp, GatherOp)):
                a, index = args
                check_positions(expr, index, a.shape[expr.dim])  # before any read
                env[id(out)] = a[positions(expr, a.shape, index, ops.arange(a))]
            else:
                env[id(out)] = ops.reshape(args[0], info.shape(out))
            if isinstance(expr, NEW_ARRAY_EXPRS):
                fresh.add(id(out))
        results = []
        seen: set[int] = set()
        for out in fusion.outputs:
            value = env[id(out)]
            # Outputs are new arrays: copy views of inputs and repeated outputs.
            results.append(value if id(out) in fresh and id(out) not in seen else ops.copy(value))
            seen.add(id(out))
    return results


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

    def linear(self, args: list[Any], dtype: DataType) -> Any:
        return self.torch.nn.functional.linear(*args)

    def cast(self, a: Any, dtype: DataType) -> Any:
        from kfuse.dtypes import to_torch_dtype

        target = to_torch_dtype(dtype)
        if a.is_floating_point() and dtype.is_integral:
            return _float_to_int(self.torch, a, dtype, lambda v: v.to(target))
        return a.to(target)

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

    def _finish(self, value: Any, dtype: DataType) -> Any:
        from kfuse.dtypes import to_numpy_dtype

        return value.astype(to_numpy_dtype(dtype), copy=False)

    def _wide(self, a: Any, dtype: DataType) -> Any:
        return a.astype(self.xp.float32) if dtype in (DataType.Half, DataType.BFloat16) else a

    def matmul(self, a: Any, b: Any, dtype: DataType) -> Any:
        return self._finish(self.xp.matmul(self._wide(a, dtype), self._wide(b, dtype)), dtype)

    def linear(self, args: list[Any], dtype: DataType) -> Any:
        x, w = self._wide(args[0], dtype), self._wide(args[1], dtype)
        y = self.xp.matmul(x, w.T)
        if len(args) == 3:
            y = y + self._wide(args[2], dtype)
        return self._finish(y, dtype)

    def cast(self, a: Any, dtype: DataType) -> Any:
        # by the DataType: ml_dtypes' bfloat16 and float8 arrays have dtype kind "V", not "f"
        if dtype.is_integral and from_array_dtype(self.xp.asarray(a).dtype).is_floating:
            import numpy

            # Half's range ends below the integer limits: NumPy warns as it widens them.
            with numpy.errstate(over="ignore", invalid="ignore"):
                return _float_to_int(self.xp, a, dtype, lambda v: self._finish(v, dtype))
        return self._finish(a, dtype)

    def reshape(self, a: Any, shape: tuple[int, ...]) -> Any:
        return self.xp.reshape(a, shape)

    def copy(self, a: Any) -> Any:
        return self.xp.array(a, copy=True, order="C")

    def full_like(self, like: Any) -> Any:
        return lambda shape, value: self.xp.full(shape, value, dtype=like.dtype)

    def arange(self, like: Any) -> Any:
        return self.xp.arange


def _float_to_int(xp: Any, a: Any, dtype: DataType, convert: Callable[[Any], Any]) -> Any:
    """Floating values converted to the integer `dtype` (Int32, Int) as kfuse's kernels
    convert them (CUDA's cvt.rzi): toward zero, NaN to 0, out-of-range values to the type's
    nearest end. A plain conversion is undefined there (x86 gives the lowest integer for all
    three), and a cast in a library segment must agree with the same cast in a kernel.
    `convert` is the framework's conversion of in-range values."""
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
