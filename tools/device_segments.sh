#!/usr/bin/env bash
# One GPU call for the host cost of segmented fusions (issue 60): build and install kfuse (no
# GPU tests unless KFUSE_SEGMENTS_TESTS=1, then this branch's segmented-replay GPU tests), then
# in one process per tool on the same machine:
#   tools/segmented_host_cost.py --device cuda            the replayed calls, 1-16 segments
#   tools/segmented_host_cost.py --device cuda --checked  the same calls on the checked path
#   benchmarks/host_benchmarks.py                         nvFuser's host benchmarks
# Their output ends the call's; host_benchmarks.json and the logs go to $OUT.
#
#   tools/device_segments.sh          (about 2 minutes after the build)
set -u
export PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/kfuse-device-logs}"
mkdir -p "$OUT"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${1:-}" = measure ]; then
    cd "$ROOT"
    if [ "${KFUSE_SEGMENTS_TESTS:-0}" = 1 ]; then
        timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu \
            tests/test_segmented_replay_gpu.py > "$OUT/segments-tests.log" 2>&1
        tail -n 3 "$OUT/segments-tests.log"
    fi
    for mode in "" --checked; do
        echo "=== segmented_host_cost.py --device cuda $mode"
        timeout 240 python3 tools/segmented_host_cost.py --device cuda $mode 2>&1 | tail -n 8
    done
    echo "=== host_benchmarks.py"
    timeout 300 python3 benchmarks/host_benchmarks.py --json "$OUT/host_benchmarks.json" 2>&1 \
        | tail -n 12
    exit 0
fi
KFUSE_SKIP_GPU_TESTS=1 KFUSE_LOG_TAIL=40 exec bash "$ROOT/tools/device_check.sh" \
    bash "$ROOT/tools/device_segments.sh" measure
