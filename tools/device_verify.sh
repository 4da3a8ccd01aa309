#!/usr/bin/env bash
# One device call verifying the working tree's kernels as a closing note needs them: build,
# `pytest -m gpu` (and the profiler's tests), a GPU campaign of every kind, the whole model
# suite (every size, each kernel profiled, its charts) and W1-W6 against torch.compile.
#
#   KFUSE_COMMIT=<sha> tools/device_verify.sh     (about 450 s on an H200; ~60 s more to start)
#
# A device call returns at most 8 files, so the steps' logs go to a scratch folder and $OUT
# gets: check.txt (the build and test steps' summary), gpu-tests.log, campaign.txt,
# campaign-summary.json, models.json, models.log, models-charts.tgz, bench-w1-w6.json. The
# output ends with each part's summary lines. KFUSE_VERIFY_CAMPAIGN_S (default 45) is the
# campaign's budget (KFUSE_CAMPAIGN_EXTRA: more options for it, e.g. --favor-ops); `fill`
# runs the campaign after every other part, for the rest of the call's 600 s.
# KFUSE_VERIFY_PARTS (default "tests campaign models bench") names the parts to run, for a
# split over two calls on one warm machine (10 minutes a call): "tests campaign" then
# "models bench"; a call without "tests" builds kfuse first unless the machine has it.
# The part "hostfigs" (not in the default) measures issue 60's host figures in one call:
# tools/launch_floor.cu, benchmarks/run.py's H1, H1s, G1 and C1 (bench-host.json) and
# tools/segmented_host_cost.py and tools/host_call_probe.py (hostfigs.txt); about 170 s.
# The part "host" (not in the default) compares the host cost of cached calls (H1, H1s) with
# another build's, alternately in separate processes (tools/device_ab.sh): the wheel at
# KFUSE_VERIFY_OLD_WHEEL (e.g. built from the commit before a refactor, carried in .whl/).
# The part "thunder" (not in the default) installs the wheels carried in .whl/thunder/
# (Lightning Thunder 0.2.6 and what it needs that the machine lacks) into a private target on
# PYTHONPATH (the part "tests" does too, for the Thunder GPU tests) and runs
# tools/thunder_check.py (KFUSE_VERIFY_THUNDER_ARGS, default none: the full run, ~4 minutes;
# "--quick" for ~1), writing thunder.json and thunder.log.
# The part "warmpath" runs tools/warm_path_probe.py (W5's first call with warm disk caches, by
# stage) with the program store on and off, then benchmarks/run.py's C1 (warmpath.txt);
# KFUSE_VERIFY_WARM_PROFILE=N adds a cProfile of N first calls with the store
# (warmpath-profile.txt).
# The part "repros" runs every repro script in KFUSE_VERIFY_REPROS (default .whl/repros: a call
# carries .whl but not ../shared; tools/fetch_device_wheels.sh copies ../shared/repros/*/ there
# and downloads the wheels .whl needs) and writes repros.txt.
# The part "ab" runs tools/kernel_times.py on KFUSE_VERIFY_AB_CASES (CASE[:SIZE] ...) with
# torch.compile, one --ab run per ';'-separated entry of KFUSE_VERIFY_AB and one --edit run per
# file in KFUSE_VERIFY_AB_EDITS (space-separated; e.g. carried in .whl/) (ab.txt). The part
# "hostcost" runs tools/segmented_host_cost.py on the GPU with switches.REPLAY_RUNS on, then
# off (hostcost.txt). The part "campaign" takes KFUSE_VERIFY_CAMPAIGN_S seconds; give it what
# a call has left after the other parts (10 minutes a call, less the start).
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
REAL="${OUT:-/tmp/kfuse-device-logs}"
mkdir -p "$REAL"
export KFUSE_COMMIT="${KFUSE_COMMIT:-unknown}" PYTHONUNBUFFERED=1
logs="$(mktemp -d)"
parts=" ${KFUSE_VERIFY_PARTS:-tests campaign models bench} "
SITE="${KFUSE_SITE:-/tmp/kfuse-site}"
# Thunder and what it needs, from the wheels carried in .whl/thunder/, in a private target
# installed once per machine: the GPU tests' Thunder tests and the part "thunder" use it.
THUNDER_SITE=/tmp/kfuse-thunder-site
install_thunder() {
    [ -d "$THUNDER_SITE/thunder" ] && return 0
    compgen -G ".whl/thunder/*.whl" > /dev/null || return 1
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$THUNDER_SITE" .whl/thunder/*.whl > "$logs/thunder-install.log" 2>&1
}
if [[ $parts == *" tests "* ]]; then
    test_path="${PYTHONPATH:-}"
    install_thunder && test_path="$THUNDER_SITE${test_path:+:$test_path}"
    PYTHONPATH="$test_path" OUT="$logs" KFUSE_LOG_TAIL=8 \
        KFUSE_GPU_TEST_TIMEOUT="${KFUSE_GPU_TEST_TIMEOUT:-200}" \
        KFUSE_PROFILER_TEST_TIMEOUT=80 bash tools/device_check.sh true > "$REAL/check.txt" 2>&1
    tail -n 10 "$REAL/check.txt"
    cp "$logs/gpu-tests.log" "$REAL/" 2>/dev/null && grep -E "passed|failed" "$REAL/gpu-tests.log" | tail -n 2
