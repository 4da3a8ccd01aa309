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


@settings(
    max_examples=examples(12),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    deadline=None,
)
@given(st.data())
def test_random_reductions_match_the_reference(data: st.DataObject) -> None:
    _run(data, {"reduction"})


@settings(
    max_examples=examples(12),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    deadline=None,
)
@given(st.data())
def test_random_normalizations_match_the_reference(data: st.DataObject) -> None:
    _run(data, {"normalization"})


@settings(
    max_examples=examples(12),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    deadline=None,
)
@given(st.data())
def test_random_normalizations_with_drawn_persistent_layouts(data: st.DataObject) -> None:
    """Any layout a user may set (threads per row, registers or shared memory, some or all
    vectors reloaded instead of held) computes the same result."""
    fd = data.draw(fusions(kinds={"normalization"}, max_ops=4, max_rank=3, max_outputs=2))
    inputs = data.draw(inputs_for(fd, framework="torch", max_elements=600))
    ok, _ = schedule.can_schedule(fd.fusion, SchedulerType.inner_persistent, inputs)
    assume(ok)
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.inner_persistent, inputs)
    covered = hp.block_x * hp.persistent_batch_size  # vectors a row needs, at least
    smallest = max(1, -(-covered // 64))  # a thread holds at most 64 vectors
    hp.block_x = data.draw(
        st.sampled_from([b for b in (1, 2, 4, 8, 16, 32, 64) if b >= smallest] or [smallest])
    )
    hp.block_y = 1
    hp.persistent_batch_size = -(-covered // hp.block_x)
    hp.reload_batch_size = data.draw(st.integers(0, hp.persistent_batch_size))
    hp.smem_persistent = data.draw(st.booleans())
    out = fd.manual_execute(inputs, heuristic_params=hp)
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)
