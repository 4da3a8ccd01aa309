"""A campaign's results: counts by kind and outcome, by GPU, failures; JSON and merging.

The JSON (`summary.json` in the campaign's --out folder) holds: the kfuse version and commit,
the device, the command line and settings, the seed and shard, examples and examples per
second, `by_kind` ({kind: {outcome: count}}), `by_gpu` ({gpu: examples}), `shrink_runs`
(examples Hypothesis ran while shrinking failures, not counted as examples), and `failures`
(one record each, with the repro script's path). `merge` joins the summaries of the shards of
one campaign run as separate invocations (`kfuse campaign merge`).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kfuse.campaign.property import OUTCOMES


@dataclass
class Summary:
    """Counts and failures of one campaign (or of several merged)."""

    info: dict[str, Any] = field(default_factory=dict)
    by_kind: dict[str, Counter] = field(default_factory=dict)
    by_gpu: Counter = field(default_factory=Counter)
    shrink_runs: int = 0
    crashes: int = 0
    seconds: float = 0.0
    failures: list[dict[str, Any]] = field(default_factory=list)
    shards: list[dict[str, Any]] = field(default_factory=list)

    def count(self, kind: str, outcome: str, gpu: int | None) -> None:
        """One example of `kind` ended in `outcome` on `gpu` (None: the host emulator)."""
        self.by_kind.setdefault(kind, Counter())[outcome] += 1
        self.by_gpu["emulator" if gpu is None else str(gpu)] += 1

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
        return (
            f"{self.passed} passed, {self.failed} failed{detail} in {self.seconds:.0f} s "
            f"({self.rate():.1f} examples/s)"
        )

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
            "examples_per_second_per_gpu": {
                g: round(n / self.seconds, 2) if self.seconds else 0.0
                for g, n in sorted(self.by_gpu.items())
            },
            "shrink_runs": self.shrink_runs,
            "crashes": self.crashes,
            "failures": self.failures,
            "shards": self.shards,
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
    summary.shrink_runs = data["shrink_runs"]
    summary.crashes = data["crashes"]
    summary.seconds = data["seconds"]
    summary.failures = data["failures"]
    summary.shards = data.get("shards") or []
    return summary


_DERIVED = {
    "examples",
    "passed",
    "failed",
    "seconds",
    "examples_per_second",
    "by_kind",
    "by_gpu",
    "examples_per_second_per_gpu",
    "shrink_runs",
    "crashes",
    "failures",
    "shards",
}


def merge(summaries: list[Summary]) -> Summary:
    """One Summary of several shards of a campaign, run at the same time (elsewhere): counts
    add up, the wall time is the longest shard's, GPUs are named host:gpu."""
    merged = Summary()
    merged.info = {"merged_from": len(summaries)}
    for s in summaries:
        host = s.info.get("host", "?")
        for kind, counts in s.by_kind.items():
            merged.by_kind.setdefault(kind, Counter()).update(counts)
        for gpu, n in s.by_gpu.items():
            merged.by_gpu[f"{host}:{gpu}"] += n
        merged.shrink_runs += s.shrink_runs
        merged.crashes += s.crashes
        merged.seconds = max(merged.seconds, s.seconds)
        merged.failures.extend(s.failures)
        merged.shards.append(
            {k: s.info.get(k) for k in ("host", "shard", "seed", "device", "kfuse_commit")}
            | {"examples": s.examples, "seconds": s.seconds}
        )
    return merged
