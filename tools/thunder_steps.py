"""The pieces of a transformer's training step that tools/thunder_check.py has Thunder compile
onto kfuse: each a function of torch tensors returning a scalar loss (or, for the optimizer
steps, updating its parameters in place), with inputs of a given size, dtype and device.

A loss is the sum of the piece's output times a fixed random tensor `g`, so every gradient is
a dense, nontrivial function of the inputs (a plain sum would make many of them constant).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Size:
    """The dimensions a step's inputs are drawn with."""

    batch: int
    seq: int
    hidden: int
    heads: int
    vocab: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


@dataclass
class Case:
    """One step's function and inputs. inplace: fn updates `args` in place (returns None), and
    the updated tensors are what is compared. options: Thunder compile options it needs."""

    fn: Callable[..., Any]
    args: list[Any]
    inplace: bool = False
    options: dict[str, Any] = field(default_factory=dict)


def _leaf(
    shape: tuple[int, ...], dtype: torch.dtype, device: str, scale: float = 1.0
) -> torch.Tensor:
    return (torch.randn(shape, device=device) * scale).to(dtype).requires_grad_(True)


def _fixed(shape: tuple[int, ...], dtype: torch.dtype, device: str) -> torch.Tensor:
    return torch.randn(shape, device=device).to(dtype)


def rms_norm(x: torch.Tensor, w: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
    return (y.to(x.dtype).float() * g).sum()


def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    y = F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)
    return (y.float() * g).sum()


def attention_written_out(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, dropout_p: float = 0.0
) -> torch.Tensor:
    # The causal mask from triu of ones, applied with where; softmax in fp32, as models do.
    seq = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    future = torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(1)
    scores = torch.where(future, float("-inf"), scores.float())
    p = F.dropout(torch.softmax(scores, dim=-1), p=dropout_p, training=True).to(q.dtype)
    return ((p @ v).float() * g).sum()


def attention_iota_mask(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor
) -> torch.Tensor:
    # The causal mask from two aranges (iota) compared, as GPT-style code writes it.
    seq = q.shape[-2]
    pos = torch.arange(seq, device=q.device)
    scores = (q @ k.transpose(-2, -1)).float() / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(pos[None, :] > pos[:, None], float("-inf"))
    p = torch.softmax(scores, dim=-1).to(q.dtype)
    return ((p @ v).float() * g).sum()


def attention_sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor
) -> torch.Tensor:
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return (out.float() * g).sum()


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    y = x * cos + rotated * sin
    return (y.float() * g).sum()


def swiglu_mlp(
    x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor, g: torch.Tensor
) -> torch.Tensor:
    h = F.silu(F.linear(x, w1)) * F.linear(x, w3)
    return (F.linear(h, w2).float() * g).sum()


def gelu_mlp(
    x: torch.Tensor,
    w1: torch.Tensor,
    b1: torch.Tensor,
    w2: torch.Tensor,
    b2: torch.Tensor,
    g: torch.Tensor,
) -> torch.Tensor:
    h = F.gelu(F.linear(x, w1, b1), approximate="tanh")
    return (F.linear(h, w2, b2).float() * g).sum()


