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


# Comparisons of |x| with a constant that every number satisfies: ptxas folded the float ones
# to true, so abs(NaN) > -1.0 read True on the GPU (a campaign's wrong result). kf::abs now
# clears the sign bit instead of calling fabsf.
TAUTOLOGIES = [
    ("gt", -1.0, False),  # |x| > -1
    ("ge", 0.0, False),  # |x| >= 0
    ("ge", -0.0, False),
    ("gt", -0.5, False),
    ("le", 0.0, True),  # -|x| <= 0
    ("lt", 1.0, True),  # -|x| < 1
]


def _abs_comparisons() -> list:
    """Every (device, dtype, comparison). On the emulator the README's command compares in
    float32 with every constant and in each other dtype with the first (each dtype's kf::abs);
    the rest of the cross is CI's extended step (a kernel each). The GPU runs the whole cross
    (ptxas folded the float comparisons)."""
    cases = []
    for device in ("cpu", "cuda"):
        for dtype in ["float32", "float16", "bfloat16", "float64"]:
            for k, (op, constant, negate) in enumerate(TAUTOLOGIES):
                if device == "cuda":
                    marks: tuple = (pytest.mark.gpu, requires_gpu)
                elif dtype == "float32" or k == 0:
                    marks = ()
                else:
                    marks = (pytest.mark.extended,)
                cases.append(pytest.param(device, dtype, op, constant, negate, marks=marks))
    return cases


@pytest.mark.parametrize(("device", "dtype", "op", "constant", "negate"), _abs_comparisons())
def test_comparisons_of_abs_that_only_nan_fails(
    device: str, dtype: str, op: str, constant: float, negate: bool
) -> None:
    from kfuse.dtypes import DataType

    kfuse_dtype = {
        "float32": DataType.Float,
        "float16": DataType.Half,
        "bfloat16": DataType.BFloat16,
        "float64": DataType.Double,
    }[dtype]
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=kfuse_dtype)
        a = fd.ops.abs(x)
        fd.add_output(getattr(fd.ops, op)(fd.ops.neg(a) if negate else a, constant))
    values = [math.nan, -math.nan, math.inf, -math.inf, 0.0, -0.0, 1.5, -2.0, 3e-8]
    x_in = torch.tensor(values, dtype=getattr(torch, dtype), device=device)
    (got,) = fd.execute([x_in])
    a_ref = x_in.double().abs()
    want = getattr(torch, op)(-a_ref if negate else a_ref, constant)
    assert got.cpu().tolist() == want.cpu().tolist()
    assert got.cpu().tolist()[:2] == [False, False]  # NaN fails every ordered comparison
