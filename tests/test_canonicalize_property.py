"""Property: the canonical form of any drawn fusion (kfuse.testing.fusions) computes the
definition's values. The float64 reference of the canonical form equals that of the
definition on inputs with NaN, infinities and signed zeros (every rule is exact there;
pow's rewrites to within the last bit of float64, where C's pow may round differently from
a product), with both reference backends; and the emulator runs it (test_campaign_property
checks the emulator against the reference, through the canonical form fd.execute uses)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from example_budget import examples
from kfuse.ir.canonicalize import canonical_fusion
from kfuse.reference import evaluate
from kfuse.testing import fusions, inputs_for
from kfuse.testing.compare import to_numpy

KINDS = {"pointwise", "reduction", "normalization", "multi_reduction"}


def _same_values(got: np.ndarray, want: np.ndarray) -> None:
    got, want = to_numpy(got), to_numpy(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    if not got.dtype.kind == "f":
        np.testing.assert_array_equal(got, want)
        return
    got, want = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(
        np.signbit(got[~np.isnan(got)]), np.signbit(want[~np.isnan(want)])
    )
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=0, equal_nan=True)


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@settings(
    max_examples=examples(60),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    deadline=None,
)
@given(data=st.data())
def test_canonical_form_has_the_definitions_values(framework: str, data: st.DataObject) -> None:
    if framework == "torch":
        pytest.importorskip("torch")
    fd = data.draw(fusions(kinds={data.draw(st.sampled_from(sorted(KINDS)))}, max_ops=8))
    inputs = data.draw(inputs_for(fd, framework=framework, max_elements=300, special_values=True))
    canon = canonical_fusion(fd.fusion)
    assert [v.name for v in canon.inputs] == [v.name for v in fd.fusion.inputs]
    with np.errstate(all="ignore"):
        want = evaluate(fd.fusion, inputs)
        got = evaluate(canon, inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        _same_values(g, w)
