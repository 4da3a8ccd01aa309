"""On the GPU, sin and cos of one value from one sincosf (sincos) call are sinf's and cosf's
values bit for bit (kfuse.codegen.shared_math's premise), over every range the argument
reductions treat apart, in pointwise kernels and in a reduction's stage."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_support import cuda_torch, requires_gpu
from kfuse import DataType, switches
from shared_math_cases import angles, chain, rotation_sum

pytestmark = [pytest.mark.gpu, requires_gpu]


@pytest.mark.parametrize("dtype", [DataType.Float, DataType.Double, DataType.Half])
def test_sincos_is_sin_and_cos_bit_for_bit(
    dtype: DataType, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = cuda_torch()
    np_dtype = {DataType.Float: np.float32, DataType.Double: np.float64}.get(dtype, np.float16)
    x = torch.from_numpy(angles(1 << 20, np_dtype)).cuda()
    (shared,) = chain(dtype, iters=1).execute([x])
    monkeypatch.setattr(switches, "SHARE_SINCOS", False)
    (apart,) = chain(dtype, iters=1).execute([x])
    assert torch.equal(shared.isnan(), apart.isnan())
    finite = ~shared.isnan()
    assert torch.equal(shared[finite], apart[finite])


def test_a_reduction_stage_gives_the_same_sums(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = cuda_torch()
    t = torch.from_numpy(angles(256 * 1000, np.float32).reshape(256, 1000)).cuda()
    t[~torch.isfinite(t)] = 1.0
    x = torch.randn(256, 1000, device="cuda")
    shared = rotation_sum(DataType.Float).execute([t, x])
    monkeypatch.setattr(switches, "SHARE_SINCOS", False)
    apart = rotation_sum(DataType.Float).execute([t, x])
    for a, b in zip(shared, apart, strict=True):
        assert torch.equal(a, b)
