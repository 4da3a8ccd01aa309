#!/usr/bin/env bash
# On the GPU machine, after tools/device_check.sh has installed kfuse: Nsight Compute on the
# kernels of model-suite cases (tools/model_case.py, bf16, quick size), kfuse's and then
# torch.compile's, each kernel of the last call: duration, DRAM and compute throughput,
# occupancy, registers and the warp stall reasons. Full reports in $OUT/ncu-<case>-<peer>.txt.
#
#   KFUSE_SKIP_GPU_TESTS=1 tools/device_check.sh bash tools/device_ncu.sh groupnorm_fwd_g1 ...
#
# KFUSE_NCU_SIZE (e.g. 32768x1024) profiles that size instead of each case's quick size.
#
# Written without a GPU (2026-12-03, at 87d877c), and first run on a later device call.
set -u
OUT="${OUT:-/tmp/kfuse-device-logs}"
mkdir -p "$OUT"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SIZE=()
[ -n "${KFUSE_NCU_SIZE:-}" ] && SIZE=(--size "$KFUSE_NCU_SIZE")
for case in "$@"; do
    for peer in kfuse tc; do
        regex=kfuse_
        [ "$peer" = tc ] && regex=triton
        report="$OUT/ncu-$case-$peer.txt"
        # Calls 1 and 2 compile and warm up; every kernel of call 3 is profiled (a segmented
        # fusion launches several: --launch-skip counts the earlier calls' launches).
        # Once outside ncu: kfuse's kernels land in its disk cache, so the profiled runs do not
        # compile under the profiler.
        timeout "${KFUSE_NCU_TIMEOUT:-150}" python3 "$ROOT/tools/model_case.py" "$case" "${SIZE[@]}" \
            --peer "$peer" --calls 1 > /dev/null 2>&1
        launches=$(timeout 120 ncu --kernel-name "regex:$regex" --metrics gpu__time_duration.sum \
            python3 "$ROOT/tools/model_case.py" "$case" "${SIZE[@]}" --peer "$peer" --calls 1 2>/dev/null |
            grep -c "gpu__time_duration.sum")
        timeout "${KFUSE_NCU_TIMEOUT:-150}" ncu --kernel-name "regex:$regex" \
            --launch-skip "$((2 * launches))" --launch-count "$launches" \
            --section SpeedOfLight --section Occupancy --section LaunchStats \
            --section MemoryWorkloadAnalysis --section WarpStateStats \
            python3 "$ROOT/tools/model_case.py" "$case" "${SIZE[@]}" --peer "$peer" --calls 3 > "$report" 2>&1
        echo "=== $case ($peer): $launches kernel(s) a call"
        grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit (Registers|Shared)|Stall" \
            "$report" | sed 's/  \+/ /g' | head -n 40
    done
done
