"""A campaign's results: counts by kind and outcome, by GPU, failures; JSON and merging.

The JSON (`summary.json` in the campaign's --out folder) holds: the kfuse version and commit,
the device, the command line and settings, the seed and shard, examples and examples per
second, `by_kind` ({kind: {outcome: count}}), `by_gpu` ({gpu: examples}), `by_scheduler`
({scheduler: examples whose first call ran it}: which schedulers the campaign reached),
`shrink_runs` (examples Hypothesis ran while shrinking failures, not counted as examples),
and `failures` (one record each, with the repro script's path), and where the workers' time
went: `worker_seconds` (the time workers spent in rounds) and `seconds_by_phase` (its parts,
as kfuse.campaign.property.PHASES names them; the rest is Hypothesis' own). `gpu_seconds` is
how long each GPU ran examples, the divisor of `examples_per_second_per_gpu`; `lost_gpus`
({gpu: {seconds, message}}) the GPUs that failed on the way (the run went on without them),
and `stopped` why the run ended before its budget, if it did. `merge` joins the summaries of
the shards of one campaign run as separate invocations (`kfuse campaign merge`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kfuse.campaign.property import OUTCOMES, PHASES


@dataclass
class Summary:
    """Counts and failures of one campaign (or of several merged)."""

    info: dict[str, Any] = field(default_factory=dict)
    by_kind: dict[str, Counter] = field(default_factory=dict)
    by_gpu: Counter = field(default_factory=Counter)
    by_scheduler: Counter = field(default_factory=Counter)
    shrink_runs: int = 0
    crashes: int = 0
    seconds: float = 0.0
    failures: list[dict[str, Any]] = field(default_factory=list)
    shards: list[dict[str, Any]] = field(default_factory=list)
    worker_seconds: float = 0.0
    seconds_by_phase: Counter = field(default_factory=Counter)
    gpu_seconds: Counter = field(default_factory=Counter)
    lost_gpus: dict[str, dict[str, Any]] = field(default_factory=dict)
    stopped: str | None = None

    def finish(self, seconds: float) -> None:
        """The run ended after `seconds` of wall time, all of it on each GPU it used but those
        lost on the way (until they were)."""
        self.seconds = seconds
        self.gpu_seconds = Counter(
            {g: self.lost_gpus.get(g, {}).get("seconds", seconds) for g in self.by_gpu}
        )

    def lose_gpu(self, gpu: int, seconds: float, message: str) -> bool:
        """GPU `gpu` failed `seconds` into the run (a worker could not use it); True the
        first time it is reported."""
        if str(gpu) in self.lost_gpus:
            return False
        self.lost_gpus[str(gpu)] = {"seconds": round(seconds, 1), "message": message}
        return True

    @property
    def clean(self) -> bool:
        """No example failed, no worker died, no GPU was lost and the run was not stopped."""
        return self.failed == 0 and not self.lost_gpus and self.stopped is None

    def count(
        self,
        kind: str,
        outcome: str,
        gpu: int | None,
        phases: dict[str, float] | None = None,
        schedulers: Iterable[str] = (),
    ) -> None:
        """One example of `kind` ended in `outcome` on `gpu` (None: the host emulator),
        having spent `phases` seconds in each of PHASES; its first call ran `schedulers`
        (none where it failed before running)."""
        self.by_kind.setdefault(kind, Counter())[outcome] += 1
        self.by_gpu["emulator" if gpu is None else str(gpu)] += 1
        self.seconds_by_phase.update(phases or {})
        self.by_scheduler.update(set(schedulers))

    @property
    def examples(self) -> int:
        """Examples run (shrink runs not included)."""
        return sum(sum(c.values()) for c in self.by_kind.values())

    @property
    def passed(self) -> int:
        """Examples that passed."""
        return sum(c["passed"] for c in self.by_kind.values())

    @property
    def failed(self) -> int:
        """Examples that did not pass, and workers that died."""
        return self.examples - self.passed + self.crashes

    def totals(self) -> Counter:
        """Examples by outcome, over all kinds."""
        total: Counter = Counter()
        for c in self.by_kind.values():
            total.update(c)
        return total

    def rate(self) -> float:
        """Examples per second of wall time."""
        return self.examples / self.seconds if self.seconds > 0 else 0.0

    def final_line(self) -> str:
        """`N passed, N failed` and the rate."""
        totals = self.totals()
        parts = [f"{totals[o]} {o.replace('_', ' ')}" for o in OUTCOMES[1:] if totals[o]]
        if self.crashes:
            parts.append(f"{self.crashes} worker crashes")
        detail = f" ({', '.join(parts)})" if parts else ""
        line = (
            f"{self.passed} passed, {self.failed} failed{detail} in {self.seconds:.0f} s "
            f"({self.rate():.1f} examples/s)"
        )
        for gpu, lost in sorted(self.lost_gpus.items()):
            line += f"; GPU {gpu} lost after {lost['seconds']:.0f} s: {lost['message']}"
        if self.stopped:
            line += f"; stopped early: {self.stopped}"
        return line

    def time_line(self) -> str:
        """Where the workers' time went, in milliseconds per example and shares of it."""
        n = max(self.examples, 1)
        total = max(self.worker_seconds, sum(self.seconds_by_phase.values()), 1e-9)
        parts = [(p, self.seconds_by_phase.get(p, 0.0)) for p in PHASES]
        parts.append(("other", total - sum(t for _, t in parts)))
        return f"time per example ({1e3 * total / n:.0f} ms of a worker's): " + ", ".join(
            f"{p.replace('_', ' ')} {1e3 * t / n:.1f} ms ({100 * t / total:.0f}%)" for p, t in parts
        )

    def scheduler_line(self) -> str:
        """How many examples reached each scheduler (a scheduler missing here was not tested)."""
        reached = ", ".join(f"{name} {n}" for name, n in self.by_scheduler.most_common())
        return f"examples by scheduler: {reached or 'none recorded'}"

    def to_json(self) -> dict[str, Any]:
        """The summary as the JSON file holds it."""
        return {
            **self.info,
            "examples": self.examples,
            "passed": self.passed,
            "failed": self.failed,
            "seconds": round(self.seconds, 1),
            "examples_per_second": round(self.rate(), 2),
            "by_kind": {k: {o: c[o] for o in OUTCOMES} for k, c in sorted(self.by_kind.items())},
            "by_gpu": dict(sorted(self.by_gpu.items())),
            "by_scheduler": dict(self.by_scheduler.most_common()),
            "examples_per_second_per_gpu": {
                g: round(n / self.gpu_seconds[g], 2) if self.gpu_seconds[g] else 0.0
                for g, n in sorted(self.by_gpu.items())
            },
            "gpu_seconds": {g: round(t, 1) for g, t in sorted(self.gpu_seconds.items())},
            "shrink_runs": self.shrink_runs,
            "crashes": self.crashes,
            "failures": self.failures,
            "shards": self.shards,
            "worker_seconds": round(self.worker_seconds, 1),
            "seconds_by_phase": {p: round(self.seconds_by_phase.get(p, 0.0), 4) for p in PHASES},
            "lost_gpus": self.lost_gpus,
            "stopped": self.stopped,
        }

    def write(self, path: Path) -> None:
        """Write the JSON to `path` (atomically: a reader never sees half a file)."""
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2, default=str) + "\n")
        tmp.replace(path)


