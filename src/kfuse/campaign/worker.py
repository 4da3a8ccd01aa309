"""One campaign worker process: runs rounds of examples with Hypothesis and reports back.

A round is a Hypothesis run of up to `examples` examples from one seed (so a round can be run
again alone: `kfuse campaign --replay-round`). A failing example stops the round's
generation; Hypothesis then shrinks it (for at most `shrink_seconds`) and the smallest failing
example is written as a repro script. Every example's outcome goes to the parent through the
progress queue as soon as it is known, so a worker that dies loses nothing already counted.

Before each example runs, its repro is written as `inflight-<pid>`: if the process crashes or
hangs (a watchdog ends it after `example_timeout` seconds, dumping every thread's stack to
`worker-<pid>.log`), that file is the repro of what killed it.

A worker checks its GPU as it starts (a kernel summing four ones) and reports the GPU lost if
it fails. After an example's error other than a mismatch it checks the GPU again: if the GPU
no longer works (the error ended the CUDA context, or the GPU left the bus), that example is
the round's failure as it is, unshrunk, and the worker ends, so that the next pool starts
with new processes and checks the GPU afresh.
"""

from __future__ import annotations

import ctypes
import faulthandler
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kfuse.campaign.property import Example, ExampleSpace, check, examples, outcome_of, timed
from kfuse.testing.gpu_memory import release_cached_gpu_memory

IN_FLIGHT = (
    "this example was running when its worker process died (a crash, or a hang that "
    "the watchdog ended)"
)

MAX_REPROS_PER_WORKER = 40
"""Repros one worker writes at most (a systematic bug fails thousands of examples; the
rest are counted)."""


@dataclass(frozen=True)
class Round:
    """What one round runs."""

    index: int
    seed: int
    examples: int
    space: ExampleSpace
    out: Path
    command: str
    shrink_seconds: float = 30.0
    example_timeout: float = 300.0
    check_alone: bool = True
    # Unix time after which the round starts no new example (the campaign's --budget ends
    # there); a failure found before it is still shrunk, for up to shrink_seconds.
    stop_at: float | None = None


@dataclass
class RoundResult:
    """What a round did (the per-example outcomes went to the queue already)."""

    index: int
    examples: int
    shrink_runs: int
    seconds: float
    failures: list[dict[str, Any]]


# The worker's process-wide state, set by `start`.
_QUEUE: Any = None
_GPU: int | None = None
_REPROS = 0
_EXAMPLES_BEFORE = 0


def start(queue: Any, slots: Any, gpus: list[int], environment: dict[str, str], out: Path) -> None:
    """ProcessPoolExecutor initializer: take the next worker slot and its GPU."""
    global _QUEUE, _GPU
    os.environ.update(environment)
    if "torch" in sys.modules:  # imported before the variables were set: tell it too
        sys.modules["torch"].set_num_threads(int(environment.get("OMP_NUM_THREADS", "1")))
    _QUEUE = queue

    # The pool ends the other workers when one dies: they leave no in-flight repro behind,
    # so that the one left is the dead worker's.
    def stop(*_: Any) -> None:
        _remove_in_flight(out)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    # Ctrl-C reaches every process of the terminal's group: the parent stops the workers
    # (SIGTERM) and writes the summary of what they counted.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _end_with_parent()
    with slots.get_lock():
        slot = slots.value
        slots.value += 1
    if gpus:
        _GPU = gpus[slot % len(gpus)]
        # A GPU gone from the bus may hang the check: then the worker ends, the pool breaks
        # with nothing new, and FRUITLESS_POOLS of those stop the campaign.
        faulthandler.dump_traceback_later(GPU_CHECK_SECONDS, exit=True)
        try:
            _use_gpu(_GPU, out)
        except Exception as exc:
            # The pool breaks on this worker's exception; the parent takes the GPU out of the
            # next pool's on this message (kfuse.campaign.runner).
            if queue is not None:
                queue.put((os.getpid(), _GPU, "gpu_lost", f"{type(exc).__name__}: {exc}"))
            raise
        finally:
            faulthandler.cancel_dump_traceback_later()


def _end_with_parent() -> None:
    """On Linux, have the kernel send this worker SIGTERM when the campaign's parent process
    dies (killed, or ended by a timeout). Otherwise the worker runs its round on as an
    orphan, on the CPU and the GPU that whatever runs next measures: an emulator campaign's
    worker was still running 40 minutes after its parent was killed."""
    if not sys.platform.startswith("linux"):
        return
    pr_set_pdeathsig = 1
    ctypes.CDLL(None).prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
    parent = multiprocessing.parent_process()
    if parent is not None and os.getppid() != parent.pid:  # it died before the call
        os.kill(os.getpid(), signal.SIGTERM)


