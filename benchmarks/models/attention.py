"""The non-matmul parts of attention, forward and backward: nanoGPT's (nvFuser's
test_nanogpt_attn_fwd.py and test_nanogpt_attn_bwd.py: scale, causal mask, softmax over the
last axis of [batch, heads, sequence, sequence], dropout) and Hugging Face's
(test_huggingface_attn_fwd.py and _bwd.py: an additive mask, a reshape to [batch * heads,
sequence, sequence], softmax, dropout; the backward reshapes back).

Shapes are [batch, heads, sequence, sequence]; the head size is 64 (n_embd / n_head of
every GPT-2 configuration nvFuser sweeps). The forward's causal bias is a [1, 1, s, s] float
slice of a larger lower-triangular buffer (nanoGPT's `bias[:, :, :T, :T]`), so its axis 2 is
not contiguous, as nvFuser declares it.

The forwards here take the dropout keep-mask as an input where nvFuser draws it with
fd.ops.uniform, and do not return it (it would be a copy of an input): the twins of
models.dropout_rng's forwards, which draw it as nvFuser does, so that the suite shows what
drawing costs. causal_softmax_fwd is nanoGPT's masked softmax with its causal mask computed
in the fusion (iota and a comparison) instead of read from the bias. fd.ops.size for
T.size(i).
nvFuser's Hugging Face backward bakes batch and heads into its final reshape; here heads is
the constant HEADS (every size of the family has 16) and batch is -1.
"""

from __future__ import annotations

import functools
from typing import Any

from kfuse import DataType, FusionDefinition
from models.case import Shape, demote, dropout_mask, promote, randn, sweep_case

HEAD_SIZE = 64
HEADS = 16
DROPOUT_P = 0.2

# [batch, heads, sequence, sequence]: GPT-2 medium's 16 heads at nvFuser's longest sequence
# (about 130 MB an input in bf16); one size, for the suite's 5-minute budget.
ATTENTION = ((16, 16, 512, 512),)
ATTENTION_QUICK = ((16, 16, 512, 512),)
TEST_ATTENTION = (1, HEADS, 9, 9)
GPU_TEST_ATTENTION = (2, HEADS, 130, 130)


def scores_input(fd: FusionDefinition, dtype: DataType) -> Any:
    return fd.define_tensor(shape=[-1, -1, -1, -1], contiguity=[True] * 4, dtype=dtype)


def nanogpt_attn_fwd_definition(dtype: DataType) -> FusionDefinition:
    # from test_nanogpt_attn_fwd.py::nanogpt_attn_fwd_fusion
    with FusionDefinition() as fd:
        x = scores_input(fd, dtype)
        bias = causal_bias_input(fd)
        keep = fd.define_tensor(shape=[-1, -1, -1, -1], contiguity=[True] * 4, dtype=DataType.Bool)
        x = promote(fd, x, dtype)
        attn, masked_out = nanogpt_softmax(fd, x, bias)
        out = dropout(fd, attn, keep)
        fd.add_output(demote(fd, out, dtype))
        fd.add_output(demote(fd, attn, dtype))
        fd.add_output(masked_out)
    return fd


def causal_bias_input(fd: FusionDefinition) -> Any:
    """nanoGPT's [1, 1, s, s] float bias, a slice of a larger buffer (axis 2 strided)."""
    return fd.define_tensor(
        shape=[1, 1, -1, -1], contiguity=[None, None, False, True], dtype=DataType.Float
    )


def nanogpt_softmax(fd: FusionDefinition, x: Any, bias: Any) -> tuple[Any, Any]:
    """(softmax of x / sqrt(head size) where bias != 0, else -inf; the Bool masked_out) over
    the last axis of x (Float), as nanoGPT's forward computes them before its dropout."""
    scaled = fd.ops.mul(x, fd.define_scalar(1 / HEAD_SIZE**0.5, dtype=DataType.Double))
    masked_out = fd.ops.eq(bias, fd.define_scalar(0.0, dtype=DataType.Double))
    shape = fd.ops.shape(x)
    masked_out = fd.ops.broadcast_in_dim(masked_out, shape=shape, broadcast_dims=[0, 1, 2, 3])
    scores = fd.ops.where(
        masked_out, fd.define_scalar(float("-inf"), dtype=DataType.Double), scaled
    )
    return last_axis_softmax(fd, x, shape, scores), masked_out


