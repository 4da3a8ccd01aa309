"""Probe cases for memory layouts (not in the suite until measured: `registry.PROBE_CASES`,
which the tools take by name): a channels-last scale, bias and ReLU, relu(x * w + b) with w
and b per channel, whose input and output are both stored channels last, as a convolution
network's activations are (torch keeps the input's memory format in its output, and so does
nvFuser, which stores an output in its input's order).

* scale_bias_relu_channels_last: [N, C, H, W] stored as [N, H, W, C], the output asked in
  that order (fd.ops.stride_order): one pointwise kernel over the common memory order
  (kfuse.switches.MEMORY_ORDER_LAYOUTS), where it was taken for a transpose.

It computes in float32 and rounds once to the input's dtype.
"""

from __future__ import annotations

import functools
from typing import Any

from kfuse import DataType, FusionDefinition
from models.case import Shape, demote, promote, sweep_case

CHANNELS_LAST = [3, 0, 2, 1]  # nvFuser's stride_order of an NCHW tensor stored as NHWC
# ResNet-50's first stage at batch 64: a 98 MiB bf16 activation.
ACTIVATIONS = ((64, 256, 56, 56),)
TEST_ACTIVATIONS = (2, 8, 5, 7)
GPU_TEST_ACTIVATIONS = (8, 64, 28, 28)


def scale_bias_relu_channels_last_definition(dtype: DataType) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(
            shape=[-1, -1, -1, -1], contiguity=True, dtype=dtype, stride_order=CHANNELS_LAST
        )
        w, b = (
            fd.define_tensor(shape=[-1, 1, 1], contiguity=[True, None, None], dtype=dtype)
            for _ in "wb"
        )
        x, w, b = (promote(fd, t, dtype) for t in (x, w, b))
        y = fd.ops.relu(fd.ops.add(fd.ops.mul(x, w), b))
        fd.add_output(fd.ops.stride_order(demote(fd, y, dtype), CHANNELS_LAST))
    return fd


def scale_bias_relu_channels_last_torch(x: Any, w: Any, b: Any) -> tuple[Any]:
    import torch

    return (torch.relu(x.float() * w.float() + b.float()).to(x.dtype),)


def scale_bias_relu_channels_last_reference(x: Any, w: Any, b: Any) -> tuple[Any]:
    import torch

    return (torch.relu(x.double() * w.double() + b.double()),)


def _inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    x = torch.randn(shape, device=device, dtype=torch.float32).to(dtype)
    w, b = (torch.randn(shape[1], 1, 1, device=device).to(dtype) for _ in "wb")
    return [x.contiguous(memory_format=torch.channels_last), w, b]


_case = functools.partial(
    sweep_case,
    "layouts",
    sweep=(ACTIVATIONS, ACTIVATIONS, TEST_ACTIVATIONS, GPU_TEST_ACTIVATIONS),
)

PROBE_CASES = [
    _case(
        "scale_bias_relu_channels_last",
        "a channels-last activation's scale, bias and ReLU (no nvFuser benchmark has it)",
        scale_bias_relu_channels_last_definition,
        (
            scale_bias_relu_channels_last_torch,
            scale_bias_relu_channels_last_reference,
            _inputs,
        ),
    ),
]
