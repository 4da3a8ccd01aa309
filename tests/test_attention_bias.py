"""sdpfa_fwd with nvFuser's bias and mask, and attention over more than four axes (leading
batch axes, AlphaFold's [B, N, H, L, E] heads): against eager torch's
scaled_dot_product_attention(attn_mask=...) and the float64 reference on CPU tensors (the
host emulator), the CUDA paths in the gpu-marked tests."""

from __future__ import annotations

import math

import pytest

from kfuse.dtypes import DataType
from kfuse.errors import DefinitionError, InputError
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.schedule import SchedulerType

torch = pytest.importorskip("torch")
sdpa = torch.nn.functional.scaled_dot_product_attention


def _randn(*shape: int, seed: int, dtype: object = None) -> object:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype or torch.bfloat16)


def _keep(*shape: int, seed: int) -> object:
    """A Bool mask that keeps about 70% of the keys."""
    g = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=g) > 0.3


def _scored_fusion(
    ranks: int,
    bias_shape: list[int] | None,
    mask_shape: list[int] | None,
    dtype: DataType = DataType.BFloat16,
    causal: bool = False,
    scale: float | None = None,
) -> FusionDefinition:
    """sdpfa_fwd(q, k, v, bias=, mask=) with all four outputs; a shape entry 1 defines a
    broadcast axis, -1 a symbolic one."""
    with FusionDefinition() as fd:
        q, k, v = (fd.define_tensor(shape=[-1] * ranks, dtype=dtype) for _ in range(3))
        bias = None if bias_shape is None else fd.define_tensor(shape=bias_shape, dtype=dtype)
        mask = (
            None if mask_shape is None else fd.define_tensor(shape=mask_shape, dtype=DataType.Bool)
        )
        outs = fd.ops.sdpfa_fwd(q, k, v, bias=bias, mask=mask, is_causal=causal, scale=scale)
        for t in outs:
            fd.add_output(t)
    return fd


def _attn_mask(bias: object, keep: object, dtype: object) -> object:
    """nvFuser's combination as eager torch's attn_mask: the bias, -inf where not kept."""
    blocked = (
        torch.zeros(()) if keep is None else torch.zeros(keep.shape).masked_fill(~keep, -math.inf)
    )
    total = blocked if bias is None else bias.float() + blocked
    return total.to(dtype)


def _eager(q: object, k: object, v: object, attn_mask: object, **kw: object) -> object:
    """Eager torch's attention of the heads flattened to 4-D (its CPU flash kernel, the one
    kfuse calls, takes 4-D only; eager torch runs other ranks through its math path)."""
    lead = tuple(q.shape[:-3])
    scores = (*q.shape[:-1], k.shape[-2])
    mask4 = attn_mask.expand(scores).reshape(-1, *scores[-3:])
    out = sdpa(*(t.reshape(-1, *t.shape[-3:]) for t in (q, k, v)), attn_mask=mask4, **kw)
    return out.reshape(*lead, *out.shape[1:])


def _logsumexp(q: object, k: object, attn_mask: object, scale: float | None) -> object:
    """The log-sum-exp of the scaled, biased scores in float64 (the kernels' Float one, with
    their approximate exp, is within 1e-4 of it)."""
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q.double() @ k.double().transpose(-1, -2) * s + attn_mask.double()
    return torch.logsumexp(scores, -1)


CASES = {
    # rank, q/k/v shapes (batch..., heads, L or S, E), bias shape, mask shape
    "4d-full": (4, (2, 3, 6, 8), (2, 3, 9, 8), [-1, -1, -1, -1], [-1, -1, -1, -1]),
    "4d-bias-per-head": (4, (2, 3, 6, 8), (2, 3, 9, 8), [1, -1, -1, -1], None),
    "4d-key-mask": (4, (2, 3, 6, 8), (2, 3, 9, 8), None, [-1, 1, 1, -1]),
    "5d-triangle": (5, (2, 4, 3, 4, 8), (2, 4, 3, 4, 8), [-1, 1, -1, -1, -1], [-1, -1, 1, 1, -1]),
    "6d": (6, (2, 2, 2, 3, 5, 8), (2, 2, 2, 3, 7, 8), [1, -1, 1, -1, 1, -1], [-1, 1, -1, 1, -1, 1]),
}