def last_axis_softmax(fd: FusionDefinition, x: Any, shape: Any, scores: Any) -> Any:
    """softmax(scores) over axis 3 of the [b, h, s, s] scores (x's sizes, `shape` its shape)."""
    row = [fd.ops.size(x, 0), fd.ops.size(x, 1), fd.ops.size(x, 2), 1]
    top = fd.ops.broadcast_in_dim(
        fd.ops.max(scores, dims=[3], keepdim=False), shape=row, broadcast_dims=[0, 1, 2]
    )
    top = fd.ops.broadcast_in_dim(top, shape=shape, broadcast_dims=[0, 1, 2, 3])
    e = fd.ops.exp(fd.ops.sub(scores, top))
    total = fd.ops.broadcast_in_dim(
        fd.ops.sum(e, dims=[3], keepdim=False), shape=row, broadcast_dims=[0, 1, 2]
    )
    total = fd.ops.broadcast_in_dim(total, shape=shape, broadcast_dims=[0, 1, 2, 3])
    return fd.ops.mul(e, fd.ops.reciprocal(total))


def dropout(fd: FusionDefinition, attn: Any, keep: Any) -> Any:
    """attn * keep / (1 - p): keep a Bool (nanoGPT) or Float (Hugging Face) mask."""
    return fd.ops.mul(
        fd.ops.mul(attn, keep),
        fd.define_scalar(1 / (1 - DROPOUT_P), dtype=DataType.Double),
    )


def causal_softmax_fwd_definition(dtype: DataType) -> FusionDefinition:
    # test_nanogpt_attn_fwd.py::nanogpt_attn_fwd_fusion's masked softmax, its mask from iota
    with FusionDefinition() as fd:
        x = promote(fd, scores_input(fd, dtype), dtype)
        scaled = fd.ops.mul(x, fd.define_scalar(1 / HEAD_SIZE**0.5, dtype=DataType.Double))
        query = fd.ops.iota(fd.ops.size(x, 2), dtype=DataType.Int)
        key = fd.ops.iota(fd.ops.size(x, 3), dtype=DataType.Int)
        # A key after its query is masked out: [1, 1, s, s], broadcast over batch and heads.
        future = fd.ops.gt(
            fd.ops.broadcast(key, [True, True, True, False]),
            fd.ops.broadcast(query, [True, True, False, True]),
        )
        scores = fd.ops.where(future, float("-inf"), scaled)
        fd.add_output(demote(fd, last_axis_softmax(fd, x, fd.ops.shape(x), scores), dtype))
    return fd


def nanogpt_attn_bwd_definition(dtype: DataType) -> FusionDefinition:
    # from test_nanogpt_attn_bwd.py::nanogpt_attn_bwd_fusion
    with FusionDefinition() as fd:
        keep_scale = fd.define_scalar(1 / (1 - DROPOUT_P), dtype=DataType.Double)
        scale = fd.define_scalar(1 / HEAD_SIZE**0.5, dtype=DataType.Double)
        grad = scores_input(fd, dtype)
        attn = scores_input(fd, dtype)
        keep = fd.define_tensor(shape=[-1, -1, -1, -1], contiguity=[True] * 4, dtype=DataType.Bool)
        masked_out = fd.define_tensor(
            shape=[-1, -1, -1, -1], contiguity=[None, None, True, True], dtype=DataType.Bool
        )
        grad, attn = promote(fd, grad, dtype), promote(fd, attn, dtype)
        if dtype in (DataType.BFloat16, DataType.Half):
            keep = fd.ops.cast(keep, dtype=DataType.Float)
        d_attn = fd.ops.mul(fd.ops.mul(grad, keep_scale), keep)
        total = fd.ops.sum(fd.ops.mul(attn, d_attn), dims=[3], keepdim=False)
        row = [fd.ops.size(grad, 0), fd.ops.size(grad, 1), fd.ops.size(grad, 2), 1]
        total = fd.ops.broadcast_in_dim(total, shape=row, broadcast_dims=[0, 1, 2])
        total = fd.ops.broadcast_in_dim(
            total, shape=fd.ops.shape(grad), broadcast_dims=[0, 1, 2, 3]
        )
        d_scores = fd.ops.mul(attn, fd.ops.sub(d_attn, total))
        d_scores = fd.ops.where(masked_out, fd.define_scalar(0.0, dtype=DataType.Double), d_scores)
        fd.add_output(demote(fd, fd.ops.mul(d_scores, scale), dtype))
    return fd


