"""nvFuser's flash-attention tests (test_sdpa.py: test_sdpa_fwd, test_sdpa_bwd,
test_sdpa_fwd_bwd), ported. Each attention test runs nvFuser's 27 cases (dropout None,
0.0, 0.2; is_causal None, True, False; scale None, 1/sqrt(E), 1e-3), the given ones as
symbolic scalar inputs, against torch's flash attention with the same seed. On the GPU every
case runs; on the host emulator (CPU tensors) the cases without dropout run through torch's
CPU flash attention, whose dropout kfuse does not take."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from gpu_support import requires_gpu
from kfuse.nvfuser_direct import DataType, FusionDefinition

N, H, L, S, E = 4, 8, 16, 16, 8
CASES = list(itertools.product([None, 0.0, 0.2], [None, True, False], [None, 1 / E**0.5, 1e-3]))
Case = tuple[Any, Any, Any]


def case_id(case: Case) -> str:
    dropout, causal, scale = case
    return f"dropout{dropout}-causal{causal}-scale{'none' if scale is None else f'{scale:.3g}'}"


GPU_MARKS = [pytest.mark.gpu, requires_gpu]
PARAMS = [
    pytest.param(
        case, device, id=f"{case_id(case)}-{device}", marks=GPU_MARKS if device == "cuda" else []
    )
    for case in CASES
    for device in (["cuda"] if case[0] == 0.2 else ["cpu", "cuda"])
]  # fmt: skip


def bf16_tensor(fd: FusionDefinition, rank: int = 4) -> Any:
    return fd.define_tensor(
        shape=[-1] * rank, contiguity=True, dtype=DataType.BFloat16, is_cpu=False
    )


def symbolic(fd: FusionDefinition, case: Case) -> list[Any]:
    """nvFuser's test defines each given parameter as a scalar input, None where not given."""
    dtypes = (DataType.Double, DataType.Bool, DataType.Double)
    return [
        None if value is None else fd.define_scalar(value=None, dtype=dtype)
        for value, dtype in zip(case, dtypes, strict=True)
    ]


def given(case: Case) -> list[Any]:
    return [value for value in case if value is not None]


def run_seeded(build: Callable[[FusionDefinition], None], inputs: list[Any]) -> list[Any]:
    """As nvFuser's harness: define, seed torch's generator with 0, execute."""
    with FusionDefinition() as fd:
        build(fd)
    torch.manual_seed(0)
    return list(fd.execute(inputs))


def randn(*shape: int, device: str, grad: bool = False) -> Any:
    return torch.randn(shape, dtype=torch.bfloat16, device=device, requires_grad=grad)


def torch_case(case: Case) -> tuple[float, bool, Any]:
    """Torch takes no None for dropout_p or is_causal."""
    dropout, causal, scale = case
    return (0.0 if dropout is None else dropout), bool(causal), scale


def flash_forward(q: Any, k: Any, v: Any, case: Case) -> Any:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dropout, causal, scale = torch_case(case)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        torch.manual_seed(0)
        return F.scaled_dot_product_attention(
            q, k, v, dropout_p=dropout, is_causal=causal, scale=scale
        )


@pytest.mark.parametrize(("case", "device"), PARAMS)
def test_sdpa_fwd(case: Case, device: str) -> None:
    qkv = [randn(N, H, length, E, device=device) for length in (L, S, S)]

    def build(fd: FusionDefinition) -> None:
        q, k, v = (bf16_tensor(fd) for _ in range(3))
        dropout, causal, scale = symbolic(fd, case)
        attn, *_ = fd.ops.sdpfa_fwd(q, k, v, dropout_p=dropout, is_causal=causal, scale=scale)
        fd.add_output(attn)

    out = run_seeded(build, [*qkv, *given(case)])
    torch.testing.assert_close(out[0], flash_forward(*qkv, case))


def flash_backward_reference(grad: Any, q: Any, k: Any, v: Any, case: Case) -> tuple[Any, ...]:
    """torch's flash forward and backward as nvFuser's test calls them: (out, logsumexp,
    philox seed, philox offset) and the three gradients."""
    aten = torch.ops.aten
    dropout, causal, scale = torch_case(case)
    if q.is_cuda:
        fwd = aten._scaled_dot_product_flash_attention(
            q, k, v, dropout, causal, return_debug_mask=False, scale=scale
        )
        out, lse, cum_q, cum_k, len_q, len_k, seed, offset = fwd[:8]
        grads = aten._scaled_dot_product_flash_attention_backward(
            grad, q, k, v, out, lse, cum_q, cum_k, len_q, len_k, dropout, causal, seed, offset,
            scale=scale,
        )  # fmt: skip
        return (out, lse, seed, offset, *grads)
    out, lse = aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, dropout, causal, scale=scale
    )
    grads = aten._scaled_dot_product_flash_attention_for_cpu_backward(
        grad, q, k, v, out, lse, dropout, causal, scale=scale
    )
    state = [torch.zeros(shape, dtype=torch.uint64) for shape in ((2,), ())]
    return (out, lse, *state, *grads)


@pytest.mark.parametrize(("case", "device"), PARAMS)
def test_sdpa_bwd(case: Case, device: str) -> None:
    grad, q, k, v = (randn(N, H, length, E, device=device) for length in (L, L, S, S))
    out, lse, seed, offset, *want = flash_backward_reference(grad, q, k, v, case)

    def build(fd: FusionDefinition) -> None:
        tensors = [bf16_tensor(fd) for _ in range(5)]  # grad, q, k, v, out
        logsumexp = fd.define_tensor(
            shape=[-1, -1, -1], contiguity=True, dtype=DataType.Float, is_cpu=False
        )
        state = [
            fd.define_tensor(shape=shape, dtype=DataType.UInt64, is_cpu=False)
            for shape in ([2], [])
        ]  # nvFuser's define_sdpa_rng_state for torch >= 2.7
        dropout, causal, scale = symbolic(fd, case)
        grads = fd.ops.sdpfa_bwd(*tensors, logsumexp, dropout, causal, *state, scale)
        for g in grads:
            fd.add_output(g)

    got = run_seeded(build, [grad, q, k, v, out, lse, seed, offset, *given(case)])
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize(("case", "device"), PARAMS)
def test_sdpa_fwd_bwd(case: Case, device: str) -> None:
    q, k, v = (randn(N, H, length, E, device=device, grad=True) for length in (L, S, S))
    grad = randn(N, H, L, E, device=device)
    want = flash_forward(q, k, v, case)
    want.backward(grad)

    def build(fd: FusionDefinition) -> None:
        tq, tk, tv, tgrad = (bf16_tensor(fd) for _ in range(4))
        dropout, causal, scale = symbolic(fd, case)
        out, lse, seed, offset = fd.ops.sdpfa_fwd(
            tq, tk, tv, dropout_p=dropout, is_causal=causal, scale=scale
        )
        grads = fd.ops.sdpfa_bwd(tgrad, tq, tk, tv, out, lse, dropout, causal, seed, offset, scale)
        for t in (out, *grads):
            fd.add_output(t)

    got = run_seeded(build, [q.detach(), k.detach(), v.detach(), grad, *given(case)])
    torch.testing.assert_close(got[0], want)
    for g, t in zip(got[1:], (q, k, v), strict=True):
        torch.testing.assert_close(g, t.grad)
