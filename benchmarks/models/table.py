"""Tables of a model-suite run: Markdown (for notes and issues) and a compact console summary.

Both read the run's JSON form ({"rows": [...], machine info}); neither needs a GPU or
matplotlib.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any


def geomean(values: Iterable[float]) -> float | None:
    vals = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def ratios(rows: Iterable[dict[str, Any]]) -> list[float]:
    """kfuse / torch.compile speed ratios of the rows that have one (both peers checked ok)."""
    return [r["ratio"] for r in rows if "ratio" in r]


def size_label(row: dict[str, Any]) -> str:
    return "x".join(str(n) for n in row["shape"])


def _us(row: dict[str, Any], peer: str) -> str:
    p = row.get("peers", {}).get(peer, {})
    if "us" in p:
        return f"{p['us']:.1f}" + ("" if p.get("check") == "ok" else " (wrong)")
    if "error" in p:
        return "error"
    return "-"


def _ratio(row: dict[str, Any]) -> str:
    return f"{row['ratio']:.2f}x" if "ratio" in row else "-"


def _copy(row: dict[str, Any]) -> str:
    k = row.get("peers", {}).get("kfuse", {})
    return f"{100 * k['fraction_of_copy']:.0f}%" if "fraction_of_copy" in k else "-"


def _segments(row: dict[str, Any]) -> str:
    if "segments" not in row:
        return "-"
    return f"{row['segments']} ({', '.join(row['schedulers'])})"


def _status(row: dict[str, Any]) -> str:
    status = row.get("status", "")
    if status in ("mismatch", "error"):
        details = [
            f"{peer}: {p.get('error') or p.get('check')}"
            for peer, p in row.get("peers", {}).items()
            if "error" in p or p.get("check") != "ok"
        ]
        return f"{status}: " + "; ".join(details)
    return status


def _header(data: dict[str, Any]) -> str:
    info = [f"{data.get('device', '?')}", f"torch {data.get('torch', '?')}"]
    info += [f"{k} {data[k]}" for k in ("triton", "driver", "nvrtc", "python") if k in data]
    if "kfuse_commit" in data:
        info.append(f"kfuse {data['kfuse_commit']}")
    copy = data.get("copy_gbs")
    line = "; ".join(info) + f"; {data.get('date', '')}"
    if copy:
        line += f"; device-to-device copy {copy:.0f} GB/s"
    return line + "."


def markdown(data: dict[str, Any]) -> str:
    """One row per case, dtype and size, then the geometric means and any notes."""
    rows = data["rows"]
    lines = [
        _header(data),
        "",
        "| family | case | dtype | size | kfuse us | torch.compile us | eager us | "
        "kfuse / torch.compile | kfuse % of copy | kfuse segments | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['family']} | {r['case']} | {r['dtype']} | {size_label(r)} | "
            f"{_us(r, 'kfuse')} | {_us(r, 'torch.compile')} | {_us(r, 'torch eager')} | "
            f"{_ratio(r)} | {_copy(r)} | {_segments(r)} | {_status(r)} |"
        )
    lines += ["", *geomean_lines(rows)]
    notes = notes_of(rows)
    if notes:
        lines += ["", "Notes:", *(f"- {n}" for n in notes)]
    return "\n".join(lines) + "\n"


def geomean_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The geometric mean of kfuse / torch.compile over every row, then per family."""
    total = geomean(ratios(rows))
    counted = len(ratios(rows))
    out = [
        f"Geometric mean of kfuse / torch.compile (speed) over {counted} of {len(rows)} rows: "
        + (f"{total:.2f}x" if total else "-")
    ]
    for family in dict.fromkeys(r["family"] for r in rows):
        fam = [r for r in rows if r["family"] == family]
        g = geomean(ratios(fam))
        out.append(f"  {family}: " + (f"{g:.2f}x" if g else "-") + f" ({len(ratios(fam))} rows)")
    return out


def notes_of(rows: list[dict[str, Any]]) -> list[str]:
    """Each case's workaround note and skip reason, once."""
    notes: dict[str, None] = {}
    for r in rows:
        if "note" in r:
            notes[f"{r['case']}: {r['note']}"] = None
        if r.get("status", "").startswith("skipped"):
            notes[f"{r['case']} {size_label(r)} {r['dtype']}: {r['status']}"] = None
    return list(notes)


def console(rows: list[dict[str, Any]]) -> str:
    """The compact summary printed at the end of a run."""
    head = (
        f"{'case':25s} {'dtype':8s} {'size':18s} {'kfuse us':>10s} {'compile us':>10s} "
        f"{'eager us':>10s} {'ratio':>7s} {'%copy':>6s} {'seg':>3s}  status"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        status = r.get("status", "")
        lines.append(
            f"{r['case']:25s} {r['dtype']:8s} {size_label(r):18s} {_us(r, 'kfuse'):>10s} "
            f"{_us(r, 'torch.compile'):>10s} {_us(r, 'torch eager'):>10s} {_ratio(r):>7s} "
            f"{_copy(r):>6s} {r.get('segments', '-')!s:>3s}  {status}"
        )
    lines += ["", *geomean_lines(rows)]
    return "\n".join(lines)
