"""Library ops (matmul, linear, grouped_mm): their checked construction and their shape
inference; `library_shapes` sizes every library op's outputs (kfuse.ir.sort_ops and
kfuse.ir.attention_ops build the others).

kfuse does not generate code for these; the expr_eval scheduler runs them through the inputs'
framework (torch / CuPy / NumPy matmul). Operands must be floating and share one dtype (mixed
floating dtypes are cast to the promoted one first); the result keeps that dtype, so a
BFloat16 matmul stays BFloat16 as in torch. Float8 operands are refused: torch.matmul has no
float8 kernels (its scaled matmul takes scales this op does not have).
"""

from __future__ import annotations

from typing import Any, cast

from kfuse.dtypes import DataType, promote_types
from kfuse.errors import DefinitionError, InputError
from kfuse.ir.exprs import GroupedMmOp, LinearOp, MatmulOp, SdpaBwdOp, SdpaFwdOp
from kfuse.ir.values import Axis, TensorView, Val


def _same_dtype(b: Any, vals: list[TensorView], op: str) -> list[TensorView]:
    for i, v in enumerate(vals):
        if not v.dtype.is_floating:
            raise DefinitionError(
                f"{op}: operand {i} {v.name} is {v.dtype.value}; {op} takes "
                "floating tensors (cast it first)"
            )
        if v.dtype.is_float8:
            raise DefinitionError(
                f"{op}: operand {i} {v.name} is {v.dtype.value}; torch has no {op} of float8 "
                "tensors: cast it to Half, BFloat16 or Float first"
            )
    dtype = promote_types([v.dtype for v in vals])
    return [b.cast(v, dtype, op=op) for v in vals]


def _static_mismatch(a: Axis, b: Axis) -> bool:
    return (
        a.extent is not None
        and b.extent is not None
        and a.extent != b.extent
        and not a.is_broadcast
        and not b.is_broadcast
    )


def _batch_axes(xs: tuple[Axis, ...], ys: tuple[Axis, ...], op: str) -> list[Axis]:
    """Right-aligned broadcast of two batch shapes (a missing axis acts as a broadcast)."""
    n = max(len(xs), len(ys))
    xs = (Axis(True, 1),) * (n - len(xs)) + xs
    ys = (Axis(True, 1),) * (n - len(ys)) + ys
    out = []
    for i, (p, q) in enumerate(zip(xs, ys, strict=True)):
        if _static_mismatch(p, q):
            raise DefinitionError(f"{op}: batch axis {i} has sizes {p.extent} and {q.extent}")
        out.append(q if p.is_broadcast else p)
    return out


def build_matmul(b: Any, x: Any, y: Any) -> TensorView:
    """MatmulOp of two tensors of rank >= 2 (Builder `b` checks and casts the operands)."""
    a_tv, b_tv = b.tensor(x, "matmul", 0), b.tensor(y, "matmul", 1)
    for i, v in enumerate((a_tv, b_tv)):
        if v.ndim < 2:
            raise DefinitionError(
                f"matmul: operand {i} {v.name} has rank {v.ndim}; kfuse's "
                "matmul takes operands of rank >= 2"
            )
    if _static_mismatch(a_tv.axes[-1], b_tv.axes[-2]):
        raise DefinitionError(
            f"matmul: {a_tv.name} has {a_tv.axes[-1].extent} columns but "
            f"{b_tv.name} has {b_tv.axes[-2].extent} rows"
        )
    a_tv, b_tv = _same_dtype(b, [a_tv, b_tv], "matmul")
    axes = _batch_axes(a_tv.axes[:-2], b_tv.axes[:-2], "matmul")
    axes += [_plain(a_tv.axes[-2]), _plain(b_tv.axes[-1])]
    out = b.new_tensor(a_tv.dtype, axes)
    b.add(MatmulOp(inputs=(a_tv, b_tv), outputs=(out,)))
    return out


