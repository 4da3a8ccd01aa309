"""A normalization of a row of equal values is exactly 0 there (x - mean(x) == 0), as with
torch's Welford statistics. The campaign found two ways kfuse missed it, each magnified by
1 / sqrt(var + eps) (316 for eps = 1e-5) and turned by an infinite weight into +-inf instead
of NaN: the persistent kernels' mean was sum / n, which rounds for most n, and on the GPU
NVRTC contracted the epilogue's recomputed x - mean into fma(a, b, -mean), unlike the
rounded a * b that the mean summed. The float64 reference had the first fault too."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpu_support import requires_gpu
from kfuse import DataType
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.schedule import SchedulerType

torch = pytest.importorskip("torch")

DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, requires_gpu])]


def layer_norm(prologue: str) -> FusionDefinition:
    """(f(x) - mean) * rsqrt(var + eps) * w over rows, f a pointwise prologue, as the
    campaign's normalization fusions write it (welford, then broadcasts)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        w = fd.define_tensor(shape=[-1])
        y = getattr(fd.ops, prologue)(x)
        mean, m2, _ = fd.ops.welford(y, dims=[1])
        n = fd.ops.cast(fd.ops.size(y, dim=1), dtype=y.dtype)
        inv = fd.ops.rsqrt(fd.ops.add(fd.ops.div(m2, n), 1e-5))
        centred = fd.ops.sub(y, fd.ops.broadcast(mean, is_broadcast_dim=[False, True]))
        normed = fd.ops.mul(centred, fd.ops.broadcast(inv, is_broadcast_dim=[False, True]))
        fd.add_output(fd.ops.mul(normed, fd.ops.broadcast(w, is_broadcast_dim=[True, False])))
    return fd


def _equal_rows_cross() -> list:
    """Every (n, prologue, device). On the emulator the README's command runs each row length
    once, with the prologues in turn (abs at 1 and 100, gelu at 3 and 1000, erfc at 32 and
    4099); the rest of the emulator's cross (a kernel each) is CI's extended step. The GPU
    keeps the whole cross."""
    cases = []
    for i, n in enumerate([1, 3, 32, 100, 1000, 4099]):
        for k, prologue in enumerate(["abs", "gelu", "erfc"]):
            extended = () if k == i % 3 else (pytest.mark.extended,)
            cases.append(pytest.param(n, prologue, "cpu", marks=extended))
            cases.append(pytest.param(n, prologue, "cuda", marks=[pytest.mark.gpu, requires_gpu]))
    return cases