elif [ ! -d "$SITE/kfuse" ]; then  # a fresh machine: build and install only
    OUT="$logs" KFUSE_SKIP_GPU_TESTS=1 bash tools/device_check.sh > "$REAL/check.txt" 2>&1
    tail -n 4 "$REAL/check.txt"
fi
# device_check installed kfuse into its private site (tools/device_check.sh)
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
if [[ $parts == *" repros "* ]]; then
    for script in "${KFUSE_VERIFY_REPROS:-.whl/repros}"/*.py; do
        echo "$script: $(cd "$(dirname "$script")" && timeout 120 python3 "$(basename "$script")" 2>&1 | tail -n 1)"
    done | tee "$REAL/repros.txt"
fi
if [[ $parts == *" ab "* ]]; then
    IFS=';' read -r -a variants <<< "${KFUSE_VERIFY_AB:-}"
    ab_args=()
    for v in "${variants[@]}"; do [ -n "$v" ] && ab_args+=(--ab "$v"); done
    for e in ${KFUSE_VERIFY_AB_EDITS:-}; do ab_args+=(--edit "$e"); done
    timeout "${KFUSE_VERIFY_AB_S:-200}" python3 tools/kernel_times.py ${KFUSE_VERIFY_AB_CASES:?cases for the part ab} \
        --tc "${ab_args[@]}" > "$REAL/ab.txt" 2>&1
    sed -n '/## summary/,$p' "$REAL/ab.txt"
fi
if [[ $parts == *" hostcost "* ]]; then
    for on in True False; do
        echo "switches.REPLAY_RUNS = $on"
        timeout 90 python3 -c "import runpy, sys, kfuse.switches as s; s.REPLAY_RUNS = $on; \
sys.argv = ['segmented_host_cost', '--device', 'cuda', '--reps', '1000']; \
runpy.run_path('tools/segmented_host_cost.py', run_name='__main__')" 2>&1 | tail -n 8
    done | tee "$REAL/hostcost.txt"
fi
if [[ $parts == *" warmpath "* ]]; then
    # W5's first call with the disk caches warm, by stage, from a fresh cache folder, once
    # with the program store and once without (KFUSE_PROGRAM_CACHE=0), then C1 itself.
    for store in 1 0; do
        echo "KFUSE_PROGRAM_CACHE=$store"
        KFUSE_CACHE_DIR="$(mktemp -d)" KFUSE_PROGRAM_CACHE=$store PYTHONPATH="$PYTHONPATH:benchmarks" \
            timeout 120 python3 tools/warm_path_probe.py --device cuda --reps 30 \
            --profile "${KFUSE_VERIFY_WARM_PROFILE:-0}" > "$logs/warm-$store.txt" 2>&1
        head -n 24 "$logs/warm-$store.txt"
    done | tee "$REAL/warmpath.txt"
    cp "$logs/warm-1.txt" "$REAL/warmpath-profile.txt" 2>/dev/null
    timeout 90 python3 benchmarks/run.py --only W5,C1 2>&1 | grep -E "C1 " | tee -a "$REAL/warmpath.txt"
fi
# The campaign part; KFUSE_VERIFY_CAMPAIGN_S=fill runs it last, for what the call has left
# (KFUSE_VERIFY_CALL_S, default 600 s, less the time so far and 100 s of slack).
campaign() {
    budget="${KFUSE_VERIFY_CAMPAIGN_S:-45}"
    if [ "$budget" = fill ]; then
        budget=$(( ${KFUSE_VERIFY_CALL_S:-600} - SECONDS - 100 ))
        if [ "$budget" -lt 20 ]; then
            echo "campaign: skipped, ${budget} s left of the call"
            return
        fi
    fi
    # The slack covers the workers' last examples and the summary (40 s lost one).
    (cd /tmp && timeout $((budget + 75)) python3 -m kfuse campaign --device cuda --budget "$budget" \
        ${KFUSE_VERIFY_CAMPAIGN_SEED:+--seed "$KFUSE_VERIFY_CAMPAIGN_SEED"} ${KFUSE_CAMPAIGN_EXTRA:-} \
        --out "$logs/campaign" > "$REAL/campaign.txt" 2>&1)
    tail -n 3 "$REAL/campaign.txt"  # time per example, examples by scheduler, the counts
    cp "$logs/campaign/summary.json" "$REAL/campaign-summary.json" 2>/dev/null
    # Failures' repro scripts, one archive (a call returns at most 8 files).
    # (compgen: `ls failure-* crash-*` fails when either kind is absent, which lost them)
    (cd "$logs/campaign" 2>/dev/null && repros=$(compgen -G "failure-*"; compgen -G "crash-*"; true) &&
        [ -n "$repros" ] && tar czf "$REAL/campaign-repros.tgz" $repros 2>/dev/null)
}
if [[ $parts == *" campaign "* && ${KFUSE_VERIFY_CAMPAIGN_S:-45} != fill ]]; then
    campaign
fi
if [[ $parts == *" models "* ]]; then
    KFUSE_MODELS_QUICK= KFUSE_MODELS_TIMEOUT=230 KFUSE_MODELS_BUDGET=210 OUT="$REAL" \
        bash tools/device_models.sh | tail -n 22
fi
if [[ $parts == *" bench "* ]]; then
    timeout 60 python3 benchmarks/run.py --only W1,W2,W3,W4,W5,W6 --peers "kfuse,torch.compile" \
        --json "$REAL/bench-w1-w6.json" 2>&1 | grep -E "^  W[1-6] "
fi
if [[ $parts == *" hostfigs "* ]]; then
    # Issue 60's host figures from one process each, in this call: the launch floor
    # (tools/launch_floor.cu, no Python), H1 (with and without outputs=), H1s, G1 (ten
    # fusions replayed from a CUDA graph) and C1, then a segmented call's host cost by
    # segment count.
    {
        nvcc -O2 -o "$logs/launch_floor" tools/launch_floor.cu -lcuda > "$logs/nvcc.log" 2>&1 &&
            timeout 60 "$logs/launch_floor" || echo "launch_floor: no build (nvcc.log)"
        timeout 150 python3 benchmarks/run.py --only H1,H1s,G1,C1 --json "$REAL/bench-host.json" 2>&1 |
            grep -E "^  (H1|H1s|G1|C1) "
        timeout 90 python3 tools/segmented_host_cost.py --device cuda --reps 1000 2>&1 | tail -n 8
        timeout 120 python3 tools/host_call_probe.py --repeats 2000 2>&1
    } | tee "$REAL/hostfigs.txt"
fi
if [[ $parts == *" host "* ]]; then
    OUT="$logs" timeout 300 bash tools/device_ab.sh "${KFUSE_VERIFY_OLD_WHEEL:?a wheel of the build to compare}" \
        "${KFUSE_VERIFY_HOST_ROUNDS:-7}" "H1,H1s" 2>&1 | tail -n 6
fi
if [[ $parts == *" thunder "* ]]; then
    install_thunder || echo "thunder: the carried wheels did not install (thunder-install.log)"
    PYTHONPATH="$THUNDER_SITE:$PYTHONPATH" timeout 330 python3 tools/thunder_check.py \
        ${KFUSE_VERIFY_THUNDER_ARGS:-} --json "$REAL/thunder.json" > "$REAL/thunder.log" 2>&1
    grep -v -E "^ *(File|\^|warn)" "$REAL/thunder.log" | tail -n 45
fi
if [[ $parts == *" campaign "* && ${KFUSE_VERIFY_CAMPAIGN_S:-45} == fill ]]; then
    campaign
fi