GPU_CHECK_SECONDS = 300
"""How long a worker's start (CUDA's initialization and the GPU's check) may take."""


FAIL_GPU_MARKER = "fail-gpu-"
"""A file `fail-gpu-<N>` in the campaign's folder makes every worker that starts on GPU N
fail its check: how a test, or a person watching a multi-GPU run, simulates GPU N's loss
(workers are started again after one dies: kill one to have the marker read)."""


def _use_gpu(gpu: int, out: Path) -> None:
    """Make `gpu` this process's device and check it (_check_gpu)."""
    marker = out / f"{FAIL_GPU_MARKER}{gpu}"
    if marker.exists():
        raise RuntimeError(f"GPU {gpu} marked as failed by {marker}")
    import torch

    torch.cuda.set_device(gpu)
    _check_gpu(gpu)


def _check_gpu(gpu: int) -> None:
    """Raise unless `gpu` runs a kernel and copies its result back."""
    import torch

    if torch.ones(4, device=f"cuda:{gpu}").sum().item() != 4.0:
        raise RuntimeError(f"GPU {gpu} summed four ones wrong")


def _gpu_fails_after(exc: BaseException) -> bool:
    """Whether this worker's GPU no longer works after an example raised `exc`: an error
    that ends the CUDA context (an illegal address) or a GPU gone from the bus fails every
    later call, so the examples after it would fail for that alone, and Hypothesis would
    shrink toward whatever ran next. A mismatch leaves the GPU as it was."""
    if _GPU is None or isinstance(exc, AssertionError):
        return False
    try:
        _check_gpu(_GPU)
    except Exception:  # noqa: BLE001 - any failure of the check is the answer
        return True
    return False


def _end_worker() -> None:
    """End this worker process once its messages are sent: the pool breaks, and the parent
    starts the next one with new processes (new CUDA contexts); a worker that then cannot use
    the GPU reports it lost."""
    if _QUEUE is not None:
        _QUEUE.close()
        _QUEUE.join_thread()
    os._exit(3)


GPU_FAILED = "; after it the GPU failed a check (a kernel summing four ones), and the worker ended"


def run_round(spec: Round) -> RoundResult:
    """Run one round in this process; see the module docstring."""
    from hypothesis import HealthCheck, Phase, Verbosity, given, seed, settings
    from hypothesis import strategies as st

    global _EXAMPLES_BEFORE
    space = spec.space if _GPU is None else replace(spec.space, device=f"cuda:{_GPU}")
    inflight = f"inflight-{os.getpid()}"  # removed by _remove_in_flight
    log = open(spec.out / f"worker-{os.getpid()}.log", "a")  # noqa: SIM115 - faulthandler's
    state = _fresh_state()
    started = time.monotonic()

    @settings(
        max_examples=spec.examples,
        database=None,
        deadline=None,
        derandomize=False,
        phases=[Phase.generate, Phase.shrink],
        report_multiple_bugs=False,
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
    )
    @seed(spec.seed)
    @given(st.data())
    def one_example(data: Any) -> None:
        shrinking = state["failed_at"] is not None
        if state["gpu_failed"]:
            return  # nothing more runs on this GPU: Hypothesis finishes at once
        if shrinking and time.monotonic() - state["failed_at"] > spec.shrink_seconds:
            # Shrinking ran out of time: every later call passes, so that Hypothesis finishes
            # quickly. Its final replay of the smallest failure then passes too, and it calls
            # the failure flaky, which it is not.
            state["shrink_timed_out"] = True
            return
        phases: dict[str, float] = {}
        with timed(phases, "draw"):
            example = data.draw(examples(space))
        if not shrinking and _budget_spent(spec):
            return  # the round's remaining calls pass at once, uncounted
        where = _where(spec, state)
        with timed(phases, "repro"):
            _write_repro(spec, inflight, example, "crash", IN_FLIGHT, where)
        faulthandler.dump_traceback_later(spec.example_timeout, exit=True, file=log)
        reached: set[str] = set()
        try:
            check(example, phases, reached)
            exc: BaseException | None = None
        except Exception as raised:  # noqa: BLE001 - every outcome is counted
            exc = raised
        finally:
            faulthandler.cancel_dump_traceback_later()
        if shrinking:
            state["shrink_runs"] += 1
        else:
            state["examples"] += 1
            _report("example", example.kind, outcome_of(exc), phases, sorted(reached))
        if exc is not None:
            _note_failure(spec, state, log, (example, exc, where))
            raise exc

    failures = []
    try:
        one_example()
    except BaseException as exc:  # noqa: BLE001 - the failure Hypothesis reports, or Flaky
        if state["last"] is None:
            raise  # not an example's failure: a bug of the campaign itself
        failures.append(_record(spec, state, exc))
        _report("failure", failures[-1])
    finally:
        log.close()
        _remove_in_flight(spec.out)
        release_cached_gpu_memory()  # every worker shares the GPU
    if state["gpu_failed"]:
        _end_worker()
    _EXAMPLES_BEFORE += state["examples"] + state["shrink_runs"]
    return RoundResult(
        spec.index, state["examples"], state["shrink_runs"], time.monotonic() - started, failures
    )


