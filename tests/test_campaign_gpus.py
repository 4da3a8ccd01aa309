"""`kfuse campaign`'s handling of GPUs that fail: a worker that cannot use its GPU as it
starts has the GPU taken out of the next pools (the campaign goes on with the others, keeping
every result), the campaign stops with a clear report when no GPU is left or when pools keep
breaking with nothing new, and the summary (and a merge of shards) says which GPU was lost
when; a worker whose GPU fails mid-round reports the example that broke it and ends. Runs
without a GPU: the pool runs are faked where only the loop's decisions are under
test, and GPUs are marked failed (worker.FAIL_GPU_MARKER) where real workers start."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from kfuse.campaign import runner, worker
from kfuse.campaign.property import ExampleSpace
from kfuse.campaign.runner import Campaign
from kfuse.campaign.summary import Summary, load, merge
from kfuse.cli import campaign as cli


def _campaign(tmp_path: Path, gpus: tuple[int, ...], workers: int, **kw: Any) -> Campaign:
    kw.setdefault("budget", 600.0)
    kw.setdefault("examples", None)
    return Campaign(ExampleSpace(), tmp_path, gpus, workers, seed=1, **kw)


def _fake_pools(monkeypatch: pytest.MonkeyPatch, pools: list[Any]) -> list[Campaign]:
    """runner._run_pool replaced by `pools`, one function (campaign, summary) -> broken per
    pool run; returns the campaigns the pools were run with."""
    seen: list[Campaign] = []

    def run_pool(campaign: Campaign, _ctx: Any, summary: Summary, *rest: Any) -> Any:
        seen.append(campaign)
        broken = pools[len(seen) - 1](campaign, summary)
        return len(seen), 8, broken

    monkeypatch.setattr(runner, "_run_pool", run_pool)
    return seen


def test_a_lost_gpu_is_left_out_of_the_next_pools(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def first(campaign: Campaign, summary: Summary) -> bool:
        for gpu in campaign.gpus:
            summary.count("pointwise", "passed", gpu)
        summary.lose_gpu(2, 1.5, "RuntimeError: device lost")
        return True

    def second(campaign: Campaign, summary: Summary) -> bool:
        for gpu in campaign.gpus:
            summary.count("pointwise", "passed", gpu)
        return False

    seen = _fake_pools(monkeypatch, [first, second])
    summary = runner.run(_campaign(tmp_path, (0, 1, 2, 3), 8))
    assert [c.gpus for c in seen] == [(0, 1, 2, 3), (0, 1, 3)]
    assert [c.workers for c in seen] == [8, 6]  # as many a GPU as before
    # Nothing found before the loss is lost; the lost GPU ran until it was lost.
    assert summary.by_gpu == {"0": 2, "1": 2, "2": 1, "3": 2}
    assert summary.lost_gpus == {"2": {"seconds": 1.5, "message": "RuntimeError: device lost"}}
    assert summary.gpu_seconds["2"] == 1.5 and summary.gpu_seconds["0"] == summary.seconds
    assert summary.stopped is None and not summary.clean
    assert "GPU 2 lost after 2 s: RuntimeError: device lost" in summary.final_line()
    assert load(tmp_path / "summary.json").lost_gpus == summary.lost_gpus


def test_a_campaign_with_every_gpu_lost_stops(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def lose_all(campaign: Campaign, summary: Summary) -> bool:
        for gpu in campaign.gpus:
            summary.lose_gpu(gpu, 0.0, "RuntimeError: no device")
        return True

    seen = _fake_pools(monkeypatch, [lose_all])
    summary = runner.run(_campaign(tmp_path, (0, 1), 2, budget=None, examples=10**6))
    assert len(seen) == 1
    assert summary.stopped == "every GPU was lost" and set(summary.lost_gpus) == {"0", "1"}
    assert summary.final_line().endswith("stopped early: every GPU was lost")


@pytest.mark.parametrize("gpus", [(), (0,)])
def test_pools_that_keep_breaking_with_nothing_new_stop_the_campaign(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, gpus: tuple[int, ...]
) -> None:
    """Workers that die as they start, for a reason other than their GPU: without the stop,
    --examples would start pools forever."""
    seen = _fake_pools(monkeypatch, [lambda c, s: True] * (runner.FRUITLESS_POOLS + 5))
    summary = runner.run(_campaign(tmp_path, gpus, 2, budget=None, examples=10**6))
    assert len(seen) == runner.FRUITLESS_POOLS
    assert summary.stopped is not None and "broke before any example ended" in summary.stopped
    assert not summary.clean


def test_a_pool_that_ran_examples_before_breaking_is_not_fruitless(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def some(campaign: Campaign, summary: Summary) -> bool:
        summary.count("pointwise", "passed", None)
        return True

    pools = [some] * (runner.FRUITLESS_POOLS + 2) + [lambda c, s: False]
    seen = _fake_pools(monkeypatch, pools)
    summary = runner.run(_campaign(tmp_path, (), 2))
    assert len(seen) == len(pools) and summary.stopped is None and summary.clean


def test_workers_on_gpus_marked_failed_report_them_lost(tmp_path: Path) -> None:
    """Real worker processes: each GPU is marked failed (as a person would mark one mid-run to
    simulate its loss), so every worker fails its start: the campaign stops at once with both
    GPUs reported, though it was asked for a million examples."""
    for gpu in (0, 1):
        (tmp_path / f"{worker.FAIL_GPU_MARKER}{gpu}").touch()
    began = time.monotonic()
    summary = runner.run(_campaign(tmp_path, (0, 1), 2, budget=None, examples=10**6))
    assert time.monotonic() - began < 120
    assert summary.stopped == "every GPU was lost" and summary.examples == 0
    assert set(summary.lost_gpus) == {"0", "1"}
    for gpu, lost in summary.lost_gpus.items():
        assert lost["message"].startswith(f"RuntimeError: GPU {gpu} marked as failed by ")
    assert load(tmp_path / "summary.json").stopped == "every GPU was lost"


def test_merged_shards_keep_each_hosts_lost_gpus(tmp_path: Path) -> None:
    a, b = Summary(info={"host": "a", "started": 100.0}), Summary(info={"host": "b"})
    b.info["started"] = 100.0
    a.count("pointwise", "passed", 0)
    a.count("pointwise", "passed", 1)
    a.lose_gpu(1, 4.0, "RuntimeError: gone")
    a.finish(10.0)
    b.count("pointwise", "passed", 0)
    b.stopped = "every GPU was lost"
    b.finish(10.0)
    m = merge([a, b])
    assert m.lost_gpus == {"a:1": {"seconds": 4.0, "message": "RuntimeError: gone"}}
    assert m.gpu_seconds == {"a:0": 10.0, "a:1": 4.0, "b:0": 10.0}
    assert m.stopped == "shard ? on b: every GPU was lost" and not m.clean
    # `kfuse campaign merge` exits 1 for such shards, though every example passed.
    a.write(tmp_path / "a.json")
    b.write(tmp_path / "b.json")
    merged = tmp_path / "m.json"
    assert (
        cli.main(
            ["merge", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--out", str(merged)]
        )
        == 1
    )
    assert load(merged).lost_gpus == m.lost_gpus


class _Queue:
    """A worker's message queue, kept in a list."""

    def __init__(self) -> None:
        self.messages: list[tuple[Any, ...]] = []

    def put(self, message: tuple[Any, ...]) -> None:
        self.messages.append(message)

    def close(self) -> None:
        pass

    def join_thread(self) -> None:
        pass


