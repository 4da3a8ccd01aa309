"""Charts and the Markdown table of a model-suite run, from its JSON (made on any machine).

    python benchmarks/models/chart.py RESULTS.json OUTDIR

writes OUTDIR/<family>.png for each family (kfuse's speed over torch.compile's across the
sweep, one line per case and dtype; a gap where a row has no ratio: a mismatch, an error or a
skip) and OUTDIR/models.md (table.markdown). matplotlib is imported here only.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/

from models import table  # noqa: E402


def family_chart(data: dict[str, Any], family: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    rows = [r for r in data["rows"] if r["family"] == family]
    sizes = list(dict.fromkeys(table.size_label(r) for r in rows))
    lines = list(dict.fromkeys((r["case"], r["dtype"]) for r in rows))
    dtypes = {dtype for _, dtype in lines}
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(sizes) + 3), 4.5))
    for case, dtype in lines:
        by_size = {
            table.size_label(r): r.get("ratio", math.nan)
            for r in rows
            if r["case"] == case and r["dtype"] == dtype
        }
        ys = [by_size.get(s, math.nan) for s in sizes]
        label = case if len(dtypes) == 1 else f"{case} ({dtype})"
        ax.plot(range(len(sizes)), ys, marker="o", label=label)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_yscale("log")
    times = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}x")
    ax.yaxis.set_major_formatter(times)
    ax.yaxis.set_minor_formatter(times)
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set_xticks(range(len(sizes)))
    ax.set_xticklabels(sizes, rotation=20, ha="right", fontsize=8)
    ax.set_xlabel("size")
    ax.set_ylabel("kfuse speed / torch.compile speed")
    gm = table.geomean(table.ratios(rows))
    ax.set_title(
        f"{family}: {data.get('device', '')}, {data.get('date', '')}"
        + (f" (geometric mean {gm:.2f}x)" if gm else ""),
        fontsize=10,
    )
    ax.legend(fontsize=8, loc="best")
    ax.grid(True, which="both", axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python benchmarks/models/chart.py RESULTS.json OUTDIR", file=sys.stderr)
        return 2
    data = json.loads(Path(argv[0]).read_text())
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    # The table first: it needs no matplotlib, so a machine without it still gets the table.
    md = table.markdown(data)
    (out / "models.md").write_text(md)
    print(md)
    for family in dict.fromkeys(r["family"] for r in data["rows"]):
        family_chart(data, family, out / f"{family}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
