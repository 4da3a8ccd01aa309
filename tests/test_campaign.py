"""`kfuse campaign` on the host emulator: the command's errors, a short run and its summary,
failures shrunk into repro scripts that replay their exact inputs, a worker killed mid-run,
shards merged."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kfuse.campaign import repro, worker
from kfuse.campaign.property import PHASES, Example, ExampleSpace, Mismatch, check
from kfuse.campaign.summary import Summary, load, merge
from kfuse.dtypes import DataType
from kfuse.frontend import FusionDefinition
from kfuse.schedule.types import SchedulerType

torch = pytest.importorskip("torch")


def campaign(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "KFUSE_CACHE_DIR": str(cwd / "cache")}
    return subprocess.run(
        [sys.executable, "-m", "kfuse", "campaign", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


@pytest.mark.parametrize(
    "args, says",
    [
        (["--device", "cuda"], "--device cuda"),
        (["--kinds", "pointwise", "bogus"], "unknown kinds ['bogus']"),
        (["--budget", "0"], "--budget must be more than 0"),
        (["--examples", "0"], "--examples must be at least 1"),
        (["--out", "/proc/no/such/dir"], "--out /proc/no/such/dir: cannot write there"),
        (["--shard", "3/2"], "--shard 3/2: need 0 <= I < N"),
        (["--shard", "x"], "--shard must be I/N"),
        (["--dtypes", "Float8"], "unknown dtype 'Float8'"),
        (["--max-rank", "0"], "must be at least 1"),
        (["--budget", "5", "--examples", "3"], "not allowed with argument"),
        (["merge", "missing.json", "--out", "m.json"], "is not a campaign summary"),
    ],
)
def test_bad_arguments_get_one_line_and_status_2(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    says: str,
) -> None:
    """In this process, through `python -m kfuse`'s own entry (kfuse.cli.main): a process
    each would start Python and import kfuse eleven times (test_help_describes_the_options
    runs the command as a process)."""
    from kfuse.cli import main

    if args[:2] == ["--device", "cuda"] and _has_gpu():
        pytest.skip("this machine has a GPU: --device cuda is valid here")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KFUSE_CACHE_DIR", str(tmp_path / "cache"))
    status = main(["campaign", *args])
    out, err = capsys.readouterr()
    assert status == 2, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kfuse campaign"), err
    assert says in lines[0]
    assert "Traceback" not in out + err


def _has_gpu() -> bool:
    try:
        from kfuse import _C

        return _C.device_count() > 0
    except Exception:  # noqa: BLE001 - no driver
        return False


def test_help_describes_the_options(tmp_path: Path) -> None:
    done = campaign("--help", cwd=tmp_path)
    assert done.returncode == 0
    for option in (
        "--budget",
        "--examples",
        "--kinds",
        "--dtypes",
        "--max-rank",
        "--max-ops",
        "--seed",
        "--shard",
        "--out",
        "--device",
    ):
        assert option in done.stdout


@pytest.mark.slow
@pytest.mark.extended  # campaign processes for seconds each: CI's extended step
def test_a_short_emulator_campaign_writes_its_summary(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = campaign(
        "--device",
        "emulator",
        "--examples",
        "6",
        "--workers",
        "2",
        "--seed",
        "5",
        "--kinds",
        "pointwise",
        "reduction",
        "--max-ops",
        "3",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-1]
    summary = json.loads((out / "summary.json").read_text())
    assert last.startswith(f"{summary['passed']} passed, 0 failed")
    assert summary["examples"] >= 6 and summary["failed"] == 0
    assert set(summary["by_kind"]) <= {"pointwise", "reduction"}
    assert summary["by_gpu"] == {"emulator": summary["examples"]}
    assert summary["device"] == "host emulator" and summary["seed"] == 5
    assert summary["shard"] == "0/1" and summary["examples_per_second"] > 0
    assert not list(out.glob("inflight-*")), "no in-flight repro is left behind"
    # Where the time went: every example's phases, within the workers' time in rounds.
    phases = summary["seconds_by_phase"]
    assert set(phases) == set(PHASES) and phases["first_call"] > 0 and phases["reference"] > 0
    assert 0 < sum(phases.values()) <= summary["worker_seconds"] + 0.1
    # Which schedulers the examples reached: each counted once an example that ran it.
    reached = summary["by_scheduler"]
    assert reached and set(reached) <= {t.value for t in SchedulerType}
    assert all(0 < n <= summary["examples"] for n in reached.values())
    lines = done.stdout.strip().splitlines()
    assert lines[-3].startswith("time per example (")
    assert lines[-2].startswith("examples by scheduler: ")
    assert all(f"{name} {n}" in lines[-2] for name, n in reached.items())


@pytest.mark.slow
@pytest.mark.extended  # campaign processes for seconds each: CI's extended step
def test_a_budget_ends_the_campaign_within_seconds_of_it(tmp_path: Path) -> None:
    """Workers start no example after the budget and are ended soon after it, even while a
    first example compiles; the progress lines count towards the budget."""
    out = tmp_path / "run"
    done = campaign(
        *("--device", "emulator", "--budget", "6", "--workers", "2", "--seed", "3"),
        *("--out", str(out)),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["seconds"] <= 6 + 3, done.stdout + done.stderr
    assert "s of 6 s, " in done.stdout and " s left]" in done.stdout
    assert not list(out.glob("inflight-*")) and not list(out.glob("crash-*"))


def test_a_round_starts_no_example_after_its_stop_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KFUSE_DEVICE", "emulator")
    ran: list[Example] = []
    monkeypatch.setattr(worker, "check", lambda example, *_: ran.append(example))
    space = ExampleSpace(kinds=("pointwise",), framework="torch", device="cpu", max_elements=64)
    spec = worker.Round(0, 11, 5, space, tmp_path, "kfuse campaign (test)")
    assert worker.run_round(spec).examples == 5 and len(ran) == 5
    late = worker.Round(1, 12, 5, space, tmp_path, "test", stop_at=time.time() - 1)
    result = worker.run_round(late)
    assert result.examples == 0 and len(ran) == 5 and not result.failures


def test_progress_lines_show_the_target_and_what_is_left() -> None:
    import io

    from kfuse.campaign.progress import Progress

    stream = io.StringIO()
    timed = Progress(Summary(), stream, budget=20.0)
    timed.every = 0.0
    timed.refresh(15.2)
    assert stream.getvalue().startswith("[15 s of 20 s, 5 s left] 0 examples")
    stream = io.StringIO()
    counted = Progress(Summary(), stream, examples=500)
    counted.every = 0.0
    counted.refresh(3.0)
    assert stream.getvalue().startswith("[3 s, 500 of 500 examples left] 0 examples")
    assert Progress(Summary(), stream, budget=20.0).every == 5.0


def _example(fd: FusionDefinition, inputs: list) -> Example:
    return Example("pointwise", fd, inputs, special_values=False, refill_seeds=(1, 2))


def _two_outputs() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        s = fd.define_scalar(dtype=DataType.Double)
        y = fd.ops.mul(fd.ops.cast(x, DataType.Float), s)
        fd.add_output(y)
        fd.add_output(fd.ops.exp(y))
    return fd


def test_repro_inputs_round_trip_exactly(tmp_path: Path) -> None:
    fd = _two_outputs()
    base = torch.randn(40, dtype=torch.float32).to(torch.bfloat16)
    x = torch.as_strided(base, (3, 5), (1, 6), 1)  # permuted, offset by one element
    path = repro.write(tmp_path, "case", _example(fd, [x, 0.5]), "mismatch", "msg", "cmd", "where")
    header, (y, s) = repro.load(path.with_suffix(".npz"))
    assert header["kind"] == "pointwise" and header["refill_seeds"] == [1, 2]
    assert s == 0.5 and y.dtype == torch.bfloat16
    assert tuple(y.shape) == (3, 5) and y.stride() == (1, 6)
    assert y.data_ptr() % 16 == x.data_ptr() % 16
    assert torch.equal(y, x)


def test_a_complex_scalar_input_round_trips(tmp_path: Path) -> None:
    """JSON has no complex number: a run-time complex scalar is saved as its two parts."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.ComplexFloat)
        fd.add_output(fd.ops.mul(x, fd.define_scalar(dtype=DataType.ComplexDouble)))
    z = torch.randn(6, dtype=torch.complex64)
    path = repro.write(tmp_path, "case", _example(fd, [z, 1.5 - 2j]), "m", "m", "c", "w")
    _, (y, s) = repro.load(path.with_suffix(".npz"))
    assert s == 1.5 - 2j and isinstance(s, complex) and torch.equal(y, z)
    assert "S0 = (1.5-2j)" in path.read_text()


