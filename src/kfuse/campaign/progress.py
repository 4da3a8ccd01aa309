"""The campaign's live progress: a rich table on a terminal, a status line every
LINE_SECONDS otherwise (CI logs, a GPU machine's captured output)."""

from __future__ import annotations

import time
from typing import Any, TextIO

from kfuse.campaign.property import OUTCOMES
from kfuse.campaign.summary import Summary

LINE_SECONDS = 15.0
MIN_LINE_SECONDS = 2.0
"""A short --budget gets a line every quarter of it, but not more often than this."""


class Progress:
    """Shows `summary` as it fills; a context manager around the campaign."""

    def __init__(
        self,
        summary: Summary,
        stream: TextIO,
        *,
        budget: float | None = None,
        examples: int | None = None,
    ) -> None:
        self.summary = summary
        self.stream = stream
        self.budget = budget  # the target the lines count towards: seconds or examples
        self.examples = examples
        self.every = LINE_SECONDS
        if budget is not None:
            self.every = min(LINE_SECONDS, max(MIN_LINE_SECONDS, budget / 4))
        self.live: Any = None
        self.elapsed = 0.0
        self._last_line = time.monotonic()

    def __enter__(self) -> Progress:
        if self.stream.isatty():
            from rich.console import Console
            from rich.live import Live

            self.live = Live(self._table(), console=Console(file=self.stream), refresh_per_second=2)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live is not None:
            self.live.update(self._table())
            self.live.__exit__(*exc)

    def refresh(self, elapsed: float) -> None:
        """Show the counts after `elapsed` seconds."""
        self.elapsed = elapsed
        if self.live is not None:
            self.live.update(self._table())
        elif time.monotonic() - self._last_line >= self.every:
            self._last_line = time.monotonic()
            print(self._line(), file=self.stream, flush=True)

    def failure(self, record: dict[str, Any]) -> None:
        """Say that a failure was found, with where its repro is."""
        text = (
            f"{record['outcome']} in a {record['kind']} fusion: "
            f"{record['message'].splitlines()[0][:200]}\n  repro: {record['repro']}"
        )
        self.note(text)

    def note(self, text: str) -> None:
        """Say something about the run (a GPU lost)."""
        if self.live is not None:
            self.live.console.print(text)
        else:
            print(text, file=self.stream, flush=True)

    def _rate(self) -> float:
        return self.summary.examples / self.elapsed if self.elapsed > 0 else 0.0

    def _where(self) -> str:
        """How far the run is towards its target: time left of a budget, examples left of a
        count."""
        if self.budget is not None:
            left = max(0.0, self.budget - self.elapsed)
            return f"{self.elapsed:.0f} s of {self.budget:g} s, {left:.0f} s left"
        if self.examples is not None:
            left_n = max(0, self.examples - self.summary.examples)
            return f"{self.elapsed:.0f} s, {left_n} of {self.examples} examples left"
        return f"{self.elapsed:.0f} s"

    def _line(self) -> str:
        s = self.summary
        totals = s.totals()
        gpus = " ".join(f"{g}:{n}" for g, n in sorted(s.by_gpu.items()))
        return (
            f"[{self._where()}] {s.examples} examples ({self._rate():.1f}/s), "
            + ", ".join(f"{totals[o]} {o.replace('_', ' ')}" for o in OUTCOMES)
            + (f", {s.crashes} crashes" if s.crashes else "")
            + f"; by device {gpus}"
        )

    def _table(self) -> Any:
        from rich.table import Table

        s = self.summary
        table = Table(
            title=f"kfuse campaign: {s.examples} examples ({self._rate():.1f}/s) "
            f"[{self._where()}]" + (f", {s.crashes} worker crashes" if s.crashes else "")
        )
        table.add_column("kind")
        for o in OUTCOMES:
            table.add_column(o.replace("_", " "), justify="right")
        for kind, counts in sorted(s.by_kind.items()):
            table.add_row(kind, *(str(counts[o]) for o in OUTCOMES))
        totals = s.totals()
        table.add_row("all", *(str(totals[o]) for o in OUTCOMES), style="bold")
        table.caption = "examples by device: " + ", ".join(
            f"{g} {n}" for g, n in sorted(s.by_gpu.items())
        )
        return table
