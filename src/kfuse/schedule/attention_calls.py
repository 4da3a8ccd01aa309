"""The torch calls that run sdpfa_fwd and sdpfa_bwd for the expr_eval scheduler.

aten's attention kernels take 4-D [batch, heads, sequence, head size] tensors: the leading
batch axes of a higher rank (AlphaFold's [B, N, H, L, E]) are flattened into one for the
call and restored after, as nvFuser does.

Without a bias or mask the forward is aten's flash attention (its CPU kernel on CPU
tensors, without dropout). aten's CUDA flash attention takes no bias: with a bias or mask
the forward runs the kernels that take one, the CUDA memory-efficient attention and the
CPU flash attention, with the two combined into one additive bias of the query's dtype
(the mask false: -inf). Those keep no dropout state that sdpfa_bwd's flash backward could
replay, so a bias or mask with dropout is an InputError (nvFuser refuses it too). A query
row whose every score is -inf gives an output of 0 and a log-sum-exp of -inf on both
devices (the kernels differ there: the CPU one leaves 0 in the log-sum-exp).
"""

from __future__ import annotations

import math
from typing import Any

from kfuse.errors import InputError
from kfuse.ir.exprs import Expr, SdpaBwdOp, SdpaFwdOp

_BIAS_ALIGNMENT = 16
"""The memory-efficient kernel reads the bias in 16-byte vectors: its row stride (and so
its batch and head strides) must be a multiple of 8 elements for 16-bit dtypes, 4 for Float.
A bias laid out in rows of a multiple of 16 elements meets that for every dtype (torch's
own dispatcher pads its attn_mask so)."""

_HEAD_ALIGNMENT = 8
"""The same kernel picks its variant by the alignment of the heads' stride but then requires
the rows' stride (the head size, for dense operands) to be a multiple of that alignment, up to
8 elements: torch's own dispatcher keeps it from other head sizes. kfuse pads query, key and
value with zeros to a head size of a multiple of 8 instead (zeros add nothing to the scores;
the value's extra columns are cut from the output)."""


def attention_scalars(expr: Any, scalars: list[Any], head_size: int) -> tuple[float, bool, float]:
    """(dropout_p, is_causal, scale), the scale 1/sqrt(E) when not given."""
    dropout_p, is_causal = float(scalars[0]), bool(scalars[1])
    scale = float(scalars[2]) if expr.has_scale else 1.0 / math.sqrt(head_size)
    return dropout_p, is_causal, scale


def _check_causal_lengths(expr: Expr, q: Any, k: Any, is_causal: bool) -> None:
    """A causal mask over unequal query and key lengths is an InputError: torch's flash
    kernels align it differently (aten's CPU kernel at the top left, its CUDA kernel at the
    bottom right) and torch's own dispatcher keeps flash attention out of that case."""
    queries, keys = int(q.shape[-2]), int(k.shape[-2])
    if is_causal and queries != keys:
        raise InputError(
            f"{expr.outputs[0].name}: flash attention with is_causal with {queries} queries "
            f"and {keys} keys: torch's flash kernels place that mask differently on CPU and "
            "CUDA; give equal lengths, or the mask as where() before a softmax"
        )


def _on_cpu_without_dropout(expr: Expr, q: Any, v: Any, dropout_p: float) -> bool:
    """True for CPU tensors (aten's CPU flash attention, which keeps no generator state for a
    backward: dropout there is an InputError, and which takes a value of the query's head
    size only); False for CUDA tensors."""
    if q.device.type == "cuda":
        return False
    if dropout_p != 0.0:
        raise InputError(
            f"{expr.outputs[0].name}: flash attention with dropout_p = {dropout_p} needs CUDA "
            "tensors (torch's CPU flash attention keeps no dropout state for the backward)"
        )
    if int(v.shape[-1]) != int(q.shape[-1]):
        raise InputError(
            f"{expr.outputs[0].name}: on CPU tensors the value's head size "
            f"{int(v.shape[-1])} must be the query's {int(q.shape[-1])} (torch's CPU flash "
            "attention takes no other)"
        )
    return True


def _flat(t: Any, kept: int) -> Any:
    """`t` with its axes before the last `kept` flattened into one (a view where it can)."""
    return t.reshape(-1, *t.shape[t.dim() - kept :])


