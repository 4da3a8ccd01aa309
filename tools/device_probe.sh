#!/usr/bin/env bash
# One GPU call for tuning: build and install (no tests), benchmarks/probe.py, then Nsight
# Compute on the softmax kernel of 65536-element rows. Logs and probe.json under $OUT.
set -u
export PYTHONUNBUFFERED=1 KFUSE_SKIP_GPU_TESTS=1
OUT="${OUT:-/tmp/kfuse-device-logs}"
mkdir -p "$OUT"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${1:-}" = probe ]; then
    timeout "${KFUSE_PROBE_TIMEOUT:-300}" python3 benchmarks/probe.py --json "$OUT/probe.json" \
        ${KFUSE_PROBE_ONLY:+--only "$KFUSE_PROBE_ONLY"}
    # The longest row the sweep holds: held in part, reloaded in part (L2 hit rate, DRAM).
    cat > /tmp/long_row_once.py <<'PY'
import sys
sys.path.insert(0, "benchmarks")
import torch
from workloads import _softmax_definition
fd = _softmax_definition()
x = torch.randn(2048, 65536, device="cuda").to(torch.bfloat16)
fd.execute([x]); fd.execute([x]); torch.cuda.synchronize()
PY
    timeout 120 ncu --kernel-name regex:kfuse_persistent --launch-skip 1 --launch-count 1 \
        --section SpeedOfLight --section Occupancy --section LaunchStats \
        --section MemoryWorkloadAnalysis --section WarpStateStats \
        python3 /tmp/long_row_once.py > "$OUT/ncu_long_row.txt" 2>&1
    grep -E "Duration|Throughput|Registers|Achieved Occupancy|Theoretical Occupancy|Hit Rate|Block Limit|Shared Memory|Stall" \
        "$OUT/ncu_long_row.txt" | head -60
    exit 0
fi
exec bash "$ROOT/tools/device_check.sh" bash "$ROOT/tools/device_probe.sh" probe
