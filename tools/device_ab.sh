#!/usr/bin/env bash
# On the GPU machine, after tools/device_check.sh has installed this tree's kfuse: the
# benchmark suite's kfuse rows for another build of kfuse (a wheel, e.g. the commit before a
# refactor) and for this one, alternately in separate processes (A B A B ...), so that both
# see the same machine; then the median of each workload's rounds for each, side by side.
#
#   tools/device_ab.sh OLD.whl [ROUNDS] [WORKLOADS]      (default 5 rounds; W1..W6, H1 and H1s)
#
# H1 (microseconds a cached call) varies by 30% between processes: settle it with 5 or more
# rounds (2 rounds of W1..W6 and H1 take about 90 s).
set -u
OLD_WHEEL="$1"
ROUNDS="${2:-5}"
ONLY="${3:-W1,W1f,W2,W3,W4,W5,W6,H1,H1s}"
OUT="${OUT:-/tmp/kfuse-device-logs}"
NEW_SITE="${KFUSE_SITE:-/tmp/kfuse-site}"
OLD_SITE=/tmp/kfuse-old-site
rm -rf "$OLD_SITE"
python3 -m pip install --no-index --no-deps --quiet --target "$OLD_SITE" "$OLD_WHEEL" || exit 1
for r in $(seq 1 "$ROUNDS"); do
    for which in old new; do
        site="$NEW_SITE"
        [ "$which" = old ] && site="$OLD_SITE:$NEW_SITE"  # the old kfuse first; nanobind from ours
        PYTHONPATH="$site" timeout 150 python3 benchmarks/run.py --only "$ONLY" --peers kfuse \
            --reps 30 --json "$OUT/ab-$which-$r.json" > "$OUT/ab-$which-$r.log" 2>&1 ||
            echo "round $r ($which) failed: $(tail -n 3 "$OUT/ab-$which-$r.log")"
    done
done
python3 - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys
from pathlib import Path
out, rounds = Path(sys.argv[1]), int(sys.argv[2])
rows = {}
for which in ("old", "new"):
    for r in range(1, rounds + 1):
        path = out / f"ab-{which}-{r}.json"
        if not path.exists():
            continue
        for row in json.loads(path.read_text())["results"]:
            peer = row.get("peer", "")
            if "us_per_call" in row and peer.startswith("kfuse"):  # H1, H1s: us a cached call
                key, value = f"{row['workload']} {peer[6:]}", row["us_per_call"]
            elif peer == "kfuse" and "ms" in row:  # a workload: kernel ms
                key, value = row["workload"], row["ms"]
            else:
                continue
            rows.setdefault(key, {}).setdefault(which, []).append(value)
print(f"{'row':14s} {'old (median)':>14s} {'new':>10s}  new/old   rounds: old | new")
for key, by in rows.items():
    old, new = by.get("old", []), by.get("new", [])
    if not old or not new:
        print(f"{key:14s} missing: old {old} new {new}")
        continue
    mo, mn = statistics.median(old), statistics.median(new)
    spread = lambda v: " ".join(f"{x:.4g}" for x in v)
    print(f"{key:14s} {mo:14.4g} {mn:10.4g}  {mn / mo:7.3f}   {spread(old)} | {spread(new)}")
PY