def huggingface_attn_fwd_definition(dtype: DataType) -> FusionDefinition:
    # from test_huggingface_attn_fwd.py::huggingface_attn_fwd_fusion
    with FusionDefinition() as fd:
        mask = promote(fd, scores_input(fd, dtype), dtype)
        x = promote(fd, scores_input(fd, dtype), dtype)
        keep = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True] * 3, dtype=DataType.Bool)
        attn, _ = huggingface_softmax(fd, mask, x)
        out = dropout(fd, attn, fd.ops.cast(keep, dtype=DataType.Float))
        fd.add_output(demote(fd, out, dtype))
        fd.add_output(demote(fd, attn, dtype))
    return fd


def huggingface_softmax(fd: FusionDefinition, mask: Any, x: Any) -> tuple[Any, list[Any]]:
    """(softmax over the last axis of (x + mask) reshaped to [b * h, s, s], that shape), as
    Hugging Face's attention computes it before its dropout (x and mask Float)."""
    rows = fd.ops.mul(fd.ops.size(x, 0), fd.ops.size(x, 1))
    seq, keys = fd.ops.size(x, 2), fd.ops.size(x, 3)
    scores = fd.ops.reshape(fd.ops.add(x, mask), new_shape=[rows, seq, keys])
    top = fd.ops.broadcast_in_dim(
        fd.ops.max(scores, dims=[2], keepdim=False), shape=[rows, seq, 1], broadcast_dims=[0, 1]
    )
    top = fd.ops.broadcast_in_dim(top, shape=[rows, seq, keys], broadcast_dims=[0, 1, 2])
    e = fd.ops.exp(fd.ops.sub(scores, top))
    total = fd.ops.broadcast_in_dim(
        fd.ops.sum(e, dims=[2], keepdim=False), shape=[rows, seq, 1], broadcast_dims=[0, 1]
    )
    total = fd.ops.broadcast_in_dim(total, shape=[rows, seq, keys], broadcast_dims=[0, 1, 2])
    return fd.ops.mul(e, fd.ops.reciprocal(total)), [rows, seq, keys]


def huggingface_attn_bwd_definition(dtype: DataType) -> FusionDefinition:
    # from test_huggingface_attn_bwd.py::huggingface_attn_bwd_fusion
    with FusionDefinition() as fd:
        keep_scale = fd.define_scalar(1 / (1 - DROPOUT_P), dtype=DataType.Double)
        grad = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True] * 3, dtype=dtype)
        attn = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True] * 3, dtype=dtype)
        keep = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True] * 3, dtype=DataType.Bool)
        grad, attn = promote(fd, grad, dtype), promote(fd, attn, dtype)
        if dtype in (DataType.BFloat16, DataType.Half):
            keep = fd.ops.cast(keep, dtype=DataType.Float)
        d_attn = fd.ops.mul(fd.ops.mul(grad, keep_scale), keep)
        total = fd.ops.sum(fd.ops.mul(attn, d_attn), dims=[2], keepdim=False)
        total = fd.ops.broadcast_in_dim(
            total, shape=[fd.ops.size(grad, 0), fd.ops.size(grad, 1), 1], broadcast_dims=[0, 1]
        )
        total = fd.ops.broadcast_in_dim(total, shape=fd.ops.shape(grad), broadcast_dims=[0, 1, 2])
        d_scores = fd.ops.mul(attn, fd.ops.sub(d_attn, total))
        d_scores = fd.ops.reshape(
            d_scores, new_shape=[-1, HEADS, fd.ops.size(grad, 1), fd.ops.size(grad, 2)]
        )
        fd.add_output(demote(fd, d_scores, dtype))
    return fd