def _case_inputs(case: str, dtype: object = torch.bfloat16) -> tuple[list, object, object]:
    """[q, k, v(, bias)(, mask)] for a CASES entry, and the bias and mask (or None)."""
    _, q_shape, kv_shape, bias_spec, mask_spec = CASES[case]
    q, k, v = (
        _randn(*q_shape, seed=0, dtype=dtype),
        *(_randn(*kv_shape, seed=s, dtype=dtype) for s in (1, 2)),
    )
    scores = (*q_shape[:-1], kv_shape[-2])

    def sized(spec: list[int]) -> tuple[int, ...]:
        return tuple(1 if d == 1 else n for d, n in zip(spec, scores, strict=True))

    bias = None if bias_spec is None else _randn(*sized(bias_spec), seed=3, dtype=dtype)
    keep = None if mask_spec is None else _keep(*sized(mask_spec), seed=4)
    extra = [t for t in (bias, keep) if t is not None]
    return [q, k, v, *extra], bias, keep


@pytest.mark.parametrize("case", list(CASES))
def test_a_bias_and_mask_match_eager_torch_and_the_reference(case: str) -> None:
    ranks, _, _, bias_spec, mask_spec = CASES[case]
    fd = _scored_fusion(ranks, bias_spec, mask_spec)
    inputs, bias, keep = _case_inputs(case)
    q, k, v = inputs[:3]
    assert [s.scheduler for s in fd.segments(inputs)] == [SchedulerType.expr_eval]
    out, lse, seed, offset = fd.execute(inputs)
    assert out.shape == (*q.shape[:-1], v.shape[-1]) and out.dtype == torch.bfloat16
    assert lse.shape == q.shape[:-1] and lse.dtype == torch.float32
    assert seed.shape == (2,) and offset.shape == () and seed.dtype == offset.dtype == torch.int64
    attn_mask = _attn_mask(bias, keep, torch.bfloat16)
    torch.testing.assert_close(out, _eager(q, k, v, attn_mask))
    torch.testing.assert_close(
        lse.double(), _logsumexp(q, k, attn_mask, None), rtol=1e-4, atol=1e-4
    )
    ref = evaluate(fd.fusion, inputs)
    torch.testing.assert_close(out.double(), ref[0], rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(lse.double(), ref[1], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_a_bias_with_is_causal_and_a_scale(causal: bool, scale: float | None) -> None:
    # nvFuser's math path refuses is_causal with a bias; kfuse's kernels take both: the
    # causal mask hides key j > i on top of the bias.
    fd = _scored_fusion(4, [-1, -1, -1, -1], None, causal=causal, scale=scale)
    q, k, v = (_randn(2, 3, 7, 8, seed=s) for s in range(3))
    bias = _randn(2, 3, 7, 7, seed=3)
    out, lse, *_ = fd.execute([q, k, v, bias])
    hide = (
        torch.ones(7, 7, dtype=torch.bool).triu(1)
        if causal
        else torch.zeros(7, 7, dtype=torch.bool)
    )
    attn_mask = (bias.float().masked_fill(hide, -math.inf)).bfloat16()
    torch.testing.assert_close(out, sdpa(q, k, v, attn_mask=attn_mask, scale=scale))
    torch.testing.assert_close(
        lse.double(), _logsumexp(q, k, attn_mask, scale), rtol=1e-4, atol=1e-4
    )
    ref = evaluate(fd.fusion, [q, k, v, bias])
    torch.testing.assert_close(out.double(), ref[0], rtol=2e-2, atol=2e-2)


def test_a_row_with_every_key_masked_gives_zero_and_a_logsumexp_of_minus_inf() -> None:
    fd = _scored_fusion(4, None, [-1, -1, -1, -1])
    q, k, v = _randn(1, 2, 4, 8, seed=0), _randn(1, 2, 6, 8, seed=1), _randn(1, 2, 6, 8, seed=2)
    keep = _keep(1, 2, 4, 6, seed=5)
    keep[0, 1, 2] = False  # query 2 of head 1 sees no key
    keep[0, 0, :, 0] = True  # every other row sees at least one
    keep[0, 1, [0, 1, 3], 0] = True
    out, lse, *_ = fd.execute([q, k, v, keep])
    assert torch.all(out[0, 1, 2] == 0) and lse[0, 1, 2] == -math.inf
    assert torch.isfinite(lse).sum() == 7
    torch.testing.assert_close(out, sdpa(q, k, v, attn_mask=keep))  # torch's 0 too
    ref_out, ref_lse, *_ = evaluate(fd.fusion, [q, k, v, keep])
    assert torch.all(ref_out[0, 1, 2] == 0) and ref_lse[0, 1, 2] == -math.inf
    torch.testing.assert_close(lse.double(), ref_lse, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("layout", ["NHSE", "NSHE"])
def test_nvfusers_bias_and_mask_in_both_query_layouts(layout: str, device: str) -> None:
    # nvFuser's test_sdpa_fwd_bias_mask (test_sdpa.py, its sizes): query, key and value
    # defined with the stride order of the layout, a full bias and mask. nvFuser also checks
    # that its output keeps the query's memory order (as nvFuser's test, through the
    # stride_order the layout defines). Its head size 2 is padded to 8 for CUDA's
    # memory-efficient kernel.
    order = [3, 2, 1, 0] if layout == "NHSE" else [3, 1, 2, 0]
    with FusionDefinition() as fd:
        q, k, v = (
            fd.define_tensor(
                shape=[-1] * 4, contiguity=True, dtype=DataType.BFloat16, stride_order=order
            )
            for _ in range(3)
        )
        bias = fd.define_tensor(shape=[-1] * 4, contiguity=True, dtype=DataType.BFloat16)
        mask = fd.define_tensor(shape=[-1] * 4, contiguity=True, dtype=DataType.Bool)
        attn, *_ = fd.ops.sdpfa_fwd(q, k, v, bias=bias, mask=mask)
        fd.add_output(attn)
    n, h, queries, keys, e = 11, 7, 5, 3, 2

    def laid_out(length: int, seed: int) -> object:
        if layout == "NHSE":
            return _randn(n, h, length, e, seed=seed)
        return _randn(n, length, h, e, seed=seed).transpose(1, 2)

    q, k, v = laid_out(queries, 0), laid_out(keys, 1), laid_out(keys, 2)
    bias, keep = _randn(n, h, queries, keys, seed=3), _keep(n, h, queries, keys, seed=4)
    q, k, v, bias, keep = (t.to(device) for t in (q, k, v, bias, keep))
    (out,) = fd.execute([q, k, v, bias, keep])
    attn_mask = (bias + torch.where(keep, 0.0, float("-inf"))).to(bias.dtype)
    want = sdpa(q, k, v, attn_mask=attn_mask)
    if device == "cpu":  # the same kernel as kfuse's
        torch.testing.assert_close(out, want)
    else:  # eager torch's math attention for head size 2
        torch.testing.assert_close(out, torch.nan_to_num(want, nan=0.0), rtol=2e-2, atol=2e-2)
    # nvFuser's verify_stride_order: the strides, put in stride_order's ranks, fall.
    ranked = [0] * 4
    for axis, rank in enumerate(order):
        ranked[3 - rank] = out.stride(axis)
    assert ranked == sorted(ranked, reverse=True), out.stride()
    assert out.stride() == q.stride()  # the query's layout: dense, in its order


def test_a_float_query_with_a_bias() -> None:
    # Flash attention takes Half and BFloat16 only; with a bias kfuse's kernels take Float.
    fd = _scored_fusion(4, [-1, -1, -1, -1], [-1, 1, -1, -1], dtype=DataType.Float)
    inputs, bias, keep = _case_inputs("4d-full", dtype=torch.float32)
    keep = keep[:, :1]
    q, k, v = inputs[:3]
    out, lse, *_ = fd.execute([q, k, v, bias, keep])
    attn_mask = _attn_mask(bias, keep, torch.float32)
    torch.testing.assert_close(out, sdpa(q, k, v, attn_mask=attn_mask))
    ref = evaluate(fd.fusion, [q, k, v, bias, keep])
    torch.testing.assert_close(out.double(), ref[0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(lse.double(), ref[1], rtol=1e-4, atol=1e-4)


def test_a_five_dimensional_backward_matches_autograd() -> None:
    with FusionDefinition() as fd:
        q, k, v, grad = (
            fd.define_tensor(shape=[-1] * 5, dtype=DataType.BFloat16) for _ in range(4)
        )
        out, lse, seed, offset = fd.ops.sdpfa_fwd(q, k, v)
        grads = fd.ops.sdpfa_bwd(grad, q, k, v, out, lse, 0.0, False, seed, offset, None)
        for t in (out, lse, *grads):
            fd.add_output(t)
    inputs = [_randn(2, 3, 2, 6, 8, seed=s) for s in range(4)]
    out, lse, *grads = fd.execute(inputs)
    assert lse.shape == (2, 3, 2, 6)
    q, k, v = (t.double().requires_grad_() for t in inputs[:3])
    eager = sdpa(q, k, v)
    eager.backward(inputs[3].double())
    torch.testing.assert_close(out.double(), eager, rtol=2e-2, atol=2e-2)
    for got, t in zip(grads, (q, k, v), strict=True):
        assert got.shape == t.shape
        torch.testing.assert_close(got.double(), t.grad, rtol=3e-2, atol=3e-2)
    for got, want in zip([out, lse, *grads], evaluate(fd.fusion, inputs), strict=True):
        torch.testing.assert_close(got.double(), want, rtol=3e-2, atol=3e-2)


def test_printed_scored_attention_rebuilds() -> None:
    fd = _scored_fusion(5, [-1, 1, -1, -1, -1], [-1, -1, 1, 1, -1], scale=0.5)
    namespace: dict = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(repr(fd), namespace)
    assert namespace["fd"].fusion == fd.fusion
    assert "bias=T3, mask=T4, dropout_p=0.0, is_causal=False, scale=0.5)" in repr(fd)


def test_bias_and_mask_definition_errors() -> None:
    with FusionDefinition() as fd:
        q = fd.define_tensor(shape=[-1] * 4, dtype=DataType.BFloat16)
        q5 = fd.define_tensor(shape=[-1] * 5, dtype=DataType.BFloat16)
        r3 = fd.define_tensor(shape=[-1] * 3, dtype=DataType.BFloat16)
        f = fd.define_tensor(shape=[-1] * 4, dtype=DataType.Float)
        d = fd.define_tensor(shape=[-1] * 4, dtype=DataType.Double)
        m = fd.define_tensor(shape=[-1] * 4, dtype=DataType.Bool)
        with pytest.raises(
            DefinitionError, match=r"bias T2 \(rank 3 .* must have the query's rank 4"
        ):
            fd.ops.sdpfa_fwd(q, q, q, bias=r3)
        with pytest.raises(
            DefinitionError, match=r"bias T3 .* must be BFloat16 \(the query's dtype\)"
        ):
            fd.ops.sdpfa_fwd(q, q, q, bias=f)
        with pytest.raises(DefinitionError, match="mask T0 .* must be Bool"):
            fd.ops.sdpfa_fwd(q, q, q, mask=q)
        with pytest.raises(DefinitionError, match="mask T1 .* must have the query's rank 4"):
            fd.ops.sdpfa_fwd(q, q, q, mask=q5)
        with pytest.raises(DefinitionError, match="key T1 .* is not of query's rank"):
            fd.ops.sdpfa_fwd(q, q5, q)
        with pytest.raises(DefinitionError, match="Double; attention with a bias or mask takes"):
            fd.ops.sdpfa_fwd(d, d, d, bias=d)
        with pytest.raises(DefinitionError, match="Float; flash attention takes Half or BFloat16"):
            fd.ops.sdpfa_fwd(f, f, f)
        out, lse, seed, offset = fd.ops.sdpfa_fwd(q, q, q, mask=m)
        with pytest.raises(DefinitionError, match="comes from an sdpfa_fwd with a bias or mask"):
            fd.ops.sdpfa_bwd(q, q, q, q, out, lse, 0.0, False, seed, offset, None)
        with pytest.raises(DefinitionError, match="logsumexp T0 .* must be a rank-4 Float"):
            fd.ops.sdpfa_bwd(q5, q5, q5, q5, q5, q, 0.0, False, seed, offset, None)
        fd.add_output(out)


def test_bias_and_mask_input_errors() -> None:
    fd = _scored_fusion(4, [-1, -1, -1, -1], [-1, -1, -1, -1])
    q, k, v = (_randn(2, 3, 6, 8, seed=s) for s in range(3))
    keep = _keep(2, 3, 6, 6, seed=4)
    with pytest.raises(
        InputError, match=r"bias T3 \(2, 3, 5, 6\) does not broadcast to the scores \(2, 3, 6, 6\)"
    ):
        fd.execute([q, k, v, _randn(2, 3, 5, 6, seed=3), keep])
    with pytest.raises(InputError, match=r"mask T4 \(2, 2, 6, 6\) does not broadcast"):
        fd.execute([q, k, v, _randn(2, 3, 6, 6, seed=3), keep[:, :2]])
    with FusionDefinition() as fd:
        t = [fd.define_tensor(shape=[-1] * 4, dtype=DataType.BFloat16) for _ in range(4)]
        out, *_ = fd.ops.sdpfa_fwd(*t[:3], bias=t[3], dropout_p=0.1)
        fd.add_output(out)
    with pytest.raises(InputError, match="with a bias or mask and dropout_p = 0.1"):
        fd.execute([q, k, v, _randn(2, 3, 6, 6, seed=3)])
    fd = _scored_fusion(4, [-1, -1, -1, -1], None)
    with pytest.raises(InputError, match="value's head size 4 must be the query's 8"):
        fd.execute([q, k, _randn(2, 3, 6, 4, seed=2), _randn(2, 3, 6, 6, seed=3)])


# ---- the CUDA path, aten's memory-efficient attention (the lead runs these) ----
@pytest.mark.gpu
@pytest.mark.parametrize("case", list(CASES))
def test_a_bias_and_mask_on_cuda_match_eager_torch(case: str) -> None:
    ranks, _, _, bias_spec, mask_spec = CASES[case]
    fd = _scored_fusion(ranks, bias_spec, mask_spec)
    inputs, bias, keep = _case_inputs(case)
    cuda = [t.cuda() for t in inputs]
    out, lse, seed, offset = fd.execute(cuda)
    q, k, v = inputs[:3]
    assert out.is_cuda and out.shape == (*q.shape[:-1], v.shape[-1]) and out.dtype == torch.bfloat16
    assert lse.shape == q.shape[:-1] and lse.dtype == torch.float32
    assert seed.shape == (2,) and offset.shape == () and seed.dtype == torch.int64
    attn_mask = _attn_mask(bias, keep, torch.bfloat16).cuda()
    # Eager torch's kernel may leave NaN in a row with no key left; kfuse's 0 there is
    # checked against the reference below.
    want = torch.nan_to_num(_eager(*cuda[:3], attn_mask), nan=0.0)
    torch.testing.assert_close(out, want, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(
        lse.double().cpu(), _logsumexp(q, k, attn_mask.cpu(), None), rtol=1e-3, atol=1e-3
    )
    ref = evaluate(fd.fusion, inputs)
    torch.testing.assert_close(out.double().cpu(), ref[0], rtol=2e-2, atol=2e-2)


DEVICE_DTYPES = [
    ("cpu", torch.bfloat16),
    ("cpu", torch.float32),
    *(
        pytest.param("cuda", dtype, marks=pytest.mark.gpu)
        for dtype in (torch.bfloat16, torch.float16, torch.float32)
    ),
]


@pytest.mark.parametrize(("device", "dtype"), DEVICE_DTYPES)
def test_a_causal_row_whose_keys_are_all_masked(device: str, dtype: object) -> None:
    # 13 keys (on CUDA the bias' rows are re-laid in multiples of 16 for the kernel's vector
    # loads); query 5 sees keys 0-5 by the causal mask and the mask hides those: 0 and -inf.
    kfuse_dtype = {torch.bfloat16: DataType.BFloat16, torch.float16: DataType.Half}.get(
        dtype, DataType.Float
    )
    fd = _scored_fusion(4, [-1, 1, -1, -1], [-1, -1, -1, -1], dtype=kfuse_dtype, causal=True)
    q, k, v = (_randn(2, 3, 13, 8, seed=s, dtype=dtype) for s in range(3))
    bias = _randn(2, 1, 13, 13, seed=3, dtype=dtype)
    keep = torch.ones(2, 3, 13, 13, dtype=torch.bool)
    keep[1, 2, 5, :6] = False
    inputs = [q, k, v, bias, keep]
    out, lse, *_ = fd.execute([t.to(device) for t in inputs])
    assert torch.all(out[1, 2, 5] == 0) and lse[1, 2, 5] == -math.inf
    assert torch.isfinite(lse).sum() == 2 * 3 * 13 - 1
    ref_out, ref_lse, *_ = evaluate(fd.fusion, inputs)
    torch.testing.assert_close(out.double().cpu(), ref_out, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(lse.double().cpu(), ref_lse, rtol=1e-4, atol=1e-4)
