#!/usr/bin/env bash
# One call on the GPU machine: build and install, GPU tests, then the benchmarks, with logs and
# bench.json under $OUT and a summary at the end (tools/device_check.sh does the steps).
#
#   tools/device_run.sh quick   # GPU tests (bounded) + short benchmarks, no torch.compile
#   tools/device_run.sh full    # GPU tests + the whole benchmark suite against every peer
#   tools/device_run.sh models [ARGS...]  # GPU tests + the model suite at its quick sizes with
#                               # each kernel profiled, and its charts (tools/device_models.sh;
#                               # ARGS go to benchmarks/models/run.py)
#   tools/device_run.sh campaign [SECONDS [ARGS...]]  # GPU tests + a kfuse campaign (default
#                               # 300 s; ARGS go to kfuse campaign: --seed S --shard I/N)
#
# The device gets a copy of the working tree without .git: pass KFUSE_COMMIT=<sha> in the
# command for the campaign's and the benchmarks' JSON to record the commit.
set -u
MODE="${1:-full}"
export PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/kfuse-device-logs}"
mkdir -p "$OUT"
if [ "$MODE" = campaign ]; then
    export KFUSE_GPU_TEST_TIMEOUT="${KFUSE_GPU_TEST_TIMEOUT:-200}"
    BENCH=(bash "$(dirname "${BASH_SOURCE[0]}")/device_campaign.sh" "${2:-300}" "${@:3}")
elif [ "$MODE" = models ]; then
    export KFUSE_GPU_TEST_TIMEOUT="${KFUSE_GPU_TEST_TIMEOUT:-200}"
    BENCH=(bash "$(dirname "${BASH_SOURCE[0]}")/device_models.sh" "${@:2}")
elif [ "$MODE" = quick ]; then
    export KFUSE_GPU_TEST_TIMEOUT="${KFUSE_GPU_TEST_TIMEOUT:-170}"
    BENCH=(timeout 150 python3 benchmarks/run.py --quick --reps 20 --peers "kfuse,torch eager,cupy"
           --json "$OUT/bench.json")
else
    export KFUSE_GPU_TEST_TIMEOUT="${KFUSE_GPU_TEST_TIMEOUT:-200}"
    export KFUSE_PROFILER_TEST_TIMEOUT="${KFUSE_PROFILER_TEST_TIMEOUT:-80}"
    BENCH=(timeout 270 python3 benchmarks/run.py --json "$OUT/bench.json")
fi
exec bash "$(dirname "${BASH_SOURCE[0]}")/device_check.sh" "${BENCH[@]}"
