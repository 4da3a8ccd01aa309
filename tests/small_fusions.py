"""Small fusions several test modules run: one pointwise kernel, two generated-kernel
segments, a library segment before a kernel."""

from __future__ import annotations

from kfuse import FusionDefinition


def scaled_sum(rank: int = 2) -> FusionDefinition:
    """(a + b) * 2 over two inputs of `rank` axes: one pointwise kernel."""
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1] * rank)
        b = fd.define_tensor(shape=[-1] * rank)
        fd.add_output(fd.ops.mul(fd.ops.add(a, b), fd.define_scalar(2.0)))
    return fd


def sums_over_both_axes() -> FusionDefinition:
    """No single scheduler takes it: a reduction and a normalization segment."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        s0 = fd.ops.sum(x, dims=[0])
        fd.add_output(fd.ops.add(x, fd.ops.broadcast(s0, is_broadcast_dim=[True, False])))
        fd.add_output(fd.ops.sum(x, dims=[1]))
    return fd


def relu_of_matmul() -> FusionDefinition:
    """A library segment (matmul), then a pointwise one."""
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1])
        b = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.relu(fd.ops.matmul(a, b)))
    return fd
