"""Probe cases for a dropout's mask traffic (not in the suite: `registry.PROBE_CASES`, which the
tools take by name). Issue 57 asks a dropout that draws its mask inside the fusion to be as fast
as its twin that reads the mask as an input; the drawn forms of the layer norm and RMS norm
forwards stay 3-5% behind. The two move the same bytes but not the same way: the twin reads
x1, x2 and the Bool mask and writes y (5 bytes read, 2 written an element of bf16), the drawn
form reads x1 and x2 and writes y and the mask it drew (4 read, 3 written). These three
one-kernel pointwise fusions tell the two costs apart, without the norm around them:

* mask_read: y = x1 * mask * 1.25 + x2, the mask an input (the twin's traffic);
* mask_written: y = x1 * 1.25 + x2 and mask = x1 > 0 written (the drawn form's traffic, no
  random numbers);
* mask_drawn: y = x1 * (u < 0.8) * 1.25 + x2 with u = fd.ops.uniform, and the mask written (the
  drawn form's traffic and its Philox calls).

mask_read against mask_written is the price of writing a byte instead of reading one;
mask_written against mask_drawn the price of drawing. All compute in float32 and round y once.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from kfuse import DataType, FusionDefinition
from models.case import Shape, demote, matrix, promote, randn, sweep_case
from models.dropout_rng import KEEP, OFFSET, SEED, philox_mask
from models.sweeps import GPU_TEST_2D, NORM_2D, NORM_2D_QUICK, TEST_2D

SCALE = 1 / KEEP


def mask_read_definition(dtype: DataType) -> FusionDefinition:
    with FusionDefinition() as fd:
        x1, x2 = matrix(fd, dtype), matrix(fd, dtype)
        mask = matrix(fd, DataType.Bool)
        x1, x2 = promote(fd, x1, dtype), promote(fd, x2, dtype)
        kept = fd.ops.mul(x1, fd.ops.cast(mask, dtype=DataType.Float))
        fd.add_output(demote(fd, fd.ops.add(fd.ops.mul(kept, SCALE), x2), dtype))
    return fd


def mask_written_definition(dtype: DataType) -> FusionDefinition:
    with FusionDefinition() as fd:
        x1, x2 = matrix(fd, dtype), matrix(fd, dtype)
        mask = fd.ops.gt(x1, 0.0)
        x1, x2 = promote(fd, x1, dtype), promote(fd, x2, dtype)
        fd.add_output(demote(fd, fd.ops.add(fd.ops.mul(x1, SCALE), x2), dtype))
        fd.add_output(mask)
    return fd


def mask_drawn_definition(dtype: DataType) -> FusionDefinition:
    with FusionDefinition() as fd:
        x1, x2 = matrix(fd, dtype), matrix(fd, dtype)
        u = fd.ops.uniform(
            0.0, 1.0, fd.ops.shape(x1), rng_seed=SEED, rng_offset=OFFSET, dtype=DataType.Float
        )
        mask = fd.ops.lt(u, KEEP)
        x1, x2 = promote(fd, x1, dtype), promote(fd, x2, dtype)
        kept = fd.ops.mul(x1, fd.ops.cast(mask, dtype=DataType.Float))
        fd.add_output(demote(fd, fd.ops.add(fd.ops.mul(kept, SCALE), x2), dtype))
        fd.add_output(mask)
    return fd


def mask_read_torch(x1: Any, x2: Any, mask: Any) -> tuple[Any]:
    return ((x1.float() * mask.float() * SCALE + x2.float()).to(x1.dtype),)


def mask_written_torch(x1: Any, x2: Any) -> tuple[Any, Any]:
    return (x1.float() * SCALE + x2.float()).to(x1.dtype), x1 > 0


def mask_drawn_torch(x1: Any, x2: Any) -> tuple[Any, Any]:
    """As a torch model draws a dropout's mask: torch.rand, its own numbers."""
    import torch

    mask = torch.rand(x1.shape, device=x1.device, dtype=torch.float32) < KEEP
    return mask_read_torch(x1, x2, mask)[0], mask


def mask_read_reference(x1: Any, x2: Any, mask: Any) -> tuple[Any]:
    return (x1.double() * mask.double() * SCALE + x2.double(),)


def mask_written_reference(x1: Any, x2: Any) -> tuple[Any, Any]:
    return x1.double() * SCALE + x2.double(), x1 > 0


def mask_drawn_reference(x1: Any, x2: Any) -> tuple[Any, Any]:
    mask = philox_mask(x1)
    return mask_read_reference(x1, x2, mask)[0], mask


def _drawn_with_peers_mask(inputs: Any, outputs: Any) -> tuple[Any, Any]:
    """A torch peer's reference: from the mask it drew (its second output)."""
    x1, x2 = inputs
    return mask_read_reference(x1, x2, outputs[1])[0], outputs[1]


def _pair(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    return [randn(torch, shape, dtype, device), randn(torch, shape, dtype, device)]


def _with_mask(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    gen = torch.Generator(device="cpu").manual_seed(1)
    mask = (torch.rand(tuple(shape), generator=gen) < KEEP).to(device)
    return [*_pair(torch, shape, dtype, device), mask]


_case = functools.partial(
    sweep_case, "mask_traffic", sweep=(NORM_2D, NORM_2D_QUICK, TEST_2D, GPU_TEST_2D)
)

PROBE_CASES = [
    _case(
        "mask_read",
        "a dropout's mask read as an input, without the norm (no nvFuser benchmark has it)",
        mask_read_definition,
        (mask_read_torch, mask_read_reference, _with_mask),
    ),
    _case(
        "mask_written",
        "a Bool mask written beside y, no random numbers (no nvFuser benchmark has it)",
        mask_written_definition,
        (mask_written_torch, mask_written_reference, _pair),
    ),
    dataclasses.replace(
        _case(
            "mask_drawn",
            "a dropout's mask drawn and written, without the norm (no nvFuser benchmark has it)",
            mask_drawn_definition,
            (mask_drawn_torch, mask_drawn_reference, _pair),
        ),
        peer_reference=_drawn_with_peers_mask,
    ),
]