def _where(spec: Round, state: dict[str, Any]) -> str:
    """Where in the campaign an example ran, for its repro script."""
    return (
        f"round {spec.index} of {spec.examples} examples, after "
        f"{_EXAMPLES_BEFORE + state['examples']} earlier examples in worker process "
        f"{os.getpid()}"
    )


def _budget_spent(spec: Round) -> bool:
    """Whether the round's stop time has passed. Checked after an example is drawn, not
    before: Hypothesis calls a test that draws less on the same choices inconsistent, and a
    draw is cheap."""
    return spec.stop_at is not None and time.time() >= spec.stop_at


def _fresh_state() -> dict[str, Any]:
    """A round's running state: examples and shrink runs counted, when it first failed, its
    first and last failures (example, exception, where), and how it ended."""
    return {
        "examples": 0,
        "shrink_runs": 0,
        "failed_at": None,
        "first": None,
        "last": None,
        "shrink_timed_out": False,
        "gpu_failed": False,
    }


def _note_failure(spec: Round, state: dict[str, Any], log: Any, failure: tuple) -> None:
    """Record a failing example (example, exception, where) as the round's first (if it is)
    and last, and whether its GPU fails from now on (then it is the failure, unshrunk)."""
    if state["failed_at"] is None:
        state["failed_at"] = time.monotonic()
        state["first"] = failure
    state["last"] = failure
    faulthandler.dump_traceback_later(spec.example_timeout, exit=True, file=log)
    try:  # a GPU gone from the bus may hang the check: the watchdog ends that too
        gpu_failed = _gpu_fails_after(failure[1])
    finally:
        faulthandler.cancel_dump_traceback_later()
    if gpu_failed:
        # This example is the failure, unshrunk: nothing after it ran on a sound GPU.
        state["first"] = state["last"]
        state["gpu_failed"] = True


def _remove_in_flight(out: Path) -> None:
    for path in out.glob(f"inflight-{os.getpid()}.*"):
        path.unlink(missing_ok=True)


def _report(*message: Any) -> None:
    if _QUEUE is not None:
        _QUEUE.put((os.getpid(), _GPU, *message))


def _write_repro(
    spec: Round, name: str, example: Example, outcome: str, message: str, where: str
) -> Path:
    from kfuse.campaign import repro

    return repro.write(spec.out, name, example, outcome, message, spec.command, where)


def _record(spec: Round, state: dict[str, Any], final: BaseException) -> dict[str, Any]:
    """The failure record of a round that failed; writes its repro (within the cap)."""
    global _REPROS
    example, exc, where = state["last"]
    first_example, first_exc, _ = state["first"]
    gpu_failed = state["gpu_failed"]
    record: dict[str, Any] = {
        "outcome": outcome_of(exc),
        "kind": example.kind,
        "round": spec.index,
        "round_examples": spec.examples,
        "round_seed": spec.seed,
        "gpu": _GPU,
        "worker": os.getpid(),
        "message": f"{type(exc).__name__}: {exc}"[:2000] + (GPU_FAILED if gpu_failed else ""),
        "first_message": f"{type(first_exc).__name__}: {first_exc}"[:2000],
        "shrunk": example is not first_example,
        # Flaky: the smallest failing example passed when Hypothesis ran it again (not when
        # that replay passed only because the shrink's time was up).
        "flaky": type(final).__name__.startswith("Flaky")
        and not state["shrink_timed_out"]
        and not gpu_failed,
        "gpu_failed": gpu_failed,
        "shrink_timed_out": state["shrink_timed_out"],
        "repro": None,
        "reproduces_alone": None,
    }
    if _REPROS < MAX_REPROS_PER_WORKER:
        _REPROS += 1
        name = f"failure-{os.getpid()}-{spec.index}"
        script = _write_repro(spec, name, example, record["outcome"], record["message"], where)
        record["repro"] = str(script)
        if spec.check_alone and not gpu_failed:  # not on a GPU that failed
            record["reproduces_alone"] = _fails_alone(script)
    return record


def _fails_alone(script: Path) -> bool | None:
    """Whether the repro script fails in a fresh process (None: it could not tell)."""
    try:
        done = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=300
        )
    except subprocess.TimeoutExpired:
        return None
    return done.returncode != 0
