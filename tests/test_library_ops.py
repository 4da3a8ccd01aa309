"""The library ops nvFuser hands to ATen: topk, argsort, scatter, sdpfa_fwd, sdpfa_bwd and
grouped_mm. Each runs in an expr_eval segment of its own (generated work around it split
off), against the float64 reference and torch; nvFuser's scatter tests ported
(tests/python/direct/test_python_frontend.py: test_scatter_output_intermediate,
test_scatter_scalar_src) on CPU tensors. Flash attention's CUDA path and grouped_mm on the
GPU are the gpu-marked tests."""

from __future__ import annotations

import numpy as np
import pytest

from kfuse.dtypes import DataType
from kfuse.errors import DefinitionError, InputError
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.schedule import SchedulerType

torch = pytest.importorskip("torch")

PW, EE = SchedulerType.pointwise, SchedulerType.expr_eval


def _randn(*shape: int, seed: int = 0, dtype: object = None) -> object:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype or torch.float32)


def _topk_fusion(largest: bool, sorted: bool, k: object = 3, dim: int = 1) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        values, indices = fd.ops.topk(fd.ops.exp(x), k, dim=dim, largest=largest, sorted=sorted)
        fd.add_output(fd.ops.neg(values))
        fd.add_output(indices)
    return fd


# ---- topk ----
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("framework", ["torch", "numpy"])
def test_topk_matches_torch_and_the_reference(largest: bool, framework: str) -> None:
    fd = _topk_fusion(largest, sorted=True)
    x = _randn(5, 9)
    arg = x if framework == "torch" else x.numpy()
    segments = fd.segments([arg])
    assert [s.scheduler for s in segments] == [PW, EE, PW]
    assert [s.is_library for s in segments] == [False, True, False]
    values, indices = fd.execute([arg])
    want_v, want_i = torch.topk(torch.exp(x), 3, 1, largest, True)
    np.testing.assert_allclose(np.asarray(values), -want_v.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(indices), want_i.numpy())
    ref = evaluate(fd.fusion, [arg])
    np.testing.assert_allclose(np.asarray(values), np.asarray(ref[0]), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(indices), np.asarray(ref[1]))


def test_topk_unsorted_gives_the_same_set_and_symbolic_k() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        k = fd.define_scalar(dtype=DataType.Int)
        values, indices = fd.ops.topk(x, k, dim=0, largest=True, sorted=False)
        fd.add_output(values)
        fd.add_output(indices)
    x = _randn(7, 4, seed=1)
    values, indices = fd.execute([x, 4])
    assert values.shape == (4, 4) and indices.dtype == torch.int64
    want = torch.topk(x, 4, 0, True, True).values
    torch.testing.assert_close(torch.sort(values, 0, descending=True).values, want)
    torch.testing.assert_close(torch.gather(x, 0, indices), values)
    with pytest.raises(InputError, match="k must be in"):
        fd.execute([x, 8])


def test_topk_definition_errors() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[3, 4])
        b = fd.define_tensor(shape=[-1], dtype=DataType.Bool)
        s = fd.define_tensor(shape=[])
        with pytest.raises(DefinitionError, match="k = 5 but axis 1"):
            fd.ops.topk(x, 5, dim=1)
        with pytest.raises(DefinitionError, match="k is -1"):
            fd.ops.topk(x, -1)
        with pytest.raises(DefinitionError, match="out of range"):
            fd.ops.topk(x, 1, dim=2)
        with pytest.raises(DefinitionError, match="Bool"):
            fd.ops.topk(b, 1)
        with pytest.raises(DefinitionError, match="rank 0"):
            fd.ops.argsort(s)
        with pytest.raises(DefinitionError, match="not an integer"):
            fd.ops.topk(x, fd.define_scalar(1.0))
        fd.add_output(fd.ops.topk(x, 2)[0])


# ---- argsort ----
@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("framework", ["torch", "numpy"])
def test_argsort_stable_keeps_ties_in_order(descending: bool, framework: str) -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.argsort(x, dim=1, descending=descending, stable=True))
    # ties and NaNs: the stable order is fully determined
    x = torch.tensor([[2.0, 1.0, 2.0, float("nan"), 1.0, 3.0], [0.0, 0.0, -1.0, 0.0, 5.0, 5.0]])
    arg = x if framework == "torch" else x.numpy()
    (out,) = fd.execute([arg])
    want = torch.argsort(x, dim=1, descending=descending, stable=True)
    np.testing.assert_array_equal(np.asarray(out), want.numpy())
    (ref,) = evaluate(fd.fusion, [arg])
    np.testing.assert_array_equal(np.asarray(ref), want.numpy())
    assert [s.scheduler for s in fd.segments([arg])] == [EE]


