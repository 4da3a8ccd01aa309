"""Dropouts that draw their keep mask inside the fusion (fd.ops.uniform, then lt), as
nvFuser's benchmarks write them: dropout + layer norm and dropout + RMS norm forwards
(test_dropout_{layernorm,rmsnorm}_fwd.py) and the nanoGPT and Hugging Face attention
forwards (test_{nanogpt,huggingface}_attn_fwd.py), each returning its mask. Their twins
with the mask given as an input are the suite's dropout_layernorm_fwd, dropout_rmsnorm_fwd
(models.norms), nanogpt_attn_fwd and huggingface_attn_fwd (models.attention): the same
bytes, a Bool mask written here where it is read there; the registry runs each pair in the
same call (issue 57 asks the drawn mask to cost nothing over the given one).

The numbers are stateless (rng_seed=SEED, rng_offset=OFFSET), so the float64 reference
draws kfuse's mask with kfuse.reference.philox. The torch peers draw their own with
torch.rand, as a torch model does: their outputs are checked against the reference computed
from the mask they return (Case.peer_reference).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from kfuse import DataType, FusionDefinition
from models import attention, norms
from models.case import Case, Shape, demote, matrix, promote, randn, sweep_case, vector
from models.sweeps import GPU_TEST_2D, NORM_2D, NORM_2D_QUICK, TEST_2D

SEED, OFFSET = 0x5EED, 7
KEEP = 1 - norms.DROPOUT_P


def _keep_mask(fd: FusionDefinition, x: Any, shape: Any = None) -> tuple[Any, Any]:
    """(Bool mask, Float mask): uniform(0, 1) < 1 - p over `shape` (x's where None), as
    nvFuser draws it (norms.DROPOUT_P and attention.DROPOUT_P are both nvFuser's 0.2)."""
    shape = fd.ops.shape(x) if shape is None else shape
    u = fd.ops.uniform(0.0, 1.0, shape, rng_seed=SEED, rng_offset=OFFSET, dtype=DataType.Float)
    mask = fd.ops.lt(u, KEEP)
    return mask, fd.ops.cast(mask, dtype=DataType.Float)


def dropout_layernorm_fwd_rng_definition(dtype: DataType) -> FusionDefinition:
    # from test_dropout_layernorm_fwd.py::dropout_layernorm_fwd_fusion
    with FusionDefinition() as fd:
        x1, x2 = matrix(fd, dtype), matrix(fd, dtype)
        w, b = vector(fd, dtype), vector(fd, dtype)
        mask, keep = _keep_mask(fd, x1)
        b, w, x1, x2 = (promote(fd, t, dtype) for t in (b, w, x1, x2))
        y, mean, invstd = norms._ln_fwd(fd, norms._dropout_add(fd, x1, x2, keep), w, b)
        fd.add_output(demote(fd, y, dtype))
        fd.add_output(mean)
        fd.add_output(invstd)
        fd.add_output(mask)
    return fd


def dropout_rmsnorm_fwd_rng_definition(dtype: DataType) -> FusionDefinition:
    # from test_dropout_rmsnorm_fwd.py::dropout_rmsnorm_fwd_fusion
    with FusionDefinition() as fd:
        x1, x2 = matrix(fd, dtype), matrix(fd, dtype)
        w = vector(fd, dtype)
        mask, keep = _keep_mask(fd, x1)
        x1, w, x2 = (promote(fd, t, dtype) for t in (x1, w, x2))
        y, rms = norms._rms_fwd(fd, norms._dropout_add(fd, x1, x2, keep), w)
        fd.add_output(demote(fd, y, dtype))
        fd.add_output(rms)
        fd.add_output(mask)
    return fd


def nanogpt_attn_fwd_rng_definition(dtype: DataType) -> FusionDefinition:
    # from test_nanogpt_attn_fwd.py::nanogpt_attn_fwd_fusion (its uniform, unseeded there)
    with FusionDefinition() as fd:
        x = attention.scores_input(fd, dtype)
        bias = attention.causal_bias_input(fd)
        x = promote(fd, x, dtype)
        attn, masked_out = attention.nanogpt_softmax(fd, x, bias)
        mask, _ = _keep_mask(fd, x)
        out = attention.dropout(fd, attn, mask)
        fd.add_output(demote(fd, out, dtype))
        fd.add_output(mask)
        fd.add_output(demote(fd, attn, dtype))
        fd.add_output(masked_out)
    return fd


def huggingface_attn_fwd_rng_definition(dtype: DataType) -> FusionDefinition:
    # from test_huggingface_attn_fwd.py::huggingface_attn_fwd_fusion (its uniform, unseeded)
    with FusionDefinition() as fd:
        mask_in = promote(fd, attention.scores_input(fd, dtype), dtype)
        x = promote(fd, attention.scores_input(fd, dtype), dtype)
        attn, rows = attention.huggingface_softmax(fd, mask_in, x)
        mask, keep = _keep_mask(fd, x, rows)
        out = attention.dropout(fd, attn, keep)
        fd.add_output(demote(fd, out, dtype))
        fd.add_output(demote(fd, attn, dtype))
        fd.add_output(mask)
    return fd


def _torch_mask(like: Any, shape: Any = None) -> Any:
    """A keep mask drawn by torch, as a torch model's dropout draws it: rand < 1 - p."""
    import torch

    shape = like.shape if shape is None else shape
    return torch.rand(tuple(shape), device=like.device, dtype=torch.float32) < KEEP


def dropout_layernorm_fwd_rng_torch(x1: Any, x2: Any, w: Any, b: Any) -> tuple[Any, ...]:
    mask = _torch_mask(x1)
    return (*norms.dropout_layernorm_fwd_torch(x1, x2, mask, w, b), mask)


def dropout_rmsnorm_fwd_rng_torch(x1: Any, x2: Any, w: Any) -> tuple[Any, ...]:
    mask = _torch_mask(x1)
    return (*norms.dropout_rmsnorm_fwd_torch(x1, x2, mask, w), mask)


def nanogpt_attn_fwd_rng_torch(x: Any, bias: Any) -> tuple[Any, ...]:
    keep = _torch_mask(x)
    out, attn, masked_out = attention.nanogpt_attn_fwd_torch(x, bias, keep)
    return out, keep, attn, masked_out


def huggingface_attn_fwd_rng_torch(mask: Any, x: Any) -> tuple[Any, ...]:
    b, h, s, k = x.shape
    keep = _torch_mask(x, (b * h, s, k))
    return (*attention.huggingface_attn_fwd_torch(mask, x, keep), keep)


def philox_mask(like: Any, shape: Any = None) -> Any:
    """The kernel's keep mask over `shape` (like's where None), from kfuse's NumPy Philox,
    on like's device."""
    import numpy as np
    import torch

    from kfuse.reference import philox

    shape = tuple(like.shape if shape is None else shape)
    u = philox.uniform(SEED, OFFSET, shape, DataType.Float)
    return torch.from_numpy(u < np.float32(KEEP)).to(like.device)


def _layernorm_with(mask: Any, x1: Any, x2: Any, w: Any, b: Any) -> tuple[Any, ...]:
    return (*norms.dropout_layernorm_fwd_reference(x1, x2, mask, w, b), mask)


def _rmsnorm_with(mask: Any, x1: Any, x2: Any, w: Any) -> tuple[Any, ...]:
    return (*norms.dropout_rmsnorm_fwd_reference(x1, x2, mask, w), mask)


def _nanogpt_with(keep: Any, x: Any, bias: Any) -> tuple[Any, ...]:
    out, attn, masked_out = attention.nanogpt_attn_fwd_reference(x, bias, keep)
    return out, keep, attn, masked_out


def _huggingface_with(keep: Any, mask: Any, x: Any) -> tuple[Any, ...]:
    return (*attention.huggingface_attn_fwd_reference(mask, x, keep), keep)


def dropout_layernorm_fwd_rng_reference(x1: Any, x2: Any, w: Any, b: Any) -> tuple[Any, ...]:
    return _layernorm_with(philox_mask(x1), x1, x2, w, b)


def dropout_rmsnorm_fwd_rng_reference(x1: Any, x2: Any, w: Any) -> tuple[Any, ...]:
    return _rmsnorm_with(philox_mask(x1), x1, x2, w)


def nanogpt_attn_fwd_rng_reference(x: Any, bias: Any) -> tuple[Any, ...]:
    return _nanogpt_with(philox_mask(x), x, bias)


def huggingface_attn_fwd_rng_reference(mask: Any, x: Any) -> tuple[Any, ...]:
    b, h, s, k = x.shape
    return _huggingface_with(philox_mask(x, (b * h, s, k)), mask, x)


MASK_OUTPUT = {
    "dropout_layernorm_fwd_rng": 3,
    "dropout_rmsnorm_fwd_rng": 2,
    "nanogpt_attn_fwd_rng": 1,
    "huggingface_attn_fwd_rng": 2,
}
"""Which output of each case is its keep mask (nvFuser's order of outputs)."""


def _with_peers_mask(reference: Any, name: str) -> Any:
    """Case.peer_reference of case `name`: `reference(mask, *inputs)` with the mask a peer
    returned."""
    position = MASK_OUTPUT[name]
    return lambda inputs, outputs: reference(outputs[position], *inputs)


def _layernorm_inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    """x1, x2, w, b."""
    return [
        randn(torch, shape, dtype, device),
        randn(torch, shape, dtype, device),
        randn(torch, shape[1:], dtype, device),
        randn(torch, shape[1:], dtype, device),
    ]


def _rmsnorm_inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    """x1, x2, w."""
    return _layernorm_inputs(torch, shape, dtype, device)[:3]


def _nanogpt_inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    """x, bias: the mask-as-input case's inputs without its mask."""
    return attention.nanogpt_fwd_inputs(torch, shape, dtype, device)[:2]


def _huggingface_inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    """mask, x: the mask-as-input case's inputs without its keep mask."""
    return attention.huggingface_fwd_inputs(torch, shape, dtype, device)[:2]


_norm_case = functools.partial(sweep_case, sweep=(NORM_2D, NORM_2D_QUICK, TEST_2D, GPU_TEST_2D))
_attention_case = functools.partial(sweep_case, "attention", sweep=attention.SWEEP)

NORM_CASES: list[Case] = [
    dataclasses.replace(
        _norm_case(
            "layernorm",
            "dropout_layernorm_fwd_rng",
            "test_dropout_layernorm_fwd.py::dropout_layernorm_fwd_fusion",
            dropout_layernorm_fwd_rng_definition,
            (
                dropout_layernorm_fwd_rng_torch,
                dropout_layernorm_fwd_rng_reference,
                _layernorm_inputs,
            ),
        ),
        peer_reference=_with_peers_mask(_layernorm_with, "dropout_layernorm_fwd_rng"),
    ),
    dataclasses.replace(
        _norm_case(
            "rmsnorm",
            "dropout_rmsnorm_fwd_rng",
            "test_dropout_rmsnorm_fwd.py::dropout_rmsnorm_fwd_fusion",
            dropout_rmsnorm_fwd_rng_definition,
            (dropout_rmsnorm_fwd_rng_torch, dropout_rmsnorm_fwd_rng_reference, _rmsnorm_inputs),
        ),
        peer_reference=_with_peers_mask(_rmsnorm_with, "dropout_rmsnorm_fwd_rng"),
    ),
]
"""The norms' dropouts, which the registry runs beside their mask-as-input twins."""

ATTENTION_CASES: list[Case] = [
    dataclasses.replace(
        _attention_case(
            "nanogpt_attn_fwd_rng",
            "test_nanogpt_attn_fwd.py::nanogpt_attn_fwd_fusion",
            nanogpt_attn_fwd_rng_definition,
            (nanogpt_attn_fwd_rng_torch, nanogpt_attn_fwd_rng_reference, _nanogpt_inputs),
        ),
        peer_reference=_with_peers_mask(_nanogpt_with, "nanogpt_attn_fwd_rng"),
    ),
    dataclasses.replace(
        _attention_case(
            "huggingface_attn_fwd_rng",
            "test_huggingface_attn_fwd.py::huggingface_attn_fwd_fusion",
            huggingface_attn_fwd_rng_definition,
            (
                huggingface_attn_fwd_rng_torch,
                huggingface_attn_fwd_rng_reference,
                _huggingface_inputs,
            ),
        ),
        peer_reference=_with_peers_mask(_huggingface_with, "huggingface_attn_fwd_rng"),
    ),
]
"""The attention forwards' dropouts, which the registry runs after the attention family."""