def _causal_bias(torch: Any, seq: int, device: str) -> Any:
    """nanoGPT's bias[:, :, :seq, :seq] of a block-size buffer (here seq + 64): a float view
    whose axis 2 is strided."""
    block = seq + 64
    full = torch.tril(torch.ones(block, block, device=device)).view(1, 1, block, block)
    return full[:, :, :seq, :seq]


def nanogpt_fwd_inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    x = randn(torch, shape, dtype, device)
    return [
        x,
        _causal_bias(torch, shape[-1], device),
        dropout_mask(torch, shape, DROPOUT_P, device),
    ]


def _bwd_inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    x = torch.randn(shape, device=device, dtype=torch.float32)
    bias = _causal_bias(torch, shape[-1], device)
    masked_out = (bias == 0).expand(shape)  # stride 0 over batch and heads
    attn = torch.softmax((x / HEAD_SIZE**0.5).masked_fill(masked_out, float("-inf")), -1)
    keep = dropout_mask(torch, shape, DROPOUT_P, device)
    return [randn(torch, shape, dtype, device), attn.to(dtype), keep, masked_out]


def _fwd_math(torch: Any, x: Any, bias: Any, keep: Any, wide: Any) -> tuple[Any, Any, Any]:
    masked_out = (bias == 0).expand(x.shape)
    scores = (x.to(wide) * (1 / HEAD_SIZE**0.5)).masked_fill(masked_out, float("-inf"))
    attn = torch.softmax(scores, -1)
    out = attn * keep * (1 / (1 - DROPOUT_P))
    return out, attn, masked_out.contiguous()


def nanogpt_attn_fwd_torch(x: Any, bias: Any, keep: Any) -> tuple[Any, ...]:
    import torch

    out, attn, masked_out = _fwd_math(torch, x, bias, keep, torch.float32)
    return out.to(x.dtype), attn.to(x.dtype), masked_out


def nanogpt_attn_fwd_reference(x: Any, bias: Any, keep: Any) -> tuple[Any, ...]:
    import torch

    return _fwd_math(torch, x, bias, keep, torch.float64)


def _dropout_softmax_grad(grad: Any, attn: Any, keep: Any, wide: Any) -> Any:
    """The gradient of the scores before the softmax and dropout both backwards share, in
    the dtype `wide`."""
    d_attn = grad.to(wide) * (1 / (1 - DROPOUT_P)) * keep
    a = attn.to(wide)
    return a * (d_attn - (a * d_attn).sum(-1, keepdim=True))


def _bwd_math(grad: Any, attn: Any, keep: Any, masked_out: Any, wide: Any) -> Any:
    d_scores = _dropout_softmax_grad(grad, attn, keep, wide)
    return d_scores.masked_fill(masked_out, 0.0) * (1 / HEAD_SIZE**0.5)


def _causal_softmax(torch: Any, x: Any, wide: Any) -> Any:
    position = torch.arange(x.shape[-1], device=x.device)
    future = position[None, :] > position[:, None]
    return torch.softmax((x.to(wide) * (1 / HEAD_SIZE**0.5)).masked_fill(future, float("-inf")), -1)


def causal_softmax_fwd_torch(x: Any) -> tuple[Any]:
    import torch

    return (_causal_softmax(torch, x, torch.float32).to(x.dtype),)


def causal_softmax_fwd_reference(x: Any) -> tuple[Any]:
    import torch

    return (_causal_softmax(torch, x, torch.float64),)


def _causal_softmax_inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    return [randn(torch, shape, dtype, device)]


def nanogpt_attn_bwd_torch(grad: Any, attn: Any, keep: Any, masked_out: Any) -> tuple[Any]:
    import torch

    return (_bwd_math(grad, attn, keep, masked_out, torch.float32).to(grad.dtype),)


def nanogpt_attn_bwd_reference(grad: Any, attn: Any, keep: Any, masked_out: Any) -> tuple[Any]:
    import torch

    return (_bwd_math(grad, attn, keep, masked_out, torch.float64),)


