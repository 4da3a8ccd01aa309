"""NaN and infinities in reductions and normalizations follow torch: max, min and
sums propagate NaN; the mean of values with +inf is +inf (torch.mean's, also for var_mean,
where torch's own Welford mean is NaN) and their variance NaN; an infinity of each sign gives
a NaN mean. The kernels' Welford statistics used to turn an infinite mean
into NaN (inf - inf inside the update)."""

from __future__ import annotations

import math
import warnings

import pytest

from gpu_support import requires_gpu
from kfuse.frontend import FusionDefinition

torch = pytest.importorskip("torch")

# The host emulator, and the GPU (its max.NaN and fast-math instructions are PTX).
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, requires_gpu])]


def statistics(dim: int) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        var, mean = fd.ops.var_mean(x, [dim], keepdim=False)
        fd.add_output(mean)
        fd.add_output(var)
        fd.add_output(fd.ops.max(x, [dim]))
        fd.add_output(fd.ops.min(x, [dim]))
        fd.add_output(fd.ops.sum(x, [dim]))
    return fd


def planted(n: int, dim: int, values: dict[int, float]) -> object:
    """A [n, 3] (dim 0) or [3, n] (dim 1) tensor whose middle line holds `values`."""
    a = torch.randn(n, 3) if dim == 0 else torch.randn(3, n)
    for k, v in values.items():
        if dim == 0:
            a[k % n, 1] = v
        else:
            a[1, k % n] = v
    return a


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("n", [1, 2, 9, 127, 1000])
@pytest.mark.parametrize(
    "values",
    [
        {0: math.inf},
        {-1: math.inf},
        {0: -math.inf, 3: -math.inf},
        {0: math.inf, -1: -math.inf},
        {1: math.nan},
        {0: math.inf, 2: math.nan},
    ],
)
def test_statistics_of_lines_with_nan_and_infinities(
    device: str, dim: int, n: int, values: dict
) -> None:
    fd = statistics(dim)
    a = planted(n, dim, values)
    mean, var, mx, mn, total = (t.cpu() for t in fd.execute([a.to(device)]))
    # torch.mean's mean: torch.var_mean's own (a Welford mean) is NaN beside an infinity.
    got = {"mean": mean, "var": var, "max": mx, "min": mn, "sum": total}
    with warnings.catch_warnings():  # torch warns of the NaN variance of a single value
        warnings.simplefilter("ignore", UserWarning)
        want_var = a.double().var(dim)
    want = {
        "mean": a.double().mean(dim),
        "var": want_var,
        "max": a.double().amax(dim),
        "min": a.double().amin(dim),
        "sum": a.double().sum(dim),
    }
    for name in got:
        g, w = got[name][1].item(), want[name][1].item()
        assert (math.isnan(g) and math.isnan(w)) or g == w, (name, g, w)
        # The other lines hold finite values only.
        assert torch.isfinite(got[name][[0, 2]]).all() or n == 1, name
