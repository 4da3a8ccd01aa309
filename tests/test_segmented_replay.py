"""A segmented fusion's cached call replayed from its plan (kfuse.engine.segmented_replay), on
the host emulator: a signature's third call and later take no checked step (no
build_runtime_info, no shape inference) and give what the checked path gives; a changed
shape, stride or dtype misses the plan and is right; errors raised inside a replay leave the
plan usable; an intermediate at another alignment class runs its segment checked; scalar
inputs are checked and their new values used; the plan keeps none of the caller's arrays."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import kfuse.engine.executor as executor
from kfuse import DataType, FusionDefinition
from kfuse.engine import compiler
from kfuse.engine.program import SegmentedProgram
from kfuse.errors import InputError
from kfuse.ir.fusion import Fusion
from kfuse.reference import evaluate
from kfuse.runtime.info import RuntimeInfo
from kfuse.testing import assert_outputs_close


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def matmul_chain() -> tuple[FusionDefinition, Callable[[int], list[Any]]]:
    """Pointwise, matmul, pointwise, matmul, pointwise: five segments, two of them library."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        y = fd.define_tensor(shape=[-1, -1])
        a = fd.ops.add(x, y)
        for _ in range(2):
            a = fd.ops.tanh(fd.ops.matmul(a, y) + a)
        fd.add_output(a)
    return fd, lambda seed: [rand(6, 6, seed=seed), rand(6, 6, seed=seed + 1)]


def scaled_matmul_sum() -> tuple[FusionDefinition, Callable[[int], list[Any]]]:
    """A scalar input that changes every call, read by the kernel after a matmul."""
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1])
        b = fd.define_tensor(shape=[-1, -1])
        s = fd.define_scalar(dtype=DataType.Double)
        m = fd.ops.matmul(a, b)
        fd.add_output(fd.ops.sum(m * (s + 1.0), dims=[1]))
        fd.add_output(m)
    return fd, lambda seed: [rand(4, 5, seed=seed), rand(5, 3, seed=seed + 1), 0.5 + seed]


def repeated_outputs() -> tuple[FusionDefinition, Callable[[int], list[Any]]]:
    """An input and a matmul's result that are outputs twice each: every output is new."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        m = fd.ops.relu(fd.ops.matmul(x, x))
        fd.add_output(x)
        fd.add_output(m)
        fd.add_output(m)
        fd.add_output(x)
    return fd, lambda seed: [rand(3, 3, seed=seed)]


def gathered_rows() -> tuple[FusionDefinition, Callable[[int], list[Any]]]:
    """index_select (checked on the host) feeding a matmul and a reduction."""
    with FusionDefinition() as fd:
        table = fd.define_tensor(shape=[-1, -1])
        rows = fd.define_tensor(shape=[-1], dtype=DataType.Int)
        picked = fd.ops.index_select(table, rows, dim=0)
        fd.add_output(fd.ops.sum(fd.ops.matmul(picked, table) * 2.0, dims=[1]))

    def inputs(seed: int) -> list[Any]:
        rows = np.random.default_rng(seed).integers(0, 4, 3)
        return [rand(4, 4, seed=seed), rows]

    return fd, inputs


def folded_rows() -> tuple[FusionDefinition, Callable[[int], list[Any]]]:
    """An input reshape that is a view, then a matmul: the runner runs the folded fusion on
    a view of the call's input and hands the output back in the user's shape."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True] * 3)
        w = fd.define_tensor(shape=[-1, -1], contiguity=[True] * 2)
        n, m, k = fd.ops.size(x, 0), fd.ops.size(x, 1), fd.ops.size(x, 2)
        rows = fd.ops.reshape(x, new_shape=[fd.ops.mul(n, m), k])
        y = fd.ops.relu(fd.ops.matmul(rows, w))
        fd.add_output(fd.ops.reshape(y, new_shape=[n, m, fd.ops.size(w, 1)]))
    return fd, lambda seed: [rand(2, 3, 4, seed=seed), rand(4, 5, seed=seed + 1)]