def build_linear(b: Any, x: Any, w: Any, bias: Any = None) -> TensorView:
    """LinearOp: x [..., k] @ w[m, k].T (+ bias [m])."""
    xt, wt = b.tensor(x, "linear", 0), b.tensor(w, "linear", 1)
    if xt.ndim < 1 or wt.ndim != 2:
        raise DefinitionError(
            f"linear: needs x of rank >= 1 and a rank-2 weight, got "
            f"{xt.name} (rank {xt.ndim}) and {wt.name} (rank {wt.ndim})"
        )
    if _static_mismatch(xt.axes[-1], wt.axes[1]):
        raise DefinitionError(
            f"linear: {xt.name} has {xt.axes[-1].extent} features but "
            f"{wt.name} takes {wt.axes[1].extent}"
        )
    operands = [xt, wt]
    if bias is not None:
        bt = b.tensor(bias, "linear", 2)
        if bt.ndim != 1:
            raise DefinitionError(f"linear: bias {bt.name} must have rank 1, got {bt.ndim}")
        operands.append(bt)
    operands = _same_dtype(b, operands, "linear")
    axes = [*xt.axes[:-1], _plain(wt.axes[0])]
    out = b.new_tensor(operands[0].dtype, axes)
    b.add(LinearOp(inputs=tuple(operands), outputs=(out,)))
    return out


def build_grouped_mm(b: Any, mat1: Any, mat2: Any, offsets: Any) -> TensorView:
    """GroupedMmOp (torch._grouped_mm): see its docstring for the three rank cases."""
    op = "grouped_mm"
    m1, m2 = b.tensor(mat1, op, 0), b.tensor(mat2, op, 1)
    offs = b.tensor(offsets, op, 2)
    if offs.ndim != 1 or offs.dtype not in (DataType.Int32, DataType.Int):
        raise DefinitionError(f"{op}: offsets {offs.name} must be a 1-D Int32 or Int tensor")
    ranks = (m1.ndim, m2.ndim)
    if ranks not in ((2, 2), (2, 3), (3, 2)):
        raise DefinitionError(
            f"{op}: operands of ranks {ranks}; grouped_mm takes ranks (2, 2), (2, 3) or (3, 2) "
            "(two 3-D operands are a batched matmul: use fd.ops.matmul)"
        )
    if _static_mismatch(m1.axes[-1], m2.axes[-2]):
        raise DefinitionError(
            f"{op}: {m1.name} has {m1.axes[-1].extent} columns but {m2.name} has "
            f"{m2.axes[-2].extent} rows"
        )
    m1, m2 = _same_dtype(b, [m1, m2], op)
    if ranks == (2, 2):
        axes = [_plain(offs.axes[0]), _plain(m1.axes[0]), _plain(m2.axes[1])]
    else:
        axes = [_plain(m1.axes[-2]), _plain(m2.axes[-1])]
    out = b.new_tensor(m1.dtype, axes)
    b.add(GroupedMmOp(inputs=(m1, m2, offs), outputs=(out,), dtype=m1.dtype))
    return out


def _plain(axis: Axis) -> Axis:
    """A matrix axis of the result: a real axis (its size may still be 1)."""
    return Axis(False, 1) if axis.is_broadcast else axis


# ---- shape inference ----
def library_shapes(expr: Any, shapes: dict[Val, Any]) -> list[tuple[int, ...]]:
    """The shape of each output of a library op for a call (InputError where its operands'
    sizes do not fit)."""
    if isinstance(expr, (MatmulOp, LinearOp)):
        return [infer_library_shape(expr, shapes)]
    if isinstance(expr, GroupedMmOp):
        return [_grouped_mm_shape(expr, shapes)]
    if isinstance(expr, (SdpaFwdOp, SdpaBwdOp)):
        from kfuse.ir.attention_ops import attention_shapes

        return attention_shapes(expr, shapes)
    from kfuse.ir.sort_ops import sort_shapes

    return sort_shapes(expr, shapes)


