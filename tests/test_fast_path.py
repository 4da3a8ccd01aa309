"""kfuse._C.FastCall's layout matching and allocation, on the host (no launches needed)."""

from __future__ import annotations

from typing import Any

import pytest

from kfuse._C import FastCall, FastCallCache
from kfuse.engine.executor import SEEN_LAYOUTS

torch = pytest.importorskip("torch")


def layout(t: object) -> tuple:
    return (type(t), t.dtype, tuple(t.shape), tuple(t.stride()), t.data_ptr() & 15, t.get_device())


def entry(inputs: list, tag: object) -> FastCall:
    outputs = [
        (torch.empty_like, (), None, 0),  # shaped like input 0
        (torch.empty_strided, ((2, 3), (3, 1)), {"dtype": torch.float64}, -1),
    ]
    return FastCall(
        "torch", -1, [layout(t) for t in inputs], outputs, [], [], lambda: 0, (), None, tag
    )


def test_a_matching_layout_allocates_the_outputs_and_returns_the_tag() -> None:
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    call = entry([a, b], "tag")
    hit = call([torch.randn(4, 5), torch.randn(4, 5)], None)
    assert hit is not None
    tag, (first, second) = hit
    assert tag == "tag"
    assert first.shape == (4, 5) and first.dtype == torch.float32 and first.is_contiguous()
    assert second.shape == (2, 3) and second.dtype == torch.float64


@pytest.mark.parametrize(
    "other",
    [
        lambda: [torch.randn(4, 6), torch.randn(4, 5)],  # shape
        lambda: [torch.randn(4, 5).double(), torch.randn(4, 5)],  # dtype
        lambda: [torch.randn(5, 4).t(), torch.randn(4, 5)],  # strides
        lambda: [torch.randn(41)[1:21].view(4, 5), torch.randn(4, 5)],  # alignment class
        lambda: [torch.randn(4, 5)],  # count
        lambda: [torch.randn(4, 5), torch.nn.Parameter(torch.randn(4, 5))],  # array type
        lambda: [torch.randn(4, 5), 2.0],  # not an array
    ],
)
def test_any_other_layout_is_a_miss(other: object) -> None:
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    assert entry([a, b], 1)(other(), None) is None


def test_the_cache_tries_newest_first_and_keeps_at_most_sixteen() -> None:
    """16 entries: nvFuser's host benchmarks call one fusion at 10 sizes in turn, which
    missed on every call when the cache kept 8."""
    assert FastCallCache.MAX_ENTRIES == 16
    cache = FastCallCache()
    assert cache([torch.randn(3)]) is None
    for n in range(1, 19):
        cache.add(entry([torch.randn(n)], n))
    assert len(cache) == 16
    assert cache([torch.randn(18)], None)[0] == 18
    assert cache([torch.randn(3)])[0] == 3
    assert cache([torch.randn(2)]) is None  # the two oldest were dropped


def test_a_failing_allocation_raises_instead_of_launching() -> None:
    def broken(*args: object) -> None:
        raise MemoryError("out of memory (test)")

    a = torch.randn(3)
    call = FastCall(
        "torch", -1, [layout(a)], [(broken, (), None, -1)], [], [], lambda: 0, (), None, 0
    )
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


def test_scalar_inputs_match_by_python_type_whatever_their_value() -> None:
    a = torch.randn(4, 5)
    call = FastCall(
        "torch",
        -1,
        [layout(a), (float,)],
        [(torch.empty_like, (), None, 0)],
        [],
        [],
        lambda: 0,
        (),
        None,
        "tag",
    )
    assert call([torch.randn(4, 5), 3.5], None) is not None
    assert call([torch.randn(4, 5), -1e300], None) is not None  # any value of that type
    for other in (3, True, "3.5", None, torch.tensor(3.5), torch.randn(4, 5)):
        assert call([torch.randn(4, 5), other], None) is None  # another type: checked path


