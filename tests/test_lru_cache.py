"""nvFuser's LRUCache and LruFusionCache (kfuse.engine.fusion_cache, kfuse.nvfuser_direct):
equal definitions share one executor cache, the least recently used goes when it is full,
and the report reads as nvFuser's. nvFuser's two tests of them are ported here, on CPU
tensors (the host emulator)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
import torch

from kfuse.errors import DefinitionError, InputError
from kfuse.nvfuser_direct import DataType, FusionDefinition, LRUCache, LruFusionCache

Build = Callable[[FusionDefinition], None]


def defined(build: Build) -> FusionDefinition:
    with FusionDefinition() as fd:
        build(fd)
    return fd


def div(numerator: int) -> Build:
    """x / y (numerator 0) or y / x (numerator 1) of two [2, 4] float inputs."""

    def build(fd: FusionDefinition) -> None:
        t = [fd.define_tensor(shape=[-1, -1], dtype=DataType.Float) for _ in range(2)]
        fd.add_output(fd.ops.div(t[numerator], t[1 - numerator]))

    return build


# ---- nvFuser's tests (test_python_direct.py) ----


def test_lru_fusion_cache_decorator() -> None:
    inputs = [torch.randn(2, 4), torch.randn(2, 4)]

    def create_fd1(fd: FusionDefinition) -> None:
        t0, t1 = fd.from_pytorch(inputs[0]), fd.from_pytorch(inputs[1])
        fd.add_output(fd.ops.div(t0, t1))

    def create_fd2(fd: FusionDefinition) -> None:
        t0, t1 = fd.from_pytorch(inputs[0]), fd.from_pytorch(inputs[1])
        fd.add_output(fd.ops.div(t1, t0))

    @LruFusionCache(max_fusions=10)
    def create_fusion(create_fd: Build) -> FusionDefinition:
        return defined(create_fd)

    assert create_fusion.stats() == "Max Fusions Allowed: 10\nThe fusion cache is empty.\n"
    for _ in range(5):
        fd1 = create_fusion(create_fd1)
        torch.testing.assert_close(fd1.execute(inputs)[0], inputs[0] / inputs[1])
        fd2 = create_fusion(create_fd2)
        torch.testing.assert_close(fd2.execute(inputs)[0], inputs[1] / inputs[0])
        assert fd1.fusion == fd1.fusion
        assert fd2.fusion == fd2.fusion
        assert fd1.fusion != fd2.fusion
    assert create_fusion.stats() == (
        "Max Fusions Allowed: 10\n"
        "Total Fusions in Cache: 2\n"
        "Total Unique Fusions Compiled: 2\n"
        "Cache Hits by LRU ordering:\n"
        "\t0 -> 4 hits\n"
        "\t1 -> 4 hits\n"
        "Cache Lookups: 10\n"
        "Cache Hits: 8\n"
        "Hit Rate: 80%\n"
    )
    assert create_fusion.num_fusions() == 2


def test_lru_cache() -> None:
    bcast_input, full_input = torch.randn(1, 4), torch.randn(2, 4)

    def bcast_tensor(fd: FusionDefinition) -> object:
        return fd.define_tensor(
            shape=[1, -1], contiguity=[None, True], dtype=DataType.Float, is_cpu=False,
            stride_order=[1, 0],
        )  # fmt: skip

    def full_tensor(fd: FusionDefinition) -> object:
        return fd.define_tensor(
            shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float, is_cpu=False,
            stride_order=[1, 0],
        )  # fmt: skip

    def fusion_id0(fd: FusionDefinition) -> None:
        t0, t1 = bcast_tensor(fd), full_tensor(fd)
        fd.add_output(fd.ops.sub(t0, t1))

    def fusion_id1(fd: FusionDefinition) -> None:  # fusion_id0's inputs in the other order
        t1, t0 = full_tensor(fd), bcast_tensor(fd)
        fd.add_output(fd.ops.sub(t0, t1))

    cache = LRUCache(max_fusions=10)
    fd0 = defined(fusion_id0)
    assert cache.num_fusions() == 0
    fd0.fec = cache.cache_compile(fd0.fusion)
    del fd0._fusion
    assert cache.num_fusions() == 1
    fd1 = defined(fusion_id1)
    assert cache.num_fusions() == 1
    fd1.fec = cache.cache_compile(fd1.fusion)
    del fd1._fusion
    assert cache.num_fusions() == 2
    # (kfuse's) the definitions print from the cache's fusion once their own is deleted
    assert "fd.ops.sub(" in repr(fd0) and repr(fd0) != repr(fd1)
    torch.testing.assert_close(fd0.execute([bcast_input, full_input])[0], bcast_input - full_input)
    torch.testing.assert_close(fd1.execute([full_input, bcast_input])[0], bcast_input - full_input)


# ---- kfuse's ----


def test_equal_definitions_share_one_executor_and_its_kernels() -> None:
    cache = LRUCache(max_fusions=4)
    x, y = torch.randn(2, 4), torch.rand(2, 4) + 1.0
    first = defined(div(0))
    first.fec = cache.cache_compile(first.fusion)
    torch.testing.assert_close(first.execute([x, y])[0], x / y)
    again = defined(div(0))
    executor = cache.cache_compile(again.fusion)
    assert executor is first.fec
    again.fec = executor
    compiled = dict(executor._compiled)
    torch.testing.assert_close(again.execute([x, y])[0], x / y)
    assert executor._compiled == compiled, "an equal definition compiled its kernels again"


def test_the_least_recently_used_goes_first() -> None:
    cache = LRUCache(max_fusions=2)
    builds = [div(0), div(1), lambda fd: fd.add_output(fd.ops.neg(fd.define_tensor([-1])))]
    a, b = (cache.cache_compile(defined(builds[i]).fusion) for i in (0, 1))
    assert cache.cache_compile(defined(builds[0]).fusion) is a  # a is now the newest
    cache.cache_compile(defined(builds[2]).fusion)  # full: b, the oldest, goes
    assert cache.num_fusions() == 2
    assert cache.cache_compile(defined(builds[0]).fusion) is a
    assert cache.cache_compile(defined(builds[1]).fusion) is not b  # made again
    assert "Total Unique Fusions Compiled: 4\n" in cache.stats()
    assert "Hit Rate: 33.3333%\n" in cache.stats()  # 2 of 6, six digits as nvFuser prints


def test_definitions_that_differ_in_layout_or_constants_do_not_share() -> None:
    cache = LRUCache(max_fusions=8)

    def scaled(value: float, contiguous: bool) -> Build:
        def build(fd: FusionDefinition) -> None:
            t = fd.define_tensor(shape=[-1, -1], contiguity=[contiguous, True])
            fd.add_output(fd.ops.mul(t, fd.define_scalar(value)))

        return build

    made = {
        cache.cache_compile(defined(scaled(v, c)).fusion) for v in (2.0, 3.0) for c in (True, False)
    }
    assert len(made) == 4 and cache.num_fusions() == 4


def test_a_cache_for_another_definition_is_refused() -> None:
    cache = LRUCache(max_fusions=2)
    other = cache.cache_compile(defined(div(1)).fusion)
    fd = defined(div(0))
    with pytest.raises(DefinitionError, match="different definition"):
        fd.fec = other
    with pytest.raises(DefinitionError, match="FusionExecutorCache"):
        fd.fec = "not a cache"
    assert not hasattr(fd, "fec")
    x, y = torch.randn(2, 4), torch.rand(2, 4) + 1.0
    torch.testing.assert_close(fd.execute([x, y])[0], x / y)


def test_unfinished_definitions_and_bad_sizes_are_kfuse_errors() -> None:
    for bad in (0, -1, 2.5, True, None):
        with pytest.raises(InputError, match="max_fusions"):
            LRUCache(max_fusions=bad)  # type: ignore[arg-type]
    cache = LRUCache(max_fusions=2)
    with pytest.raises(InputError, match="fd.fusion"):
        cache.cache_compile("fusion")  # type: ignore[arg-type]
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.neg(fd.define_tensor([-1])))
        with pytest.raises(DefinitionError, match="not finished"):
            cache.cache_compile(fd.fusion)
        with pytest.raises(DefinitionError, match="finish the definition"):
            fd.fec = cache.cache_compile(defined(div(0)).fusion)
    assert cache.num_fusions() == 1


def test_a_definition_without_its_fusion_or_a_cache_says_so() -> None:
    fd = defined(div(0))
    del fd._fusion
    with pytest.raises(DefinitionError, match="deleted"):
        fd.execute([torch.randn(2, 4), torch.randn(2, 4)])


def test_the_decorator_keeps_a_definitions_own_cache_and_refuses_other_results() -> None:
    @LruFusionCache(max_fusions=4)
    def make(run_first: bool) -> FusionDefinition:
        fd = defined(div(0))
        if run_first:
            fd.execute([torch.randn(2, 4), torch.rand(2, 4) + 1.0])
        return fd

    ran = make(True)
    assert ran.fusion is not None and make.num_fusions() == 0  # it had a cache: kept
    make(False)
    assert make.num_fusions() == 1

    @LruFusionCache()
    def not_a_definition() -> int:
        return 3

    with pytest.raises(DefinitionError, match="not a FusionDefinition"):
        not_a_definition()


def test_threads_share_one_cache() -> None:
    cache = LRUCache(max_fusions=64)
    builds = [div(0), div(1)]
    x, y = torch.rand(2, 4) + 1.0, torch.rand(2, 4) + 1.0
    want = [x / y, y / x]
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for i in range(6):
                fd = defined(builds[(i + k) % 2])
                fd.fec = cache.cache_compile(fd.fusion)
                torch.testing.assert_close(fd.execute([x, y])[0], want[(i + k) % 2])
        except BaseException as err:  # noqa: BLE001 - reported by the main thread
            errors.append(err)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert cache.num_fusions() == 2
    assert "Cache Lookups: 24\n" in cache.stats()