def test_argsort_of_integers_along_axis_0() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int)
        fd.add_output(fd.ops.argsort(fd.ops.add(x, 1), dim=0))
    x = torch.randperm(24, generator=torch.Generator().manual_seed(3)).reshape(6, 4)
    (out,) = fd.execute([x])
    assert torch.equal(out, torch.argsort(x, dim=0))


# ---- scatter (nvFuser's tests, on CPU tensors) ----
def test_scatter_output_intermediate() -> None:
    bsz, hidden, scatter_size = 16, 32, 8
    x = _randn(bsz, hidden)
    _, ind = torch.topk(x, k=scatter_size, dim=0)
    src = _randn(scatter_size, hidden, seed=1)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        t1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Int)
        t2 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        t3 = fd.ops.scatter(t0, t1, t2, 0)
        fd.add_output(fd.ops.sigmoid(t3))
    inputs = [x, ind, src]
    assert [s.scheduler for s in fd.segments(inputs)] == [EE, PW]
    (out,) = fd.execute(inputs)
    torch.testing.assert_close(out, torch.sigmoid(torch.scatter(x, 0, ind, src)))
    (ref,) = evaluate(fd.fusion, inputs)
    torch.testing.assert_close(out.double(), ref)


@pytest.mark.parametrize("framework", ["torch", "numpy"])
def test_scatter_of_an_empty_index_is_a_copy(framework: str) -> None:
    """An index with no positions writes nothing (the emulator campaign's torch case: the
    position check read a torch tensor's size method as its element count)."""
    x = _randn(4, 3)
    index = torch.zeros((4, 0), dtype=torch.int32)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        t1 = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int32)
        fd.add_output(fd.ops.scatter(t0, t1, -1.0, 1))
    inputs = [x, index] if framework == "torch" else [x.numpy(), index.numpy()]
    (out,) = fd.execute(inputs)
    np.testing.assert_array_equal(np.asarray(out), x.numpy())


@pytest.mark.parametrize("framework", ["torch", "numpy"])
def test_scatter_scalar_src(framework: str) -> None:
    x = _randn(16, 32)
    _, ind = torch.topk(x, k=8, dim=0)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        t1 = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int)
        s2 = fd.define_scalar(None, dtype=DataType.Double)
        fd.add_output(fd.ops.scatter(t0, t1, s2, 0))
    inputs = [x, ind, 1.5] if framework == "torch" else [x.numpy(), ind.numpy(), 1.5]
    (out,) = fd.execute(inputs)
    np.testing.assert_array_equal(np.asarray(out), torch.scatter(x, 0, ind, 1.5).numpy())


def test_scatter_with_a_smaller_index_along_the_last_axis() -> None:
    x, src = _randn(4, 10), _randn(5, 6, seed=2)
    index = torch.stack([torch.randperm(10)[:3] for _ in range(4)])
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1])
        t1 = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int)
        t2 = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.scatter(t0, t1, t2, dim=-1))
    for arrays in ([x, index, src], [x.numpy(), index.numpy(), src.numpy()]):
        (out,) = fd.execute(arrays)
        np.testing.assert_array_equal(np.asarray(out), torch.scatter(x, 1, index, src).numpy())


def test_scatter_checks_positions_and_sizes() -> None:
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1])
        t1 = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int)
        t2 = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.scatter(t0, t1, t2, 0))
    x, src = _randn(4, 3), _randn(4, 3)
    with pytest.raises(InputError, match="holds 4, outside axis 0 of size 4"):
        fd.execute([x, torch.tensor([[4, 0, 0]]), src])
    with pytest.raises(InputError, match="larger than"):
        fd.execute([x, torch.zeros(1, 5, dtype=torch.int64), src])
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1])
        i = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        j = fd.define_tensor(shape=[-1], dtype=DataType.Int)
        h = fd.define_tensor(shape=[-1, -1], dtype=DataType.Half)
        with pytest.raises(DefinitionError, match="not an integer tensor"):
            fd.ops.scatter(t0, i, t0, 0)
        with pytest.raises(DefinitionError, match="differ in rank"):
            fd.ops.scatter(t0, j, t0, 0)
        with pytest.raises(DefinitionError, match="cast it first"):
            fd.ops.scatter(t0, fd.ops.cast(i, DataType.Int), h, 0)
        fd.add_output(t0)


