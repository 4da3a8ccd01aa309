"""`fd.ops`: the op namespace of a FusionDefinition (primitives and composites).

Pointwise ops (one method per row of the op table kfuse.ir.ops.OPS, its arguments checked
by the row: OpInfo.bind) accept tensors, scalars and Python
numbers, promote like PyTorch and broadcast numpy-style (right-aligned ranks); their typed
signatures, for type checkers, are in pointwise_ops.pyi (tools/gen_ops_stub.py). Composites
(mean, var, var_mean, softmax, log_softmax, layer_norm, rms_norm) expand to primitives and
compute Half/BFloat16 inputs in Float, returning the input's dtype; addcmul and triu expand
as nvFuser's do (kfuse.ir.composite_ops).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kfuse.dtypes import REDUCED_FLOATS, DataType, optional_dtype
from kfuse.errors import DefinitionError
from kfuse.frontend.library_methods import LibraryMethods
from kfuse.frontend.operands import Dims, Extent, Operand, ScalarOperand
from kfuse.ir.builder import as_index, as_index_list, describe
from kfuse.ir.composite_ops import build_addcmul, build_triu
from kfuse.ir.embedding import build_embedding_fwd
from kfuse.ir.generated import build_full, build_iota, build_random, build_random_like
from kfuse.ir.index_ops import build_gather, build_index_select
from kfuse.ir.layout_ops import build_segment_set, build_stride_order
from kfuse.ir.op_docstrings import pointwise_docstring
from kfuse.ir.ops import OPS, OpInfo
from kfuse.ir.resize_ops import build_cat, build_pad, build_select, build_slice
from kfuse.ir.scan_ops import build_scan
from kfuse.ir.values import Scalar, TensorView, Val

if TYPE_CHECKING:
    from kfuse.frontend import FusionDefinition

    # The typed signatures of the methods made from the table at the end of this module,
    # generated from the table (tools/gen_ops_stub.py) so that a type checker sees them.
    from kfuse.frontend.pointwise_ops import PointwiseOps
else:
    PointwiseOps = object


def _pointwise_method(row: OpInfo) -> Any:
    name = row.method_name or row.name

    def method(self: Ops, *args: Any, **kwargs: Any) -> Val:
        self._fd.check_open(name)
        return self._b.pointwise(row.bind(args, kwargs), args)

    method.__name__ = name
    method.__doc__ = pointwise_docstring(row)
    return method


class Ops(LibraryMethods, PointwiseOps):
    """The op namespace; create through FusionDefinition (fd.ops)."""

    def __init__(self, fd: FusionDefinition) -> None:
        self._fd = fd

    @property
    def _b(self) -> Any:
        return self._fd._builder

    # ---- pointwise extras (the table's ops are methods made at the end of this module) ----
    if not TYPE_CHECKING:  # checked by div's row as the table's methods are; typed as they
        # are, in pointwise_ops.pyi (tools/gen_ops_stub.py's CHECKED_BY_ROW)

        def truediv(self, *args: Any, **kwargs: Any) -> Val:
            """truediv(a, b): div, except that two integer scalars give a Float (div divides
            them as integers, as nvFuser's Int scalar division does)."""
            self._fd.check_open("truediv")
            OPS["div"].bind(args, kwargs, method="truediv")
            return self._b.true_divide(*args)

    def cast(self, arg: Operand, dtype: Any) -> Val:
        """arg converted to dtype."""
        self._fd.check_open("cast")
        return self._b.cast(arg, dtype)

    def addcmul(self, x: Operand, tensor1: Operand, tensor2: Operand, value: ScalarOperand) -> Val:
        """x + tensor1 * (tensor2 * value), as nvFuser's addcmul: in the dtype x, tensor1
        and tensor2 promote to; value is a scalar (a number or a scalar Val)."""
        self._fd.check_open("addcmul")
        return build_addcmul(self._b, x, tensor1, tensor2, value)

    def triu(self, arg: Val, diagonal: int = 0) -> TensorView:
        """The upper triangle of the last two axes of arg (2 or more axes): the elements
        whose column - row >= diagonal, the others 0, as torch.triu."""
        self._fd.check_open("triu")
        return build_triu(self._b, arg, diagonal)

    # ---- factories (generated values: kfuse.ir.generated) ----
    def full(self, shape: Sequence[Extent], fill_value: ScalarOperand, dtype: Any) -> TensorView:
        """A tensor of `shape` (ints and Int scalars; a constant 1 is a broadcast axis)
        holding fill_value (a number or a scalar) converted to dtype."""
        self._fd.check_open("full")
        return build_full(self._b, shape, fill_value, dtype)

    def zeros(self, shape: Sequence[Extent], dtype: Any) -> TensorView:
        """A tensor of `shape` filled with zeros of dtype: full(shape, 0, dtype)."""
        self._fd.check_open("zeros")
        return build_full(self._b, shape, 0, dtype, op="zeros")

    def ones(self, shape: Sequence[Extent], dtype: Any) -> TensorView:
        """A tensor of `shape` filled with ones of dtype: full(shape, 1, dtype)."""
        self._fd.check_open("ones")
        return build_full(self._b, shape, 1, dtype, op="ones")

    def iota(
        self,
        length: Extent,
        start: ScalarOperand | None = None,
        step: ScalarOperand | None = None,
        dtype: Any = DataType.Int,
    ) -> TensorView:
        """The 1-D tensor start, start + step, ... of `length` elements (an int or Int
        scalar) of an integer or floating dtype; start and step (0 and 1 where None) are
        numbers or scalars of the dtype's kind."""
        self._fd.check_open("iota")
        return build_iota(self._b, length, start, step, dtype)

    # ---- random numbers (kfuse.ir.random_ops) ----
    def uniform(
        self,
        minval: ScalarOperand,
        maxval: ScalarOperand,
        shape: Sequence[Extent],
        *,
        rng_seed: Extent | None = None,
        rng_offset: Extent | None = None,
        dtype: Any = DataType.Float,
    ) -> TensorView:
        """Uniform random numbers in [minval, maxval) of `shape` and a floating dtype. With
        rng_seed and rng_offset (Int scalars or ints, both or neither) the numbers are those
        of that seed and Philox offset on every call; without, each launch draws the next
        ones of the generator (torch's CUDA generator, or kfuse.manual_seed's)."""
        self._fd.check_open("uniform")
        return build_random(self._b, "uniform", minval, maxval, shape, rng_seed, rng_offset, dtype)

    def normal(
        self,
        mean: ScalarOperand,
        std: ScalarOperand,
        shape: Sequence[Extent],
        *,
        rng_seed: Extent | None = None,
        rng_offset: Extent | None = None,
        dtype: Any = DataType.Float,
    ) -> TensorView:
        """Normal random numbers of `mean` and `std`, as uniform for the rest."""
        self._fd.check_open("normal")
        return build_random(self._b, "normal", mean, std, shape, rng_seed, rng_offset, dtype)

    def rand_like(
        self, x: Val, *, rng_seed: Extent | None = None, rng_offset: Extent | None = None
    ) -> TensorView:
        """uniform(0, 1) numbers of x's shape and (floating) dtype."""
        self._fd.check_open("rand_like")
        return build_random_like(self._b, "uniform", x, rng_seed, rng_offset, "rand_like")

    def randn_like(
        self, x: Val, *, rng_seed: Extent | None = None, rng_offset: Extent | None = None
    ) -> TensorView:
        """normal(0, 1) numbers of x's shape and (floating) dtype."""
        self._fd.check_open("randn_like")
        return build_random_like(self._b, "normal", x, rng_seed, rng_offset, "randn_like")

    # ---- shape ops ----
    def broadcast(self, arg: Val, is_broadcast_dim: Sequence[bool]) -> TensorView:
        """Insert broadcast axes where is_broadcast_dim is True (nvFuser's broadcast)."""
        self._fd.check_open("broadcast")
        return self._b.broadcast(arg, is_broadcast_dim)

    def broadcast_in_dim(
        self, arg: Val, shape: Sequence[Extent], broadcast_dims: Sequence[int]
    ) -> TensorView:
        """Place arg's axes at broadcast_dims (negative ones count from the end) of a tensor of
        `shape` (ints or Int scalars, e.g. fd.ops.shape(y)); the other axes are new, and
        broadcast axes are expanded to shape."""
        self._fd.check_open("broadcast_in_dim")
        if not isinstance(shape, (list, tuple)):
            raise DefinitionError(f"broadcast_in_dim: shape must be a list, got {describe(shape)}")
        shape = list(shape)
        if (
            isinstance(arg, Scalar)
            and not arg.is_constant
            and isinstance(broadcast_dims, (list, tuple))
            and not broadcast_dims
        ):
            # A symbolic scalar (a CPU scalar tensor's value, define_tensor(is_cpu=True))
            # everywhere in a tensor of `shape`.
            return build_full(self._b, shape, arg, arg.dtype, op="broadcast_in_dim")
        v = self._b.tensor(arg, "broadcast_in_dim")
        dims = as_index_list(broadcast_dims, "broadcast_in_dim", "broadcast_dims")
        if len(dims) != v.ndim:
            raise DefinitionError(
                f"broadcast_in_dim: broadcast_dims {dims} has {len(dims)} "
                f"entries but {describe(v)} has {v.ndim} axes"
            )
        for i, d in enumerate(dims):
            if not -len(shape) <= d < len(shape):
                raise DefinitionError(
                    f"broadcast_in_dim: broadcast_dims entry {i} ({d!r}) is "
                    f"not an axis of the {len(shape)}-d output shape"
                )
        dims = [d % len(shape) for d in dims]  # nvFuser counts a negative entry from the end
        if any(a >= b for a, b in zip(dims, dims[1:], strict=False)):
            raise DefinitionError(
                f"broadcast_in_dim: broadcast_dims {dims} must be strictly increasing"
            )
        b = self._b.broadcast(v, [i not in dims for i in range(len(shape))], op="broadcast_in_dim")
        return self._b.expand(b, shape, op="broadcast_in_dim")

    def expand(self, arg: Val, shape: Sequence[Extent]) -> TensorView:
        """Expand broadcast axes to `shape` (-1 keeps an axis)."""
        self._fd.check_open("expand")
        return self._b.expand(arg, shape)

    def squeeze(self, arg: Val, dims: Sequence[int], squeeze_expanded: bool = False) -> TensorView:
        """Remove the given axes of size 1: broadcast axes, or symbolic ones (-1 where the
        tensor was defined), which must have size 1 on every call (InputError otherwise). A
        broadcast axis that an expand gave an extent is removed only with squeeze_expanded
        (its values are the same all along it), as in nvFuser."""
        self._fd.check_open("squeeze")
        return self._b.squeeze(arg, dims, squeeze_expanded)

    def permute(self, arg: Val, dims: Sequence[int]) -> TensorView:
        """Reorder axes: output axis i is input axis dims[i]."""
        self._fd.check_open("permute")
        return self._b.permute(arg, dims)

    def reshape(self, arg: Val, new_shape: Sequence[Extent]) -> TensorView:
        """Row-major reshape to new_shape (ints or Int scalars, one -1 allowed)."""
        self._fd.check_open("reshape")
        return self._b.reshape(arg, new_shape)

    def slice(
        self,
        arg: Val,
        start_indices: Sequence[Extent],
        end_indices: Sequence[Extent],
        strides: Sequence[int] | None = None,
        manual_normalization: bool = False,
    ) -> TensorView:
        """Elements [start, end) of every axis, every stride-th (ints or Int scalars; strides
        ints, 1 by default). A negative bound counts from the axis' end and bounds are
        clamped to the axis, as Python's slicing; manual_normalization takes them as given
        (0 <= start <= end <= size, checked when the fusion runs). As nvFuser, a constant
        start must be >= 0 and a constant end >= a constant start."""
        self._fd.check_open("slice")
        return build_slice(self._b, arg, start_indices, end_indices, strides, manual_normalization)

    def select(self, arg: Val, index: Extent, dim: int) -> TensorView:
        """arg at position `index` (an int or Int scalar, in [0, the axis' size)) of axis
        `dim`, that axis removed."""
        self._fd.check_open("select")
        return build_select(self._b, arg, index, dim)

    def pad(
        self, arg: Val, pad_widths: Sequence[Extent], value: ScalarOperand | None = None
    ) -> TensorView:
        """arg widened by pad_widths in torch.nn.functional.pad's order (the last axis'
        before and after first; ints or Int scalars; negative ones crop), the new elements
        `value` (zero or False by default; of the tensor's kind)."""
        self._fd.check_open("pad")
        return build_pad(self._b, arg, pad_widths, value)

    def cat(self, tensors: Sequence[Val], dim: int = 0, manual_padding: bool = False) -> TensorView:
        """The tensors (one dtype and rank) one after another along axis `dim`."""
        self._fd.check_open("cat")
        return build_cat(self._b, tensors, dim, manual_padding)

    def index_select(self, arg: Val, index: Val, dim: int) -> TensorView:
        """arg along axis `dim` at the positions the 1-D integer tensor `index` holds (a 0-D
        index: one position, the axis keeping size 1, as torch.index_select)."""
        self._fd.check_open("index_select")
        return build_index_select(self._b, arg, index, dim)

    def gather(self, arg: Val, index: Val, dim: int) -> TensorView:
        """torch.gather: out[..., j, ...] = arg[..., index[..., j, ...], ...] along `dim`; the
        index (of arg's rank) no larger than arg off `dim`, the output of its shape."""
        self._fd.check_open("gather")
        return build_gather(self._b, arg, index, dim, broadcast=False)

    def take_along_axis(self, arg: Val, index: Val, dim: int) -> TensorView:
        """As gather, with the other axes of arg and the index broadcast together."""
        self._fd.check_open("take_along_axis")
        return build_gather(self._b, arg, index, dim, broadcast=True, op="take_along_axis")

    def embedding_fwd(
        self,
        input: Val,
        weight: Val,
        padding_idx: ScalarOperand | None = None,
        max_norm: ScalarOperand | None = None,
        norm_type: ScalarOperand | None = None,
        scale_grad_by_freq: ScalarOperand | None = None,
        sparse: ScalarOperand | None = None,
    ) -> TensorView:
        """torch.nn.functional.embedding's forward: the rows of the 2-D `weight` at the
        integer ids `input` (any shape), of shape input's + [embedding_dim]; rows whose
        norm_type-norm exceeds max_norm are scaled down to it (the weight itself is not
        changed). padding_idx, scale_grad_by_freq and sparse only change the backward."""
        self._fd.check_open("embedding_fwd")
        return build_embedding_fwd(
            self._b, input, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse
        )

    # ---- layout ----
    def stride_order(self, arg: Val, stride_order: Sequence[int]) -> TensorView:
        """arg, stored in `stride_order` where it is a fusion output (stride_order[i] is
        the rank of axis i's stride, 0 the fastest: [3, 0, 2, 1] is NCHW channels-last);
        the same values anywhere else."""
        self._fd.check_open("stride_order")
        return build_stride_order(self._b, arg, stride_order)

    def segment_set(self, x: Val) -> Val:
        """x, computed in another segment than the one producing it: x is written to
        memory there and read back by the kernel that computes what uses the result."""
        self._fd.check_open("segment_set")
        return build_segment_set(self._b, x)

    def size(self, arg: Val, dim: int) -> Scalar:
        """The extent of axis `dim` of arg, an Int scalar."""
        self._fd.check_open("size")
        return self._b.size(arg, dim)

    def shape(self, arg: Val) -> list[Scalar]:
        """All extents of arg, as a list of Int scalars."""
        self._fd.check_open("shape")
        v = self._b.tensor(arg, "shape")
        return [self._b.size(v, i) for i in range(v.ndim)]

    # ---- library ops (run by the expr_eval scheduler, never generated) ----
    def matmul(self, arg1: Val, arg2: Val) -> TensorView:
        """arg1 @ arg2 with torch.matmul semantics for operands of rank >= 2: [..., n, k] @
        [..., k, m] -> [..., n, m], batch axes broadcast. Floating operands; the result keeps
        their (promoted) dtype, so BFloat16 stays BFloat16."""
        self._fd.check_open("matmul")
        from kfuse.ir.library_ops import build_matmul

        return build_matmul(self._b, arg1, arg2)

    def linear(self, arg1: Val, arg2: Val, bias: Val | None = None) -> TensorView:
        """torch.nn.functional.linear: arg1 [..., k] @ arg2 [m, k].T + bias[m] (bias optional)."""
        self._fd.check_open("linear")
        from kfuse.ir.library_ops import build_linear

        return build_linear(self._b, arg1, arg2, bias)

    # ---- reductions ----
    def _reduce(
        self, op: str, x: Any, dims: Any, keepdim: bool, dtype: Any, dim: Any = None
    ) -> TensorView:
        self._fd.check_open(op)
        if dim is not None:  # nvFuser's overload op(arg, dim: int, keepdim, dtype)
            if dims is not None:
                raise DefinitionError(f"{op}: give dims or dim, not both")
            if isinstance(dim, bool) or not isinstance(dim, int):
                raise DefinitionError(f"{op}: dim must be one axis (an int), got {dim!r}")
            dims = [dim]
        if isinstance(dims, DataType):  # nvFuser's overload op(arg, dtype): over every axis
            if dtype is not None or keepdim is not False:
                raise DefinitionError(
                    f"{op}: the dtype {dims!r} is given in dims' place; "
                    "then no keepdim or dtype may follow"
                )
            dims, dtype = None, dims
        return self._b.reduction(op, x, dims, keepdim, dtype)

    def sum(
        self,
        arg: Val,
        dims: Dims | DataType = None,
        keepdim: bool = False,
        dtype: Any = None,
        *,
        dim: int | None = None,
    ) -> TensorView:
        """Sum over dims (all when None). dtype: accumulate/output dtype; by default ints and
        Bool sum to Int, Half/BFloat16 accumulate in Float and return their own dtype.
        As in nvFuser, sum(arg, DataType.X) sums every axis in dtype X, dtype=DataType.Null
        is the default, and dim=i (one axis) is dims=[i]."""
        return self._reduce("sum", arg, dims, keepdim, dtype, dim)

    def prod(
        self,
        arg: Val,
        dims: Dims | DataType = None,
        keepdim: bool = False,
        dtype: Any = None,
        *,
        dim: int | None = None,
    ) -> TensorView:
        """Product over dims; dtype rules (and nvFuser's prod(arg, dtype)) as for sum."""
        return self._reduce("prod", arg, dims, keepdim, dtype, dim)

    def max(
        self,
        arg: Val,
        dims: Dims | DataType = None,
        keepdim: bool = False,
        dtype: Any = None,
        *,
        dim: int | None = None,
    ) -> TensorView:
        """Maximum over dims (NaN-propagating); keeps arg's dtype unless dtype is given."""
        return self._reduce("max", arg, dims, keepdim, dtype, dim)

    def min(
        self,
        arg: Val,
        dims: Dims | DataType = None,
        keepdim: bool = False,
        dtype: Any = None,
        *,
        dim: int | None = None,
    ) -> TensorView:
        """Minimum over dims (NaN-propagating); keeps arg's dtype unless dtype is given."""
        return self._reduce("min", arg, dims, keepdim, dtype, dim)

    def welford(self, arg: Val, dims: Dims) -> tuple[TensorView, TensorView, TensorView]:
        """(avg, m2, count) over dims, as nvFuser's welford: the mean, the sum of squared
        deviations from it (the biased variance times the count) and the number of elements,
        in one pass (see kfuse.ir.WelfordOp)."""
        self._fd.check_open("welford")
        return self._b.welford(arg, dims)

    def cumsum(self, arg: Val, dim: int, init: ScalarOperand | None = None) -> TensorView:
        """The inclusive prefix sum of arg along `dim` (negative counts from the end), of
        arg's shape and dtype (nvFuser's: Int32 stays Int32; cast to Int for torch's)."""
        self._fd.check_open("cumsum")
        return build_scan(self._b, "cumsum", arg, dim, init)

    def cumprod(self, arg: Val, dim: int, init: ScalarOperand | None = None) -> TensorView:
        """The inclusive prefix product of arg along `dim`, of arg's shape and dtype."""
        self._fd.check_open("cumprod")
        return build_scan(self._b, "cumprod", arg, dim, init)

    def cummax(self, arg: Val, dim: int, init: ScalarOperand | None = None) -> TensorView:
        """The running maximum of arg along `dim` (NaN-propagating), of arg's shape and
        dtype: torch.cummax's values (nvFuser returns no indices either)."""
        self._fd.check_open("cummax")
        return build_scan(self._b, "cummax", arg, dim, init)

    def cummin(self, arg: Val, dim: int, init: ScalarOperand | None = None) -> TensorView:
        """The running minimum of arg along `dim` (NaN-propagating): torch.cummin's values."""
        self._fd.check_open("cummin")
        return build_scan(self._b, "cummin", arg, dim, init)

    def _count(self, v: TensorView, dims: tuple[int, ...]) -> Val:
        """The number of reduced elements, as an exact Int scalar (product of sizes)."""
        n: Val = self._b.size(v, dims[0])
        for d in dims[1:]:
            n = self._b.pointwise("mul", [n, self._b.size(v, d)])
        return n

    def _float_input(
        self, x: Any, op: str, dtype: Any = None, *, complex_ok: bool = False
    ) -> tuple[TensorView, DataType]:
        """x cast for floating math: returns (x in its compute dtype, the result dtype).
        `complex_ok`: complex dtypes are taken too (mean)."""
        v = self._b.tensor(x, op)
        out = optional_dtype(dtype, what=f"{op}: dtype") or v.dtype
        if not (out.is_floating or (complex_ok and out.is_complex)):
            raise DefinitionError(
                f"{op}: {describe(v)} needs a floating dtype "
                f"(got {out.value}); cast it or pass dtype="
            )
        compute = DataType.Float if out in REDUCED_FLOATS else out
        return self._b.cast(v, compute, op=op), out

    def mean(
        self, x: Val, dims: Dims | DataType = None, keepdim: bool = False, dtype: Any = None
    ) -> TensorView:
        """Mean over dims: sum / N with N the exact product of the reduced sizes."""
        self._fd.check_open("mean")
        v, out = self._float_input(x, "mean", dtype, complex_ok=True)
        dims_n = self._b._reduction_dims(v, dims, "mean")
        s = self._b.reduction("sum", v, dims_n, False, v.dtype)
        n = self._count(v, dims_n)
        if s.dtype.is_complex:  # each part divided: the count as a complex scalar would be a
            # run-time complex kernel parameter, which kernels do not take
            parts = [self._b.pointwise(p, [s]) for p in ("real", "imag")]
            mean = self._b.pointwise("complex", [self._b.pointwise("div", [p, n]) for p in parts])
        else:
            mean = self._b.pointwise("div", [s, n])
        m = self._b.cast(mean, out)
        return self._b.keepdim(m, dims_n, v.ndim, keepdim, "mean")

    def var_mean(
        self, arg: Val, dims: Dims = None, correction: int = 1, keepdim: bool = False
    ) -> tuple[TensorView, TensorView]:
        """(variance, mean) over dims via Welford; variance = m2 / (N - correction)."""
        self._fd.check_open("var_mean")
        if isinstance(correction, bool) or not isinstance(correction, int) or correction < 0:
            raise DefinitionError(f"var_mean: correction must be an int >= 0, got {correction!r}")
        v, out = self._float_input(arg, "var_mean")
        dims_n = self._b._reduction_dims(v, dims, "var_mean")
        avg, m2, _ = self._b.welford(v, dims_n)
        denom = self._count(v, dims_n)
        if correction:
            denom = self._b.pointwise("sub", [denom, correction])
        var = self._b.cast(self._b.pointwise("div", [m2, denom]), out)
        mean = self._b.cast(avg, out)
        return (
            self._b.keepdim(var, dims_n, v.ndim, keepdim, "var_mean"),
            self._b.keepdim(mean, dims_n, v.ndim, keepdim, "var_mean"),
        )

    def var(
        self, arg: Val, dims: Dims = None, correction: int = 1, keepdim: bool = False
    ) -> TensorView:
        """Variance over dims (Welford), divided by N - correction."""
        return self.var_mean(arg, dims, correction, keepdim)[0]

    # ---- normalizations ----
    def softmax(self, x: Val, dim: int = -1) -> TensorView:
        """exp(x - max) / sum(exp(x - max)) along dim."""
        self._fd.check_open("softmax")
        v, out = self._float_input(x, "softmax")
        (d,) = self._b.dims(v, [as_index(dim, "softmax", "dim")], "softmax")
        e = self._b.pointwise(
            "exp", [self._b.pointwise("sub", [v, self._b.reduction("max", v, (d,), True)])]
        )
        s = self._b.reduction("sum", e, (d,), True)
        return self._b.cast(self._b.pointwise("div", [e, s]), out)

    def log_softmax(self, x: Val, dim: int = -1) -> TensorView:
        """(x - max) - log(sum(exp(x - max))) along dim."""
        self._fd.check_open("log_softmax")
        v, out = self._float_input(x, "log_softmax")
        (d,) = self._b.dims(v, [as_index(dim, "log_softmax", "dim")], "log_softmax")
        shifted = self._b.pointwise("sub", [v, self._b.reduction("max", v, (d,), True)])
        s = self._b.reduction("sum", self._b.pointwise("exp", [shifted]), (d,), True)
        return self._b.cast(self._b.pointwise("sub", [shifted, self._b.pointwise("log", [s])]), out)

    def _norm_dims(self, v: TensorView, normalized_ndim: int, op: str) -> tuple[int, ...]:
        if (
            isinstance(normalized_ndim, bool)
            or not isinstance(normalized_ndim, int)
            or not 1 <= normalized_ndim <= v.ndim
        ):
            raise DefinitionError(
                f"{op}: normalized_ndim {normalized_ndim!r} must be between "
                f"1 and the rank of {describe(v)}"
            )
        return tuple(range(v.ndim - normalized_ndim, v.ndim))

    def _affine(self, y: Val, weight: Any, bias: Any, op: str) -> Val:
        for name, p in (("weight", weight), ("bias", bias)):
            if p is None:
                continue
            t = self._b.tensor(p, op, 1 if name == "weight" else 2)
            if t.dtype in REDUCED_FLOATS:
                t = self._b.cast(t, DataType.Float, op=op)
            y = self._b.pointwise("mul" if name == "weight" else "add", [y, t])
        return y

    def layer_norm(
        self,
        x: Val,
        weight: Val | None = None,
        bias: Val | None = None,
        *,
        eps: float = 1e-5,
        normalized_ndim: int = 1,
    ) -> TensorView:
        """(x - mean) * rsqrt(var + eps) * weight + bias over the last normalized_ndim axes
        (biased variance, as torch.nn.functional.layer_norm)."""
        self._fd.check_open("layer_norm")
        v, out = self._float_input(x, "layer_norm")
        dims = self._norm_dims(v, normalized_ndim, "layer_norm")
        var, mean = self.var_mean(v, dims, correction=0, keepdim=True)
        inv = self._b.pointwise("rsqrt", [self._b.pointwise("add", [var, eps])])
        y = self._b.pointwise("mul", [self._b.pointwise("sub", [v, mean]), inv])
        return self._b.cast(self._affine(y, weight, bias, "layer_norm"), out)

    def rms_norm(
        self, x: Val, weight: Val | None = None, *, eps: float = 1e-6, normalized_ndim: int = 1
    ) -> TensorView:
        """x * rsqrt(mean(x * x) + eps) * weight over the last normalized_ndim axes."""
        self._fd.check_open("rms_norm")
        v, out = self._float_input(x, "rms_norm")
        dims = self._norm_dims(v, normalized_ndim, "rms_norm")
        ms = self.mean(self._b.pointwise("mul", [v, v]), dims, keepdim=True)
        inv = self._b.pointwise("rsqrt", [self._b.pointwise("add", [ms, eps])])
        y = self._b.pointwise("mul", [v, inv])
        return self._b.cast(self._affine(y, weight, None, "rms_norm"), out)


for _row in OPS.values():
    if _row.method_name is not None:
        # A row's method never shadows one written here (truediv, cast, the reductions).
        assert not hasattr(Ops, _row.method_name), _row.method_name
        setattr(Ops, _row.method_name, _pointwise_method(_row))
del _row
