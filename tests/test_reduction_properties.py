"""Property tests: random reduction and normalization fusions (kfuse.testing.fusions) run on
the emulator through whichever of reduction / inner_persistent takes them, and match the
reference. The `ci` Hypothesis profile keeps the example counts small."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from example_budget import examples
from kfuse import schedule
from kfuse.reference import evaluate
from kfuse.schedule import SchedulerType
from kfuse.testing import assert_outputs_close, fusions, inputs_for

pytest.importorskip("torch")
OURS = {SchedulerType.reduction, SchedulerType.inner_persistent}


def _run(data: st.DataObject, kinds: set[str]) -> None:
    fd = data.draw(fusions(kinds=kinds, max_ops=4, max_rank=3, max_outputs=2))
    # CPU torch rather than NumPy: NumPy has no bfloat16 outputs to hand back.
    inputs = data.draw(inputs_for(fd, framework="torch", max_elements=600))
    found = schedule.find_compatible_schedulers(fd.fusion, inputs)
    assert not OURS <= set(found), "reduction and inner_persistent are disjoint"
    assume(found and found[0] in OURS)
    out = fd.execute(inputs)
    assert fd.last_scheduler() is found[0]
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)


@settings(max_examples=examples(12), suppress_health_check=[HealthCheck.too_slow,
                                                  HealthCheck.filter_too_much], deadline=None)
@given(st.data())
def test_random_reductions_match_the_reference(data: st.DataObject) -> None:
    _run(data, {"reduction"})


@settings(max_examples=examples(12), suppress_health_check=[HealthCheck.too_slow,
                                                  HealthCheck.filter_too_much], deadline=None)
@given(st.data())
def test_random_normalizations_match_the_reference(data: st.DataObject) -> None:
    _run(data, {"normalization"})