def test_scalar_specs_come_from_python_numbers_only() -> None:
    import numpy as np

    from kfuse.engine.signature import scalar_spec

    assert scalar_spec(2.0) == (float,)
    assert scalar_spec(2) == (int,)
    assert scalar_spec(True) == (bool,)
    # NumPy scalars and 0-d arrays take the checked path every time
    for other in (np.float64(2.0), np.int32(2), torch.tensor(2.0), "2"):
        assert scalar_spec(other) is None


def test_scalar_programs_replay_the_checked_paths_scalar_values() -> None:
    """A program exists where scalar inputs feed element-wise math (also through the casts
    the frontend inserts and scalar arithmetic); it computes what the checked path would."""
    from kfuse import DataType, FusionDefinition
    from kfuse.engine.fast_path import ScalarProgram

    with FusionDefinition() as derived:  # s * 2 and the int k are scalars computed on the host
        x = derived.define_tensor(shape=[-1])
        s = derived.define_scalar(dtype=DataType.Double)
        k = derived.define_scalar(dtype=DataType.Int)
        derived.add_output(derived.ops.add(derived.ops.mul(x, derived.ops.mul(s, 2.0)), k))
    with FusionDefinition() as shaped:  # n sets an output's shape
        x = shaped.define_tensor(shape=[-1])
        n = shaped.define_scalar(dtype=DataType.Int)
        shaped.add_output(shaped.ops.reshape(x, [n, -1]))
    a = torch.randn(6)
    assert ScalarProgram.of(shaped.fusion, shaped.fusion.infer_shapes([a, 2])) is None
    fusion = derived.fusion
    program = ScalarProgram.of(fusion, fusion.infer_shapes([a, 1.5, 3]))
    assert program is not None
    operands = [
        v
        for e in fusion.exprs
        for v in e.inputs
        if type(v).__name__ == "Scalar" and program.slot(v) is not None
    ]
    assert operands  # the scalars the tensor ops read
    for values in ([a, 0.1, 7], [a, -2.5, -1], [a, 1e30, 2**40]):
        expected = fusion.infer_shapes(values)
        assert program(values) == tuple(expected[v] for v in program.operands)


def _counting_cache(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[object]]:
    """An executor cache whose layout keys are the inputs themselves and whose FastCall
    builds are recorded (the inputs of each) instead of packed."""
    import kfuse.engine.executor as executor
    from kfuse import FusionDefinition

    built: list[object] = []
    monkeypatch.setattr(executor, "layout_key", lambda inputs, info: tuple(inputs))
    monkeypatch.setattr(
        executor,
        "fast_call_for",
        lambda inputs, compiled, info, layout: (
            built.append(inputs) or FastCall("torch", -1, [], [], [], [], lambda: 0, (), None, None)
        ),
    )
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.neg(fd.define_tensor(shape=[-1])))
    return executor.FusionExecutorCache(fd.fusion), built


def test_a_layout_already_cached_is_not_built_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call that misses for a reason its layout's entry checks on every call (another
    current CuPy device, a scalar out of its parameter's range) takes the checked path; it
    must not build and add that layout's FastCall again. Layouts the cache dropped may be."""
    cache, built = _counting_cache(monkeypatch)
    for _ in range(3):  # built on the second call, not again on the third
        cache._remember_fast_call([1], None, None)
    assert built == [[1]] and len(cache.fast_calls) == 1
    for n in range(2, 2 + FastCallCache.MAX_ENTRIES):  # pushes [1] out of the cache
        cache._remember_fast_call([n], None, None)
        cache._remember_fast_call([n], None, None)
    assert len(cache.fast_calls) == FastCallCache.MAX_ENTRIES
    cache._remember_fast_call([1], None, None)  # dropped, so built again
    assert built.count([1]) == 2