@pytest.mark.parametrize(("n", "prologue", "device"), _equal_rows_cross())
def test_rows_of_equal_values_normalize_to_exactly_zero(device: str, prologue: str, n: int) -> None:
    fd = layer_norm(prologue)
    rows = 37
    # Row r holds one value repeated: values whose sums round (0.1, 1/3, erf-like ones).
    values = torch.linspace(-2.5, 2.5, rows, dtype=torch.float32) + 0.1
    x = values[:, None].expand(rows, n).contiguous().to(device)
    w = torch.linspace(0.5, 2.0, n, dtype=torch.float32).to(device)
    w[n // 2] = math.inf  # 0 * inf is NaN: exactly 0 shows as NaN, a residue as +-inf
    (out,) = fd.execute([x, w])
    assert fd.last_scheduler() is SchedulerType.inner_persistent
    expected = torch.zeros(rows, n)
    expected[:, n // 2] = math.nan
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0, equal_nan=True)
    (reference,) = evaluate(fd.fusion, [x.cpu().double().float(), w.cpu()])
    torch.testing.assert_close(
        torch.as_tensor(np.asarray(reference)).float(), expected, rtol=0, atol=0, equal_nan=True
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [65, 129, 4097])
def test_the_mean_of_integer_valued_rows_is_exact(device: str, n: int) -> None:
    """Rows of random integers whose mean is the value of their middle element (the last
    element makes it so): that element normalizes to exactly 0, NaN times the infinite
    weight there. Sums of small integers are exact in float32, so sum / n is exact here;
    per-thread means combined as Welford states are not (the campaign found that in a first
    version of the shifted mean)."""
    fd = layer_norm("abs")
    rows, mid = 40, (n - 1) // 2
    gen = torch.Generator().manual_seed(n)
    x = torch.randint(1, 100, (rows, n), generator=gen).double()
    x[:, mid] += 1000  # so that the last element comes out positive (abs leaves it)
    x[:, -1] = 0
    x[:, -1] = n * x[:, mid] - x.sum(1)
    assert (x.mean(1) == x[:, mid]).all() and (x > 0).all() and (x < 2**23).all()
    x = x.float().to(device)
    w = torch.ones(n, dtype=torch.float32).to(device)
    w[mid] = math.inf
    (out,) = fd.execute([x, w])
    assert fd.last_scheduler() is SchedulerType.inner_persistent
    assert torch.isnan(out[:, mid]).all(), out[:, mid]
    assert torch.isfinite(out[:, :mid]).all() and torch.isfinite(out[:, mid + 1 :]).all()


def instance_norm_of_int32() -> FusionDefinition:
    """The campaign's fusion: int32 -> float, Welford over the last two axes, the statistics
    broadcast back, times a weight over those axes."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1, -1], dtype=DataType.Int32)
        w = fd.define_tensor(shape=[-1, -1])
        y = fd.ops.cast(x, dtype=DataType.Float)
        mean, m2, _ = fd.ops.welford(y, dims=[2, 3])
        n = fd.ops.cast(fd.ops.mul(fd.ops.size(y, dim=2), fd.ops.size(y, dim=3)), DataType.Float)
        inv = fd.ops.rsqrt(fd.ops.add(fd.ops.div(m2, n), 1e-5))
        stats = [False, False, True, True]
        centred = fd.ops.sub(y, fd.ops.broadcast(mean, is_broadcast_dim=stats))
        normed = fd.ops.mul(centred, fd.ops.broadcast(inv, is_broadcast_dim=stats))
        fd.add_output(
            fd.ops.mul(normed, fd.ops.broadcast(w, is_broadcast_dim=[True, True, False, False]))
        )
    return fd


@pytest.mark.parametrize("device", DEVICES)
def test_the_mean_of_integer_valued_rows_is_exact_in_the_reduction_scheduler(device: str) -> None:
    """The same in a segmented fusion whose Welford runs in the reduction scheduler, where
    per-thread states are combined (the campaign's case: values -8..8 whose mean is exactly 0,
    a kernel mean of 1.5e-8, and inf instead of NaN where the weight is infinite). Its input
    is laid out with the reduced axes outermost and strided, as the campaign's was."""
    fd = instance_norm_of_int32()
    gen = torch.Generator().manual_seed(5)
    # Memory order (5, 3, 128, 7); the fusion sees (7, 3, 5, 128) with strides (1, 896, 2688, 7).
    x = torch.randint(-8, 9, (5, 3, 128, 7), generator=gen, dtype=torch.int32).permute(3, 1, 0, 2)
    x[:, :, 1, 57] = 0
    x[:, :, 0, 0] = 0
    x[:, :, 0, 0] = -x.sum((2, 3), dtype=torch.int32)  # every (i, j) row sums to exactly 0
    assert x.stride() == (1, 896, 2688, 7) and (x.sum((2, 3)) == 0).all()
    w = torch.linspace(-2.0, 2.0, 5 * 128).reshape(5, 128)
    w[1, 57] = -math.inf
    inputs = [x.to(device), w.to(device)]
    assert SchedulerType.reduction in [s.scheduler for s in fd.segments(inputs)]
    (out,) = fd.execute(inputs)
    assert torch.isnan(out[:, :, 1, 57]).all(), out[:, :, 1, 57]
