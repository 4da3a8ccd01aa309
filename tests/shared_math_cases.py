"""Fusions that take sin and cos of one value, for the tests of kfuse.codegen.shared_math on
the emulator and on the GPU, and the values they are checked on."""

from __future__ import annotations

import numpy as np

from kfuse import DataType, FusionDefinition


def chain(dtype: DataType, iters: int = 2) -> FusionDefinition:
    """nvFuser's many-pointwise-ops form: a = cos(a) + sin(a), `iters` times."""
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1], dtype=dtype)
        s = fd.ops.cast(a, DataType.Double if dtype is DataType.Double else DataType.Float)
        for _ in range(iters):
            s = fd.ops.add(fd.ops.cos(s), fd.ops.sin(s))
        fd.add_output(fd.ops.cast(s, dtype))
    return fd


def rotation_sum(dtype: DataType) -> FusionDefinition:
    """A reduction whose stage takes sin and cos of one value (x cos(t) - y sin(t), summed over
    rows), and sin(t) alone as a second output: the pairing in a reduction's stage function."""
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], dtype=dtype)
        x = fd.define_tensor(shape=[-1, -1], dtype=dtype)
        rotated = fd.ops.sub(fd.ops.mul(x, fd.ops.cos(t)), fd.ops.mul(x, fd.ops.sin(t)))
        fd.add_output(fd.ops.sum(rotated, dims=[1]))
        fd.add_output(fd.ops.sin(t))
    return fd


def angles(n: int, np_dtype: type, seed: int = 0) -> np.ndarray:
    """`n` values over every range the argument reductions treat apart: small, ordinary,
    multiples of pi/2, large (the slow reduction above about 1e5), huge, subnormal, signed
    zeros, infinities and NaN."""
    rng = np.random.default_rng(seed)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-45, 1e30, -3e38, 105615.0]
    special += [k * np.pi / 2 for k in range(-8, 9)]
    spread = rng.standard_normal(n) * np.exp(rng.uniform(-10, 40, n))
    spread[: len(special)] = special
    with np.errstate(over="ignore"):  # huge values are infinities in half
        return spread.astype(np_dtype)
