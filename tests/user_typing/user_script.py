"""A user's script, written as a newcomer writes one: NumPy and torch inputs, a fusion of
each, run on the host emulator (or the GPU, for CUDA tensors). tests/test_user_typing.py
checks that it passes `mypy --strict` and that it runs."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch

import kfuse
from kfuse import DataType, FusionDefinition


def biased_softplus(
    x: npt.NDArray[np.float32], bias: npt.NDArray[np.float32], scale: float
) -> npt.NDArray[np.float32]:
    """max(scale * log1p(exp(x + bias)), 0), the bias broadcast over x's rows."""
    with FusionDefinition() as fd:
        t = fd.from_array(x)
        b = fd.define_tensor(shape=[-1], dtype=np.float32)
        assert b.ndim == 1 and t.ndim == x.ndim
        s = fd.define_scalar(dtype=DataType.Double)
        z = fd.ops.mul(fd.ops.log1p(fd.ops.exp(fd.ops.add(t, b))), s)
        fd.add_output(fd.ops.where(fd.ops.gt(z, 0.0), z, 0.0))
    (out,) = fd.execute([x, bias, scale])
    result: npt.NDArray[np.float32] = out
    return result


def gelu_rms_norm(x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """rms_norm(gelu(x)) * weight in x's dtype, and the row sums of gelu(x) in float32."""
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        w = fd.from_pytorch(weight)
        g = fd.ops.gelu(t, approximate="tanh")
        fd.add_output(fd.ops.rms_norm(g, w, eps=1e-6))
        fd.add_output(fd.ops.sum(fd.ops.cast(g, dtype=torch.float32), [1], keepdim=True))
    normed, sums = fd.execute([x, weight])
    assert isinstance(normed, torch.Tensor) and isinstance(sums, torch.Tensor)
    return normed, sums


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    bias = rng.standard_normal(8).astype(np.float32)
    expected = np.maximum(0.5 * np.log1p(np.exp(x + bias)), 0)
    np.testing.assert_allclose(biased_softplus(x, bias, 0.5), expected, rtol=1e-5)

    xt = torch.randn(4, 8)
    weight = torch.rand(8)
    normed, sums = gelu_rms_norm(xt, weight)
    g = torch.nn.functional.gelu(xt, approximate="tanh")
    torch.testing.assert_close(normed, torch.nn.functional.rms_norm(g, (8,), weight, eps=1e-6))
    torch.testing.assert_close(sums, g.sum(1, keepdim=True))

    try:
        with FusionDefinition() as fd:
            fd.ops.softmax(fd.define_tensor(shape=[-1], dtype=DataType.Int))
    except kfuse.DefinitionError as e:
        print("caught:", e)


if __name__ == "__main__":
    main()
