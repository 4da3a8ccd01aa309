"""A replayed segmented call's consecutive kernel segments run by one kfuse._C.ReplayRun
(kfuse.engine.replay_runs), on the host emulator, whose kernels' own launch the run calls:
what only the run's kernels read is pooled, what a later segment or the caller reads is its
own array; a replayed call gives the reference's results, its outputs are never another
call's memory; an index outside its axis, a scalar out of its parameter's range and an
intermediate off its planned layout are reported or handled as the checked path does."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kfuse import DataType, FusionDefinition
from kfuse.engine import compiler
from kfuse.engine.replay_runs import KernelRun
from kfuse.errors import InputError
from kfuse.reference import evaluate
from kfuse.testing import assert_outputs_close


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def check(fd: FusionDefinition, inputs: list[Any]) -> list[Any]:
    out = fd.execute(inputs)
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)
    return out


def replay_of(fd: FusionDefinition) -> Any:
    (replay,) = fd._executor().replays.entries.values()
    return replay


def runs(fd: FusionDefinition) -> list[KernelRun]:
    return [unit for unit in replay_of(fd).units if isinstance(unit, KernelRun)]


@pytest.fixture
def unmerged(monkeypatch: pytest.MonkeyPatch) -> None:
    """Segments left as the segmenter first cuts them (kernel segments in a row)."""
    monkeypatch.setattr(compiler, "merge_segments", lambda *args: None)


def reductions_after_a_matmul() -> FusionDefinition:
    """A pointwise segment, a matmul, and two reductions in a row: the first's rows are read
    by the second alone; the matmul's result is also an output."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        y = fd.define_tensor(shape=[-1, -1])
        m = fd.ops.matmul(fd.ops.tanh(fd.ops.mul(x, 0.5)), y)
        fd.add_output(fd.ops.sum(fd.ops.sum(fd.ops.mul(m, 2.0), -1), -1))
        fd.add_output(m)
    return fd


def test_a_run_pools_what_only_its_kernels_read(unmerged: None) -> None:
    fd = reductions_after_a_matmul()
    for seed in range(3):
        check(fd, [rand(5, 4, seed=seed), rand(4, 4, seed=seed + 1)])
    assert fd._executor().replays.hits == 1
    before, after = runs(fd)
    # The tanh's result is read by the matmul: its own array. The rows are read by the
    # second reduction alone: pooled, with no array in the call's slots.
    assert [slot for slot, *_ in before.exports] == before.steps[0].outputs and not before.pooled
    (rows,) = after.steps[0].outputs
    assert [slot for slot, _ in after.pooled] == [rows]
    assert [slot for slot, *_ in after.exports] == after.steps[1].outputs


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_replayed_outputs_are_right_and_each_calls_own(unmerged: None, framework: str) -> None:
    """Outputs made by a run (torch's through empty_like of a same-shaped input) are new
    arrays: no later call writes into them, none shares memory with an input."""
    fd = reductions_after_a_matmul()
    inputs = [[rand(6, 6, seed=s), rand(6, 6, seed=s + 1)] for s in range(5)]
    host = [[a.copy() for a in args] for args in inputs]
    if framework == "torch":
        torch = pytest.importorskip("torch")
        inputs = [[torch.from_numpy(a) for a in args] for args in inputs]
    outs = [check(fd, args) for args in inputs]
    assert fd._executor().replays.hits == 3
    if framework == "torch":
        outs = [[a.numpy() for a in out] for out in outs]
    for k, args in enumerate(host):  # later calls wrote nothing into earlier outputs
        assert_outputs_close(fd, outs[k], evaluate(fd.fusion, args), args)
    arrays = [a for args in inputs for a in args]
    if framework == "torch":
        arrays = [a.numpy() for a in arrays]
    for k, out in enumerate(outs):
        for other in outs[k + 1 :]:
            assert not any(np.shares_memory(a, b) for a in out for b in other)
        assert not any(np.shares_memory(a, b) for a in out for b in arrays)


def test_a_changing_scalar_reaches_every_kernel_of_a_run(unmerged: None) -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        s = fd.define_scalar(dtype=DataType.Int32)
        rows = fd.ops.sum(fd.ops.mul(x, s), -1)
        fd.add_output(fd.ops.sum(fd.ops.add(rows, s), -1))
    x = rand(4, 7)
    for value in (2, 3, -5, 9):
        check(fd, [x, value])
    assert fd._executor().replays.hits == 2
    (run,) = runs(fd)
    assert len(run.steps) == 2 and run.scalars
    with pytest.raises(InputError, match="scalar input of dtype Int32"):
        fd.execute([x, 2**40])
    check(fd, [x, 4])


def test_an_index_outside_its_axis_is_reported_by_a_replayed_run() -> None:
    with FusionDefinition() as fd:
        table = fd.define_tensor(shape=[-1, -1])
        index = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int)
        w = fd.define_tensor(shape=[-1, -1])
        picked = fd.ops.take_along_axis(fd.ops.exp(table), index, 0)
        fd.add_output(fd.ops.relu(fd.ops.matmul(picked, w)))
    table, w = rand(4, 3), rand(3, 2, seed=1)
    good = np.array([[0, 1, 2], [3, 3, 0]])
    for _ in range(3):
        check(fd, [table, good, w])
    assert fd._executor().replays.hits == 1
    assert any(run.checks for run in runs(fd))
    with pytest.raises(InputError, match="outside the axis"):
        fd.execute([table, np.array([[0, 1, 2], [3, 4, 0]]), w])
    check(fd, [table, good, w])
    assert fd._executor().replays.hits == 2


def test_a_library_result_off_its_planned_layout_runs_the_next_segment_checked(
    unmerged: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A matmul's array at another alignment class than planned: the run after it runs its
    segments one by one, the first of them checked (a Program of its own)."""
    real = np.matmul
    misalign = [False]

    def matmul(a: Any, b: Any, **kwargs: Any) -> Any:
        out = real(a, b, **kwargs)
        if not misalign[0]:
            return out
        raw = np.empty(out.nbytes + 32, np.uint8)
        start = (4 - raw.ctypes.data) % 16
        moved = raw[start : start + out.nbytes].view(out.dtype).reshape(out.shape)
        moved[...] = out
        return moved

    # Patched before the plan binds the library's matmul (expr_eval.BoundExprEval).
    monkeypatch.setattr(np, "matmul", matmul)
    fd = reductions_after_a_matmul()
    for seed in range(3):
        check(fd, [rand(5, 4, seed=seed), rand(4, 4, seed=seed + 1)])
    step = runs(fd)[1].steps[0].step
    assert fd._executor().replays.hits == 1 and len(step.programs) == 1
    misalign[0] = True
    check(fd, [rand(5, 4, seed=7), rand(4, 4, seed=8)])
    assert fd._executor().replays.hits == 2 and len(step.programs) == 2