def test_printed_library_fusion_rebuilds() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        i = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int)
        values, indices = fd.ops.topk(x, 2, dim=0, largest=False, sorted=True)
        fd.add_output(fd.ops.scatter(x, i, 2.0, 1))
        fd.add_output(fd.ops.argsort(values, dim=1, descending=True, stable=True))
        fd.add_output(indices)
    namespace: dict = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(repr(fd), namespace)
    assert namespace["fd"].fusion == fd.fusion
    assert "fd.ops.topk(T0, 2, dim=0, largest=False, sorted=True)" in repr(fd)


# ---- flash attention ----
def _attention_fusion(causal: bool, scale: float | None) -> FusionDefinition:
    with FusionDefinition() as fd:
        q, k, v, grad = (
            fd.define_tensor(shape=[-1, -1, -1, -1], dtype=DataType.BFloat16) for _ in range(4)
        )
        out, lse, seed, offset = fd.ops.sdpfa_fwd(
            q, k, v, dropout_p=None, is_causal=causal, scale=scale
        )
        grads = fd.ops.sdpfa_bwd(grad, q, k, v, out, lse, 0.0, causal, seed, offset, scale)
        fd.add_output(out)
        fd.add_output(lse)
        for g in grads:
            fd.add_output(g)
    return fd


def _attention_inputs(device: str = "cpu", keys: int = 10) -> list:
    """query, key, value and the output's gradient: 12 queries, `keys` keys and values."""
    shapes = [(2, 3, 12, 16), (2, 3, keys, 16), (2, 3, keys, 16), (2, 3, 12, 16)]
    return [_randn(*s, seed=i).bfloat16().to(device) for i, s in enumerate(shapes)]


