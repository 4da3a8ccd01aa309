"""Flash attention (nvFuser's sdpfa_fwd and sdpfa_bwd): checked construction and per-call
shapes.

nvFuser runs these through ATen's flash attention (at::_scaled_dot_product_flash_attention
and its backward); so does kfuse, on torch tensors (kfuse.schedule.library_calls). The
forward's philox_seed and philox_offset are the dropout generator's state, which the
backward takes back to draw the same mask: torch 2.7 and later keep it as two 64-bit words
([2]) and an unused [] tensor, both UInt64. kfuse has no UInt64, so they are Int tensors
holding the same 64-bit words (torch's view of them as int64).
"""

from __future__ import annotations

from typing import Any

from kfuse.dtypes import DataType
from kfuse.errors import DefinitionError, InputError
from kfuse.ir.builder import describe
from kfuse.ir.exprs import SdpaBwdOp, SdpaFwdOp
from kfuse.ir.values import Axis, Scalar, TensorView, Val

_FLASH_DTYPES = (DataType.Half, DataType.BFloat16)


def _scalar(b: Any, x: Any, dtype: DataType, op: str, what: str, default: Any) -> Scalar:
    """A number argument (Python number, None for its default, or a Scalar) as a Scalar of
    `dtype`."""
    if x is None:
        x = default
    v = b.operand(x, op, what)
    if isinstance(v, TensorView):
        raise DefinitionError(f"{op}: {what} is {describe(v)}, expected a number")
    if dtype is DataType.Bool and v.dtype is not DataType.Bool:
        raise DefinitionError(f"{op}: {what} {describe(v)} is not a Bool")
    if dtype is not DataType.Bool and v.dtype is DataType.Bool:
        raise DefinitionError(f"{op}: {what} {describe(v)} is not a real number")
    return v if v.dtype is dtype else b.cast(v, dtype, op=op)


def _attention_operands(b: Any, tensors: list[tuple[str, Any]], op: str) -> list[TensorView]:
    vals = [b.tensor(x, op, i) for i, (_, x) in enumerate(tensors)]
    for (name, _), v in zip(tensors, vals, strict=True):
        if v.ndim != 4:
            raise DefinitionError(
                f"{op}: {name} {describe(v)} must have rank 4 [batch, heads, sequence, "
                "head size] (kfuse runs torch's flash attention, which takes rank 4)"
            )
        if v.dtype is not vals[0].dtype:
            raise DefinitionError(
                f"{op}: {name} {describe(v)} is not of {tensors[0][0]}'s dtype "
                f"{vals[0].dtype.value}"
            )
    if vals[0].dtype not in _FLASH_DTYPES:
        raise DefinitionError(
            f"{op}: {tensors[0][0]} {describe(vals[0])} is {vals[0].dtype.value}; flash "
            "attention takes Half or BFloat16"
        )
    return vals


def _plain(a: Axis) -> Axis:
    return Axis(False, 1) if a.is_broadcast else a


def build_sdpfa_fwd(
    b: Any,
    query: Any,
    key: Any,
    value: Any,
    bias: Any,
    mask: Any,
    dropout_p: Any,
    is_causal: Any,
    scale: Any,
) -> list[TensorView]:
    """fd.ops.sdpfa_fwd: [output, logsumexp, philox_seed, philox_offset]."""
    op = "sdpfa_fwd"
    if bias is not None or mask is not None:
        raise DefinitionError(
            f"{op}: kfuse runs torch's flash attention, which takes no bias or mask "
            "(add them to the scores with matmul and softmax instead)"
        )
    q, k, v = _attention_operands(b, [("query", query), ("key", key), ("value", value)], op)
    scalars = [
        _scalar(b, dropout_p, DataType.Double, op, "dropout_p", 0.0),
        _scalar(b, is_causal, DataType.Bool, op, "is_causal", False),
    ]
    if scale is not None:
        scalars.append(_scalar(b, scale, DataType.Double, op, "scale", None))
    lead = [_plain(a) for a in q.axes[:3]]
    output = b.new_tensor(q.dtype, [*lead, _plain(v.axes[3])])
    logsumexp = b.new_tensor(DataType.Float, lead)
    seed = b.new_tensor(DataType.Int, [Axis(False, 2)])
    offset = b.new_tensor(DataType.Int, [])
    outs = (output, logsumexp, seed, offset)
    b.add(SdpaFwdOp(inputs=(q, k, v, *scalars), outputs=outs, has_scale=scale is not None))
    return list(outs)


def build_sdpfa_bwd(
    b: Any,
    grad_output: Any,
    query: Any,
    key: Any,
    value: Any,
    output: Any,
    logsumexp: Any,
    dropout_p: Any,
    is_causal: Any,
    philox_seed: Any,
    philox_offset: Any,
    scale: Any,
) -> list[TensorView]:
    """fd.ops.sdpfa_bwd: [grad_query, grad_key, grad_value]."""
    op = "sdpfa_bwd"
    named = [
        ("grad_output", grad_output),
        ("query", query),
        ("key", key),
        ("value", value),
        ("output", output),
    ]
    tensors = _attention_operands(b, named, op)
    lse = b.tensor(logsumexp, op, 5)
    if lse.ndim != 3 or lse.dtype is not DataType.Float:
        raise DefinitionError(f"{op}: logsumexp {describe(lse)} must be a rank-3 Float tensor")
    state = [b.tensor(x, op, 8 + i) for i, x in enumerate((philox_seed, philox_offset))]
    for name, s in zip(("philox_seed", "philox_offset"), state, strict=True):
        if s.dtype is not DataType.Int:
            raise DefinitionError(
                f"{op}: {name} {describe(s)} must be the Int tensor sdpfa_fwd returned"
            )
    scalars = [
        _scalar(b, dropout_p, DataType.Double, op, "dropout_p", 0.0),
        _scalar(b, is_causal, DataType.Bool, op, "is_causal", False),
    ]
    if scale is not None:
        scalars.append(_scalar(b, scale, DataType.Double, op, "scale", None))
    grads = [b.new_tensor(t.dtype, [_plain(a) for a in t.axes]) for t in tensors[1:4]]
    b.add(
        SdpaBwdOp(
            inputs=(*tensors, lse, *state, *scalars),
            outputs=tuple(grads),
            has_scale=scale is not None,
        )
    )
    return grads


# ---- per-call shapes ----
def attention_shapes(expr: Any, shapes: dict[Val, Any]) -> list[tuple[int, ...]]:
    """The output shapes of an SdpaFwdOp / SdpaBwdOp for a call (InputError where the
    query, key and value do not fit together)."""
    q, k, v = expr.inputs[:3] if isinstance(expr, SdpaFwdOp) else expr.inputs[1:4]
    sq, sk, sv = (tuple(shapes[t]) for t in (q, k, v))
    name = "sdpfa_fwd" if isinstance(expr, SdpaFwdOp) else "sdpfa_bwd"
    if sq[:2] != sk[:2] or sk[:3] != sv[:3] or sq[3] != sk[3]:
        raise InputError(
            f"{name}: query {q.name} {sq}, key {k.name} {sk} and value {v.name} {sv} do not "
            "fit [batch, heads, L, E], [batch, heads, S, E], [batch, heads, S, Ev]"
        )
    if isinstance(expr, SdpaFwdOp):
        return [(*sq[:3], sv[3]), sq[:3], (2,), ()]
    return [sq, sk, sv]
