"""Pointwise kernels over operands that all store their axes in one non-logical order (a
channels-last input with a channels-last stride_order output, a transposed view written in its
own order): the reference axes are walked in that memory order (codegen.layout.in_memory_order),
so the operands merge into long unit-stride rows and the fusion runs as a pointwise kernel, not
as a transpose along the logical innermost axis. Where the operands disagree the layout is as
before. On the host emulator (CPU tensors), both device profiles; the GPU case is marked."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from example_budget import examples
from gpu_support import requires_gpu
from kfuse import switches
from kfuse.codegen.layout import OperandLayout, in_memory_order
from kfuse.ir.layout_ops import ordered_strides
from kfuse.nvfuser_direct import DataType, FusionDefinition
from kfuse.reference import evaluate
from kfuse.schedule import SchedulerType
from kfuse.testing import assert_outputs_close

CL = [3, 0, 2, 1]  # channels last, nvFuser's stride_order of an NCHW tensor


def scale_bias_relu(order: list[int] | None) -> FusionDefinition:
    """relu(x * w + b) with w, b per channel ([C, 1, 1]), the output in `order` (None: row
    major), x channels last."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1, -1], contiguity=True, stride_order=CL)
        w, b = (fd.define_tensor(shape=[-1, 1, 1], contiguity=[True, None, None]) for _ in "wb")
        y = fd.ops.relu(fd.ops.add(fd.ops.mul(x, w), b))
        fd.add_output(y if order is None else fd.ops.stride_order(y, order))
    return fd


def nchw_last(*shape: int, device: str = "cpu", dtype: object = torch.float32) -> torch.Tensor:
    g = torch.Generator(device=device).manual_seed(sum(shape))
    x = torch.randn(shape, generator=g, device=device, dtype=dtype)
    return x.to(memory_format=torch.channels_last)


def per_channel(c: int, device: str = "cpu") -> list[torch.Tensor]:
    g = torch.Generator(device=device).manual_seed(c)
    return [torch.randn(c, 1, 1, generator=g, device=device) for _ in range(2)]