def test_a_layouts_fastcall_is_built_on_its_second_checked_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One-off layouts (shapes that change every call) build no FastCall, so they neither pay
    for one nor push repeated layouts out of the cache; the seen set stays bounded."""
    cache, built = _counting_cache(monkeypatch)
    cache._remember_fast_call([1], None, None)
    assert built == [] and cache.fast_calls is None
    cache._remember_fast_call([1], None, None)
    assert built == [[1]] and len(cache.fast_calls) == 1
    for n in range(2, 2 + SEEN_LAYOUTS):  # one-off layouts push [1] out
        cache._remember_fast_call([n], None, None)
    assert len(cache._seen_layouts) == SEEN_LAYOUTS and built == [[1]]


def test_a_launch_with_indexed_reads_packs_for_the_fast_path() -> None:
    """A kernel with indexed reads has an operand for its bounds flags beside the scalar
    parameters: packing its launch for a FastCall (what a GPU call does on its layout's
    second call) keeps the flags' words and a slot for the scalar input alone. The emulator's
    launch packs as a GPU's does, so this runs without one."""
    import numpy as np

    from kfuse import DataType, FusionDefinition
    from kfuse.engine.fast_path import ScalarProgram, launch_slots
    from kfuse.runtime.info import build_runtime_info
    from kfuse.runtime.launch import IndexCheckOperand

    with FusionDefinition() as fd:
        table = fd.define_tensor(shape=[-1, -1])
        ids = fd.define_tensor(shape=[-1], dtype=DataType.Int)
        scale = fd.define_scalar(dtype=DataType.Double)
        fd.add_output(fd.ops.mul(fd.ops.index_select(table, ids, dim=0), scale))
    inputs = [np.arange(12, dtype=np.float32).reshape(4, 3), np.array([3, 0, 2]), 2.0]
    (out,) = fd.execute(inputs)
    np.testing.assert_array_equal(out, inputs[0][[3, 0, 2]] * 2)
    (launch,) = fd.last_program().launches
    assert any(isinstance(op, IndexCheckOperand) for op in launch.operands)
    info = build_runtime_info(fd.fusion, inputs)
    program = ScalarProgram.of(fd.fusion, info.extents)
    assert program is not None
    kinds = sorted(kind for _, kind, _, _ in launch_slots(launch, program))
    assert kinds == ["input", "input", "output", "scalar"]
    assert len(program.operands) == 1  # the scale, as the kernel reads it
    flags = next(p for p, op in enumerate(launch.operands) if isinstance(op, IndexCheckOperand))
    assert flags not in [p for p, *_ in launch_slots(launch, program)]


def test_a_random_ops_seed_and_offset_inputs_are_replayed_per_call() -> None:
    """Stateless random numbers seeded by scalar inputs take the fast path: the seed and
    offset are scalar slots computed from each call's inputs. A generated value sized by a
    scalar input does not (its shape would change)."""
    import numpy as np

    from kfuse import DataType, FusionDefinition
    from kfuse.engine.fast_path import ScalarProgram, launch_slots
    from kfuse.runtime.info import build_runtime_info

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1])
        seed = fd.define_scalar(dtype=DataType.Int)
        offset = fd.define_scalar(dtype=DataType.Int32)  # cast to Int on the host
        u = fd.ops.uniform(0.0, 1.0, fd.ops.shape(x), rng_seed=seed, rng_offset=offset)
        fd.add_output(fd.ops.mul(x, u))
    inputs = [np.ones(10, np.float32), 5, 3]
    fd.execute(inputs)
    (launch,) = fd.last_program().launches
    info = build_runtime_info(fd.fusion, inputs)
    program = ScalarProgram.of(fd.fusion, info.extents)
    assert program is not None
    kinds = sorted(kind for _, kind, _, _ in launch_slots(launch, program))
    assert kinds == ["input", "output", "scalar", "scalar"]  # the generated read has no data
    for values in ([inputs[0], 7, 1], [inputs[0], 2**62, 2**31 - 1]):
        expected = fd.fusion.infer_shapes(values)
        assert program(values) == tuple(expected[v] for v in program.operands)
        assert sorted(program(values)) == sorted(values[1:])
    with FusionDefinition() as sized:
        n = sized.define_scalar(dtype=DataType.Int)
        sized.add_output(sized.ops.full([n], 1.0, DataType.Float))
    assert ScalarProgram.of(sized.fusion, sized.fusion.infer_shapes([4])) is None


