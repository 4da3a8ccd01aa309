"""Fast approximations are used only where every use ends in a BFloat16 output."""

from __future__ import annotations

import pytest

from gpu_support import requires_gpu
from kfuse import DataType, FusionDefinition
from kfuse.codegen.precision import approximable
from kfuse.runtime.backends.cuda import compile_to_cubin, nvrtc_options


def gelu_fusion(
    out_dtype: DataType, extra_float_output: bool = False, compare: bool = False
) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        xf = fd.ops.cast(x, DataType.Float)
        g = fd.ops.gelu(xf, approximate="tanh")
        y = fd.ops.mul(g, 0.5)
        fd.add_output(fd.ops.cast(y, out_dtype))
        if extra_float_output:
            fd.add_output(g)
        if compare:
            fd.add_output(fd.ops.gt(g, 0.25))
    return fd


def fast_ops(fd: FusionDefinition) -> set[str]:
    return {v.definition.op for v in approximable(fd.fusion)}


def test_bf16_only_uses_are_approximated() -> None:
    assert fast_ops(gelu_fusion(DataType.BFloat16)) == {"gelu_tanh"}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"out_dtype": DataType.Float},
        {"out_dtype": DataType.Half},
        {"out_dtype": DataType.BFloat16, "extra_float_output": True},
        {"out_dtype": DataType.BFloat16, "compare": True},
    ],
)
def test_any_precise_use_keeps_the_precise_form(kwargs: dict) -> None:
    assert fast_ops(gelu_fusion(**kwargs)) == set()


def test_products_stop_the_approximation() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        e = fd.ops.exp(fd.ops.cast(x, DataType.Float))
        fd.add_output(fd.ops.cast(fd.ops.prod(e, dims=[1]), DataType.BFloat16))
    assert fast_ops(fd) == set()


def test_generated_source_uses_the_fast_form_and_compiles() -> None:
    import numpy as np
    import torch

    fd = gelu_fusion(DataType.BFloat16)
    x = torch.randn(8, 64).to(torch.bfloat16)
    (out,) = fd.execute([x])
    source = fd.last_cuda_source()
    assert "kf::gelu_tanh_fast(" in source
    for arch in ("sm_80", "sm_90"):
        assert compile_to_cubin(source, "k", arch, nvrtc_options())[:4] == b"\x7fELF"
    want = torch.nn.functional.gelu(x.double(), approximate="tanh") * 0.5
    np.testing.assert_allclose(out.double().numpy(), want.numpy(), rtol=1.6e-2, atol=1e-3)


def test_bf16_softmax_takes_fast_exp_and_division_but_float_softmax_does_not() -> None:
    def softmax(out: DataType) -> FusionDefinition:
        with FusionDefinition() as fd:
            x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
            y = fd.ops.softmax(fd.ops.cast(x, DataType.Float), dim=-1)
            fd.add_output(fd.ops.cast(y, out))
        return fd

    assert fast_ops(softmax(DataType.BFloat16)) == {"exp", "div"}
    assert fast_ops(softmax(DataType.Float)) == set()


@pytest.mark.parametrize("out", [DataType.BFloat16, DataType.Float])
def test_a_segment_makes_the_choices_of_the_whole_fusion(out: DataType) -> None:
    """A softmax over axis 0 of [16384, 4096] segments (on an H200) into its statistics (the
    max and the sum of exponentials, folded into one accumulator) and the normalization: the
    statistics segment ends in float outputs, which the whole fusion only rounds into its
    bf16 output, so they are marked rounded and the fold's exp is fast; with a float output
    they are not."""
    from kfuse.codegen.reduction_plan import plan_reductions
    from kfuse.engine.segmenter import segment_fusion
    from planning import gpu_info

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        y = fd.ops.softmax(fd.ops.cast(x, DataType.Float), dim=0)
        fd.add_output(fd.ops.cast(y, out))
    info = gpu_info(fd, [(16384, 4096)], "h200")
    stats, normalization = segment_fusion(fd.fusion, info, "test").plans
    low = out is DataType.BFloat16
    assert stats.fusion.rounded_outputs == ((0, 1) if low else ())
    assert {v.definition.op for v in approximable(stats.fusion)} == ({"exp"} if low else set())
    (folded,) = plan_reductions(stats.fusion, fold_softmax=True).reductions
    assert folded.fast is low  # type: ignore[attr-defined]


def test_welford_statistics_stop_the_approximation() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        e = fd.ops.exp(fd.ops.cast(x, DataType.Float))
        var, mean = fd.ops.var_mean(e, [1])
        fd.add_output(fd.ops.cast(var, DataType.BFloat16))
    assert "exp" not in fast_ops(fd)  # (the final division by N - 1 may still be fast)


def test_bf16_outputs_are_rounded_exactly_once() -> None:
    """A bf16 output narrows a value already rounded to bf16 by taking its top half (no second
    conversion): the stored bits equal torch's float -> bf16 rounding, ties included."""
    torch = pytest.importorskip("torch")
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        b = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        fd.add_output(fd.ops.cast(fd.ops.mul(a, b), DataType.BFloat16))
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4096, generator=gen)
    # exact ties between two bf16 values: mantissa bits 0x8000 below the kept 16
    # values in [1, 2) whose low 16 bits are exactly 0x8000, with any bf16 mantissa above
    ties = (
        torch.randint(0, 1 << 7, (1024,), generator=gen, dtype=torch.int32) << 16
        | 0x8000
        | 0x3F800000
    ).view(torch.float32)
    x = torch.cat([x, ties, torch.tensor([float("inf"), -0.0, 3.0e38, 1e-40])])
    y = torch.ones_like(x)
    y[:4096] = torch.randn(4096, generator=gen)
    (out,) = fd.execute([x, y])
    assert "bfloat16_from_exact" in fd.last_cuda_source()
    expected = (x * y).to(torch.bfloat16)
    assert torch.equal(out.view(torch.int16), expected.view(torch.int16))


@pytest.mark.parametrize(
    "device", ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, requires_gpu])]
)
def test_the_fast_gelu_meets_infinities_as_torch_does(device: str) -> None:
    """Where torch's 0.5 * x * (1 + tanh(u)) is exactly -0 (tanh(u) rounds to -1), the fast
    form's quotient was a tiny negative number instead: inf times it gave -inf, not NaN."""
    import numpy as np
    import torch

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.BFloat16)
        inf = fd.define_tensor(shape=[-1], dtype=DataType.BFloat16)
        g = fd.ops.gelu(fd.ops.cast(x, DataType.Float), approximate="tanh")
        fd.add_output(
            fd.ops.cast(fd.ops.mul(g, fd.ops.cast(inf, DataType.Float)), DataType.BFloat16)
        )
    assert fast_ops(fd) == {"gelu_tanh"}
    x = torch.tensor([-np.inf, -8.0, -6.0, -5.0, -1.0, 0.0, 2.0, np.inf, np.nan]).to(torch.bfloat16)
    inf = torch.full_like(x, np.inf)
    (out,) = fd.execute([x.to(device), inf.to(device)])
    want = torch.nn.functional.gelu(x.float(), approximate="tanh") * inf.float()
    torch.testing.assert_close(out.cpu().float(), want, equal_nan=True)