def _check_attention(fd: FusionDefinition, inputs: list, causal: bool, scale: float | None) -> None:
    outs = fd.execute(inputs)
    ref = evaluate(fd.fusion, inputs)
    for got, want in zip(outs, ref, strict=True):
        torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2)
    q, k, v, grad = (t.double().requires_grad_() for t in inputs)
    eager = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    eager.backward(grad)
    torch.testing.assert_close(outs[0].double(), eager, rtol=2e-2, atol=2e-2)
    for got, t in zip(outs[2:], (q, k, v), strict=True):
        torch.testing.assert_close(got.double(), t.grad, rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_sdpfa_forward_and_backward_on_cpu_torch(causal: bool, scale: float | None) -> None:
    fd = _attention_fusion(causal, scale)
    inputs = _attention_inputs(keys=12 if causal else 10)
    assert [s.scheduler for s in fd.segments(inputs)] == [EE]
    _check_attention(fd, inputs, causal, scale)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_attention_outputs_keep_their_operands_memory_order(device: str) -> None:
    """nvFuser allocates sdpfa_fwd's output in the query's memory order and sdpfa_bwd's
    gradients in their operands' (its SdpaPropagator): queries, keys and values stored as
    [N, S, H, E] (each transposed to [N, H, S, E]) give outputs stored so."""
    fd = _attention_fusion(False, None)
    stored = _attention_inputs(device)
    inputs = [t.transpose(1, 2).contiguous().transpose(1, 2) for t in stored]
    outs = fd.execute(inputs)
    assert outs[0].stride() == inputs[0].stride()
    for got, operand in zip(outs[2:], inputs[:3], strict=True):
        assert got.stride() == operand.stride()
    _check_attention(fd, inputs, False, None)


def test_an_attention_output_takes_a_dense_operands_order_only() -> None:
    from kfuse.schedule.attention_calls import _in_order_of

    t = _randn(2, 3, 5, 4)
    nshe = _randn(2, 5, 3, 4).transpose(1, 2)
    placed = _in_order_of(nshe, t)
    assert placed.stride() == nshe.stride() and torch.equal(placed, t)
    assert _in_order_of(t, t).data_ptr() == t.data_ptr()  # already in its order: no copy
    broadcast = _randn(1, 3, 5, 4).expand(2, 3, 5, 4)  # no order of its own along axis 0
    assert _in_order_of(broadcast, t) is t


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_sdpfa_refuses_a_causal_mask_over_unequal_lengths(device: str) -> None:
    """torch's flash kernels align a causal mask over more queries than keys differently (the
    CPU one at the top left, the CUDA one at the bottom right), and torch's own dispatcher
    keeps flash attention out of that case: an InputError naming it."""
    fd = _attention_fusion(True, None)
    with pytest.raises(InputError, match="is_causal with 12 queries and 10 keys"):
        fd.execute(_attention_inputs(device))


@pytest.mark.parametrize("causal", [False, True])
def test_sdpfa_in_thunders_positional_order(causal: bool) -> None:
    """Thunder 0.2.6 calls sdpfa_fwd(query, key, value, dropout_p, is_causal, scale) with all
    six positional (nvFuser's order before bias and mask), each number a defined scalar and
    scale None; sdpfa_bwd with its eleven positional, as in nvFuser's python_direct."""
    with FusionDefinition() as fd:
        q, k, v, grad = (
            fd.define_tensor(shape=[-1, -1, -1, -1], dtype=DataType.BFloat16) for _ in range(4)
        )
        dropout_p, is_causal = fd.define_scalar(0.0), fd.define_scalar(causal)
        out, lse, seed, offset = fd.ops.sdpfa_fwd(q, k, v, dropout_p, is_causal, None)
        grads = fd.ops.sdpfa_bwd(grad, q, k, v, out, lse, dropout_p, is_causal, seed, offset, None)
        fd.add_output(out)
        fd.add_output(lse)
        for g in grads:
            fd.add_output(g)
    _check_attention(fd, _attention_inputs(keys=12 if causal else 10), causal, None)


def test_sdpfa_definition_and_input_errors() -> None:
    with FusionDefinition() as fd:
        q = fd.define_tensor(shape=[-1, -1, -1, -1], dtype=DataType.BFloat16)
        f = fd.define_tensor(shape=[-1, -1, -1, -1], dtype=DataType.Float)
        r3 = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.BFloat16)
        with pytest.raises(DefinitionError, match="Half or BFloat16"):
            fd.ops.sdpfa_fwd(f, f, f)
        with pytest.raises(DefinitionError, match="rank 4"):
            fd.ops.sdpfa_fwd(r3, r3, r3)
        with pytest.raises(DefinitionError, match="not of query's dtype"):
            fd.ops.sdpfa_fwd(q, f, q)
        with pytest.raises(DefinitionError, match="bias T1 .* must be BFloat16"):
            fd.ops.sdpfa_fwd(q, q, q, bias=f)
        with pytest.raises(DefinitionError, match="is_causal"):
            fd.ops.sdpfa_fwd(q, q, q, is_causal=1.0)
        fd.add_output(q)
    with FusionDefinition() as fd:
        q = fd.define_tensor(shape=[-1, -1, -1, -1], dtype=DataType.Half)
        out, *_ = fd.ops.sdpfa_fwd(q, q, q, dropout_p=0.1)
        fd.add_output(out)
    x = _randn(1, 2, 8, 8).half()
    with pytest.raises(InputError, match="needs CUDA tensors"):
        fd.execute([x])
    with pytest.raises(InputError, match="has no reference"):
        evaluate(fd.fusion, [x])
    with pytest.raises(InputError, match="pass torch tensors"):
        fd.execute([x.numpy()])


