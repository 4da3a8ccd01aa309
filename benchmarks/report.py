"""Turn a benchmark JSON (benchmarks/run.py --json) into a Markdown table and a PNG chart.

python benchmarks/report.py results/bench.json   # writes bench.md and bench.png beside it
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def table(data: dict[str, Any]) -> str:
    """The results as Markdown: one row per workload and peer."""
    extra = "".join(
        f"; {k} {data[k]}" for k in ("driver", "nvrtc", "python", "kfuse_commit") if k in data
    )
    lines = [
        f"Device: {data['device']}; torch {data['torch']}{extra}; {data.get('date', '')}; "
        f"device-to-device copy {data['copy_gbs']:.0f} GB/s.",
        "",
        *([data["note"], ""] if "note" in data else []),
        "| workload | peer | time | bandwidth | of copy | check |",
        "|---|---|---|---|---|---|",
    ]
    for r in data["results"]:
        if "gbs" in r:
            lines.append(
                f"| {r['workload']} | {r['peer']} | {r['ms'] * 1e3:.1f} us | "
                f"{r['gbs']:.0f} GB/s | {100 * r['fraction_of_copy']:.1f}% | "
                f"{r['status']} |"
            )
        elif "us_per_call" in r:
            extra = (
                f" ({r['ratio_to_cupy_allocating']:.2f}x CuPy allocating)"
                if "ratio_to_cupy_allocating" in r
                else ""
            )
            lines.append(f"| H1 | {r['peer']} | {r['us_per_call']:.2f} us per call{extra} | | | |")
        elif "ms" in r:
            lines.append(f"| {r['workload']} | {r['peer']} | {r['ms']:.1f} ms | | | |")
        else:
            lines.append(f"| {r['workload']} | {r['peer']} | {r['status']} | | | |")
    return "\n".join(lines) + "\n"


def chart(data: dict[str, Any], path: Path) -> None:
    """Bars of achieved bandwidth as a fraction of copy bandwidth, per workload and peer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in data["results"] if "fraction_of_copy" in r]
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    peers = list(dict.fromkeys(r["peer"] for r in rows))
    width = 0.8 / max(1, len(peers))
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for k, peer in enumerate(peers):
        xs, ys = [], []
        for i, w in enumerate(workloads):
            for r in rows:
                if r["workload"] == w and r["peer"] == peer:
                    xs.append(i + k * width)
                    ys.append(100 * r["fraction_of_copy"])
        ax.bar(xs, ys, width, label=peer)
    ax.axhline(90, color="grey", linestyle="--", linewidth=1)
    ax.set_xticks([i + width * (len(peers) - 1) / 2 for i in range(len(workloads))])
    ax.set_xticklabels(workloads)
    ax.set_ylabel("% of device-to-device copy bandwidth")
    ax.set_title(f"{data['device']}, {data.get('date', '')}")
    # below the axes: above them it covered the bars of the last workloads
    ax.legend(fontsize=8, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.08))
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str]) -> int:
    src = Path(argv[0])
    data = json.loads(src.read_text())
    src.with_suffix(".md").write_text(table(data))
    chart(data, src.with_suffix(".png"))
    print(table(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
