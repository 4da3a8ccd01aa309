#!/usr/bin/env bash
# On the GPU machine, after tools/device_check.sh has installed kfuse: the model suite at its
# quick sizes with every kernel profiled, then its charts. $OUT gets models.json and
# models.log; the PNG per family and the Markdown table go into $OUT/models-charts.tgz, one
# file, since a device call returns at most 8 (the issues' closing notes give the PNGs).
#
#   tools/device_models.sh [ARGS...]   (ARGS go to benchmarks/models/run.py: --only REGEX, ...)
#
# KFUSE_MODELS_QUICK= (set and empty) runs every size of the sweep instead of the quick ones;
# KFUSE_MODELS_TIMEOUT and KFUSE_MODELS_BUDGET bound the run (seconds).
set -u
OUT="${OUT:-/tmp/kfuse-device-logs}"
mkdir -p "$OUT"
timeout "${KFUSE_MODELS_TIMEOUT:-300}" python3 benchmarks/models/run.py ${KFUSE_MODELS_QUICK---quick} --kernels \
    --budget "${KFUSE_MODELS_BUDGET:-270}" --json "$OUT/models.json" "$@" > "$OUT/models.log" 2>&1
rc=$?
tail -n 30 "$OUT/models.log"
charts="$(mktemp -d)/models-charts"
if [ -s "$OUT/models.json" ]; then
    # chart.py writes the Markdown table before the PNGs (which need matplotlib): whatever
    # it wrote goes back.
    python3 benchmarks/models/chart.py "$OUT/models.json" "$charts" > "$charts.log" 2>&1 ||
        echo "chart.py failed: $(tail -n 1 "$charts.log")"
    tar czf "$OUT/models-charts.tgz" -C "$(dirname "$charts")" models-charts
    echo "in models-charts.tgz: $(ls "$charts" | tr '\n' ' ')"
fi
exit $rc