def test_other_inputs_round_trip_and_describe_themselves(tmp_path: Path) -> None:
    fd = _two_outputs()
    x = torch.randn(3, 5).to(torch.bfloat16)
    other = torch.as_strided(torch.randn(30).to(torch.bfloat16), (2, 7), (1, 3), 1)
    example = _example(fd, [x, 0.5])
    example.other_inputs = [other, 2.0]
    path = repro.write(tmp_path, "case", example, "mismatch", "msg", "cmd", "where")
    header, inputs, again = repro.load_all(path.with_suffix(".npz"))
    assert torch.equal(inputs[0], x) and inputs[1] == 0.5
    assert again is not None and again[1] == 2.0 and again[0].stride() == (1, 3)
    assert torch.equal(again[0], other) and again[0].data_ptr() % 16 == other.data_ptr() % 16
    assert "Other inputs (calls 4 and 5): T0 torch BFloat16 (2, 7) strides (1, 3)" in (
        path.read_text()
    )
    plain = repro.write(tmp_path, "plain", _example(fd, [x, 0.5]), "m", "m", "c", "w")
    assert repro.load_all(plain.with_suffix(".npz"))[2] is None


def test_a_repro_scripts_definition_keeps_typed_constants(tmp_path: Path) -> None:
    """The script's printed definition rebuilds the fusion that failed, constants' dtypes
    included: where of two Float constants gives Float, not the Double of bare literals."""
    with FusionDefinition() as fd:
        c = fd.define_tensor(shape=[-1, -1], dtype=DataType.Bool)
        three, five = fd.define_scalar(3.0, DataType.Float), fd.define_scalar(5.0, DataType.Float)
        fd.add_output(fd.ops.where(c, three, five))
    cond = np.array([[True, False, False], [False, True, True]])
    script = repro.write(tmp_path, "case", _example(fd, [cond]), "mismatch", "m", "cmd", "w")
    namespace: dict[str, Any] = {"__name__": "repro_script"}  # defines fd, replays nothing
    exec(script.read_text(), namespace)  # noqa: S102 - kfuse's own printed definition
    again = namespace["fd"]
    assert again.fusion == fd.fusion
    ((want,), (got,)) = fd.execute([cond]), again.execute([cond])  # on the host emulator
    assert got.dtype == want.dtype == np.float32 and np.array_equal(got, want)