def sliced_rows() -> tuple[FusionDefinition, Callable[[int], list[Any]]]:
    """A slice of an input from its second row (a view at an offset), then a matmul."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True] * 2)
        w = fd.define_tensor(shape=[-1, -1], contiguity=[True] * 2)
        rows = fd.ops.slice(x, start_indices=[1, 0], end_indices=[5, 4])
        fd.add_output(fd.ops.exp(fd.ops.matmul(rows, w)))
    return fd, lambda seed: [rand(5, 4, seed=seed), rand(4, 3, seed=seed + 1)]


FUSIONS = [
    matmul_chain,
    scaled_matmul_sum,
    repeated_outputs,
    gathered_rows,
    folded_rows,
    sliced_rows,
]


def check(fd: FusionDefinition, inputs: list[Any]) -> list[Any]:
    out = fd.execute(inputs)
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)
    return out


def counted_checks(monkeypatch: Any) -> list[Fusion]:
    """The fusions build_runtime_info and shape inference run on from now."""
    seen: list[Fusion] = []
    real_build, real_infer = executor.build_runtime_info, Fusion.infer_shapes

    def counted_build(fusion: Fusion, *args: Any, **kwargs: Any) -> Any:
        seen.append(fusion)
        return real_build(fusion, *args, **kwargs)

    def counted_infer(fusion: Fusion, args: list[Any]) -> Any:
        seen.append(fusion)
        return real_infer(fusion, args)

    monkeypatch.setattr(executor, "build_runtime_info", counted_build)
    monkeypatch.setattr(Fusion, "infer_shapes", counted_infer)
    return seen


def in_framework(inputs: Callable[[int], list[Any]], framework: str) -> Any:
    if framework == "numpy":
        return inputs
    torch = pytest.importorskip("torch")
    return lambda seed: [
        torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in inputs(seed)
    ]


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("make", FUSIONS, ids=lambda f: f.__name__)
def test_a_planned_signature_replays_without_checking_again(
    make: Any, framework: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fd, inputs = make()
    inputs = in_framework(inputs, framework)
    check(fd, inputs(0))
    check(fd, inputs(1))  # the second checked call plans the signature
    program = fd.last_program()
    assert isinstance(program, SegmentedProgram)
    replays = fd._executor().replays
    assert len(replays) == 1 and replays.hits == 0
    for seed in range(2, 6):
        args = inputs(seed)
        with monkeypatch.context() as patched:
            seen = counted_checks(patched)
            out = fd.execute(args)
        assert seen == []
        assert_outputs_close(fd, out, evaluate(fd.fusion, args), args)
        handed_out = [id(a) for a in out]
        assert len(set(handed_out)) == len(out)  # repeated outputs are copies
        assert not {id(a) for a in args} & set(handed_out)
    assert replays.hits == 4
    assert fd.last_program() is program
    assert fd.last_cuda_source() == program.cuda_source()


@pytest.mark.parametrize("make", [matmul_chain, gathered_rows], ids=lambda f: f.__name__)
def test_a_replayed_call_derives_nothing_per_segment(
    make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replay's kernel segments launch as packed and its library segments call the ops
    bound when the signature was planned: a replayed call makes no RuntimeInfo (a
    segment's derived info was most of its host cost) and binds no library op again."""
    from kfuse.schedule import expr_eval

    fd, inputs = make()
    for seed in range(2):  # compiles; plans
        check(fd, inputs(seed))
    made: list[Any] = []
    real_init, real_bind = RuntimeInfo.__init__, expr_eval._bound_call

    def counted_init(self: RuntimeInfo, *args: Any, **kwargs: Any) -> None:
        made.append(self)
        real_init(self, *args, **kwargs)

    def counted_bind(*args: Any) -> Any:
        made.append(args)
        return real_bind(*args)

    args = inputs(2)
    with monkeypatch.context() as patched:
        patched.setattr(RuntimeInfo, "__init__", counted_init)
        patched.setattr(expr_eval, "_bound_call", counted_bind)
        out = fd.execute(args)
    assert made == [] and fd._executor().replays.hits == 1
    assert_outputs_close(fd, out, evaluate(fd.fusion, args), args)


@pytest.mark.parametrize(
    "changed",
    [
        lambda x: np.ascontiguousarray(x[:5, :5]),  # shape
        lambda x: np.asfortranarray(x),  # strides
        lambda x: x.astype(np.float64),  # dtype
        lambda x: np.frombuffer(x.tobytes() + b"\0" * 8, np.float32, 36, 4).reshape(6, 6),  # align
    ],
    ids=["shape", "strides", "dtype", "alignment"],
)
def test_a_changed_signature_misses_the_plan_and_is_right(changed: Any) -> None:
    fd, inputs = matmul_chain()
    for seed in range(3):
        check(fd, inputs(seed))
    replays = fd._executor().replays
    assert replays.hits == 1
    x, y = inputs(7)
    other = [changed(x), changed(y) if changed(x).shape != x.shape else y]
    if other[0].dtype == np.float64:
        with pytest.raises(InputError, match="defined as Float but the array is Double"):
            fd.execute(other)
    else:
        assert (
            other[0].ctypes.data % 16 != x.ctypes.data % 16
            or other[0].shape != x.shape
            or (other[0].strides != x.strides)
        )
        check(fd, other)
    assert replays.hits == 1
    check(fd, inputs(8))  # the planned signature still replays
    assert replays.hits == 2