def embedding(ids: torch.Tensor, table: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    return (F.embedding(ids, table).float() * g).sum()


def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    # No label smoothing: Thunder 0.2.6 sends a smoothed one to nvFuser's cross-entropy
    # translation, which leaves the smoothing out (its checker refuses it, but the grad
    # transform does not ask), and its own decomposition differs from torch's too.
    return F.cross_entropy(logits.float(), target, ignore_index=-100)


def log_softmax_nll(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    # The loss written out, as older model code does.
    return F.nll_loss(F.log_softmax(logits.float(), dim=-1), target, ignore_index=-100)


def norm_gelu_residual(
    x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, g: torch.Tensor
) -> torch.Tensor:
    # A block's pointwise tail: LayerNorm, exact (erf) GELU, residual add, in one region.
    y = x + F.gelu(F.layer_norm(x, (x.shape[-1],), w, b))
    return (y.float() * g).sum()


def dropout(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    return (F.dropout(x, p=0.1, training=True).float() * g).sum()


def transformer_block(
    x: torch.Tensor,
    n1: torch.Tensor,
    wqkv: torch.Tensor,
    wo: torch.Tensor,
    n2: torch.Tensor,
    w1: torch.Tensor,
    w3: torch.Tensor,
    w2: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    g: torch.Tensor,
) -> torch.Tensor:
    """A pre-norm Llama-style block: RMSNorm, QKV projection, RoPE, causal SDPA, output
    projection and residual; RMSNorm, SwiGLU MLP and residual. x: [batch, seq, hidden]."""
    batch, seq, hidden = x.shape
    heads = hidden // cos.shape[-1]
    q, k, v = F.linear(_rms(x, n1), wqkv).split(hidden, dim=-1)
    q, k, v = (t.view(batch, seq, heads, -1).transpose(1, 2) for t in (q, k, v))
    q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
    attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    h = x + F.linear(attn.transpose(1, 2).reshape(batch, seq, hidden), wo)
    y = _rms(h, n2)
    out = h + F.linear(F.silu(F.linear(y, w1)) * F.linear(y, w3), w2)
    return (out.float() * g).sum()


def _rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def sgd_momentum_step(p: torch.Tensor, grad: torch.Tensor, buf: torch.Tensor) -> None:
    buf.mul_(0.9).add_(grad)
    p.add_(buf, alpha=-1e-2)


def adam_step(p: torch.Tensor, grad: torch.Tensor, m: torch.Tensor, v: torch.Tensor) -> None:
    beta1, beta2, lr, eps, step = 0.9, 0.999, 1e-3, 1e-8, 3
    m.mul_(beta1).add_(grad, alpha=1 - beta1)
    v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    denom = (v / (1 - beta2**step)).sqrt().add_(eps)
    p.addcdiv_(m, denom, value=-lr / (1 - beta1**step))


def _attention_args(s: Size, dtype: torch.dtype, device: str) -> list[Any]:
    shape = (s.batch, s.heads, s.seq, s.head_dim)
    return [
        _leaf(shape, dtype, device),
        _leaf(shape, dtype, device),
        _leaf(shape, dtype, device),
        _fixed(shape, torch.float32, device),
    ]


def _rope_args(s: Size, dtype: torch.dtype, device: str) -> list[Any]:
    hd = s.head_dim
    inv = 1.0 / (10000 ** (torch.arange(0, hd, 2, device=device).float() / hd))
    angles = torch.outer(torch.arange(s.seq, device=device).float(), inv)
    angles = torch.cat((angles, angles), dim=-1)
    x = _leaf((s.batch, s.heads, s.seq, hd), dtype, device)
    return [
        x,
        angles.cos().to(dtype),
        angles.sin().to(dtype),
        _fixed(tuple(x.shape), torch.float32, device),
    ]


def _targets(s: Size, device: str) -> torch.Tensor:
    target = torch.randint(0, s.vocab, (s.batch * s.seq,), device=device)
    target[::7] = -100  # ignored positions, as padding makes them
    return target


def make_case(name: str, s: Size, dtype: torch.dtype, device: str) -> Case:
    """The inputs of step `name` at size `s` (activations and weights in `dtype`)."""
    rows, h, f = s.batch * s.seq, s.hidden, 4 * s.hidden
    w_scale = 1.0 / math.sqrt(h)
    if name == "rmsnorm":
        x = _leaf((rows, h), dtype, device)
        return Case(
            rms_norm, [x, _leaf((h,), dtype, device), _fixed((rows, h), torch.float32, device)]
        )
    if name == "layernorm":
        x = _leaf((rows, h), dtype, device)
        return Case(
            layer_norm,
            [
                x,
                _leaf((h,), dtype, device),
                _leaf((h,), dtype, device),
                _fixed((rows, h), torch.float32, device),
            ],
        )
    if name == "attention":
        return Case(attention_written_out, _attention_args(s, dtype, device))
    if name == "attention_iota":
        return Case(attention_iota_mask, _attention_args(s, dtype, device))
    if name == "sdpa":
        return Case(
            attention_sdpa, _attention_args(s, dtype, device), options={"nv_enable_sdpa": True}
        )
    if name == "rope":
        return Case(rope, _rope_args(s, dtype, device))
    if name == "swiglu":
        return Case(
            swiglu_mlp,
            [
                _leaf((rows, h), dtype, device),
                _leaf((f, h), dtype, device, w_scale),
                _leaf((f, h), dtype, device, w_scale),
                _leaf((h, f), dtype, device, w_scale),
                _fixed((rows, h), torch.float32, device),
            ],
        )
    if name == "gelu_mlp":
        return Case(
            gelu_mlp,
            [
                _leaf((rows, h), dtype, device),
                _leaf((f, h), dtype, device, w_scale),
                _leaf((f,), dtype, device),
                _leaf((h, f), dtype, device, w_scale),
                _leaf((h,), dtype, device),
                _fixed((rows, h), torch.float32, device),
            ],
        )
    if name == "embedding":
        ids = torch.randint(0, s.vocab, (s.batch, s.seq), device=device)
        return Case(
            embedding,
            [
                ids,
                _leaf((s.vocab, h), dtype, device),
                _fixed((s.batch, s.seq, h), torch.float32, device),
            ],
        )
    if name == "cross_entropy":
        return Case(cross_entropy, [_leaf((rows, s.vocab), dtype, device), _targets(s, device)])
    if name == "log_softmax_nll":
        return Case(log_softmax_nll, [_leaf((rows, s.vocab), dtype, device), _targets(s, device)])
    if name == "norm_gelu_residual":
        x = _leaf((rows, h), dtype, device)
        norm = [_leaf((h,), dtype, device), _leaf((h,), dtype, device)]
        return Case(norm_gelu_residual, [x, *norm, _fixed((rows, h), torch.float32, device)])
    if name == "block":
        cos, sin = _rope_args(s, dtype, device)[1:3]
        ws = [_leaf((3 * h, h), dtype, device, w_scale), _leaf((h, h), dtype, device, w_scale)]
        mlp = [_leaf((f, h), dtype, device, w_scale), _leaf((f, h), dtype, device, w_scale),
               _leaf((h, f), dtype, device, w_scale)]  # fmt: skip
        x = _leaf((s.batch, s.seq, h), dtype, device)
        norms = [_leaf((h,), dtype, device) for _ in range(2)]
        g = _fixed((s.batch, s.seq, h), torch.float32, device)
        args = [x, norms[0], *ws, norms[1], *mlp, cos, sin, g]
        return Case(transformer_block, args, options={"nv_enable_sdpa": True})
    if name == "sgd":
        return Case(
            sgd_momentum_step, [_fixed((h, f), dtype, device) for _ in range(3)], inplace=True
        )
    if name == "adam":
        p, grad, m = (_fixed((h, f), dtype, device) for _ in range(3))
        return Case(adam_step, [p, grad, m, _fixed((h, f), dtype, device).abs()], inplace=True)
    raise KeyError(f"no step named {name!r}; steps: {', '.join(STEPS)}")


STEPS = (
    "rmsnorm",
    "layernorm",
    "attention",
    "attention_iota",
    "sdpa",
    "rope",
    "swiglu",
    "gelu_mlp",
    "embedding",
    "cross_entropy",
    "log_softmax_nll",
    "norm_gelu_residual",
    "block",
    "sgd",
    "adam",
)
"""Every step make_case builds, in the order the check runs them."""
