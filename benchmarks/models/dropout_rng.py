"""Probe cases for random numbers (not in the suite until measured: `registry.PROBE_CASES`):
nvFuser's dropout + layer norm and dropout + RMS norm forwards as its benchmarks write them,
the keep mask drawn inside the fusion (fd.ops.uniform, then lt) and output (nvFuser's
test_dropout_{layernorm,rmsnorm}_fwd.py). Their twins with the mask given as an input are
the suite's dropout_layernorm_fwd and dropout_rmsnorm_fwd (models.norms): the same
bytes, a Bool mask written here where it is read there. Compare the two in one call:
`tools/kernel_times.py dropout_layernorm_fwd dropout_layernorm_fwd_rng --tc`.

The numbers are stateless (rng_seed=SEED, rng_offset=OFFSET), so the float64 reference
draws the same mask with kfuse.reference.philox. The torch peer draws its own with
torch.rand_like, as a torch model would: its outputs are the reference's in shape and dtype
but not in value, which is why these are probes whose torch outputs are not checked.
"""

from __future__ import annotations

import functools
from typing import Any

from kfuse import DataType, FusionDefinition
from models import norms
from models.case import Shape, demote, matrix, promote, randn, sweep_case, vector
from models.sweeps import GPU_TEST_2D, NORM_2D, NORM_2D_QUICK, TEST_2D

SEED, OFFSET = 0x5EED, 7
KEEP = 1 - norms.DROPOUT_P


def _keep_mask(fd: FusionDefinition, x: Any) -> tuple[Any, Any]:
    """(Bool mask, Float mask): uniform(0, 1) < 1 - p over x's shape, as nvFuser draws it."""
    u = fd.ops.uniform(
        0.0, 1.0, fd.ops.shape(x), rng_seed=SEED, rng_offset=OFFSET, dtype=DataType.Float
    )
    mask = fd.ops.lt(u, KEEP)
    return mask, fd.ops.cast(mask, dtype=DataType.Float)


def dropout_layernorm_fwd_rng_definition(dtype: DataType) -> FusionDefinition:
    # from test_dropout_layernorm_fwd.py::dropout_layernorm_fwd_fusion
    with FusionDefinition() as fd:
        x1, x2 = matrix(fd, dtype), matrix(fd, dtype)
        w, b = vector(fd, dtype), vector(fd, dtype)
        mask, keep = _keep_mask(fd, x1)
        b, w, x1, x2 = (promote(fd, t, dtype) for t in (b, w, x1, x2))
        y, mean, invstd = norms._ln_fwd(fd, norms._dropout_add(fd, x1, x2, keep), w, b)
        fd.add_output(demote(fd, y, dtype))
        fd.add_output(mean)
        fd.add_output(invstd)
        fd.add_output(mask)
    return fd


def dropout_rmsnorm_fwd_rng_definition(dtype: DataType) -> FusionDefinition:
    # from test_dropout_rmsnorm_fwd.py::dropout_rmsnorm_fwd_fusion
    with FusionDefinition() as fd:
        x1, x2 = matrix(fd, dtype), matrix(fd, dtype)
        w = vector(fd, dtype)
        mask, keep = _keep_mask(fd, x1)
        x1, w, x2 = (promote(fd, t, dtype) for t in (x1, w, x2))
        y, rms = norms._rms_fwd(fd, norms._dropout_add(fd, x1, x2, keep), w)
        fd.add_output(demote(fd, y, dtype))
        fd.add_output(rms)
        fd.add_output(mask)
    return fd


def _torch_mask(x1: Any) -> Any:
    import torch

    return torch.rand(x1.shape, device=x1.device, dtype=torch.float32) < KEEP


def dropout_layernorm_fwd_rng_torch(x1: Any, x2: Any, w: Any, b: Any) -> tuple[Any, ...]:
    mask = _torch_mask(x1)
    return (*norms.dropout_layernorm_fwd_torch(x1, x2, mask, w, b), mask)


def dropout_rmsnorm_fwd_rng_torch(x1: Any, x2: Any, w: Any) -> tuple[Any, ...]:
    mask = _torch_mask(x1)
    return (*norms.dropout_rmsnorm_fwd_torch(x1, x2, mask, w), mask)


def philox_mask(x1: Any) -> Any:
    """The kernel's keep mask for x1's shape, from kfuse's NumPy Philox, where x1 lives."""
    import numpy as np
    import torch

    from kfuse.reference import philox

    u = philox.uniform(SEED, OFFSET, tuple(x1.shape), DataType.Float)
    return torch.from_numpy(u < np.float32(KEEP)).to(x1.device)


def dropout_layernorm_fwd_rng_reference(x1: Any, x2: Any, w: Any, b: Any) -> tuple[Any, ...]:
    mask = philox_mask(x1)
    return (*norms.dropout_layernorm_fwd_reference(x1, x2, mask, w, b), mask)


def dropout_rmsnorm_fwd_rng_reference(x1: Any, x2: Any, w: Any) -> tuple[Any, ...]:
    mask = philox_mask(x1)
    return (*norms.dropout_rmsnorm_fwd_reference(x1, x2, mask, w), mask)


def _layernorm_inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    """x1, x2, w, b."""
    return [
        randn(torch, shape, dtype, device),
        randn(torch, shape, dtype, device),
        randn(torch, shape[1:], dtype, device),
        randn(torch, shape[1:], dtype, device),
    ]


def _rmsnorm_inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    """x1, x2, w."""
    return _layernorm_inputs(torch, shape, dtype, device)[:3]


_case = functools.partial(sweep_case, sweep=(NORM_2D, NORM_2D_QUICK, TEST_2D, GPU_TEST_2D))

PROBE_CASES = [
    _case(
        "layernorm",
        "dropout_layernorm_fwd_rng",
        "test_dropout_layernorm_fwd.py::dropout_layernorm_fwd_fusion",
        dropout_layernorm_fwd_rng_definition,
        (
            dropout_layernorm_fwd_rng_torch,
            dropout_layernorm_fwd_rng_reference,
            _layernorm_inputs,
        ),
    ),
    _case(
        "rmsnorm",
        "dropout_rmsnorm_fwd_rng",
        "test_dropout_rmsnorm_fwd.py::dropout_rmsnorm_fwd_fusion",
        dropout_rmsnorm_fwd_rng_definition,
        (dropout_rmsnorm_fwd_rng_torch, dropout_rmsnorm_fwd_rng_reference, _rmsnorm_inputs),
    ),
]
