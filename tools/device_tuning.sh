#!/usr/bin/env bash
# One device call of tuning measurements: build and install this tree's kfuse (no GPU tests),
# then every command of a plan file, each under its own time limit, with kfuse importable.
#
#   tools/device_tuning.sh PLAN [SECONDS_A_COMMAND]     (default 150 s a command)
#
# PLAN holds one shell command a line (blank lines and lines starting with # are skipped),
# run from the repository root; `tools/peer_kernels.py` commands write under $OUT/peer, which
# comes back as one archive. A device call returns at most 8 files, so $OUT gets: check.txt
# (the build's summary), tuning.txt (every command's whole output) and peer-kernels.tgz; the
# call's own output is each command's last lines (KFUSE_TUNING_TAIL, default 25).
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PLAN="$1"
LIMIT="${2:-150}"
REAL="${OUT:-/tmp/kfuse-device-logs}"
mkdir -p "$REAL"
logs="$(mktemp -d)"
OUT="$logs" KFUSE_SKIP_GPU_TESTS=1 KFUSE_LOG_TAIL=3 bash tools/device_check.sh true \
    > "$REAL/check.txt" 2>&1
tail -n 6 "$REAL/check.txt"
export PYTHONPATH="${KFUSE_SITE:-/tmp/kfuse-site}${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 OUT="$logs/peer"
mkdir -p "$OUT"
while IFS= read -r command || [ -n "$command" ]; do
    case "$command" in "" | "#"*) continue ;; esac
    echo "=== $command" | tee -a "$REAL/tuning.txt"
    start=$(date +%s)
    timeout "$LIMIT" bash -c "$command" > "$logs/one.txt" 2>&1
    rc=$?
    cat "$logs/one.txt" >> "$REAL/tuning.txt"
    tail -n "${KFUSE_TUNING_TAIL:-25}" "$logs/one.txt"
    echo "--- rc $rc, $(( $(date +%s) - start )) s" | tee -a "$REAL/tuning.txt"
done < "$PLAN"
if [ -n "$(ls -A "$OUT")" ]; then
    tar -czf "$REAL/peer-kernels.tgz" -C "$OUT" .
fi