class _Recording:
    """A FusionDefinition that records each call's first input shape, and answers calls on
    inputs of `wrong_shape` with the outputs of the call before (a cache keyed too loosely)."""

    def __init__(self, fd: FusionDefinition, wrong_shape: tuple[int, ...] | None = None) -> None:
        self.fd, self.wrong_shape = fd, wrong_shape
        self.fusion = fd.fusion
        self.shapes: list[tuple[int, ...]] = []
        self.last: Any = None

    def execute(self, inputs: list) -> Any:
        self.shapes.append(tuple(inputs[0].shape))
        if self.shapes[-1] == self.wrong_shape:
            return self.last
        self.last = self.fd.execute(inputs)
        return self.last

    def last_program(self) -> Any:
        return self.fd.last_program()


def test_an_example_with_other_inputs_runs_five_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls 1-3 on the first inputs (new values each time), 4 on the other inputs, 5 on the
    first again; a Program handed to another signature's call is a mismatch naming it."""
    monkeypatch.setenv("KFUSE_DEVICE", "emulator")
    x, other = torch.randn(3, 5).to(torch.bfloat16), torch.randn(4, 2).to(torch.bfloat16)
    recording = _Recording(_two_outputs())
    example = _example(recording, [x, 0.5])  # type: ignore[arg-type]
    example.other_inputs = [other, 1.5]
    check(example)
    assert recording.shapes == [(3, 5)] * 3 + [(4, 2), (3, 5)]
    # The outputs of [3, 5] for the inputs of [4, 2]: call 4 fails, and says which it is.
    example.fd = recording = _Recording(_two_outputs(), wrong_shape=(4, 2))
    with pytest.raises(Mismatch, match=r"call 4 of 5 \(the other inputs\)"):
        check(example)


