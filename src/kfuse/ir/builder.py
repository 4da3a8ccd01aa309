"""Checked construction of Fusion IR: type promotion, implicit casts and broadcasts, and the
DefinitionErrors for invalid definitions. kfuse.frontend's fd.ops is a thin layer over this.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any, cast

from kfuse.dtypes import (
    INTEGER_RANGE,
    DataType,
    as_dtype,
    optional_dtype,
    promote_types,
    python_scalar_dtype,
)
from kfuse.errors import DefinitionError
from kfuse.ir import complex_rules as cx
from kfuse.ir.exprs import (
    BinaryOp,
    BroadcastOp,
    CastOp,
    ExpandOp,
    Expr,
    PermuteOp,
    ReductionOp,
    ReshapeOp,
    SizeOp,
    SqueezeOp,
    TernaryOp,
    UnaryOp,
    WelfordOp,
)
from kfuse.ir.fusion import Fusion
from kfuse.ir.ops import OPS, REDUCTION_OPS
from kfuse.ir.values import Axis, Scalar, TensorView, Val


def describe(v: Any) -> str:
    """A short description of an operand for error messages."""
    if isinstance(v, TensorView):
        return f"{v.name} (rank {v.ndim} {v.dtype.label} tensor)"
    if isinstance(v, Scalar):
        return f"{v.name} ({v.dtype.label} scalar)"
    return f"{v!r} ({type(v).__name__})"


MAX_EXTENT = 2**63 - 1
"""The largest extent: sizes are int64 everywhere (kernels, frameworks)."""


def _is_bool(b: Any) -> bool:
    """A Python or NumPy bool (a flag given as 1 or "no" is not silently taken as one)."""
    return isinstance(b, bool) or getattr(getattr(b, "dtype", None), "kind", "") == "b"


def as_index(d: Any, op: str, what: str) -> int:
    """`d` as a Python int: an int or any integer that supports __index__ (NumPy's); a bool,
    float or string is a DefinitionError naming `what`, never silently converted."""
    if not isinstance(d, bool) and getattr(getattr(d, "dtype", None), "kind", "") != "b":
        try:
            return operator.index(d)
        except TypeError:
            pass
    raise DefinitionError(f"{op}: {what} {d!r} is not an integer")


def as_index_list(dims: Any, op: str, what: str = "dim") -> list[int]:
    """One integer, or a list or tuple of them, as a list of Python ints (see as_index)."""
    if isinstance(dims, (list, tuple)):
        return [as_index(d, op, f"{what} entry {k}") for k, d in enumerate(dims)]
    try:
        return [as_index(dims, op, what)]
    except DefinitionError:
        raise DefinitionError(
            f"{op}: {what} must be an integer or a list of integers, got {describe(dims)}"
        ) from None


def is_integer_division(op: str, vals: Sequence[Val]) -> bool:
    """div whose operands promote to an integer dtype (Bool alone does not): nvFuser's
    integer division, whose result is an integer (C's `/`, rounding toward zero), so that
    `fd.ops.div(fd.ops.size(x, 1), g)` is an extent and div of Int tensors is torch's
    div(rounding_mode="trunc"). Any other div is true division (kfuse.ir.ops)."""
    if op != "div":
        return False
    tensors = [v.dtype for v in vals if isinstance(v, TensorView)]
    scalars = [v.dtype for v in vals if not isinstance(v, TensorView)]
    return promote_types(tensors, scalars).is_integral


def is_expanded_axis(v: TensorView, d: int) -> bool:
    """Whether axis `d` of `v`, not a broadcast axis, is a broadcast axis that an expand gave
    an extent (nvFuser's expanded broadcast, which squeeze removes only when asked to): it
    comes from such axes alone, through element-wise ops (where every operand that is not
    broadcast along it has one), permutes, broadcasts and squeezes. Any other origin (an
    input's axis, a reshape's, a slice's...) makes it a real axis."""
    pending, seen = [(v, d)], set()
    while pending:
        t, i = pending.pop()
        if (id(t), i) in seen:
            continue
        seen.add((id(t), i))
        e = t.definition
        src = e.inputs[0] if e is not None else None
        if isinstance(e, ExpandOp):
            assert isinstance(src, TensorView)
            if not (e.extents[i] is not None and src.axes[i].is_broadcast):
                pending.append((src, i))  # an axis kept, or one only checked against a size
        elif isinstance(e, (UnaryOp, BinaryOp, TernaryOp, CastOp)):
            pending += [
                (u, i) for u in e.inputs if isinstance(u, TensorView) and not u.axes[i].is_broadcast
            ]
        elif isinstance(e, PermuteOp):
            pending.append((cast(TensorView, src), e.perm[i]))
        elif isinstance(e, BroadcastOp):
            # Not a new axis (those are broadcast): the input's axis of that position.
            pending.append((cast(TensorView, src), i - sum(e.is_new_axis[:i])))
        elif isinstance(e, SqueezeOp):
            kept = [k for k in range(cast(TensorView, src).ndim) if k not in e.dims]
            pending.append((cast(TensorView, src), kept[i]))
        else:
            return False
    return True


class Builder:
    """Creates Vals and Exprs in `fusion` on behalf of `owner` (a FusionDefinition)."""

    def __init__(self, fusion: Fusion, owner: Any) -> None:
        self.fusion = fusion
        self.owner = owner

    # ---- vals ----
    def new_tensor(
        self, dtype: DataType, axes: Sequence[Axis], *, is_input: bool = False
    ) -> TensorView:
        """A fresh TensorView."""
        name, serial = self.fusion.next_name("T")
        return TensorView(
            name, dtype, tuple(axes), is_input=is_input, owner=self.owner, serial=serial
        )

    def new_scalar(self, dtype: DataType, *, is_input: bool = False) -> Scalar:
        """A fresh non-constant Scalar."""
        name, serial = self.fusion.next_name("S")
        return Scalar(name, dtype, None, is_input=is_input, owner=self.owner, serial=serial)

    def constant(
        self, value: Any, dtype: DataType | None = None, *, op: str = "define_scalar"
    ) -> Scalar:
        """A constant Scalar; the value is converted to dtype's Python kind, range-checked."""
        if dtype is None:
            dtype = python_scalar_dtype(value)
        if hasattr(value, "item"):
            try:
                value = value.item()
            except (ValueError, TypeError):  # an array of several elements, or not a number
                raise DefinitionError(f"{op}: {value!r} is not a number") from None
        if not isinstance(value, (bool, int, float, complex)):
            raise DefinitionError(f"{op}: {value!r} is not a number")
        if dtype.is_complex or isinstance(value, complex):
            value = cx.complex_constant(value, dtype, op)
        elif dtype is DataType.Bool:
            value = bool(value)
        elif dtype.is_integral:
            if isinstance(value, float) and not value.is_integer():
                raise DefinitionError(f"{op}: {value!r} is not an integer ({dtype.label})")
            value = int(value)
            lo, hi = INTEGER_RANGE[dtype]
            if not lo <= value <= hi:
                raise DefinitionError(f"{op}: {value} does not fit in {dtype.label}")
        else:
            value = float(value)
        name, serial = self.fusion.next_name("C")
        return Scalar(name, dtype, value, owner=self.owner, serial=serial)

    def operand(self, x: Any, op: str, pos: int) -> Val:
        """Check an operand: a Val of this definition, or a Python number (made a constant)."""
        if isinstance(x, Val):
            if x.owner is not self.owner:
                raise DefinitionError(
                    f"{op}: operand {pos} ({x.name}) belongs to another FusionDefinition"
                )
            return x
        if isinstance(x, (bool, int, float, complex)) or (
            hasattr(x, "dtype") and getattr(x, "ndim", None) == 0
        ):
            try:
                return self.constant(x, op=op)
            except DefinitionError as e:
                raise DefinitionError(f"{op}: operand {pos}: {e}") from None
        raise DefinitionError(
            f"{op}: operand {pos} is {describe(x)}, expected a tensor or "
            "scalar of this FusionDefinition or a Python number"
        )

    def tensor(self, x: Any, op: str, pos: int = 0) -> TensorView:
        """Check that an operand is a TensorView of this definition."""
        v = self.operand(x, op, pos)
        if not isinstance(v, TensorView):
            raise DefinitionError(f"{op}: operand {pos} is {describe(x)}, expected a tensor")
        return v

    def add(self, expr: Expr) -> Expr:
        """Register an expr with the fusion."""
        cx.check_kernel_operands(expr)
        return self.fusion.register_expr(expr)

    # ---- pointwise ----
    def cast(self, x: Any, dtype: Any, *, op: str = "cast") -> Val:
        """x converted to dtype (x itself when it already has it; constants are re-made)."""
        v = self.operand(x, op, 0)
        dtype = as_dtype(dtype, what=f"{op}: dtype")
        if v.dtype is dtype:
            return v
        if v.dtype.is_complex or dtype.is_complex:
            return cx.complex_cast(self, v, dtype, op)
        if isinstance(v, Scalar) and v.is_constant:
            value = v.value
            if dtype.is_floating or dtype is DataType.Bool:
                return self.constant(
                    bool(value) if dtype is DataType.Bool else float(value), dtype, op=op
                )
            if isinstance(value, float) and not math.isfinite(value):
                raise DefinitionError(f"{op}: cannot convert {value} to {dtype.label}")
            return self.constant(int(value), dtype, op=op)
        if isinstance(v, TensorView):
            out: Val = self.new_tensor(dtype, v.axes)
        else:
            out = self.new_scalar(dtype)
        self.add(CastOp(inputs=(v,), outputs=(out,), dtype=dtype))
        return out

    def pointwise(self, op: str, args: Sequence[Any]) -> Val:
        """Build a UnaryOp/BinaryOp/TernaryOp, inserting casts and broadcasts."""
        info = OPS[op]
        if len(args) != info.arity:
            raise DefinitionError(f"{op} takes {info.arity} operands, got {len(args)}")
        vals = [self.operand(a, op, i) for i, a in enumerate(args)]
        cond = None
        if info.has_condition:
            cond, vals = vals[0], vals[1:]
            if cond.dtype is not DataType.Bool:
                raise DefinitionError(
                    f"{op}: the condition {describe(cond)} must be Bool (compare or cast it first)"
                )
        compute = self._compute_dtype(op, vals)
        if info.category == "logical":
            compute = DataType.Bool
        if compute.is_complex and any(isinstance(v, TensorView) for v in [cond, *vals]):
            vals = [cx.complex_operand(self, v, compute, op) for v in vals]
        if info.casts_operands:
            vals = [self.cast(v, compute, op=op) for v in vals]
        out_dtype = cx.result_dtype(info, compute)
        if cond is not None:
            vals = [cond, *vals]
        vals = self._align(op, vals)
        tensors = [v for v in vals if isinstance(v, TensorView)]
        if not tensors and (compute.is_complex or out_dtype.is_complex) and cx.all_constant(vals):
            return self.constant(cx.folded_value(op, vals, out_dtype), out_dtype, op=op)
        if tensors:
            out: Val = self.new_tensor(out_dtype, self._result_axes(op, tensors))
        else:
            out = self.new_scalar(out_dtype)
        cls = {1: UnaryOp, 2: BinaryOp, 3: TernaryOp}[info.arity]
        self.add(cls(inputs=tuple(vals), outputs=(out,), op=op))
        return out

    def _compute_dtype(self, op: str, vals: list[Val]) -> DataType:
        info = OPS[op]
        tensor_dt = [v.dtype for v in vals if isinstance(v, TensorView)]
        weak_dt = [v.dtype for v in vals if not isinstance(v, TensorView)]
        if not info.accepts_float:
            for i, v in enumerate(vals):
                if v.dtype.is_floating:
                    kinds = "Bool or integer" if info.accepts_bool else "integer"
                    raise DefinitionError(
                        f"{op}: operand {i} {describe(v)} is floating; {op} needs {kinds} operands"
                    )
        dt = promote_types(tensor_dt, weak_dt)
        cx.check_complex_operands(op, dt, [describe(v) for v in vals])
        if info.category == "float_math" or info.result == "float":
            if not (dt.is_floating or dt.is_complex) and not is_integer_division(op, vals):
                dt = DataType.Float
        if info.full_precision_only and dt not in (DataType.Float, DataType.Double):
            raise DefinitionError(
                f"{op}: the operands ({', '.join(describe(v) for v in vals)}) promote to "
                f"{dt.value}; {op} needs Float or Double"
            )
        if not info.accepts_bool and dt is DataType.Bool:
            raise DefinitionError(
                f"{op}: Bool operands are not supported ({', '.join(describe(v) for v in vals)})"
            )
        return dt

    def true_divide(self, a: Any, b: Any) -> Val:
        """a / b as a floating value, also of integers (which `div` divides as integers, as
        nvFuser does)."""
        vals = [self.operand(a, "truediv", 0), self.operand(b, "truediv", 1)]
        if is_integer_division("div", vals):
            vals[0] = self.cast(vals[0], DataType.Float, op="truediv")
        return self.pointwise("div", vals)

    def _align(self, op: str, vals: list[Val]) -> list[Val]:
        """Right-align tensor ranks numpy-style by inserting BroadcastOps."""
        rank = max((v.ndim for v in vals if isinstance(v, TensorView)), default=0)
        out = []
        for v in vals:
            if isinstance(v, TensorView) and v.ndim < rank:
                v = self.broadcast(v, [True] * (rank - v.ndim) + [False] * v.ndim, op=op)
            out.append(v)
        return out

    def _result_axes(self, op: str, tensors: list[TensorView]) -> list[Axis]:
        axes = []
        for i in range(tensors[0].ndim):
            real = [(t, t.axes[i]) for t in tensors if not t.axes[i].is_broadcast]
            if not real:
                axes.append(Axis(True, 1))
                continue
            static = [(t, a) for t, a in real if a.extent is not None]
            for (t1, a1), (t2, a2) in zip(static, static[1:], strict=False):
                if a1.extent != a2.extent:
                    raise DefinitionError(
                        f"{op}: incompatible broadcast: axis {i} of {describe(t1)} has size "
                        f"{a1.extent} but axis {i} of {describe(t2)} has size {a2.extent} "
                        "(after right-aligning ranks)"
                    )
            axes.append(Axis(False, static[0][1].extent if static else None))
        return axes

    # ---- shape ops ----
    def broadcast(
        self, x: Any, is_new_axis: Sequence[bool], *, op: str = "broadcast"
    ) -> TensorView:
        """Insert broadcast axes where is_new_axis is True."""
        v = self.tensor(x, op)
        if not isinstance(is_new_axis, (list, tuple)) or not all(_is_bool(b) for b in is_new_axis):
            raise DefinitionError(
                f"{op}: is_broadcast_dim must be a list of bools, got {describe(is_new_axis)}"
            )
        flags = tuple(bool(b) for b in is_new_axis)
        if sum(not b for b in flags) != v.ndim:
            raise DefinitionError(
                f"{op}: is_broadcast_dim {list(flags)} has "
                f"{sum(not b for b in flags)} False entries but "
                f"{describe(v)} has {v.ndim} axes"
            )
        if all(not b for b in flags):
            return v
        it = iter(v.axes)
        axes = [Axis(True, 1) if b else next(it) for b in flags]
        out = self.new_tensor(v.dtype, axes)
        self.add(BroadcastOp(inputs=(v,), outputs=(out,), is_new_axis=flags))
        return out

    def shape_entries(self, shape: Any, op: str) -> list[Any]:
        """A shape argument as a list (its entries are checked by `extent`)."""
        if not isinstance(shape, (list, tuple)):
            raise DefinitionError(f"{op}: shape must be a list of sizes, got {describe(shape)}")
        return list(shape)

    def extent(self, e: Any, op: str, i: int) -> Scalar | int:
        """A shape entry: an int (kept) or an integer Scalar of this definition."""
        if not isinstance(e, Scalar):
            try:
                e = as_index(e, op, f"shape entry {i}")
            except DefinitionError:
                raise DefinitionError(
                    f"{op}: shape entry {i} is {describe(e)}, expected an int or an integer scalar"
                ) from None
        if isinstance(e, Scalar):
            self.operand(e, op, i)
            if e.dtype.is_floating:
                # nvFuser casts every size to its index type (toward zero): Thunder's
                # reshape(-1) computes an extent as 192 * reciprocal(rows), a Double.
                e = self.cast(e, DataType.Int, op=op)
                assert isinstance(e, Scalar)
            if not e.dtype.is_integral:
                raise DefinitionError(f"{op}: shape entry {i} {describe(e)} is not an integer")
            return e.value if e.is_constant else e
        if e < -1:
            raise DefinitionError(f"{op}: shape entry {i} is {e}; sizes are >= 0 (or -1)")
        if e > MAX_EXTENT:
            raise DefinitionError(f"{op}: shape entry {i} is {e}; sizes are at most 2**63 - 1")
        return e

    def expand(self, x: Any, shape: Sequence[Any], *, op: str = "expand") -> TensorView:
        """Expand broadcast axes to the extents in shape (-1 or 1 keeps an axis)."""
        v = self.tensor(x, op)
        shape = self.shape_entries(shape, op)
        if len(shape) != v.ndim:
            raise DefinitionError(
                f"{op}: shape has {len(shape)} entries but {describe(v)} has {v.ndim} axes"
            )
        extents: list[Scalar | None] = []
        for i, (axis, e) in enumerate(zip(v.axes, shape, strict=False)):
            e = self.extent(e, op, i)
            if not axis.is_broadcast:
                if isinstance(e, int) and e not in (-1,) and axis.extent not in (None, e):
                    raise DefinitionError(
                        f"{op}: axis {i} of {describe(v)} has size "
                        f"{axis.extent}, cannot expand it to {e}"
                    )
                # A size asked of an axis that is not broadcast is checked at execute
                # (kfuse.ir.shapes), not taken on trust: a symbolic axis may not match it.
                if isinstance(e, int):
                    e = (
                        None
                        if e == -1 or axis.extent == e
                        else self.constant(e, DataType.Int, op=op)
                    )
                extents.append(e)
            elif isinstance(e, int):
                extents.append(None if e in (-1, 1) else self.constant(e, DataType.Int, op=op))
            else:
                extents.append(e)
        if all(e is None for e in extents):
            return v
        axes = [
            a
            if e is None or not a.is_broadcast
            else Axis(False, e.value if e.is_constant else None)
            for a, e in zip(v.axes, extents, strict=False)
        ]
        out = self.new_tensor(v.dtype, axes)
        scalars = tuple(e for e in extents if e is not None and not e.is_constant)
        self.add(ExpandOp(inputs=(v, *scalars), outputs=(out,), extents=tuple(extents)))
        return out

    def squeeze(
        self, x: Any, dims: Sequence[int], squeeze_expanded: Any = False, *, op: str = "squeeze"
    ) -> TensorView:
        """Remove axes of size 1, as nvFuser's squeeze(x, dims, squeeze_expanded): broadcast
        axes, and axes whose size only the inputs tell (symbolic ones), which shape inference
        checks to be 1 on every call. An expanded broadcast axis is refused unless
        squeeze_expanded, which removes it whatever its extent."""
        v = self.tensor(x, op)
        if not _is_bool(squeeze_expanded):
            raise DefinitionError(
                f"{op}: squeeze_expanded must be a bool, got {describe(squeeze_expanded)}"
            )
        norm = self.dims(v, dims, op)
        expanded = []
        for d in norm:
            axis = v.axes[d]
            if axis.is_broadcast:
                continue
            if is_expanded_axis(v, d):
                if not squeeze_expanded:
                    raise DefinitionError(
                        f"{op}: axis {d} of {describe(v)} is a broadcast axis that an "
                        "expand gave an extent; squeeze_expanded=True removes it"
                    )
                expanded.append(d)
            elif axis.extent is not None and axis.extent != 1:
                raise DefinitionError(
                    f"{op}: axis {d} of {describe(v)} has size {axis.extent} "
                    "(only axes of size 1 can be squeezed)"
                )
        if not norm:
            return v
        out = self.new_tensor(v.dtype, [a for i, a in enumerate(v.axes) if i not in norm])
        self.add(SqueezeOp(inputs=(v,), outputs=(out,), dims=norm, expanded=tuple(expanded)))
        return out

    def permute(self, x: Any, perm: Sequence[int], *, op: str = "permute") -> TensorView:
        """Reorder axes: output axis i is input axis perm[i]."""
        v = self.tensor(x, op)
        p = tuple(d + (v.ndim if d < 0 else 0) for d in as_index_list(perm, op, "dims"))
        if sorted(p) != list(range(v.ndim)):
            raise DefinitionError(
                f"{op}: {list(p)} is not a permutation of the {v.ndim} axes of {describe(v)}"
            )
        if p == tuple(range(v.ndim)):
            return v
        out = self.new_tensor(v.dtype, [v.axes[d] for d in p])
        self.add(PermuteOp(inputs=(v,), outputs=(out,), perm=p))
        return out

    def reshape(self, x: Any, shape: Sequence[Any], *, op: str = "reshape") -> TensorView:
        """Row-major reshape; at most one entry may be -1."""
        v = self.tensor(x, op)
        entries = [self.extent(e, op, i) for i, e in enumerate(self.shape_entries(shape, op))]
        if sum(1 for e in entries if isinstance(e, int) and e == -1) > 1:
            raise DefinitionError(f"{op}: at most one shape entry may be -1, got {list(shape)}")
        ints = [e for e in entries if isinstance(e, int)]
        statics = [a.extent for a in v.axes]
        if len(ints) == len(entries) and -1 not in ints and None not in statics:
            if math.prod(ints) != math.prod(cast("list[int]", statics)):
                raise DefinitionError(
                    f"{op}: cannot reshape {describe(v)} of size {statics} to {ints}"
                )
        scalars = tuple(
            self.constant(e, DataType.Int, op=op) if isinstance(e, int) else e for e in entries
        )
        axes = [
            Axis(True, 1)
            if isinstance(e, int) and e == 1
            else Axis(False, e if isinstance(e, int) and e != -1 else None)
            for e in entries
        ]
        out = self.new_tensor(v.dtype, axes)
        inputs = (v, *(s for s in scalars if not s.is_constant))
        self.add(ReshapeOp(inputs=inputs, outputs=(out,), shape=scalars))
        return out

    def size(self, x: Any, dim: Any, *, op: str = "size") -> Scalar:
        """The extent of one axis, as an Int Scalar."""
        v = self.tensor(x, op)
        (d,) = self.dims(v, [as_index(dim, op, "dim")], op)
        out = self.new_scalar(DataType.Int)
        self.add(SizeOp(inputs=(v,), outputs=(out,), dim=d))
        return out

    def dims(self, v: TensorView, dims: Any, op: str) -> tuple[int, ...]:
        """Normalize axis indices (one, or a list; negative counts from the end), sorted,
        checked."""
        out: list[int] = []
        given = as_index_list(dims, op)
        for d in given:
            n = d + v.ndim if d < 0 else d
            if not 0 <= n < v.ndim:
                raise DefinitionError(f"{op}: dim {d} is out of range for {describe(v)}")
            if n in out:
                raise DefinitionError(f"{op}: dim {d} is listed twice in {given}")
            out.append(n)
        return tuple(sorted(out))

    # ---- reductions ----
    def reduction(
        self, op: str, x: Any, dims: Sequence[int] | None, keepdim: bool, dtype: Any = None
    ) -> TensorView:
        """sum/prod/max/min over dims; see ReductionOp for the dtype rules."""
        assert op in REDUCTION_OPS
        v = self.tensor(x, op)
        cx.check_complex_reduction(op, v.dtype)
        norm = self._reduction_dims(v, dims, op)
        out_dtype = None
        given = optional_dtype(dtype, what=f"{op}: dtype")  # DataType.Null: the default
        if given is not None:
            acc = given
        elif op in ("sum", "prod") and not (v.dtype.is_floating or v.dtype.is_complex):
            acc = DataType.Int  # torch: integer and bool sums are int64
        elif op in ("sum", "prod") and v.dtype.is_reduced_float:
            acc, out_dtype = DataType.Float, v.dtype  # accumulate in float, return v's dtype
        else:
            acc = v.dtype
        src = self.cast(v, acc, op=op)
        # Over a size-1 broadcast axis every one of these reductions is the value itself:
        # such axes are squeezed, and only the real ones reduced (if any). nvFuser's
        # backward norms sum a keepdim'd row result over its broadcast axis; as a
        # reduction of its own that would split the fusion in segments.
        size_one = tuple(d for d in norm if v.axes[d].is_broadcast)
        real = tuple(d - sum(s < d for s in size_one) for d in norm if d not in size_one)
        if size_one:
            src = self.squeeze(src, size_one, op=op)
        red: Val = src
        if real:
            assert isinstance(src, TensorView)
            red = self.new_tensor(acc, [a for i, a in enumerate(src.axes) if i not in real])
            self.add(ReductionOp(inputs=(src,), outputs=(red,), op=op, dims=real, dtype=acc))
        result: Val = red if out_dtype is None else self.cast(red, out_dtype, op=op)
        return self.keepdim(result, norm, v.ndim, keepdim, op)

    def _reduction_dims(self, v: TensorView, dims: Any, op: str) -> tuple[int, ...]:
        norm = self.dims(v, list(range(v.ndim)) if dims is None else dims, op)
        if not norm:
            raise DefinitionError(f"{op}: no dims to reduce for {describe(v)}")
        return norm

    def keepdim(self, v: Any, dims: tuple[int, ...], ndim: int, keepdim: bool, op: str) -> Any:
        """Re-insert reduced axes as broadcast axes when keepdim is set."""
        if not _is_bool(keepdim):
            raise DefinitionError(f"{op}: keepdim must be a bool, got {describe(keepdim)}")
        if not keepdim:
            return v
        return self.broadcast(v, [i in dims for i in range(ndim)], op=op)

    def welford(
        self, x: Any, dims: Sequence[int] | None, *, op: str = "welford"
    ) -> tuple[TensorView, TensorView, TensorView]:
        """(avg, m2, count) of x over dims; x is cast to Float unless Float or Double."""
        v = self.tensor(x, op)
        cx.check_complex_reduction(op, v.dtype)
        norm = self._reduction_dims(v, dims, op)
        acc = v.dtype if v.dtype in (DataType.Float, DataType.Double) else DataType.Float
        src = self.cast(v, acc, op=op)
        axes = [a for i, a in enumerate(v.axes) if i not in norm]
        outs = (
            self.new_tensor(acc, axes),
            self.new_tensor(acc, axes),
            self.new_tensor(DataType.Int, axes),
        )
        self.add(WelfordOp(inputs=(src,), outputs=outs, dims=norm))
        return outs