def _grouped_mm_shape(expr: Any, shapes: dict[Val, Any]) -> tuple[int, ...]:
    m1, m2, offs = expr.inputs
    s1, s2, (groups,) = tuple(shapes[m1]), tuple(shapes[m2]), tuple(shapes[offs])
    if s1[-1] != s2[-2]:
        raise InputError(
            f"{expr.outputs[0].name} = grouped_mm({m1.name}, {m2.name}, ...): {m1.name} has "
            f"shape {s1} and {m2.name} has shape {s2}; {s1[-1]} != {s2[-2]}"
        )
    three_d = s1 if len(s1) == 3 else s2 if len(s2) == 3 else None
    if three_d is not None and three_d[0] != groups:
        raise InputError(
            f"{expr.outputs[0].name} = grouped_mm(...): {groups} offsets for {three_d[0]} matrices"
        )
    if len(s1) == len(s2) == 2:
        return (groups, s1[0], s2[1])
    return (s1[-2], s2[-1])


def check_group_offsets(expr: Any, offsets: Any, args: list[Any]) -> list[int]:
    """grouped_mm's offsets as ints, checked before any library reads through them: rising,
    non-negative and no larger than the split axis (k for two 2-D operands, else the rows or
    columns the groups cover), an InputError otherwise."""
    m1, m2 = args[0], args[1]
    if m1.ndim == m2.ndim:
        size = int(m1.shape[-1])
    else:
        size = int(m1.shape[0]) if m1.ndim == 2 else int(m2.shape[-1])
    ends = [int(e) for e in offsets.tolist()]
    previous = 0
    for i, end in enumerate(ends):
        if not previous <= end <= size:
            raise InputError(
                f"{expr.outputs[0].name} = grouped_mm(...): offsets {ends} must rise from 0 "
                f"and end at most at {size}, the size of the axis the groups split (entry {i})"
            )
        previous = end
    return ends


def infer_library_shape(expr: Any, shapes: dict[Val, Any]) -> tuple[int, ...]:
    """The output shape of a MatmulOp/LinearOp from its inputs' shapes; InputError when the
    contracted sizes or batch sizes disagree."""
    out = expr.outputs[0]
    if isinstance(expr, MatmulOp):
        a, b = cast("tuple[TensorView, TensorView]", expr.inputs)
        sa, sb = shapes[a], shapes[b]
        if sa[-1] != sb[-2]:
            raise InputError(
                f"{out.name} = matmul({a.name}, {b.name}): {a.name} has shape "
                f"{sa} and {b.name} has shape {sb}; {sa[-1]} != {sb[-2]}"
            )
        batch = _batch_shape(sa[:-2], sb[:-2], a.axes[:-2], b.axes[:-2], out.name)
        return (*batch, sa[-2], sb[-1])
    x, w = expr.inputs[0], expr.inputs[1]
    sx, sw = shapes[x], shapes[w]
    if sx[-1] != sw[1]:
        raise InputError(
            f"{out.name} = linear({x.name}, {w.name}): {x.name} has shape {sx} "
            f"and {w.name} has shape {sw}; {sx[-1]} != {sw[1]}"
        )
    if len(expr.inputs) == 3:
        bias = expr.inputs[2]
        if shapes[bias] != (sw[0],):
            raise InputError(
                f"{out.name} = linear(...): bias {bias.name} has shape "
                f"{shapes[bias]}, expected ({sw[0]},)"
            )
    return (*sx[:-1], sw[0])


def _batch_shape(sa: tuple, sb: tuple, axa: tuple, axb: tuple, name: str) -> tuple[int, ...]:
    n = max(len(sa), len(sb))
    sa = (1,) * (n - len(sa)) + tuple(sa)
    sb = (1,) * (n - len(sb)) + tuple(sb)
    axa = (Axis(True, 1),) * (n - len(axa)) + tuple(axa)
    axb = (Axis(True, 1),) * (n - len(axb)) + tuple(axb)
    out = []
    for i in range(n):
        if axa[i].is_broadcast:
            out.append(sb[i])
        elif axb[i].is_broadcast or sa[i] == sb[i]:
            out.append(sa[i])
        else:
            raise InputError(f"{name} = matmul(...): batch axis {i} has sizes {sa[i]} and {sb[i]}")
    return tuple(out)


def contraction_size(expr: Any, shapes: dict[Val, Any]) -> int:
    """How many products each output element of a MatmulOp/LinearOp/GroupedMmOp sums (at
    most: a group of grouped_mm splitting k sums part of it)."""
    return int(shapes[expr.inputs[0]][-1])