class _Ended(Exception):
    pass


def test_a_gpu_that_fails_mid_round_ends_its_worker_with_the_example_that_broke_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The third example raises a CUDA error after which the GPU fails its check (as after an
    illegal address, or a GPU gone from the bus): that example is the round's failure, not
    shrunk (everything after it would fail for the GPU alone), and the worker ends so that
    the next pool's workers check the GPU afresh."""
    calls = {"n": 0}

    def check(example: Any, phases: Any, schedulers: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    def check_gpu(gpu: int) -> None:
        if calls["n"] >= 3:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    def end() -> None:
        raise _Ended

    queue = _Queue()
    monkeypatch.setattr(worker, "_GPU", 0)
    monkeypatch.setattr(worker, "_QUEUE", queue)
    monkeypatch.setattr(worker, "check", check)
    monkeypatch.setattr(worker, "_check_gpu", check_gpu)
    monkeypatch.setattr(worker, "_end_worker", end)
    space = ExampleSpace(
        kinds=("pointwise",), max_elements=64, framework="numpy", device="cpu", max_ops=2
    )
    spec = worker.Round(0, 1, 20, space, tmp_path, "kfuse campaign", shrink_seconds=5)
    with pytest.raises(_Ended):
        worker.run_round(spec)
    assert calls["n"] == 3  # nothing ran after the failure
    outcomes = [m[4] for m in queue.messages if m[2] == "example"]
    assert outcomes == ["passed", "passed", "raw_error"]
    (failure,) = [m[3] for m in queue.messages if m[2] == "failure"]
    assert failure["gpu_failed"] and not failure["shrunk"] and not failure["flaky"]
    assert failure["message"].endswith(worker.GPU_FAILED)
    assert Path(failure["repro"]).exists() and failure["reproduces_alone"] is None
    assert not list(tmp_path.glob("inflight-*"))


def test_a_mismatch_does_not_make_the_worker_check_its_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    checked = []
    monkeypatch.setattr(worker, "_GPU", 0)
    monkeypatch.setattr(worker, "_check_gpu", checked.append)
    assert not worker._gpu_fails_after(AssertionError("outputs differ"))
    assert checked == []
    assert not worker._gpu_fails_after(RuntimeError("a raw error"))  # the check passed
    assert checked == [0]