def given_entry(inputs: list) -> FastCall:
    """A FastCall taking given outputs: one float32 (4, 5) output, row major."""
    outputs = [(torch.empty_like, (), None, 0)]
    spans = [(0, t.element_size() * t.numel()) for t in inputs]
    given = ([(torch.Tensor, torch.float32, torch.Size((4, 5)), (5, 1), 0, -1)], [80], spans)
    return FastCall(
        "torch",
        -1,
        [layout(t) for t in inputs],
        outputs,
        [],
        [],
        lambda: 0,
        (),
        None,
        "t",
        None,
        given,
    )


def test_call_into_returns_the_given_arrays() -> None:
    a = torch.randn(4, 5)
    out = torch.empty(4, 5)
    hit = given_entry([a]).call_into([torch.randn(4, 5)], [out])
    assert hit is not None
    tag, (result,) = hit
    assert tag == "t" and result is out


@pytest.mark.parametrize(
    "outputs",
    [
        lambda a: [torch.empty(4, 6)],  # shape
        lambda a: [torch.empty(4, 5, dtype=torch.float64)],  # dtype
        lambda a: [torch.empty(5, 4).t()],  # strides
        lambda a: [torch.empty(21)[1:].view(4, 5)],  # not 16-byte aligned
        lambda a: [torch.empty(4, 5), torch.empty(4, 5)],  # count
        lambda a: [],  # count
        lambda a: [a],  # the input itself
        lambda a: [a.view(20)[:].view(4, 5)],  # a view of the input
        lambda a: torch.empty(4, 5),  # not a list
        lambda a: [2.0],  # not an array
    ],
)
def test_call_into_misses_for_any_output_that_does_not_fit_exactly(outputs: Any) -> None:
    """A miss sends the call to the checked path, which says what is wrong."""
    a = torch.randn(4, 5)
    assert given_entry([a]).call_into([a], outputs(a)) is None


def test_call_into_misses_where_outputs_share_memory() -> None:
    with_two = FastCall(
        "torch",
        -1,
        [layout(torch.randn(4, 5))],
        [(torch.empty_like, (), None, 0)] * 2,
        [],
        [],
        lambda: 0,
        (),
        None,
        "t",
        None,
        (
            [(torch.Tensor, torch.float32, torch.Size((4, 5)), (5, 1), 0, -1)] * 2,
            [80, 80],
            [(0, 80)],
        ),
    )
    a, out = torch.randn(4, 5), torch.empty(4, 5)
    assert with_two.call_into([a], [out, out]) is None
    assert with_two.call_into([a], [out, torch.empty(4, 5)]) is not None


def test_a_fast_call_without_given_layouts_never_takes_outputs() -> None:
    a = torch.randn(4, 5)
    assert entry([a, a], 1).call_into([a, a], [torch.empty(4, 5), torch.empty(2, 3)]) is None


def test_the_cache_calls_into_its_entries() -> None:
    a = torch.randn(4, 5)
    cache = FastCallCache()
    cache.add(given_entry([a]))
    out = torch.empty(4, 5)
    hit = cache.call_into([a], [out])
    assert hit is not None and hit[1][0] is out
    assert cache.call_into([a], [a]) is None