def _restored(t: Any, batch: tuple[int, ...]) -> Any:
    return t.reshape(*batch, *t.shape[1:])


def torch_sdpfa_fwd(expr: SdpaFwdOp, args: list[Any], scalars: list[Any]) -> list[Any]:
    """[output, logsumexp, philox_seed, philox_offset] of an sdpfa_fwd on torch tensors."""
    import torch

    q, k, v = args[:3]
    dropout_p, is_causal, scale = attention_scalars(expr, scalars, int(q.shape[-1]))
    _check_causal_lengths(expr, q, k, is_causal)
    batch = tuple(int(n) for n in q.shape[:-3])
    q4, k4, v4 = (_flat(t, 3) for t in (q, k, v))
    if expr.has_bias or expr.has_mask:
        bias = _additive_bias(expr, args[3:], q.dtype)
        out, lse = _scored_forward(expr, q4, k4, v4, bias, batch, dropout_p, is_causal, scale)
        seed = torch.zeros(2, dtype=torch.int64, device=q.device)
        offset = torch.zeros((), dtype=torch.int64, device=q.device)
    else:
        out, lse, seed, offset = _flash_forward(expr, q4, k4, v4, dropout_p, is_causal, scale)
    return [_in_order_of(q, _restored(out, batch)), _restored(lse, batch), seed, offset]


def _in_order_of(model: Any, t: Any) -> Any:
    """`t` (of `model`'s rank) stored in `model`'s memory order, as nvFuser allocates an
    attention's output (its query's order) and gradients (their operand's): torch's flash
    attention gives them so already (no copy then); the kernels that take a bias and the CPU
    ones give them row major. A model broadcast along an axis (stride 0) has no order to
    give: `t` as it is."""
    if any(n > 1 and st == 0 for n, st in zip(model.shape, model.stride())):
        return t
    slowest_first = sorted(range(model.dim()), key=lambda i: (-model.stride(i), i))
    back = sorted(range(model.dim()), key=lambda i: slowest_first[i])
    return t.permute(slowest_first).contiguous().permute(back)


def _flash_forward(
    expr: SdpaFwdOp, q: Any, k: Any, v: Any, dropout_p: float, is_causal: bool, scale: float
) -> tuple[Any, Any, Any, Any]:
    import torch

    aten = torch.ops.aten
    if _on_cpu_without_dropout(expr, q, v, dropout_p):
        out, lse = aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, dropout_p, is_causal, scale=scale
        )
        zero = torch.zeros((), dtype=torch.int64, device=q.device)
        return out, lse, torch.zeros(2, dtype=torch.int64, device=q.device), zero
    found = aten._scaled_dot_product_flash_attention(
        q, k, v, dropout_p, is_causal, False, scale=scale
    )
    out, lse, seed, offset = found[0], found[1], found[6], found[7]
    return out, lse, _as_words(seed, (2,)), _as_words(offset, ())


def _as_words(state: Any, shape: tuple[int, ...]) -> Any:
    """torch's philox state (UInt64, or Int64 before torch 2.7) as an Int tensor of
    `shape`, the same 64-bit words; an empty one (torch's unused offset) as 0."""
    import torch

    if state.numel() == 0:
        return torch.zeros(shape, dtype=torch.int64, device=state.device)
    words = state.view(torch.int64) if state.dtype != torch.int64 else state
    return words.reshape(shape).clone()


# ---- with a bias or mask ----
def _additive_bias(expr: SdpaFwdOp, extra: list[Any], dtype: Any) -> Any:
    """The bias with -inf where the mask is false, in the query's dtype (nvFuser's
    combination; still broadcast, of the query's rank)."""
    import torch

    bias = extra[0] if expr.has_bias else None
    if not expr.has_mask:
        return bias
    kept = bias if bias is not None else 0.0
    return torch.where(extra[-1], kept, -math.inf).to(dtype)


