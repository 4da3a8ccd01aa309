#!/usr/bin/env bash
# Issue 25's device call, on a machine with several GPUs, after tools/device_check.sh has
# installed kfuse:
#
#   KFUSE_SKIP_GPU_TESTS=1 tools/device_check.sh tools/device_multigpu.sh [SECONDS] [SEED] [SHARD]
#
# 1. `kfuse campaign` over every GPU for SECONDS (default 240) with nvidia-smi sampled every
#    2 s beside it; SHARD (default 0/1) makes it shard I/N of seed SEED (default 25), so that
#    calls in a row (or on later days) add shards of one campaign, joined by `kfuse campaign merge`;
# 2. the same on GPU 0 alone for a quarter of that: the one-GPU rate the scaling is against;
# 3. a rehearsal of a GPU's loss (KFUSE_MULTIGPU_LOSS_S, default 60 s): GPU 1 marked failed
#    (`fail-gpu-1`, kfuse.campaign.worker.FAIL_GPU_MARKER) and a worker killed a third of the
#    way in; its summary must name GPU 1 lost, one crash (the killed worker's example) and
#    examples after the loss on the other GPUs.
# $OUT gets campaign-all.json, campaign-one.json, campaign-loss.json, nvidia-smi.csv and
# multigpu.txt (the campaigns' output); the output ends with a table of the three.
# KFUSE_MULTIGPU_DEVICE=emulator runs step 1 on the host emulator instead (a dry run of the
# plumbing on a machine without GPUs; steps 2 and 3 need GPUs and are skipped).
set -u
SECONDS_WANTED="${1:-240}"
SEED="${2:-25}"
SHARD="${3:-0/1}"
OUT="${OUT:-/tmp/kfuse-device-logs}"
DEVICE="${KFUSE_MULTIGPU_DEVICE:-cuda}"
LOSS_S="${KFUSE_MULTIGPU_LOSS_S:-60}"
RUN="$(mktemp -d /tmp/kfuse-multigpu.XXXXXX)"
LOG="$OUT/multigpu.txt"
mkdir -p "$OUT"
: > "$LOG"
cd /tmp || exit 1

campaign() { # NAME ARGS...: a campaign into $RUN/NAME, its summary copied to $OUT
    local name="$1"
    shift
    echo "=== campaign $name: $*" | tee -a "$LOG"
    python3 -m kfuse campaign --seed "$SEED" --out "$RUN/$name" "$@" >> "$LOG" 2>&1
    local rc=$?
    tail -n 2 "$LOG"  # examples by scheduler, the counts
    echo "exit status $rc" | tee -a "$LOG"
    cp "$RUN/$name/summary.json" "$OUT/campaign-$name.json" 2>/dev/null
}

gpus=0
if [ "$DEVICE" = cuda ]; then
    gpus="$(python3 -c 'import torch; print(torch.cuda.device_count())')"
    nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used --format=csv -l 2 \
        > "$OUT/nvidia-smi.csv" 2>&1 &
    smi=$!
fi

campaign all --device "$DEVICE" --budget "$SECONDS_WANTED" --shard "$SHARD"
if [ "$gpus" -ge 2 ]; then
    CUDA_VISIBLE_DEVICES=0 campaign one --device cuda --budget $((SECONDS_WANTED / 4))
    # The rehearsal: once a worker runs an example a third of the way in, mark GPU 1 failed
    # and kill that worker; the pool started next finds GPU 1 failing its check.
    mkdir -p "$RUN/loss"
    (
        sleep $((LOSS_S / 3))
        touch "$RUN/loss/fail-gpu-1"
        for _ in $(seq 100); do
            victim="$(ls "$RUN/loss" | sed -n 's/^inflight-\([0-9]*\)\.py$/\1/p' | head -n 1)"
            [ -n "$victim" ] && kill -9 "$victim" && echo "killed worker $victim" >> "$LOG" && break
            sleep 0.2
        done
    ) &
    campaign loss --device cuda --budget "$LOSS_S"
    wait
else
    echo "steps 2 and 3 skipped: $gpus GPU(s)" | tee -a "$LOG"
fi
[ -n "${smi:-}" ] && kill "$smi" 2>/dev/null

python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path

out = Path(sys.argv[1])
for name in ("all", "one", "loss"):
    path = out / f"campaign-{name}.json"
    if not path.exists():
        continue
    s = json.loads(path.read_text())
    print(f"{name}: {s['examples']} examples in {s['seconds']} s ({s['examples_per_second']}/s), "
          f"{s['failed']} failed, {s['crashes']} crashes; by GPU {s['by_gpu']}; "
          f"per GPU /s {s['examples_per_second_per_gpu']}")
    for gpu, lost in (s.get("lost_gpus") or {}).items():
        print(f"  GPU {gpu} lost after {lost['seconds']} s: {lost['message']}")
    if s.get("stopped"):
        print(f"  stopped early: {s['stopped']}")
rates = {}
for name in ("all", "one"):
    path = out / f"campaign-{name}.json"
    if path.exists():
        rates[name] = json.loads(path.read_text())["examples_per_second"]
if rates.get("one"):
    print(f"scaling: {rates['all'] / rates['one']:.2f}x one GPU's rate")
PY