def test_a_replay_after_an_error_is_right() -> None:
    fd, inputs = gathered_rows()
    for seed in range(3):
        check(fd, inputs(seed))
    replays = fd._executor().replays
    assert replays.hits == 1
    table, rows = inputs(3)
    rows[1] = 9  # outside the table's 4 rows: index_select's host check refuses it
    with pytest.raises(Exception, match="9"):
        fd.execute([table, rows])
    assert replays.hits == 1
    check(fd, inputs(4))
    assert replays.hits == 2


def test_a_replayed_scalar_input_is_checked_and_used() -> None:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1])
        n = fd.define_scalar(dtype=DataType.Int32)
        m = fd.ops.matmul(a, a)
        fd.add_output(fd.ops.sum(m * n, dims=[0]))
    x = rand(3, 3)
    for n_value in (1, 2, 3, -4):
        check(fd, [x, n_value])
    assert fd._executor().replays.hits == 2
    with pytest.raises(InputError, match="outside its range"):
        fd.execute([x, 2**40])
    with pytest.raises(InputError, match="scalar input of dtype Int32"):
        fd.execute([x, 2.5])
    check(fd, [x, 7])
    assert fd._executor().replays.hits == 3


def test_an_intermediate_at_another_alignment_runs_its_segment_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two kernel segments run in turn: the second reads the first's array, which is also
    an output (so its own array, not pooled: kfuse.engine.replay_runs). Allocated at another
    alignment class than planned, that segment takes the checked step, which gives it a
    Program of its own, and the call is still a replay."""
    monkeypatch.setattr(compiler, "merge_segments", lambda *args: None)
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1])
        rows = fd.ops.sum(a * 2.0, -1)
        fd.add_output(rows)
        fd.add_output(fd.ops.sum(rows, -1))
    real = np.empty
    residue = [0]

    def empty(shape: Any, dtype: Any = float, **kwargs: Any) -> np.ndarray:
        """NumPy's allocations (kfuse's among them) at data pointers residue[0] modulo 16."""
        array = real(shape, dtype, **kwargs)
        raw = real(array.nbytes + 32, np.uint8)
        start = (residue[0] - raw.ctypes.data) % 16
        return raw[start : start + array.nbytes].view(array.dtype).reshape(array.shape)

    monkeypatch.setattr(np, "empty", empty)
    for seed in range(3):
        check(fd, [rand(3, 5, seed=seed)])
    replays = fd._executor().replays
    step = fd.last_program().runner.steps[1]
    assert replays.hits == 1 and len(step.programs) == 1
    residue[0] = 4
    check(fd, [rand(3, 5, seed=4)])
    assert replays.hits == 2 and len(step.programs) == 2


def test_outputs_given_are_checked_and_written_by_a_replay() -> None:
    fd, inputs = matmul_chain()
    given = [np.empty((6, 6), np.float32)]
    for seed in range(2):  # compiles; plans
        fd.execute(inputs(seed), outputs=given)
    replays = fd._executor().replays
    for seed in range(2, 4):
        args = inputs(seed)
        out = fd.execute(args, outputs=given)
        assert out[0] is given[0]
        assert_outputs_close(fd, out, evaluate(fd.fusion, args), args)
    assert replays.hits == 2
    args = inputs(4)
    with pytest.raises(
        InputError, match=r"outputs\[0\] \(output T\d+\) has dtype Double; the output is Float"
    ):
        fd.execute(args, outputs=[np.empty((6, 6), np.float64)])
    with pytest.raises(InputError, match="shares memory with input"):
        fd.execute(args, outputs=[args[1]])
    with pytest.raises(InputError, match="the fusion returns 1 output"):
        fd.execute(args, outputs=[])
    check(fd, args)  # without outputs=: the same plan
    assert replays.hits == 3


def test_a_plan_keeps_none_of_the_callers_arrays() -> None:
    fd, inputs = matmul_chain()
    arrays = [inputs(seed) for seed in range(3)]
    for args in arrays:
        check(fd, args)
    assert fd._executor().replays.hits == 1
    refs = [weakref.ref(a) for args in arrays for a in args]
    del arrays, args
    gc.collect()
    assert [r() for r in refs] == [None] * len(refs)


def test_every_signature_gets_its_own_plan_up_to_the_limit() -> None:
    fd, _ = matmul_chain()
    replays = fd._executor().replays
    sizes = list(range(2, 4 + replays.MAX_ENTRIES))  # two more than the plans kept
    for _ in range(2):  # planned on the second round, the oldest two dropped
        for n in sizes:
            check(fd, [rand(n, n), rand(n, n, seed=1)])
    assert len(replays) == replays.MAX_ENTRIES and replays.hits == 0
    for n in reversed(sizes):  # the newest MAX_ENTRIES replay
        check(fd, [rand(n, n, seed=2), rand(n, n, seed=3)])
    assert replays.hits == replays.MAX_ENTRIES


def test_a_replayed_random_segment_draws_as_the_checked_path_does() -> None:
    """A kernel segment with a stateful random op reserves its seed and offset on every
    launch: replayed calls draw the numbers checked calls draw from the same seed."""
    import kfuse

    def dropout_after_matmul() -> FusionDefinition:
        with FusionDefinition() as fd:
            x = fd.define_tensor(shape=[-1, -1])
            m = fd.ops.matmul(x, x)
            keep = fd.ops.lt(fd.ops.rand_like(m), 0.5)
            fd.add_output(fd.ops.where(keep, m, 0.0))
        return fd

    x = rand(8, 8)
    draws = []
    for replays in (True, False):
        fd = dropout_after_matmul()
        if not replays:  # nothing planned: every call checked
            fd._executor().replays.add = lambda *args: None
        kfuse.manual_seed(11)
        draws.append([fd.execute([x])[0] for _ in range(5)])
        assert fd._executor().replays.hits == (3 if replays else 0)
    for replayed, checked in zip(*draws, strict=True):
        np.testing.assert_array_equal(replayed, checked)
    assert not np.array_equal(draws[0][2], draws[0][3])  # each call draws anew


def test_an_aliased_output_of_a_segmented_fusion_is_never_replayed() -> None:
    """An output written into an input is staged after every segment (engine.aliasing), on
    the checked path: each call updates the input, however often the layout repeats."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        w = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.add(x, fd.ops.matmul(x, w)), alias_input=x)
    state, w_value = rand(4, 4), rand(4, 4, seed=1) / 4
    expected = state.copy()
    for _ in range(4):
        fd.execute([state, w_value])
        expected = expected + expected @ w_value
        np.testing.assert_allclose(state, expected, rtol=1e-5, atol=1e-5)
    assert isinstance(fd.last_program(), SegmentedProgram)
    assert fd._executor().replays.hits == 0