def load(path: Path) -> Summary:
    """A Summary from a JSON file written by Summary.write."""
    data = json.loads(Path(path).read_text())
    summary = Summary()
    summary.info = {k: v for k, v in data.items() if k not in _DERIVED}
    summary.by_kind = {k: Counter(v) for k, v in data["by_kind"].items()}
    summary.by_gpu = Counter(data["by_gpu"])
    summary.by_scheduler = Counter(data.get("by_scheduler") or {})
    summary.shrink_runs = data["shrink_runs"]
    summary.crashes = data["crashes"]
    summary.seconds = data["seconds"]
    summary.failures = data["failures"]
    summary.shards = data.get("shards") or []
    summary.worker_seconds = data.get("worker_seconds", 0.0)
    summary.seconds_by_phase = Counter(data.get("seconds_by_phase") or {})
    # Summaries written before gpu_seconds existed: each GPU ran for the whole run.
    summary.gpu_seconds = Counter(
        data.get("gpu_seconds") or dict.fromkeys(summary.by_gpu, summary.seconds)
    )
    summary.lost_gpus = data.get("lost_gpus") or {}
    summary.stopped = data.get("stopped")
    return summary


_DERIVED = {
    "examples",
    "passed",
    "failed",
    "seconds",
    "examples_per_second",
    "by_kind",
    "by_gpu",
    "by_scheduler",
    "examples_per_second_per_gpu",
    "shrink_runs",
    "crashes",
    "failures",
    "shards",
    "worker_seconds",
    "seconds_by_phase",
    "gpu_seconds",
    "lost_gpus",
    "stopped",
}


