"""Flash attention (nvFuser's sdpfa_fwd and sdpfa_bwd): checked construction and per-call
shapes.

nvFuser runs these through ATen's flash attention (at::_scaled_dot_product_flash_attention
and its backward); so does kfuse, on torch tensors (kfuse.schedule.attention_calls). The
forward also takes a bias (added to the scores) and a Bool mask (false: the score is -inf),
each of the query's rank and broadcast to the scores, and any rank of 4 or more (leading
batch axes, as AlphaFold's [B, N, H, L, E] heads), as nvFuser's does; the backward takes
no bias or mask, as nvFuser's does not.

The forward's philox_seed and philox_offset are the dropout generator's state, which the
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
from kfuse.ir.fusion import Fusion
from kfuse.ir.values import Axis, Scalar, TensorView, Val

PHILOX_STATE_POSITIONS = (6, 7)
"""SdpaBwdOp's inputs: grad_output, query, key, value, output, logsumexp, philox_seed,
philox_offset, then its scalars."""


def is_philox_state_use(expr: Any, tv: TensorView) -> bool:
    """Whether `expr` takes `tv` only as sdpfa_bwd's philox seed or offset."""
    places = [i for i, v in enumerate(expr.inputs) if v is tv]
    return isinstance(expr, SdpaBwdOp) and all(i in PHILOX_STATE_POSITIONS for i in places)


def used_only_as_philox_state(fusion: Fusion, tv: TensorView) -> bool:
    """Whether every use of `tv` in `fusion` (finalized) is sdpfa_bwd's philox seed or
    offset: such an input holds 64-bit words that nothing computes on, so torch's UInt64
    state tensors may be given for it as they are."""
    return all(is_philox_state_use(expr, tv) for expr in fusion.uses(tv))


_FLASH_DTYPES = (DataType.Half, DataType.BFloat16)
_SCORED_DTYPES = (DataType.Half, DataType.BFloat16, DataType.Float)
"""With a bias or mask kfuse runs the kernels that take one (aten's CPU flash attention,
its CUDA memory-efficient attention): both take Float too."""


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


def _attention_operands(
    b: Any, tensors: list[tuple[str, Any]], op: str, dtypes: tuple[DataType, ...]
) -> list[TensorView]:
    """The query-like operands: one rank of 4 or more (leading batch axes, then heads,
    sequence, head size) and one dtype of `dtypes`."""
    vals = [b.tensor(x, op, i) for i, (_, x) in enumerate(tensors)]
    first = tensors[0][0]
    for (name, _), v in zip(tensors, vals, strict=True):
        if v.ndim < 4:
            raise DefinitionError(
                f"{op}: {name} {describe(v)} must have rank 4 or more [batch..., heads, "
                "sequence, head size]"
            )
        if v.ndim != vals[0].ndim:
            raise DefinitionError(f"{op}: {name} {describe(v)} is not of {first}'s rank")
        if v.dtype is not vals[0].dtype:
            raise DefinitionError(
                f"{op}: {name} {describe(v)} is not of {first}'s dtype {vals[0].dtype.value}"
            )
    if vals[0].dtype not in dtypes:
        kernels = (
            "attention with a bias or mask takes Half, BFloat16 or Float"
            if dtypes is _SCORED_DTYPES
            else "flash attention takes Half or BFloat16"
        )
        raise DefinitionError(
            f"{op}: {first} {describe(vals[0])} is {vals[0].dtype.value}; {kernels}"
        )
    return vals


