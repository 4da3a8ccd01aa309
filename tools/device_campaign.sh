#!/usr/bin/env bash
# On the GPU machine, after tools/device_check.sh has installed kfuse: a campaign of
# SECONDS (default 300) with `kfuse campaign`, its folder packed into $OUT/campaign.tgz (the
# device tool brings back few files), then, with KFUSE_CAMPAIGN_PROFILE=1, a profile of one worker.
#
#   KFUSE_SKIP_GPU_TESTS=1 tools/device_check.sh tools/device_campaign.sh 300 [campaign args...]
set -u
SECONDS_WANTED="${1:-300}"
shift || true
OUT="${OUT:-/tmp/kfuse-device-logs}"
RUN="/tmp/kfuse-campaign"
rm -rf "$RUN"
cd /tmp || exit 1
python3 -m kfuse campaign --device cuda --budget "$SECONDS_WANTED" --out "$RUN" "$@"
rc=$?
tar -czf "$OUT/campaign.tgz" -C "$(dirname "$RUN")" "$(basename "$RUN")"
cp "$RUN/summary.json" "$OUT/campaign-summary.json"
# Where one worker's time goes (KFUSE_CAMPAIGN_PROFILE=1): a round of 150 examples alone, in
# one process, profiled. Off by default: it takes about a minute of device time, and the
# answer so far has been NVRTC (73% of a worker's time on 2026-12-01).
if [ "${KFUSE_CAMPAIGN_PROFILE:-0}" = 1 ]; then
    python3 -m cProfile -o "$OUT/campaign.prof" -m kfuse campaign --device cuda --seed 7 \
        --replay-round 0 --examples 150 --out /tmp/kfuse-campaign-profile >/dev/null
    python3 -c "import pstats; pstats.Stats('$OUT/campaign.prof').sort_stats('cumulative').print_stats(45)" |
        cut -c1-160 | tail -n 60
fi
exit $rc
