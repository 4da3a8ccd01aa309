"""A replayed segmented call's kernel segments run by kfuse._C.ReplayRun on a GPU
(kfuse.engine.replay_runs): for torch and CuPy arrays, a replayed call gives what the checked
call (the executor's execute with device=, which never replays) gives, on a fusion with two
kernel segments in a row (one run, their intermediate pooled), a library segment (matmul)
between kernel segments, and a stateful random op (each call draws the generator's next
numbers, replayed or not); an output never shares memory with another call's."""

from __future__ import annotations

from typing import Any

import pytest

import kfuse
from gpu_support import cuda_cupy, cuda_torch, requires_gpu
from kfuse import FusionDefinition
from kfuse.engine import compiler
from kfuse.engine.program import SegmentedProgram
from kfuse.engine.replay_runs import KernelRun

pytestmark = [pytest.mark.gpu, requires_gpu]


def mixed_fusion() -> FusionDefinition:
    """A pointwise segment with a stateful random op (a kernel segment no run takes: each
    launch reserves its seed and offset), a matmul, and two reductions in a row (with
    merge_segments off: two kernel segments, the first's rows read by the second alone)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        y = fd.define_tensor(shape=[-1, -1])
        m = fd.ops.matmul(fd.ops.tanh(fd.ops.mul(x, 0.5)), y)
        fd.add_output(fd.ops.sum(fd.ops.sum(fd.ops.mul(m, 2.0), -1), -1))
        fd.add_output(fd.ops.mul(x, fd.ops.rand_like(x)))
    return fd


def planned(fd: FusionDefinition, inputs: list[Any]) -> Any:
    """The fusion's replay of `inputs`' signature, after the calls that compile and plan it."""
    for _ in range(2):
        fd.execute(inputs)
    assert isinstance(fd.last_program(), SegmentedProgram)
    (replay,) = fd._executor().replays.entries.values()
    return replay


def checked_call(fd: FusionDefinition, inputs: list[Any], device: int) -> list[Any]:
    """The call on the checked path, never replayed: fd.execute would drop a device= that
    names the inputs' own device (Thunder passes one on every call) and replay the call."""
    return fd._executor().execute(inputs, device=device)


def check_runs(replay: Any) -> None:
    """The plan runs its consecutive kernel segments as one ReplayRun, which pools the
    intermediate that only its own kernels read."""
    runs = [unit for unit in replay.units if isinstance(unit, KernelRun)]
    assert any(len(run.steps) == 2 and run.pooled for run in runs), replay.units


@pytest.mark.parametrize("seed", [0, 1])
def test_a_replayed_torch_call_gives_the_checked_calls_results(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    torch = cuda_torch()
    monkeypatch.setattr(compiler, "merge_segments", lambda *args: None)
    fd = mixed_fusion()
    x, y = torch.randn(40, 24, device="cuda"), torch.randn(24, 24, device="cuda") / 8
    check_runs(planned(fd, [x, y]))
    earlier = None
    for k in range(3):
        x2, y2 = torch.randn_like(x), torch.randn_like(y) / 8
        torch.manual_seed(seed + k)
        replayed = fd.execute([x2, y2])
        hits = fd._executor().replays.hits
        torch.manual_seed(seed + k)
        checked = checked_call(fd, [x2, y2], x2.device.index)
        assert fd._executor().replays.hits == hits == k + 1
        for got, want in zip(replayed, checked, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        if earlier is not None:  # each call's outputs are its own arrays
            for a in replayed:
                assert all(a.data_ptr() != b.data_ptr() for b in earlier)
        earlier = replayed


def test_a_replayed_cupy_call_gives_the_checked_calls_results(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cupy = cuda_cupy()
    monkeypatch.setattr(compiler, "merge_segments", lambda *args: None)
    fd = mixed_fusion()
    x = cupy.random.standard_normal((36, 20), dtype=cupy.float32)
    y = cupy.random.standard_normal((20, 20), dtype=cupy.float32) / 8
    check_runs(planned(fd, [x, y]))
    for k in range(3):
        x2 = cupy.random.standard_normal(x.shape, dtype=cupy.float32)
        kfuse.manual_seed(11 + k)
        replayed = fd.execute([x2, y])
        kfuse.manual_seed(11 + k)
        checked = checked_call(fd, [x2, y], 0)
        assert fd._executor().replays.hits == k + 1
        for got, want in zip(replayed, checked, strict=True):
            cupy.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_random_op_draws_new_numbers_on_every_replayed_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch = cuda_torch()
    monkeypatch.setattr(compiler, "merge_segments", lambda *args: None)
    fd = mixed_fusion()
    x, y = torch.randn(16, 8, device="cuda"), torch.randn(8, 8, device="cuda")
    planned(fd, [x, y])
    first = fd.execute([x, y])[1]
    second = fd.execute([x, y])[1]
    assert fd._executor().replays.hits == 2
    assert not torch.equal(first, second)
