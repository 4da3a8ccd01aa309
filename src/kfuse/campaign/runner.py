"""The campaign's parent process: a process pool of workers, rounds handed out, progress
shown, the summary written.

The standard library's ProcessPoolExecutor (spawn: each worker initializes CUDA itself) runs
the workers; each worker takes the next GPU in turn. The parent keeps every worker busy with
rounds (kfuse.campaign.worker.Round) until the budget or the example count is reached.
Outcomes arrive through a queue as each example ends. If a worker dies (a crash, or the
watchdog ending a hang), the pool is broken: the parent records the crash with the repro of
the example that was in flight, starts a new pool and goes on. A worker that cannot use its
GPU as it starts (kfuse.campaign.worker._use_gpu) reports the GPU lost and breaks the pool;
the next pool runs on the other GPUs, and the campaign stops when none is left, or when
FRUITLESS_POOLS pools in a row break with nothing new. Ctrl-C stops it too: the workers
(which leave SIGINT to the parent) are terminated, and the summary of what ended before is
written, `stopped` saying so.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import queue as queue_module
import random
import socket
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kfuse.campaign.progress import Progress
from kfuse.campaign.property import ExampleSpace
from kfuse.campaign.summary import Summary
from kfuse.campaign.worker import Round, run_round, start


@dataclass(frozen=True)
class Campaign:
    """Everything one invocation of `kfuse campaign` runs."""

    space: ExampleSpace
    out: Path
    gpus: tuple[int, ...]  # empty: the host emulator
    workers: int
    budget: float | None  # seconds, or None with `examples`
    examples: int | None
    seed: int
    shard: tuple[int, int] = (0, 1)
    poison: bool = True
    shrink_seconds: float = 30.0
    example_timeout: float = 300.0
    command: str = "kfuse campaign"
    info: dict[str, Any] = field(default_factory=dict)

    def round_seed(self, index: int) -> int:
        """Hypothesis' seed for round `index` of this shard: rounds of different shards, or
        of campaigns with different seeds, draw different examples."""
        return random.Random(f"{self.seed}:{self.shard[0]}/{self.shard[1]}:{index}").getrandbits(64)

    def round(self, index: int, examples: int, stop_at: float | None = None) -> Round:
        """Round `index`, of `examples` examples, starting none after Unix time `stop_at`."""
        return Round(
            index,
            self.round_seed(index),
            examples,
            self.space,
            self.out,
            self.command,
            self.shrink_seconds,
            self.example_timeout,
            stop_at=stop_at,
        )

    def environment(self) -> dict[str, str]:
        """Variables every worker sets before importing anything of CUDA's (or torch's)."""
        env = {"KFUSE_POISON": "1" if self.poison else "0"}
        # One thread each for torch's and NumPy's CPU work: a worker per CPU already fills
        # the machine, and a pool of threads per worker only makes them contend.
        for threads in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[threads] = os.environ.get(threads, "1")
        if not self.gpus:
            env["KFUSE_DEVICE"] = "emulator"
        return env


# Rounds last about this long, so that the budget is kept to within a round and a worker's
# results come back often; at most MAX_ROUND examples, because the rate swings (a run of
# kernels from the disk cache is ten times faster than one that compiles).
ROUND_SECONDS = 4.0
MAX_ROUND = 48


def run(campaign: Campaign) -> Summary:
    """Run the campaign; the summary is also written to `<out>/summary.json`."""
    summary = Summary(info=dict(campaign.info))
    summary.info.update(
        host=socket.gethostname(),
        seed=campaign.seed,
        shard=f"{campaign.shard[0]}/{campaign.shard[1]}",
        workers=campaign.workers,
        # When the run began (Unix time): merge tells shards that ran one after another on one
        # machine from shards that ran at the same time.
        started=round(time.time(), 1),
    )
    progress = Progress(summary, sys.stdout, budget=campaign.budget, examples=campaign.examples)
    context = multiprocessing.get_context("spawn")
    started = time.monotonic()
    next_round = 0
    per_round = 8 if not campaign.gpus else 16
    active: Campaign | None = campaign
    fruitless = 0
    with progress:
        while active is not None:
            before = _news(summary)
            try:
                outcome = _run_pool(
                    active, context, summary, progress, started, next_round, per_round
                )
            except KeyboardInterrupt:
                summary.stopped = INTERRUPTED
                break
            next_round, per_round, broken = outcome
            if not broken or _done(campaign, summary, started):
                break
            # A worker died, or could not use its GPU: a new pool, without the GPUs lost.
            fruitless = fruitless + 1 if _news(summary) == before else 0
            active = _without_lost_gpus(campaign, summary)
            if active is None:
                summary.stopped = "every GPU was lost"
            elif fruitless >= FRUITLESS_POOLS:
                summary.stopped = (
                    f"{FRUITLESS_POOLS} pools of workers in a row broke before any example "
                    "ended (the workers' errors are above)"
                )
                active = None
    summary.finish(time.monotonic() - started)
    for log in campaign.out.glob("worker-*.log"):
        if log.stat().st_size == 0:  # the watchdog wrote nothing: no worker hung
            log.unlink()
    summary.write(campaign.out / "summary.json")
    return summary


INTERRUPTED = "interrupted (Ctrl-C): the workers were stopped"
"""Summary.stopped of a campaign stopped by Ctrl-C: what ended before is counted."""

FRUITLESS_POOLS = 3
"""Pools in a row that may break with nothing new (no example ended, no worker crashed in
one, no GPU lost) before the campaign stops: workers that die as they start would otherwise
be started again until the budget ends, or forever with --examples."""


def _news(summary: Summary) -> tuple[int, int, int]:
    """What a pool may have added: examples ended, workers crashed, GPUs lost."""
    return summary.examples, summary.crashes, len(summary.lost_gpus)


def _without_lost_gpus(campaign: Campaign, summary: Summary) -> Campaign | None:
    """The campaign on the GPUs not lost (as many workers a GPU as before), or None where
    every GPU was lost. The host emulator's campaign is unchanged."""
    if not campaign.gpus:
        return campaign
    left = tuple(g for g in campaign.gpus if str(g) not in summary.lost_gpus)
    if not left:
        return None
    per_gpu = -(-campaign.workers // len(campaign.gpus))
    return dataclasses.replace(
        campaign, gpus=left, workers=min(campaign.workers, per_gpu * len(left))
    )


def _done(campaign: Campaign, summary: Summary, started: float) -> bool:
    if campaign.budget is not None:
        return time.monotonic() - started >= campaign.budget
    return summary.examples >= (campaign.examples or 0)


def _run_pool(
    campaign: Campaign,
    context: Any,
    summary: Summary,
    progress: Progress,
    started: float,
    next_round: int,
    per_round: int,
) -> tuple[int, int, bool]:
    """Run rounds on one pool until the campaign is done or the pool breaks; returns (the
    next round's index, examples a round, whether the pool broke)."""
    messages = context.Queue()
    slots = context.Value("i", 0)
    running: dict[Future, Round] = {}
    assigned = 0  # examples of rounds in flight
    broken = False
    stop_at = _stop_time(campaign, started)
    pool = ProcessPoolExecutor(
        max_workers=campaign.workers,
        mp_context=context,
        initializer=start,
        initargs=(messages, slots, list(campaign.gpus), campaign.environment(), campaign.out),
    )
    try:
        while True:
            done = _done(campaign, summary, started)
            while not done and not broken and len(running) < campaign.workers + 2:
                want = per_round
                if campaign.examples is not None:
                    want = min(want, campaign.examples - summary.examples - assigned)
                    if want <= 0:
                        break
                spec = campaign.round(next_round, want, stop_at)
                next_round += 1
                try:
                    running[pool.submit(run_round, spec)] = spec
                except BrokenProcessPool:
                    broken = True
                    break
                assigned += want
            if not running:
                break
            finished, _ = wait(running, timeout=0.5, return_when=FIRST_COMPLETED)
            _drain(messages, summary, progress, time.monotonic() - started)
            for future in finished:
                spec = running.pop(future)
                assigned -= spec.examples
                try:
                    result = future.result()
                except BrokenProcessPool:
                    broken = True
                    continue
                summary.worker_seconds += result.seconds
                if result.examples:
                    # Size rounds to last about ROUND_SECONDS at the rate a worker runs.
                    rate = result.examples / max(result.seconds, 1e-3)
                    per_round = max(2, min(MAX_ROUND, int(rate * ROUND_SECONDS)))
            progress.refresh(time.monotonic() - started)
            if broken or (done and not running):
                break
            if running and _overran(stop_at, summary):
                progress.note("budget spent: the workers are ended, their examples uncounted")
                _end_workers()
                break
            if done:
                assigned -= _cancel_waiting(running)
    except KeyboardInterrupt:
        # Rounds in flight could run for minutes: the workers end now, and the shutdown
        # below joins them.
        _end_workers()
        raise
    finally:
        # On a broken pool this joins the workers the pool ended: afterwards only the dead
        # worker's in-flight repro is left (the others remove theirs when told to stop).
        pool.shutdown(wait=True, cancel_futures=True)
        _drain(messages, summary, progress, time.monotonic() - started)
    if broken:
        _record_crashes(campaign, summary, progress)
    return next_round, per_round, broken


def _cancel_waiting(running: dict[Future, Round]) -> int:
    """Cancel the rounds no worker has started, taking them out of `running`; returns their
    examples."""
    cancelled = 0
    for future in list(running):
        if future.cancel():
            cancelled += running.pop(future).examples
    return cancelled


def _stop_time(campaign: Campaign, started: float) -> float | None:
    """The Unix time after which rounds start no example: where the budget ends, so that the
    campaign ends within about one example of it, not one round (a round of first compiles
    runs for many seconds). None without a budget."""
    if campaign.budget is None:
        return None
    return time.time() + campaign.budget - (time.monotonic() - started)


END_GRACE_SECONDS = 5.0
"""How long ended workers get to exit before they are killed."""


def _end_workers() -> None:
    """End every worker now; each removes its in-flight repro as it ends
    (kfuse.campaign.worker.start). One that has not exited END_GRACE_SECONDS later is killed:
    on a GPU machine a worker inside a CUDA or NVRTC call at the budget's end did not exit,
    the pool's shutdown waited for it, and the device call's time limit ended the campaign
    before it wrote its summary."""
    children = multiprocessing.active_children()
    for process in children:
        process.terminate()
    deadline = time.monotonic() + END_GRACE_SECONDS
    for process in children:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in children:
        if process.is_alive():
            process.kill()
            process.join(1.0)


OVERRUN_SECONDS = 1.0
"""How long examples still running when the budget ends may go on before their workers are
ended (a worker's first example on the emulator compiles for many seconds)."""


def _overran(stop_at: float | None, summary: Summary) -> bool:
    """Whether the budget ended more than OVERRUN_SECONDS ago and no worker is shrinking a
    failure (a failing example counted whose record has not come yet): a failure found in
    time is always shrunk and written, for up to --shrink-seconds."""
    if stop_at is None or time.time() < stop_at + OVERRUN_SECONDS:
        return False
    records = len(summary.failures) - summary.crashes
    return summary.examples - summary.passed <= records


def _drain(messages: Any, summary: Summary, progress: Progress, elapsed: float) -> None:
    """Take every message the workers have sent so far (`elapsed` seconds into the run)."""
    while True:
        try:
            pid, gpu, what, *rest = messages.get_nowait()
        except (queue_module.Empty, EOFError, OSError):
            return
        if what == "gpu_lost":
            if summary.lose_gpu(gpu, elapsed, rest[0]):
                progress.note(f"GPU {gpu} lost: {rest[0]}")
        elif what == "example":
            kind, outcome, phases, schedulers = rest
            summary.count(kind, outcome, gpu, phases, schedulers)
        elif what == "failure":
            summary.failures.append(rest[0])
            progress.failure(rest[0])


def _record_crashes(campaign: Campaign, summary: Summary, progress: Progress) -> None:
    """A broken pool: a worker whose in-flight repro is left died with that example; keep its
    repro as a crash."""
    for script in sorted(campaign.out.glob("inflight-*.py")):
        pid = int(script.stem.split("-")[1])
        summary.crashes += 1
        name = f"crash-{pid}"
        crash = script.with_name(f"{name}.py")
        script.replace(crash)
        npz = script.with_suffix(".npz")
        if npz.exists():
            npz.replace(crash.with_suffix(".npz"))
        log = campaign.out / f"worker-{pid}.log"
        record = {
            "outcome": "crash",
            "kind": _kind_of(crash),
            "worker": pid,
            "message": "the worker process died while running this example",
            "repro": str(crash),
            "log": str(log) if log.exists() else None,
            "reproduces_alone": None,
        }
        summary.failures.append(record)
        progress.failure(record)


def _kind_of(script: Path) -> str | None:
    for line in script.read_text().splitlines()[:3]:
        if " fusion." in line and " in a " in line:
            return line.split(" in a ", 1)[1].split(" fusion", 1)[0]
    return None