# ---- grouped_mm ----
def _grouped_case(
    r1: int, r2: int, device: str = "cpu", aligned: bool = False
) -> tuple[FusionDefinition, list]:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1] * r1, dtype=DataType.BFloat16)
        b = fd.define_tensor(shape=[-1] * r2, dtype=DataType.BFloat16)
        offsets = fd.define_tensor(shape=[-1], dtype=DataType.Int32)
        fd.add_output(fd.ops.relu(fd.ops.grouped_mm(a, b, offsets)))
    groups, m, k, n = 3, 16, 24, 32
    a_shape = (m, k) if r1 == 2 else (groups, m, k)
    b_shape = (k, n) if r2 == 2 else (groups, k, n)
    split = k if (r1, r2) == (2, 2) else m if r1 == 2 else n
    cuts = [split // 4, split // 2]
    if aligned:  # groups of whole 16-byte runs of BFloat16, as torch's CUDA kernel needs
        cuts = [c - c % 8 for c in cuts]
    ends = torch.tensor([*cuts, split], dtype=torch.int32)
    inputs = [_randn(*a_shape).bfloat16(), _randn(*b_shape, seed=1).bfloat16(), ends]
    return fd, [t.to(device) for t in inputs]


@pytest.mark.parametrize("ranks", [(2, 2), (2, 3), (3, 2)])
def test_grouped_mm_matches_the_reference(ranks: tuple[int, int]) -> None:
    fd, inputs = _grouped_case(*ranks)
    assert [s.scheduler for s in fd.segments(inputs)] == [EE, PW]
    (out,) = fd.execute(inputs)
    (ref,) = evaluate(fd.fusion, inputs)
    torch.testing.assert_close(out.double(), ref, rtol=2e-2, atol=5e-2)


def test_grouped_mm_definition_and_input_errors() -> None:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        b3 = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.BFloat16)
        offsets = fd.define_tensor(shape=[-1], dtype=DataType.Int32)
        with pytest.raises(DefinitionError, match="batched matmul"):
            fd.ops.grouped_mm(b3, b3, offsets)
        with pytest.raises(DefinitionError, match="1-D Int32 or Int"):
            fd.ops.grouped_mm(a, b3, fd.ops.cast(offsets, DataType.Float))
        fd.add_output(fd.ops.grouped_mm(a, b3, offsets))
    a_t, b_t = _randn(16, 8).bfloat16(), _randn(2, 8, 16).bfloat16()
    with pytest.raises(InputError, match="must rise from 0"):
        evaluate(fd.fusion, [a_t, b_t, torch.tensor([9, 3], dtype=torch.int32)])
    with pytest.raises(InputError, match="must rise from 0"):
        fd.execute([a_t, b_t, torch.tensor([8, 17], dtype=torch.int32)])
    with pytest.raises(InputError, match="2 offsets for 3 matrices"):
        fd.execute([a_t, _randn(3, 8, 16).bfloat16(), torch.tensor([8, 16], dtype=torch.int32)])
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1])
        b3 = fd.define_tensor(shape=[-1, -1, -1])
        offsets = fd.define_tensor(shape=[-1], dtype=DataType.Int32)
        fd.add_output(fd.ops.grouped_mm(a, b3, offsets))
    arrays = [a_t.float().numpy(), b_t.float().numpy(), np.array([8, 16], np.int32)]
    with pytest.raises(InputError, match="pass torch tensors"):
        fd.execute(arrays)


# ---- the CUDA paths (the lead runs these) ----
@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_sdpfa_on_cuda_matches_eager_torch(causal: bool) -> None:
    fd = _attention_fusion(causal, None)
    inputs = _attention_inputs("cuda", keys=12 if causal else 10)
    assert [s.scheduler for s in fd.segments(inputs)] == [EE]
    _check_attention(fd, inputs, causal, None)


@pytest.mark.gpu
def test_sdpfa_with_dropout_replays_its_mask_in_the_backward() -> None:
    with FusionDefinition() as fd:
        q, k, v, grad = (
            fd.define_tensor(shape=[-1, -1, -1, -1], dtype=DataType.BFloat16) for _ in range(4)
        )
        out, lse, seed, offset = fd.ops.sdpfa_fwd(q, k, v, dropout_p=0.5, is_causal=False)
        grads = fd.ops.sdpfa_bwd(grad, q, k, v, out, lse, 0.5, False, seed, offset, None)
        for t in (out, lse, seed, offset, *grads):
            fd.add_output(t)
    inputs = _attention_inputs("cuda")
    q, k, v, g = inputs
    out, lse, seed, offset, *grads = fd.execute(inputs)
    assert seed.dtype == torch.int64 and seed.shape == (2,) and offset.shape == ()
    words = torch.uint64 if hasattr(torch, "uint64") else torch.int64
    state = (seed.view(words), offset.view(words))
    aten = torch.ops.aten
    want = aten._scaled_dot_product_flash_attention_backward(
        g, q, k, v, out, lse, None, None, 12, 10, 0.5, False, *state, scale=None
    )
    for got, w in zip(grads, want, strict=True):
        torch.testing.assert_close(got, w)