def test_threads_replaying_one_plan_each_get_their_own_results() -> None:
    from concurrent.futures import ThreadPoolExecutor

    fd, inputs = matmul_chain()
    for seed in range(2):  # compiles; plans
        fd.execute(inputs(seed))

    def run(seed: int) -> None:
        for k in range(10):
            check(fd, inputs(100 * seed + k))

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(run, range(4)))
    assert fd._executor().replays.hits >= 1


def test_a_scalar_input_that_sets_an_extent_is_part_of_the_plan() -> None:
    """An expand to a row count given as a scalar input, then a matmul: each row count is a
    signature of its own, planned and replayed apart, and each call is right for its rows."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[1, -1])
        w = fd.define_tensor(shape=[-1, -1])
        rows = fd.define_scalar(dtype=DataType.Int)
        wide = fd.ops.expand(x, shape=[rows, -1])
        fd.add_output(fd.ops.relu(fd.ops.matmul(wide, w)))
    x, w = rand(1, 4), rand(4, 3, seed=1)
    for n in (2, 2, 5, 2, 5, 5, 3, 2):
        (out,) = fd.execute([x, w, n])
        np.testing.assert_allclose(out, np.maximum(np.repeat(x, n, 0) @ w, 0), rtol=1e-5)
    assert isinstance(fd.last_program(), SegmentedProgram)
    replays = fd._executor().replays
    assert len(replays) == 2 and replays.hits == 3  # 2 and 5 planned; 2, 5, 2 replayed
