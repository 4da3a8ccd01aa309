#!/usr/bin/env bash
# Build, install and test kfuse on a GPU machine that has no package registry.
#
#   tools/device_check.sh [extra command...]
#
# Wheels the machine lacks (nanobind 3.1, nanobind-backend for cp312) come from .whl/ in the
# repository (downloaded beforehand, see README); they and kfuse are installed into a private
# directory ($KFUSE_SITE, default /tmp/kfuse-site) put first on PYTHONPATH, so the machine's own
# environment is not modified. Steps: environment report, install the carried wheels, build and
# install kfuse (no build isolation, no index), `python -m kfuse info`, `pytest -m gpu`, then the
# extra command if one is given. Every step logs to $OUT/<step>.log (OUT defaults to
# /tmp/kfuse-device-logs); a failing step does not stop the later ones; a summary ends the output and the
# exit status is non-zero if any step failed.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-/tmp/kfuse-device-logs}"
PY="${PYTHON:-python3}"
SITE="${KFUSE_SITE:-/tmp/kfuse-site}"
mkdir -p "$OUT" "$SITE"
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1

SUMMARY=()
FAILED=0

# step NAME COMMAND...: run COMMAND with its output in $OUT/NAME.log; show the log's tail.
step() {
    local name="$1"
    shift
    local log="$OUT/$name.log" start rc
    echo "=== [$name] $*"
    start=$(date +%s)
    ( "$@" ) >"$log" 2>&1
    rc=$?
    tail -n "${KFUSE_LOG_TAIL:-40}" "$log"
    # A failing pytest step also shows its tracebacks here: the log file itself may not come
    # back from the GPU machine (which returns a limited number of files).
    if [ $rc -ne 0 ] && grep -q "= FAILURES =" "$log"; then
        sed -n '/= FAILURES =/,/short test summary info/p' "$log" | head -n "${KFUSE_FAILURE_LINES:-150}"
    fi
    SUMMARY+=("$(printf '%-10s %s  (%ss)' "$name" "$([ $rc -eq 0 ] && echo ok || echo "FAILED rc=$rc")" "$(( $(date +%s) - start ))")")
    [ $rc -eq 0 ] || FAILED=1
    return $rc
}

environment() {
    set -x
    uname -a
    nvidia-smi || true
    "$PY" --version
    "$PY" -m pip list 2>/dev/null | grep -iE "nanobind|scikit|torch|cupy|cuda|nvidia|pytest|hypothesis|numpy" || true
    cmake --version | head -n 1
    ninja --version || true
    ls -la .whl 2>/dev/null || echo "no .whl directory"
}

carried_wheels() {
    set -x
    shopt -s nullglob
    local wheels=(.whl/*.whl)
    if [ ${#wheels[@]} -eq 0 ]; then
        echo "no carried wheels in .whl/: using the machine's packages"
        return 0
    fi
    "$PY" -m pip install --no-index --no-deps --upgrade --target "$SITE" "${wheels[@]}"
    "$PY" -c "import nanobind, nanobind_backend; print('nanobind', nanobind.__version__, nanobind.__file__)"
}

build_install() {
    set -x
    rm -rf "$SITE/kfuse" "$SITE"/kfuse-*.dist-info
    "$PY" -m pip install --no-index --no-build-isolation --no-deps --target "$SITE" -v .
    cd /tmp && "$PY" -c "import kfuse, sys; print(kfuse.__file__); sys.exit('kfuse' not in kfuse.__file__)"
}

info() {
    set -x
    cd /tmp && "$PY" -m kfuse info
}

gpu_tests() {
    set -x
    # KFUSE_GPU_TEST_TIMEOUT (seconds) bounds the run so that later steps still get their turn.
    local limit=()
    [ -n "${KFUSE_GPU_TEST_TIMEOUT:-}" ] && limit=(timeout "$KFUSE_GPU_TEST_TIMEOUT")
    # The profiler's tests run in a process of their own: CUPTI misbehaving there must not take
    # the other GPU tests' results with it.
    # They run in KFUSE_GPU_TEST_WORKERS processes (pytest-xdist) sharing the one GPU: most of
    # their time is NVRTC on the CPU. --dist loadgroup keeps a module marked xdist_group on
    # one worker (the Thunder tests: their fixture runs Thunder's whole check, ~2 minutes).
    local rc=0
    "${limit[@]}" "$PY" -m pytest -m gpu -rfE -p no:cacheprovider --durations=15 \
        -n "${KFUSE_GPU_TEST_WORKERS:-8}" --dist loadgroup \
        --ignore=tests/test_profiler_gpu.py tests || rc=1
    local plimit=()
    [ -n "${KFUSE_PROFILER_TEST_TIMEOUT:-}" ] && plimit=(timeout "$KFUSE_PROFILER_TEST_TIMEOUT")
    "${plimit[@]}" "$PY" -m pytest -m gpu -v -rfE -p no:cacheprovider \
        tests/test_profiler_gpu.py || rc=1
    return $rc
}

extra() {
    set -x
    "$@"
}

step environment environment
step wheels carried_wheels
if step build build_install; then
    step info info
    # KFUSE_SKIP_GPU_TESTS=1: only the extra command (a probe or a sweep), not the tests.
    [ "${KFUSE_SKIP_GPU_TESTS:-0}" = 1 ] || step gpu-tests gpu_tests
    if [ $# -gt 0 ]; then
        step extra extra "$@"
    fi
else
    SUMMARY+=("info, gpu-tests: skipped (build failed)")
fi

echo
echo "=== summary (logs in $OUT)"
printf '%s\n' "${SUMMARY[@]}"
exit $FAILED