def _scored_forward(
    expr: SdpaFwdOp,
    q: Any,
    k: Any,
    v: Any,
    bias: Any,
    batch: tuple[int, ...],
    dropout_p: float,
    is_causal: bool,
    scale: float,
) -> tuple[Any, Any]:
    """(output, logsumexp) of 4-D operands with an additive bias of the original rank."""
    import torch

    if dropout_p != 0.0:
        raise InputError(
            f"{expr.outputs[0].name}: sdpfa_fwd with a bias or mask and dropout_p = "
            f"{dropout_p}: the kernels that take a bias keep no dropout state sdpfa_bwd "
            "could replay (nvFuser refuses this too)"
        )
    bias4 = _flat(bias.expand(*batch, *bias.shape[-3:]), 3)
    aten = torch.ops.aten
    if _on_cpu_without_dropout(expr, q, v, dropout_p):
        out, lse = aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, is_causal, attn_mask=bias4, scale=scale
        )
    else:
        found = aten._scaled_dot_product_efficient_attention(
            *(_aligned_heads(t) for t in (q, k, v)),
            _aligned_bias(bias4, (*q.shape[:-1], k.shape[-2])),
            True,
            0.0,
            is_causal,
            scale=scale,
        )
        # Its log-sum-exp is padded along the queries to a multiple of 32.
        out, lse = found[0][..., : v.shape[-1]], found[1][..., : q.shape[-2]]
    empty = _rows_without_keys(bias4, is_causal, int(q.shape[-2]))
    out = torch.where(empty[..., None], 0.0, out)
    return out, torch.where(empty, -math.inf, lse)


def _aligned_heads(t: Any) -> Any:
    """`t` itself where its head size and strides are multiples of 8 elements (its last
    stride 1), else a dense copy with the head size padded with zeros to one."""
    import torch

    extra = -int(t.shape[-1]) % _HEAD_ALIGNMENT
    if extra:
        return torch.nn.functional.pad(t, (0, extra))
    if t.stride(-1) == 1 and all(s % _HEAD_ALIGNMENT == 0 for s in t.stride()[:-1]):
        return t
    return t.clone(memory_format=torch.contiguous_format)


def _aligned_bias(bias: Any, scores: tuple[int, ...]) -> Any:
    """`bias` broadcast to the scores [B, H, L, S] in memory whose rows start every multiple
    of 16 elements (the kernel takes the bias' full sizes and vector-aligned strides)."""
    import torch

    keys = scores[-1]
    padded = -(-keys // _BIAS_ALIGNMENT) * _BIAS_ALIGNMENT
    room = torch.empty((*scores[:-1], padded), dtype=bias.dtype, device=bias.device)
    aligned = room[..., :keys]
    aligned.copy_(bias.expand(scores))
    return aligned


def _rows_without_keys(bias: Any, is_causal: bool, queries: int) -> Any:
    """Bool [B, H or 1, L or 1]: the query rows whose every score is -inf (by the bias, and
    the causal mask's upper triangle)."""
    import torch

    hidden = torch.isneginf(bias)
    if is_causal:  # as many keys as queries (_check_causal_lengths)
        above = torch.ones(queries, queries, dtype=torch.bool, device=bias.device).triu(1)
        hidden = hidden | above
    return hidden.all(-1)


# ---- backward ----
def torch_sdpfa_bwd(expr: SdpaBwdOp, args: list[Any], scalars: list[Any]) -> list[Any]:
    """[grad_query, grad_key, grad_value] of an sdpfa_bwd on torch tensors."""
    import torch

    q, k, v = args[1:4]
    dropout_p, is_causal, scale = attention_scalars(expr, scalars, int(q.shape[-1]))
    _check_causal_lengths(expr, q, k, is_causal)
    grad, q4, k4, v4, out = (_flat(t, 3) for t in args[:5])
    lse, seed, offset = _flat(args[5], 2), args[6], args[7]
    aten = torch.ops.aten
    if _on_cpu_without_dropout(expr, q4, v4, dropout_p):
        grads = aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad, q4, k4, v4, out, lse, dropout_p, is_causal, scale=scale
        )
    else:
        words = torch.uint64 if hasattr(torch, "uint64") else torch.int64
        grads = aten._scaled_dot_product_flash_attention_backward(
            grad,
            q4,
            k4,
            v4,
            out,
            lse,
            None,
            None,
            int(q4.shape[2]),
            int(k4.shape[2]),
            dropout_p,
            is_causal,
            seed.view(words),
            offset.view(words),
            scale=scale,
        )
    return [_in_order_of(t, g.reshape(t.shape)) for g, t in zip(grads, (q, k, v), strict=True)]
