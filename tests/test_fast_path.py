"""kfuse._C.FastCall's layout matching and allocation, on the host (no launches needed)."""

from __future__ import annotations

import pytest

from kfuse._C import FastCall, FastCallCache

torch = pytest.importorskip("torch")


def layout(t: object) -> tuple:
    return (type(t), t.dtype, tuple(t.shape), tuple(t.stride()), t.data_ptr() & 15,
            t.get_device())


def entry(inputs: list, tag: object) -> FastCall:
    outputs = [(torch.empty_like, (), None, 0),  # shaped like input 0
               (torch.empty_strided, ((2, 3), (3, 1)), {"dtype": torch.float64}, -1)]
    return FastCall("torch", -1, [layout(t) for t in inputs], outputs, [], [],
                    lambda: 0, (), None, tag)


def test_a_matching_layout_allocates_the_outputs_and_returns_the_tag() -> None:
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    call = entry([a, b], "tag")
    hit = call([torch.randn(4, 5), torch.randn(4, 5)], None)
    assert hit is not None
    tag, (first, second) = hit
    assert tag == "tag"
    assert first.shape == (4, 5) and first.dtype == torch.float32 and first.is_contiguous()
    assert second.shape == (2, 3) and second.dtype == torch.float64


@pytest.mark.parametrize("other", [
    lambda: [torch.randn(4, 6), torch.randn(4, 5)],                 # shape
    lambda: [torch.randn(4, 5).double(), torch.randn(4, 5)],        # dtype
    lambda: [torch.randn(5, 4).t(), torch.randn(4, 5)],             # strides
    lambda: [torch.randn(41)[1:21].view(4, 5), torch.randn(4, 5)],  # alignment class
    lambda: [torch.randn(4, 5)],                                    # count
    lambda: [torch.randn(4, 5), torch.nn.Parameter(torch.randn(4, 5))],  # array type
    lambda: [torch.randn(4, 5), 2.0],                               # not an array
])
def test_any_other_layout_is_a_miss(other: object) -> None:
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    assert entry([a, b], 1)(other(), None) is None


def test_the_cache_tries_newest_first_and_keeps_at_most_eight() -> None:
    cache = FastCallCache()
    assert cache([torch.randn(3)]) is None
    for n in range(1, 11):
        cache.add(entry([torch.randn(n)], n))
    assert len(cache) == 8
    assert cache([torch.randn(10)], None)[0] == 10
    assert cache([torch.randn(3)])[0] == 3
    assert cache([torch.randn(2)]) is None  # the two oldest were dropped


def test_a_failing_allocation_raises_instead_of_launching() -> None:
    def broken(*args: object) -> None:
        raise MemoryError("out of memory (test)")

    a = torch.randn(3)
    call = FastCall("torch", -1, [layout(a)], [(broken, (), None, -1)], [], [], lambda: 0, (),
                    None, 0)
    with pytest.raises(MemoryError, match="test"):
        call([torch.randn(3)], None)


def test_bad_specs_are_rejected_when_built() -> None:
    with pytest.raises(ValueError, match="framework"):
        FastCall("jax", 0, [], [], [], [], lambda: 0, (), None, 0)
    with pytest.raises(ValueError, match="input spec"):
        FastCall("torch", 0, [(1, 2)], [], [], [], lambda: 0, (), None, 0)


def test_a_cycle_through_the_cache_is_collected() -> None:
    """The compiled fusion a FastCall keeps may lead back to the object holding its cache;
    the cycle collector must see through the C++ objects to free it."""
    import gc
    import weakref

    class Tag:
        pass

    class Holder:
        pass

    a = torch.randn(3)
    tag, holder = Tag(), Holder()
    holder.cache = FastCallCache()
    holder.cache.add(entry([a], tag))
    tag.holder = holder  # tag -> holder -> cache -> FastCall -> tag
    alive = weakref.ref(tag)
    del tag, holder
    gc.collect()
    assert alive() is None