def _rows(shape: Shape) -> tuple[int, int, int]:
    return (shape[0] * shape[1], shape[2], shape[3])


def huggingface_fwd_inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    # nvFuser's attention mask is zeros; a random one here, so that it is not a no-op.
    mask = randn(torch, shape, dtype, device)
    x = randn(torch, shape, dtype, device)
    return [mask, x, dropout_mask(torch, _rows(shape), DROPOUT_P, device)]


def _hf_bwd_inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    logits = torch.randn(_rows(shape), device=device, dtype=torch.float32)
    attn = torch.softmax(logits, -1).to(dtype)
    keep = dropout_mask(torch, _rows(shape), DROPOUT_P, device)
    return [randn(torch, _rows(shape), dtype, device), attn, keep]


def _hf_fwd_math(torch: Any, mask: Any, x: Any, keep: Any, wide: Any) -> tuple[Any, Any]:
    b, h, s, k = x.shape
    attn = torch.softmax((x.to(wide) + mask.to(wide)).reshape(b * h, s, k), -1)
    return attn * keep * (1 / (1 - DROPOUT_P)), attn


def huggingface_attn_fwd_torch(mask: Any, x: Any, keep: Any) -> tuple[Any, ...]:
    import torch

    out, attn = _hf_fwd_math(torch, mask, x, keep, torch.float32)
    return out.to(x.dtype), attn.to(x.dtype)


def huggingface_attn_fwd_reference(mask: Any, x: Any, keep: Any) -> tuple[Any, ...]:
    import torch

    return _hf_fwd_math(torch, mask, x, keep, torch.float64)


def _hf_bwd_math(grad: Any, attn: Any, keep: Any, wide: Any) -> Any:
    d_scores = _dropout_softmax_grad(grad, attn, keep, wide)
    return d_scores.reshape(-1, HEADS, *d_scores.shape[1:])


def huggingface_attn_bwd_torch(grad: Any, attn: Any, keep: Any) -> tuple[Any]:
    import torch

    return (_hf_bwd_math(grad, attn, keep, torch.float32).to(grad.dtype),)


def huggingface_attn_bwd_reference(grad: Any, attn: Any, keep: Any) -> tuple[Any]:
    import torch

    return (_hf_bwd_math(grad, attn, keep, torch.float64),)


SWEEP = (ATTENTION, ATTENTION_QUICK, TEST_ATTENTION, GPU_TEST_ATTENTION)
_case = functools.partial(sweep_case, "attention", sweep=SWEEP)


CASES = [
    _case(
        "nanogpt_attn_fwd",
        "test_nanogpt_attn_fwd.py::nanogpt_attn_fwd_fusion",
        nanogpt_attn_fwd_definition,
        (nanogpt_attn_fwd_torch, nanogpt_attn_fwd_reference, nanogpt_fwd_inputs),
    ),
    _case(
        "causal_softmax_fwd",
        "test_nanogpt_attn_fwd.py::nanogpt_attn_fwd_fusion",
        causal_softmax_fwd_definition,
        (causal_softmax_fwd_torch, causal_softmax_fwd_reference, _causal_softmax_inputs),
    ),
    _case(
        "nanogpt_attn_bwd",
        "test_nanogpt_attn_bwd.py::nanogpt_attn_bwd_fusion",
        nanogpt_attn_bwd_definition,
        (nanogpt_attn_bwd_torch, nanogpt_attn_bwd_reference, _bwd_inputs),
    ),
    _case(
        "huggingface_attn_fwd",
        "test_huggingface_attn_fwd.py::huggingface_attn_fwd_fusion",
        huggingface_attn_fwd_definition,
        (huggingface_attn_fwd_torch, huggingface_attn_fwd_reference, huggingface_fwd_inputs),
    ),
    _case(
        "huggingface_attn_bwd",
        "test_huggingface_attn_bwd.py::huggingface_attn_bwd_fusion",
        huggingface_attn_bwd_definition,
        (huggingface_attn_bwd_torch, huggingface_attn_bwd_reference, _hf_bwd_inputs),
    ),
]