@pytest.mark.gpu
@pytest.mark.parametrize("ranks", [(2, 2), (2, 3), (3, 2)])
def test_grouped_mm_on_cuda_matches_the_reference(ranks: tuple[int, int]) -> None:
    fd, inputs = _grouped_case(*ranks, device="cuda", aligned=True)
    (out,) = fd.execute(inputs)
    (ref,) = evaluate(fd.fusion, inputs)
    torch.testing.assert_close(out.double(), ref, rtol=2e-2, atol=5e-2)


@pytest.mark.gpu
def test_grouped_mm_on_cuda_refuses_groups_torch_would_assert_on() -> None:
    """Groups that are not whole 16-byte runs are an InputError before torch's kernel, whose
    device-side assert would end the CUDA context; the context works on afterwards."""
    fd, inputs = _grouped_case(2, 2, device="cuda")  # groups of 6, 6 and 12 BFloat16
    with pytest.raises(InputError, match="multiple of 16 bytes"):
        fd.execute(inputs)
    fd, inputs = _grouped_case(2, 2, device="cuda", aligned=True)
    (out,) = fd.execute(inputs)
    torch.cuda.synchronize()
    assert out.is_cuda


# ---- NaNs with their sign bit set ----
def _signed_nans(device: str, rows: int = 200) -> object:
    """Columns of 200 with NaNs both ways round (the sign bit set: x86's default NaN, which
    `-nan` and 0 * -inf give) among finite values and infinities; 200 rows, past the
    lengths torch's CUDA sort orders without radix passes."""
    x = _randn(rows, 3, seed=7).double()
    x[::7, 0] = -float("nan")
    x[3::11, 1] = float("nan")
    x[5::13, 1] = -float("nan")
    x[::17, 2] = -float("inf")
    x[1::19, 2] = -float("nan")
    assert torch.signbit(x[0, 0]) and torch.isnan(x[0, 0])
    return x.to(device)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("descending", [False, True])