@pytest.mark.parametrize("profile", ["h100", "h200"])
@pytest.mark.parametrize("shape", [(2, 8, 5, 7), (4, 64, 16, 16), (1, 3, 1, 33)])
def test_a_channels_last_output_of_a_channels_last_input_is_one_pointwise_kernel(
    profile: str, shape: tuple[int, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KFUSE_EMULATOR_PROFILE", profile)
    x = nchw_last(*shape)
    w, b = per_channel(shape[1])
    fd = scale_bias_relu(CL)
    (out,) = fd.execute([x, w, b])
    assert out.stride() == x.stride()
    torch.testing.assert_close(out, torch.relu(x * w + b))
    assert fd.last_scheduler() is SchedulerType.pointwise


def test_the_switch_off_gives_the_transpose_kernel_and_the_same_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    x = nchw_last(4, 64, 16, 16)
    w, b = per_channel(64)
    (on,) = scale_bias_relu(CL).execute([x, w, b])
    monkeypatch.setattr(switches, "MEMORY_ORDER_LAYOUTS", False)
    fd = scale_bias_relu(CL)
    (off,) = fd.execute([x, w, b])
    assert fd.last_scheduler() is SchedulerType.transpose
    assert torch.equal(on, off) and off.stride() == on.stride()


def test_a_row_major_output_of_a_channels_last_input_is_still_a_transpose() -> None:
    x = nchw_last(4, 64, 16, 16)
    w, b = per_channel(64)
    fd = scale_bias_relu(None)
    (out,) = fd.execute([x, w, b])
    assert out.is_contiguous()
    torch.testing.assert_close(out, torch.relu(x * w + b))
    assert fd.last_scheduler() is SchedulerType.transpose


def test_a_transposed_view_written_in_its_own_order() -> None:
    # [a, b, c] stored as [c, a, b] (order [1, 0, 2]: axis 2 slowest, then 0, then 1), plus a
    # row-major [a, b, c] tensor: they disagree, so the layout keeps the logical order.
    base = torch.randn(9, 5, 6)
    x = base.permute(1, 2, 0)  # [5, 6, 9], strides (6, 1, 30)
    order = [1, 0, 2]
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        fd.add_output(fd.ops.stride_order(fd.ops.mul(fd.ops.exp(t), 2.0), order))
    (out,) = fd.execute([x])
    assert out.stride() == x.stride()
    torch.testing.assert_close(out, torch.exp(x) * 2.0)
    assert fd.last_scheduler() is SchedulerType.pointwise
    y = torch.randn(5, 6, 9)
    with FusionDefinition() as fd2:
        t, u = fd2.from_pytorch(x), fd2.from_pytorch(y)
        fd2.add_output(fd2.ops.stride_order(fd2.ops.add(t, u), order))
    (out,) = fd2.execute([x, y])
    torch.testing.assert_close(out, x + y)
    assert fd2.last_scheduler() is SchedulerType.transpose


def op(strides: tuple[int, ...], **kw: object) -> OperandLayout:
    return OperandLayout(256, 4, strides, **kw)  # type: ignore[arg-type]


def test_in_memory_order_reorders_only_where_every_operand_agrees() -> None:
    sizes = (2, 3, 4, 5)  # N, C, H, W
    channels_last = (60, 1, 15, 3)
    bias = (0, 1, 0, 0)
    got_sizes, got = in_memory_order(sizes, [op(channels_last), op(bias), op(channels_last)])
    assert got_sizes == (2, 4, 5, 3)  # N, H, W, C
    assert [o.strides for o in got] == [(60, 15, 3, 1), (0, 0, 0, 1), (60, 15, 3, 1)]
    row_major = (60, 20, 5, 1)
    for operands in (
        [op(channels_last), op(row_major)],  # they disagree: a transpose
        [op(row_major), op(row_major)],  # already in logical order
        [op(channels_last, window=((1, 0, 3),)), op(channels_last)],  # names an axis
        [op(channels_last, generated=True), op(channels_last)],  # a linear index
        [op(channels_last, indexed=(3, 1)), op(channels_last)],
    ):
        assert in_memory_order(sizes, operands) == (sizes, operands)
    # Size-1 axes go first (merge_axes drops them); ties keep the logical order.
    assert in_memory_order((1, 3, 4), [op((12, 1, 3))])[0] == (1, 4, 3)


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_channels_last_outputs_on_the_gpu(dtype: torch.dtype) -> None:
    x = nchw_last(8, 96, 28, 28, device="cuda", dtype=dtype)
    w, b = per_channel(96, device="cuda")
    with FusionDefinition() as fd:
        tx = fd.from_pytorch(x)
        tw, tb = fd.from_pytorch(w), fd.from_pytorch(b)
        y = fd.ops.relu(fd.ops.add(fd.ops.mul(fd.ops.cast(tx, DataType.Float), tw), tb))
        fd.add_output(fd.ops.stride_order(fd.ops.cast(y, tx.dtype), CL))
    for _ in range(3):  # the checked call, the call that builds the fast path, a fast call
        (out,) = fd.execute([x, w, b])
        assert out.stride() == x.stride() and out.dtype == dtype
        torch.testing.assert_close(out, torch.relu(x.float() * w + b).to(dtype))
    assert fd.last_scheduler() is SchedulerType.pointwise


# ---- a property: any one memory order, any pointwise chain, broadcasts and special values ----

UNARY = ["sin", "neg", "abs", "relu", "sigmoid", "tanh"]  # none amplifies a rounding
BINARY = ["add", "mul", "sub", "maximum"]


@st.composite
def same_order_cases(draw: st.DrawFn) -> tuple[FusionDefinition, list[torch.Tensor], list[int]]:
    """A fusion of a chain of pointwise ops over a tensor stored in a drawn order (and
    operands broadcast along drawn axes), its output written in that order."""
    rank = draw(st.integers(2, 4))
    shape = [draw(st.integers(1, 9)) for _ in range(rank)]
    shape[draw(st.integers(0, rank - 1))] = draw(st.integers(1, 64))  # one long axis
    perm = draw(st.permutations(range(rank)))  # memory order, slowest first
    order = [0] * rank
    for speed, axis in enumerate(reversed(perm)):
        order[axis] = speed
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16, torch.float16]))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    stored = torch.randn([shape[a] for a in perm], generator=g).to(dtype)
    if draw(st.booleans()):
        flat = stored.reshape(-1)
        flat[draw(st.integers(0, flat.numel() - 1))] = draw(st.sampled_from([math.nan, math.inf]))
    x = stored.permute([perm.index(a) for a in range(rank)])  # logical axes, stored in perm
    bcast = [draw(st.booleans()) for _ in range(rank)]
    y_shape = [1 if b else n for b, n in zip(bcast, shape)]
    y = torch.randn([y_shape[a] for a in perm], generator=g).to(dtype)
    if draw(st.integers(0, 3)):  # mostly stored in x's order too, else row major
        y = y.permute([perm.index(a) for a in range(rank)])
    else:
        y = y.permute([perm.index(a) for a in range(rank)]).contiguous()
    steps = draw(st.lists(st.sampled_from(UNARY + BINARY), min_size=1, max_size=5))
    with FusionDefinition() as fd:
        tx, ty = fd.from_pytorch(x), fd.from_pytorch(y)
        v = fd.ops.cast(tx, DataType.Float)
        for step in steps:
            other = fd.ops.cast(ty, DataType.Float)
            v = getattr(fd.ops, step)(v) if step in UNARY else getattr(fd.ops, step)(v, other)
        fd.add_output(fd.ops.stride_order(fd.ops.cast(v, tx.dtype), order))
    return fd, [x, y], order


@pytest.mark.parametrize("profile", ["h100", "h200"])
@settings(max_examples=examples(60), deadline=None)
@given(case=same_order_cases())
def test_same_order_layouts_property(
    profile: str, case: tuple[FusionDefinition, list[torch.Tensor], list[int]]
) -> None:
    import os

    fd, inputs, order = case
    old = os.environ.get("KFUSE_EMULATOR_PROFILE")
    os.environ["KFUSE_EMULATOR_PROFILE"] = profile
    try:
        (out,) = fd.execute(inputs)
    finally:
        if old is None:
            os.environ.pop("KFUSE_EMULATOR_PROFILE")
        else:
            os.environ["KFUSE_EMULATOR_PROFILE"] = old
    (want,) = evaluate(fd.fusion, inputs)
    assert_outputs_close(fd.fusion, [out], [want], inputs)
    assert out.stride() == ordered_strides(out.shape, order)