def test_given_layouts_match_the_arrays_a_caller_allocates() -> None:
    """kfuse.engine.fast_path.given_outputs describes each output as a caller allocates it:
    row major, or in its stride_order; a FastCall built with it takes exactly those."""
    from kfuse import FusionDefinition
    from kfuse.engine.fast_path import given_outputs
    from kfuse.runtime.info import build_runtime_info

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.exp(x))
        fd.add_output(fd.ops.stride_order(fd.ops.neg(x), [0, 1]))  # column major
    a = torch.randn(6, 4)
    fd.execute([a])
    info = build_runtime_info(fd._executor_cache.fusion, [a])
    call = FastCall(
        "torch",
        -1,
        [layout(a)],
        [(torch.empty_like, (), None, 0)] * 2,
        [],
        [],
        lambda: 0,
        (),
        None,
        "t",
        None,
        given_outputs(fd.last_program(), info),
    )
    row, column = torch.empty(6, 4), torch.empty(4, 6).t()
    assert call.call_into([a], [row, column]) is not None
    assert call.call_into([a], [row, torch.empty(6, 4)]) is None  # not in its stride order


def test_stage_times_reports_each_stage_of_a_call() -> None:
    """tools/host_call_probe.py's breakdown: every stage of a matching call, timed."""
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    call = entry([a, b], "tag")
    times = call.stage_times([a, b], repeats=50)
    assert set(times) == {
        "match inputs",
        "stream",
        "allocate outputs",
        "allocate workspaces",
        "launches",
        "call",
    }
    assert times["launches"] == []  # this entry has none
    assert all(times[k] > 0 for k in ("match inputs", "allocate outputs", "call"))
    with pytest.raises(ValueError, match="layout"):
        call.stage_times([torch.randn(3), b], repeats=5)
    with pytest.raises(ValueError, match="no given outputs"):
        call.stage_times([a, b], [torch.empty(4, 5), torch.empty(2, 3)], repeats=5)
    with pytest.raises(ValueError, match="at least 1"):
        call.stage_times([a, b], repeats=0)


def test_scalar_slots_read_directly_where_no_arithmetic_makes_them() -> None:
    """ScalarProgram.direct: a scalar input used as given is read as it is (kind 0), a
    Python float cast to Float rounded to float32 in C++ (kind 1); anything computed on the
    host (arithmetic, an int's cast to a float) keeps the program."""
    import numpy as np

    from kfuse import DataType, FusionDefinition
    from kfuse.engine.fast_path import ScalarProgram
    from kfuse.ir.values import Scalar, TensorView
    from kfuse.runtime.info import build_runtime_info

    def direct(make: Any, values: list, types: dict[int, type]) -> list | None:
        with FusionDefinition() as fd:
            x = fd.define_tensor(shape=[-1], dtype=DataType.Float)
            fd.add_output(make(fd, x))
        inputs = [np.ones(4, np.float32), *values]
        info = build_runtime_info(fd.fusion, inputs)
        program = ScalarProgram.of(fd.fusion, info.extents)
        assert program is not None
        for e in fd.fusion.exprs:  # the scalar operands a kernel reads, as packed_launch slots them
            if isinstance(e.outputs[0], TensorView):
                for v in e.inputs:
                    if isinstance(v, Scalar):
                        program.slot(v)
        return program.direct(types)

    def scaled(dtype: DataType) -> Any:
        return lambda fd, x: fd.ops.mul(x, fd.define_scalar(dtype=dtype))

    assert direct(scaled(DataType.Float), [2.0], {1: float}) == [(1, 0)]
    assert direct(scaled(DataType.Double), [2.0], {1: float}) == [(1, 1)]  # cast to Float
    assert direct(scaled(DataType.Double), [2], {1: int}) is None  # an int's cast
    assert direct(scaled(DataType.Int), [2], {1: int}) is None  # cast to Float of an int

    def twice(fd: Any, x: Any) -> Any:
        s = fd.define_scalar(dtype=DataType.Double)
        return fd.ops.mul(x, fd.ops.mul(s, 2.0))

    assert direct(twice, [2.0], {1: float}) is None  # arithmetic on the host