def _score_operand(
    b: Any, x: Any, name: str, pos: int, query: TensorView, dtype: DataType, op: str
) -> TensorView:
    """The bias or mask: a tensor of the query's rank (broadcast to the scores [batch...,
    heads, L, S] at run time) and of `dtype` (the query's for the bias, Bool for the mask),
    as nvFuser requires."""
    t = b.tensor(x, op, pos)
    if t.ndim != query.ndim:
        raise DefinitionError(
            f"{op}: {name} {describe(t)} must have the query's rank {query.ndim}: it is "
            "broadcast to the scores [batch..., heads, L, S]"
        )
    if t.dtype is not dtype:
        raise DefinitionError(
            f"{op}: {name} {describe(t)} must be {dtype.value}"
            + (" (the query's dtype)" if dtype is query.dtype else "")
        )
    return t


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
    scored = bias is not None or mask is not None
    named = [("query", query), ("key", key), ("value", value)]
    q, k, v = _attention_operands(b, named, op, _SCORED_DTYPES if scored else _FLASH_DTYPES)
    extra = []
    if bias is not None:
        extra.append(_score_operand(b, bias, "bias", 3, q, q.dtype, op))
    if mask is not None:
        extra.append(_score_operand(b, mask, "mask", 4, q, DataType.Bool, op))
    scalars = [
        _scalar(b, dropout_p, DataType.Double, op, "dropout_p", 0.0),
        _scalar(b, is_causal, DataType.Bool, op, "is_causal", False),
    ]
    if scale is not None:
        scalars.append(_scalar(b, scale, DataType.Double, op, "scale", None))
    lead = [_plain(a) for a in q.axes[:-1]]
    output = b.new_tensor(q.dtype, [*lead, _plain(v.axes[-1])])
    logsumexp = b.new_tensor(DataType.Float, lead)
    seed = b.new_tensor(DataType.Int, [Axis(False, 2)])
    offset = b.new_tensor(DataType.Int, [])
    outs = (output, logsumexp, seed, offset)
    b.add(
        SdpaFwdOp(
            inputs=(q, k, v, *extra, *scalars),
            outputs=outs,
            has_scale=scale is not None,
            has_bias=bias is not None,
            has_mask=mask is not None,
        )
    )
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
    tensors = _attention_operands(b, named, op, _FLASH_DTYPES)
    lse = b.tensor(logsumexp, op, 5)
    rank = tensors[0].ndim - 1
    if lse.ndim != rank or lse.dtype is not DataType.Float:
        raise DefinitionError(
            f"{op}: logsumexp {describe(lse)} must be a rank-{rank} Float tensor (the "
            "query's rank less one)"
        )
    _refuse_a_scored_forward(tensors[4], lse, op)
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


def _refuse_a_scored_forward(output: TensorView, lse: TensorView, op: str) -> None:
    """sdpfa_bwd takes no bias or mask (nor does nvFuser's): fed an sdpfa_fwd that had one,
    its flash backward would give the gradients of the attention without them."""
    for v in (output, lse):
        source = v.definition
        if isinstance(source, SdpaFwdOp) and (source.has_bias or source.has_mask):
            raise DefinitionError(
                f"{op}: {v.name} comes from an sdpfa_fwd with a bias or mask; sdpfa_bwd takes "
                "neither (as nvFuser's), so its gradients would be those of the attention "
                "without them: write the backward with matmul and softmax instead"
            )


# ---- per-call shapes ----
def attention_shapes(expr: Any, shapes: dict[Val, Any]) -> list[tuple[int, ...]]:
    """The output shapes of an SdpaFwdOp / SdpaBwdOp for a call (InputError where the
    query, key and value do not fit together, or a bias or mask does not broadcast to the
    scores)."""
    q, k, v = expr.inputs[:3] if isinstance(expr, SdpaFwdOp) else expr.inputs[1:4]
    sq, sk, sv = (tuple(shapes[t]) for t in (q, k, v))
    name = "sdpfa_fwd" if isinstance(expr, SdpaFwdOp) else "sdpfa_bwd"
    if sq[:-2] != sk[:-2] or sk[:-1] != sv[:-1] or sq[-1] != sk[-1]:
        raise InputError(
            f"{name}: query {q.name} {sq}, key {k.name} {sk} and value {v.name} {sv} do not "
            "fit [batch..., heads, L, E], [batch..., heads, S, E], [batch..., heads, S, Ev]"
        )
    if not isinstance(expr, SdpaFwdOp):
        return [sq, sk, sv]
    scores = (*sq[:-1], sk[-2])
    roles = ["bias"] * expr.has_bias + ["mask"] * expr.has_mask
    for role, t in zip(roles, expr.inputs[3 : 3 + len(roles)], strict=True):
        st = tuple(shapes[t])
        if any(n not in (1, want) for n, want in zip(st, scores, strict=True)):
            raise InputError(
                f"{name}: {role} {t.name} {st} does not broadcast to the scores {scores} "
                "[batch..., heads, L, S] (each size must be 1 or the scores')"
            )
    return [(*sq[:-1], sv[-1]), sq[:-1], (2,), ()]