def merge(summaries: list[Summary]) -> Summary:
    """One Summary of several shards of a campaign: counts add up, GPUs are named host:gpu.

    Wall time and each GPU's time come from when the shards ran. Where every shard says when
    it started, the time is the length of the union of their [start, start + seconds]
    intervals (over all shards for the wall time, over a GPU's shards for its time). Where
    one does not (summaries written before `started` existed), the shards of one host are
    taken to have run one after another and different hosts at the same time; that reading
    never overstates a rate, since one GPU does not run two shards at full speed at once."""
    merged = Summary()
    merged.info = {"merged_from": len(summaries)}
    for s in summaries:
        host = s.info.get("host", "?")
        for kind, counts in s.by_kind.items():
            merged.by_kind.setdefault(kind, Counter()).update(counts)
        for gpu, n in s.by_gpu.items():
            merged.by_gpu[f"{host}:{gpu}"] += n
        merged.by_scheduler.update(s.by_scheduler)
        merged.shrink_runs += s.shrink_runs
        merged.crashes += s.crashes
        merged.worker_seconds += s.worker_seconds
        merged.seconds_by_phase.update(s.seconds_by_phase)
        merged.failures.extend(s.failures)
        for gpu, lost in s.lost_gpus.items():
            merged.lost_gpus[f"{host}:{gpu}"] = lost
        if s.stopped:
            shard = f"shard {s.info.get('shard', '?')} on {host}"
            merged.stopped = "; ".join(filter(None, [merged.stopped, f"{shard}: {s.stopped}"]))
        merged.shards.append(
            {k: s.info.get(k) for k in ("host", "shard", "seed", "device", "kfuse_commit")}
            | {"examples": s.examples, "seconds": s.seconds}
        )
    merged.seconds, merged.gpu_seconds = _merged_times(summaries)
    return merged


def _merged_times(summaries: list[Summary]) -> tuple[float, Counter]:
    """The wall time of merged shards and each host:gpu's time (see merge)."""
    gpu_seconds: dict[str, float] = {}
    if all(isinstance(s.info.get("started"), (int, float)) for s in summaries):
        spans: dict[str, list[tuple[float, float]]] = {}
        for s in summaries:
            span = (s.info["started"], s.info["started"] + s.seconds)
            spans.setdefault("wall", []).append(span)
            for gpu, t in s.gpu_seconds.items():  # less than the shard's where it was lost
                spans.setdefault(f"{s.info.get('host', '?')}:{gpu}", []).append(
                    (span[0], span[0] + t)
                )
        lengths = {key: _union_length(found) for key, found in spans.items()}
        wall = lengths.pop("wall", 0.0)
        return wall, Counter(lengths)
    by_host: dict[str, float] = {}
    for s in summaries:
        host = s.info.get("host", "?")
        by_host[host] = by_host.get(host, 0.0) + s.seconds
        for gpu, t in s.gpu_seconds.items():
            key = f"{host}:{gpu}"
            gpu_seconds[key] = gpu_seconds.get(key, 0.0) + t
    return max(by_host.values(), default=0.0), Counter(gpu_seconds)


def _union_length(spans: list[tuple[float, float]]) -> float:
    """How long at least one of the [start, end] spans covers."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total
