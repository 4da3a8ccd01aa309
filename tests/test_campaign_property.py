"""The campaign's property as kfuse's own property tests (kfuse.campaign.property, which
`kfuse campaign` runs at scale): random fusions of every kind, each called three times with
new values (compile, cached, fast path), and then the same definitions called again in
another order, every output of every call checked. Anything one fusion leaves behind for the
next (a cache keyed on too little, a reused buffer, a stream left waiting) shows here.

The emulator runs here; the GPU tests run the same property on CUDA tensors."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from example_budget import examples as budget
from gpu_support import requires_gpu
from kfuse.campaign.property import Example, ExampleSpace, check, examples

torch = pytest.importorskip("torch")

EMULATED = ExampleSpace(framework="torch", device="cpu", max_elements=1 << 9, max_ops=5, max_rank=3)
ON_GPU = ExampleSpace(framework="torch", device="cuda", max_elements=1 << 16)


def run_in_two_orders(batch: list[Example], order: list[int]) -> None:
    for example in batch:
        check(example)
    for k in order:  # the same definitions, caches warm, in another order
        check(batch[k])


def _test(space: ExampleSpace, ci: int) -> object:
    @settings(
        max_examples=budget(ci),
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def test(data: st.DataObject) -> None:
        batch = data.draw(st.lists(examples(space), min_size=2, max_size=4))
        order = data.draw(st.permutations(range(len(batch))))
        run_in_two_orders(batch, order)

    return test


test_random_fusions_one_after_another_on_the_emulator = _test(EMULATED, 6)

test_random_fusions_one_after_another_on_the_gpu = pytest.mark.gpu(requires_gpu(_test(ON_GPU, 60)))
