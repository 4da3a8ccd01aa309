"""Whole models' training steps for tools/thunder_check.py: the nanoGPT and Llama 2 models
that Thunder's wheel ships for its own tests (thunder/tests/nanogpt_model.py, llama2_model.py;
plain torch modules), a loss of their logits, forward and backward under thunder.jit with
kfuse as nvFuser, every parameter's gradient compared with the module's float64 copy in eager.

nanoGPT: embeddings of tokens and positions, LayerNorm with bias, causal SDPA, GELU MLP,
residuals, tied lm_head, cross-entropy; Llama 2: RMSNorm, RoPE from cos/sin tables, SDPA,
SwiGLU, cross-entropy of its logits.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F

MODELS = ("nanogpt", "llama2")


class LossOf(torch.nn.Module):
    """The model's mean cross-entropy on (tokens, targets), as one module for thunder.jit."""

    def __init__(self, name: str, model: torch.nn.Module) -> None:
        super().__init__()
        self.name = name
        self.model = model

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if self.name == "nanogpt":
            _, loss = self.model(tokens, targets)
            return loss
        logits = self.model(tokens, targets)
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def make_model(name: str, size: Any, dtype: torch.dtype, device: str) -> LossOf:
    """The model at `size` (thunder_steps.Size: its hidden, heads, vocab and seq; two layers,
    one on the emulator), its parameters in `dtype`, no dropout."""
    layers = 1 if device == "cpu" else 2
    if name == "nanogpt":
        from thunder.tests.nanogpt_model import GPT, GPTConfig

        config = GPTConfig(
            block_size=size.seq,
            vocab_size=size.vocab,
            n_layer=layers,
            n_head=size.heads,
            n_embd=size.hidden,
            dropout=0.0,
            bias=True,
        )
        model: torch.nn.Module = GPT(config)
    elif name == "llama2":
        from thunder.tests.llama2_model import ModelArgs, Transformer

        args = ModelArgs(
            dim=size.hidden,
            n_layers=layers,
            n_heads=size.heads,
            vocab_size=size.vocab,
            max_seq_len=size.seq,
            multiple_of=16,
        )
        model = Transformer(args)
    else:
        raise KeyError(f"no model named {name!r}; models: {', '.join(MODELS)}")
    return LossOf(name, model.to(device=device, dtype=dtype))


def model_inputs(size: Any, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(0, size.vocab, (size.batch, size.seq), device=device)
    return tokens, torch.randint(0, size.vocab, (size.batch, size.seq), device=device)


def loss_and_grads(module: torch.nn.Module, tokens: Any, targets: Any) -> list[Any]:
    """The loss and every parameter's gradient after one forward and backward."""
    loss = module(tokens, targets)
    loss.backward()
    return [loss] + [p.grad for p in module.parameters()]


def reference_of(module: LossOf) -> LossOf:
    """The module's float64 copy, for eager torch's reference."""
    return copy.deepcopy(module).double()
