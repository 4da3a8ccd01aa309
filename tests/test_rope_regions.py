"""The regions Thunder's nvFuser executor hands kfuse for a RoPE step's forward and backward
(tools/thunder_steps.py's rope: y = x * cos + cat(-x[..., half:], x[..., :half]) * sin, the
loss sum(y * g)), as kfuse segments and runs them: the rotated halves computed inside a
pointwise kernel, no library segment making the cat or the pads as framework copies."""

from __future__ import annotations

import numpy as np
import pytest

from kfuse.dtypes import DataType
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.schedule.types import SchedulerType
from kfuse.testing import assert_outputs_close

torch = pytest.importorskip("torch")

B, H, S, D = 1, 2, 8, 16


def _rope_forward(with_loss: bool) -> FusionDefinition:
    """The forward region (as Thunder 0.2.6 writes it), ending in the loss's sum, or in the
    rotated values times g as an output."""
    h = D // 2
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[1, H, S, D], contiguity=[None, True, True, True],
                             dtype=DataType.BFloat16)  # fmt: skip
        cos = fd.define_tensor(shape=[S, D], contiguity=[True, True], dtype=DataType.BFloat16)
        sin = fd.define_tensor(shape=[S, D], contiguity=[True, True], dtype=DataType.BFloat16)
        g = fd.define_tensor(shape=[1, H, S, D], contiguity=[None, True, True, True],
                             dtype=DataType.Float)  # fmt: skip
        back = fd.ops.slice(x, start_indices=[0, 0, 0, h], end_indices=[1, H, S, D])
        negated = fd.ops.cast(fd.ops.neg(fd.ops.cast(back, DataType.Float)), DataType.BFloat16)
        front = fd.ops.slice(x, start_indices=[0, 0, 0, 0], end_indices=[1, H, S, h])
        cos4 = fd.ops.expand(fd.ops.broadcast(cos, [True, True, False, False]), [-1, H, -1, -1])
        sin4 = fd.ops.expand(fd.ops.broadcast(sin, [True, True, False, False]), [-1, H, -1, -1])
        rotated = fd.ops.cat(
            [fd.ops.cast(negated, DataType.Float), fd.ops.cast(front, DataType.Float)], dim=3
        )
        y = fd.ops.add(
            fd.ops.mul(fd.ops.cast(x, DataType.Float), fd.ops.cast(cos4, DataType.Float)),
            fd.ops.mul(rotated, fd.ops.cast(sin4, DataType.Float)),
        )
        scaled = fd.ops.mul(y, g)
        if with_loss:
            fd.add_output(fd.ops.sum(fd.ops.squeeze(scaled, dims=[0]), dims=[0, 1, 2]))
        else:
            fd.add_output(scaled)
    return fd


def _forward_inputs() -> list:
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(1, H, S, D, generator=gen).bfloat16()
    x[0, 0, 0, :3] = torch.tensor([float("nan"), float("inf"), -0.0])
    cos, sin = (torch.randn(S, D, generator=gen).bfloat16() for _ in range(2))
    return [x, cos, sin, torch.randn(1, H, S, D, generator=gen)]


def test_rotated_halves_consumed_by_products_are_one_pointwise_kernel() -> None:
    """A cat of two equal halves that a product reads is computed by the pointwise kernel (it
    has no windows of an output to be written into), not made by a library call."""
    fd = _rope_forward(with_loss=False)
    inputs = _forward_inputs()
    (segment,) = fd.segments(inputs)
    assert segment.scheduler is SchedulerType.pointwise
    assert_outputs_close(fd, fd.execute(inputs), evaluate(fd.fusion, inputs), inputs)


def test_rope_forward_with_its_loss_is_a_pointwise_and_a_reduction() -> None:
    fd = _rope_forward(with_loss=True)
    inputs = _forward_inputs()
    schedulers = [s.scheduler for s in fd.segments(inputs)]
    assert schedulers == [SchedulerType.pointwise, SchedulerType.reduction]
    assert_outputs_close(fd, fd.execute(inputs), evaluate(fd.fusion, inputs), inputs)


def test_cat_of_equal_halves_as_an_output_is_still_written_into_windows() -> None:
    """A cat that is an output nothing else reads keeps its parts' vector stores: the pointwise
    kernel declines it whole, and the folded cat's parts are the kernels' outputs."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        y = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        fd.add_output(fd.ops.cat([fd.ops.exp(x), fd.ops.neg(y)], dim=1))
    inputs = [np.ones((4, 8), np.float32), np.full((4, 8), 2.0, np.float32)]
    (segment,) = fd.segments(inputs)
    assert "folded" in segment.reason
    assert_outputs_close(fd, fd.execute(inputs), evaluate(fd.fusion, inputs), inputs)