def test_argsort_orders_every_nan_as_the_largest_value(device: str, descending: bool) -> None:
    """torch's order: NaN above +inf whatever its sign bit. torch 2.11's CUDA radix sort put
    sign-bit NaNs before -inf; kfuse clears NaNs' sign before sorting, and its reference
    does too (a GPU campaign met both). Checked against NumPy's stable argsort."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Double)
        fd.add_output(fd.ops.argsort(x, dim=0, descending=descending, stable=True))
    x = _signed_nans(device)
    (order,) = fd.execute([x])
    a = x.cpu().numpy()
    want = np.flip(np.argsort(np.flip(a, 0), 0, kind="stable"), 0) if descending else None
    want = (a.shape[0] - 1 - want) if descending else np.argsort(a, 0, kind="stable")
    np.testing.assert_array_equal(order.cpu().numpy(), want)
    (ref,) = evaluate(fd.fusion, [x])
    np.testing.assert_array_equal(np.asarray(ref.cpu()), want)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("k", [20, 200], ids=["k20", "whole-axis"])
def test_topk_takes_nans_first_whatever_their_sign(device: str, k: int) -> None:
    """k = the whole axis: torch's CUDA topk then sorts every value by the radix sort that
    put sign-bit NaNs before -inf (a GPU campaign's topk of 65 of 65 float32 values)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        for largest in (True, False):
            values, _ = fd.ops.topk(x, k, dim=0, largest=largest, sorted=True)
            fd.add_output(values)
    x = _signed_nans(device).float()
    assert torch.signbit(x[0, 0]) and torch.isnan(x[0, 0])
    largest, smallest = (v.cpu().numpy() for v in fd.execute([x]))
    a = np.sort(x.cpu().numpy(), axis=0)  # NaNs last, whatever their sign
    np.testing.assert_array_equal(largest, np.flip(a, 0)[:k])
    np.testing.assert_array_equal(smallest, a[:k])
    for got, want in zip(evaluate(fd.fusion, [x]), (largest, smallest), strict=True):
        np.testing.assert_array_equal(np.asarray(got.cpu()), want)


def test_a_column_major_argsort_feeds_a_reduction_segment() -> None:
    """torch.argsort of a column-major array returns a column-major one; the segment that
    sums it beside a full product of the input was accepted for the contiguous layout the
    segmenter plans intermediates in and had no scheduler in that one (a GPU campaign's
    SchedulerError): the intermediate is copied into the planned layout."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        product = fd.ops.prod(fd.ops.tanh(x), dims=[0, 1])
        order = fd.ops.argsort(x, dim=0, descending=True, stable=True)
        fd.add_output(fd.ops.sum(x, dims=[0, 1]))
        fd.add_output(fd.ops.sum(order, dims=[0]))
        fd.add_output(fd.ops.pad(fd.ops.broadcast(product, [True, True]), [1, 2, 2, 1], -1.5))
    x = _randn(5, 7, seed=3).T
    total, order_sums, padded = fd.execute([x])
    torch.testing.assert_close(total, x.sum())
    assert order_sums.tolist() == [21] * 5  # each column's positions 0..6 once
    torch.testing.assert_close(padded[2, 1], torch.tanh(x).prod())
    assert padded[0, 0] == -1.5 and padded.shape == (4, 4)


@pytest.mark.parametrize(
    "framework", ["torch", "numpy", pytest.param("cuda", marks=pytest.mark.gpu)]
)
@pytest.mark.parametrize("dtype", [DataType.Int, DataType.Int32])
def test_a_cast_inside_a_library_segment_converts_as_a_kernel_does(
    framework: str, dtype: DataType
) -> None:
    """The cast of scatter's source runs in the library segment: NaN goes to 0 and values
    outside the integer type to its nearest end there too, as CUDA's conversion in a kernel
    gives them (a GPU campaign's scatter of cast(-inf) gave 0 against the kernel's lowest
    integer; x86's plain conversion gives the lowest integer for all three)."""
    values = [float("nan"), float("inf"), -float("inf"), 3.7, -3.7, 3e9, -3e9, 1e20, -1e20]
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        into = fd.define_tensor(shape=[-1, -1], dtype=dtype)
        index = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int)
        fd.add_output(fd.ops.scatter(into, index, fd.ops.cast(x, dtype), 0))
        fd.add_output(fd.ops.cast(fd.ops.neg(x), dtype))  # the same conversion in a kernel
    device = "cuda" if framework == "cuda" else "cpu"
    x = torch.tensor([values], device=device)
    int_dtype = torch.int64 if dtype is DataType.Int else torch.int32
    into = torch.full((1, len(values)), 5, dtype=int_dtype, device=device)
    index = torch.zeros((1, len(values)), dtype=torch.int64, device=device)
    args = [x, into, index] if framework != "numpy" else [a.numpy() for a in (x, into, index)]
    assert EE in [s.scheduler for s in fd.segments(args)]
    scattered, in_kernel = (np.asarray(torch.as_tensor(o).cpu()) for o in fd.execute(args))
    bits = 64 if dtype is DataType.Int else 32
    top, bottom = 2 ** (bits - 1) - 1, -(2 ** (bits - 1))
    three_e9 = (top, bottom) if bits == 32 else (3_000_000_000, -3_000_000_000)
    want = [0, top, bottom, 3, -3, *three_e9, top, bottom]
    np.testing.assert_array_equal(scattered[0], want)
    np.testing.assert_array_equal(in_kernel[0], [0, bottom, top, -3, 3, *want[6:4:-1], bottom, top])
    for got, expected in zip(evaluate(fd.fusion, args), (scattered, in_kernel), strict=True):
        np.testing.assert_array_equal(np.asarray(torch.as_tensor(got).cpu()), expected)


@pytest.mark.parametrize("source", ["bfloat16", "float16"])
def test_a_library_segments_cast_of_narrow_numpy_floats_saturates(source: str) -> None:
    """NumPy's bfloat16 (ml_dtypes: its dtype kind is "V", not "f") and float16 arrays take
    the same conversion as float32's in a library segment."""
    import ml_dtypes

    np_dtype = ml_dtypes.bfloat16 if source == "bfloat16" else np.float16
    dtype = DataType.BFloat16 if source == "bfloat16" else DataType.Half
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=dtype)
        into = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int32)
        index = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int)
        fd.add_output(fd.ops.scatter(into, index, fd.ops.cast(x, DataType.Int32), 0))
    x = np.array([[np.nan, np.inf, -np.inf, 3.7, -3.7, -60000.0]]).astype(np_dtype)
    (out,) = fd.execute([x, np.zeros((1, 6), np.int32), np.zeros((1, 6), np.int64)])
    top = 2**31 - 1
    expected = [0, top, -top - 1, 3, -3, int(np.float32(x[0, 5]))]
    np.testing.assert_array_equal(out[0], expected)