@pytest.mark.slow
@pytest.mark.extended  # campaign processes for seconds each: CI's extended step
def test_a_repro_script_exits_0_when_it_passes_and_1_when_it_fails(tmp_path: Path) -> None:
    fd = _two_outputs()
    x = torch.randn(4, 6).to(torch.bfloat16)
    good = repro.write(tmp_path, "good", _example(fd, [x, 1.5]), "mismatch", "m", "cmd", "w")
    # Inputs that do not fit the definition fail in every process: a kfuse error.
    bad = repro.write(
        tmp_path, "bad", _example(fd, [torch.randn(4, 6), 1.5]), "kfuse_error", "m", "cmd", "w"
    )
    env = {**os.environ, "KFUSE_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, str(good)], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0 and "passed" in done.stdout, done.stdout + done.stderr
    # --device emulator, as the campaign command names the host emulator
    done = subprocess.run(
        [sys.executable, str(good), "--device", "emulator"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0 and "passed" in done.stdout, done.stdout + done.stderr
    done = subprocess.run(
        [sys.executable, str(bad)], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 1 and "FAILED (kfuse error)" in done.stdout, done.stdout


@pytest.mark.slow
@pytest.mark.extended  # a Hypothesis shrink compiling dozens of kernels: CI's extended step
def test_a_failing_round_is_shrunk_into_a_repro(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A planted bug (any fusion with two or more outputs 'fails'): the round stops, the
    smallest failing example Hypothesis finds is written as a repro, and the record says it
    does not fail alone (the planted bug is not in the script's process). The bug fails an
    example before it runs, so that the shrink compiles only the examples that pass."""
    monkeypatch.setenv("KFUSE_DEVICE", "emulator")

    def planted(
        example: Example,
        phases: dict[str, float] | None = None,
        schedulers: set[str] | None = None,
    ) -> None:
        if len(example.fd.fusion.outputs) > 1:
            raise Mismatch("planted: more than one output")
        check(example, phases, schedulers)

    monkeypatch.setattr(worker, "check", planted)
    monkeypatch.setattr(worker, "_REPROS", 0)
    space = ExampleSpace(
        kinds=("pointwise",), framework="torch", device="cpu", max_elements=64, max_ops=3
    )
    spec = worker.Round(0, 11, 40, space, tmp_path, "kfuse campaign (test)", shrink_seconds=60)
    result = worker.run_round(spec)
    assert len(result.failures) == 1, result
    record = result.failures[0]
    assert record["outcome"] == "mismatch" and "planted" in record["message"]
    assert record["reproduces_alone"] is False
    assert record["flaky"] is False and record["shrink_timed_out"] is False
    script = Path(record["repro"])
    text = script.read_text()
    assert "kfuse campaign (test)" in text and "round 0 of 40 examples" in text
    # Shrunk: no more outputs than the bug needs, and the smallest inputs.
    assert text.count("fd.add_output(") == 2
    _, inputs = repro.load(script.with_suffix(".npz"))
    assert all(getattr(a, "numel", lambda: 1)() <= 1 for a in inputs)
    assert not list(tmp_path.glob("inflight-*")), "the in-flight repro is removed"


def test_a_shrink_that_runs_out_of_time_is_not_called_flaky(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the shrink's time is up every call passes, Hypothesis's final replay too, and it
    raises Flaky: the record must still say the failure is not flaky (the GPU campaign's
    deterministic mismatches were all labelled flaky)."""
    monkeypatch.setenv("KFUSE_DEVICE", "emulator")

    def planted(
        example: Example,
        phases: dict[str, float] | None = None,
        schedulers: set[str] | None = None,
    ) -> None:
        check(example, phases, schedulers)
        if len(example.fd.fusion.outputs) > 1:
            raise Mismatch("planted: more than one output")

    monkeypatch.setattr(worker, "check", planted)
    monkeypatch.setattr(worker, "_REPROS", worker.MAX_REPROS_PER_WORKER)  # no repro needed
    space = ExampleSpace(
        kinds=("pointwise",), framework="torch", device="cpu", max_elements=64, max_ops=3
    )
    spec = worker.Round(0, 11, 40, space, tmp_path, "kfuse campaign (test)", shrink_seconds=0)
    (record,) = worker.run_round(spec).failures
    assert record["outcome"] == "mismatch"
    assert record["shrink_timed_out"] is True and record["flaky"] is False


def _emulator_campaign(
    tmp_path: Path, seed: int, limit: tuple[str, str] = ("--budget", "300"), **popen: Any
) -> tuple[subprocess.Popen, Path]:
    """A campaign of two emulator workers started in the background, and its --out folder;
    `limit` ends it (a budget, or a count of examples)."""
    out = tmp_path / "run"
    args = ["--device", "emulator", *limit, "--workers", "2"]
    process = subprocess.Popen(
        [sys.executable, "-m", "kfuse", "campaign", *args, "--seed", str(seed), "--out", str(out)],
        cwd=tmp_path,
        env={**os.environ, "KFUSE_CACHE_DIR": str(tmp_path / "cache")},
        **popen,
    )
    return process, out


def _workers_in_flight(out: Path, count: int) -> list[int]:
    """The process ids of the workers running an example (their in-flight repros), once
    `count` of them are (or two minutes have passed)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = [int(p.stem.split("-")[1]) for p in out.glob("inflight-*.py")]
        if len(found) >= count:
            return found
        time.sleep(0.2)
    return []


@pytest.mark.slow
@pytest.mark.extended  # campaign processes for seconds each: CI's extended step
def test_ctrl_c_stops_the_workers_and_writes_the_summary(tmp_path: Path) -> None:
    """SIGINT to the campaign's process group, as Ctrl-C in a terminal sends it: the parent
    ends the workers (which ignore it) at once and writes what was counted."""
    process, out = _emulator_campaign(
        tmp_path,
        3,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        # A shell's background job ignores SIGINT, and so would Python: a terminal's would not.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    _workers_in_flight(out, 1)
    time.sleep(3)
    os.killpg(process.pid, signal.SIGINT)
    stdout, _ = process.communicate(timeout=60)
    assert process.returncode == 1, stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped"].startswith("interrupted") and summary["crashes"] == 0
    assert summary["failed"] == 0 and summary["examples"] == summary["passed"]
    assert not list(out.glob("inflight-*")), "the workers removed their in-flight repros"
    assert "stopped early: interrupted" in stdout.strip().splitlines()[-1]


@pytest.mark.slow
@pytest.mark.extended  # campaign processes for seconds each: CI's extended step
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_workers_end_when_the_campaign_is_killed(tmp_path: Path) -> None:
    """A parent killed outright (SIGKILL, or a timeout's) leaves no worker running on."""
    process, out = _emulator_campaign(
        tmp_path, 4, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    workers = _workers_in_flight(out, 2)
    assert len(workers) == 2
    process.kill()
    process.wait(timeout=30)
    deadline = time.monotonic() + 30
    while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_running(pid) for pid in workers), "a worker outlived its campaign"


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.extended  # campaign processes for seconds each: CI's extended step
def test_a_worker_killed_mid_run_is_reported_with_its_example(tmp_path: Path) -> None:
    """A count of examples, not a budget: the campaign ends once the new pool has run the
    examples the dead one left, not after seconds of both workers drawing more."""
    proc, out = _emulator_campaign(
        tmp_path,
        3,
        ("--examples", "2"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    in_flight = _workers_in_flight(out, 1)
    assert in_flight, "no worker started an example"
    victim = min(in_flight)
    os.kill(victim, signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 1, stdout + stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["crashes"] == 1
    (crash,) = [f for f in summary["failures"] if f["outcome"] == "crash"]
    assert crash["worker"] == victim
    assert Path(crash["repro"]).exists() and Path(crash["repro"]).with_suffix(".npz").exists()
    # The campaign went on after the crash, on a new pool, to the examples asked for (the
    # example that died with its worker is counted as the crash, not as an example).
    assert summary["examples"] == summary["passed"] == 2, summary
    assert "1 worker crashes" in stdout.strip().splitlines()[-1]


@pytest.mark.slow
@pytest.mark.extended  # campaign processes for seconds each: CI's extended step
def test_shards_merge_into_one_summary(tmp_path: Path) -> None:
    paths = []
    for shard in ("0/2", "1/2"):
        out = tmp_path / shard.replace("/", "-")
        done = campaign(
            "--device",
            "emulator",
            "--examples",
            "3",
            "--workers",
            "1",
            "--seed",
            "9",
            "--shard",
            shard,
            "--kinds",
            "pointwise",
            "--max-ops",
            "2",
            "--out",
            str(out),
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        paths.append(out / "summary.json")
    shards = [load(p) for p in paths]
    done = campaign("merge", *map(str, paths), "--out", str(tmp_path / "merged.json"), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert merged["examples"] == sum(s.examples for s in shards)
    assert merged["merged_from"] == 2 and len(merged["shards"]) == 2
    assert {s["shard"] for s in merged["shards"]} == {"0/2", "1/2"}
    scheduler_line, final_line = done.stdout.strip().splitlines()
    assert scheduler_line.startswith("examples by scheduler: ") and merged["by_scheduler"]
    assert final_line.startswith(f"{merged['passed']} passed, 0 failed")


def test_merge_adds_counts_and_keeps_every_failure(tmp_path: Path) -> None:
    a, b = Summary(info={"host": "a"}), Summary(info={"host": "b"})
    a.count("pointwise", "passed", 0)
    a.count("reduction", "mismatch", 1)
    b.count("pointwise", "passed", 0)
    b.crashes = 1
    a.failures, b.failures = [{"outcome": "mismatch"}], [{"outcome": "crash"}]
    a.seconds, b.seconds = 10.0, 20.0
    a.worker_seconds, b.worker_seconds = 18.0, 39.0
    a.seconds_by_phase.update(first_call=5.0, draw=1.0)
    b.seconds_by_phase.update(first_call=7.0)
    a.count("pointwise", "passed", 0, schedulers=["transpose", "pointwise"])
    b.count("reduction", "passed", 0, schedulers=["reduction", "pointwise", "pointwise"])
    m = merge([a, b])
    assert m.worker_seconds == 57.0 and m.seconds_by_phase == {"first_call": 12.0, "draw": 1.0}
    # An example counts once for each scheduler it ran, however many segments did.
    assert m.by_scheduler == {"pointwise": 2, "transpose": 1, "reduction": 1}
    m.write(tmp_path / "m.json")
    assert load(tmp_path / "m.json").seconds_by_phase == m.seconds_by_phase
    assert load(tmp_path / "m.json").by_scheduler == m.by_scheduler
    assert m.examples == 5 and m.passed == 4 and m.failed == 2
    assert m.by_gpu == {"a:0": 2, "a:1": 1, "b:0": 2}
    assert [f["outcome"] for f in m.failures] == ["mismatch", "crash"]
    assert m.seconds == 20.0 and m.final_line().startswith("4 passed, 2 failed")


def _shard(host: str, examples: int, seconds: float, started: float | None = None) -> Summary:
    s = Summary(info={"host": host} | ({} if started is None else {"started": started}))
    for _ in range(examples):
        s.count("pointwise", "passed", 0)
    s.finish(seconds)
    return s


def test_merged_rates_follow_when_the_shards_ran() -> None:
    # Two hosts at the same time, the second host's two shards one after the other.
    m = merge(
        [_shard("a", 100, 10.0, 1000.0), _shard("b", 50, 5.0, 1002.0), _shard("b", 50, 5.0, 1007.0)]
    )
    assert m.seconds == 12.0  # from 1000 to 1012
    assert m.gpu_seconds == {"a:0": 10.0, "b:0": 10.0}
    assert m.to_json()["examples_per_second_per_gpu"] == {"a:0": 10.0, "b:0": 10.0}
    # Without start times, one host's shards add up (a GPU runs one shard at a time at best).
    m = merge([_shard("vm", 90, 9.0), _shard("vm", 30, 3.0), _shard("other", 10, 5.0)])
    assert m.seconds == 12.0 and m.gpu_seconds == {"vm:0": 12.0, "other:0": 5.0}
    assert m.to_json()["examples_per_second_per_gpu"]["vm:0"] == 10.0


def test_the_seed_and_shard_decide_each_round() -> None:
    from kfuse.campaign.runner import Campaign

    def seeds(seed: int, shard: tuple[int, int]) -> list[int]:
        c = Campaign(ExampleSpace(), Path("."), (), 1, 1.0, None, seed, shard)
        return [c.round_seed(i) for i in range(4)]

    assert seeds(1, (0, 2)) == seeds(1, (0, 2))
    assert len(set(seeds(1, (0, 2)) + seeds(1, (1, 2)) + seeds(2, (0, 2)))) == 12


def test_poisoned_bool_bytes_fail_the_comparison() -> None:
    from kfuse.runtime.arrays import POISON_BYTE
    from kfuse.testing import assert_close

    out = np.full(5, POISON_BYTE, np.uint8).view(np.bool_)
    with pytest.raises(AssertionError, match="byte other than 0 or 1"):
        assert_close(out, np.ones(5, np.bool_), DataType.Bool)


def test_drawn_inputs_keep_every_intermediate_within_the_element_bound() -> None:
    """max_elements bounds the fusion's intermediates too, not its inputs alone: an index
    that broadcasts against take_along_axis's input, and an outer product of a column and a
    row, are each far larger than their inputs (a GPU campaign drew a [2^20, 1, 1023, 2]
    take_along_axis output, 16 GB in the float64 reference, and ran out of memory)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from kfuse.testing.inputs import inputs_for

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        index = fd.define_tensor(shape=[1, -1], dtype=DataType.Int)
        column = fd.define_tensor(shape=[-1, 1])
        row = fd.define_tensor(shape=[1, -1])
        fd.add_output(fd.ops.take_along_axis(x, index, 1))
        fd.add_output(fd.ops.add(column, row))
    limit = 256
    seen = []

    @settings(max_examples=60, deadline=None, database=None)
    @given(st.data())
    def draw(data: Any) -> None:
        ins = data.draw(inputs_for(fd, framework="numpy", max_elements=limit, long_axis=True))
        x_, index_, column_, row_ = ins
        assert x_.size <= limit and index_.size <= limit
        assert x_.shape[0] * index_.shape[1] <= limit  # take_along_axis's output
        assert column_.shape[0] * row_.shape[1] <= limit  # the outer product
        seen.append(x_.shape[0] * index_.shape[1])

    draw()
    assert max(seen) > limit // 8  # the bound shrinks the sizes, not every example to nothing
