#!/usr/bin/env bash
# bench/spatial.sh - the spatial benchmark (issue 12): chanqd with the `benchmark` layout (15x15
# cells of 2000, 3x3 servers) and chanqworld's types (world.fds + a Handover section), driven by
# spatialbench: 9 spatial servers, CLIENTS clients each with a wandering entity whose owner sends
# RATE times a second an entity update and a cell update (the clients read the cells), and a
# sphere interest of RADIUS cells (1.5: about 10 cells) set by its server when it changes cell.
# Prints spatialbench's JSON line per run and a summary with the machine's load.
#
# Environment knobs [defaults]:
#   CLIENTS [2000]  RATE [10]  DURATION [10] s  WARMUP [3]  RADIUS [1.5] cells  SPEED [0.5] cells/s
#   WORKERS [1]  REPS [1]  BUILD [build-bench] (meson release build, created if missing)
#   SUBSCRIBE_CLIENTS [false]  the Handover section's SubscribeClients: false, clients read the
#                      cells (their interest's damping); true, channeld's §4.6, a handover also
#                      subscribes every client watching the destination to the moved entities
#   SPATIAL_SMOKE [0]  1: 200 clients, 5 s, 1 s warmup, and the count checks (--check): every
#                      entity created, updates and fan-outs flowed, no lost handover, no
#                      update refused (chanqd's log). The meson
#                      test `spatial-smoke` (suite bench) runs this with CHANQD/SPATIALBENCH/
#                      WORLD_FDS set to the build's files.
#   CHANQD, SPATIALBENCH, WORLD_FDS: use these binaries/files instead of building.
# Each JSON line also carries the overload policy's counters read from chanqd's /metrics after
# the run (coarsen_level, windows_stretched_total, windows_merged_total, resyncs_total,
# coarsen_rises_total, coarsen_falls_total; doc/spatial.md "Overload"), when chanqd has them.
#   OUT [$BUILD/bench-results]  raw JSON lines (spatial-<time>.jsonl)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CLIENTS=${CLIENTS:-2000} RATE=${RATE:-10} DURATION=${DURATION:-10} WARMUP=${WARMUP:-3}
RADIUS=${RADIUS:-1.5} SPEED=${SPEED:-0.5} WORKERS=${WORKERS:-1} REPS=${REPS:-1}
BUILD=${BUILD:-build-bench}
CHECK=()
if [ "${SPATIAL_SMOKE:-0}" = 1 ]; then
    CLIENTS=200 DURATION=5 WARMUP=1 CHECK=(--check)
fi
log() { echo "spatial.sh: $*" >&2; }

if [ -z "${CHANQD:-}" ] || [ -z "${SPATIALBENCH:-}" ] || [ -z "${WORLD_FDS:-}" ]; then
    [ -d "$BUILD" ] || meson setup "$BUILD" -Dbuildtype=release >/dev/null
    ninja -C "$BUILD" src/main/chanqd bench/spatialbench proto/world.fds >/dev/null
    CHANQD=$ROOT/$BUILD/src/main/chanqd SPATIALBENCH=$ROOT/$BUILD/bench/spatialbench
    WORLD_FDS=$ROOT/$BUILD/proto/world.fds
fi
OUT=${OUT:-$ROOT/$BUILD/bench-results}
mkdir -p "$OUT"
RESULTS=$OUT/spatial-$(date +%Y%m%d-%H%M%S).jsonl
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt $((CLIENTS * 2 + 200)) ]; then
    log "ulimit -n $(ulimit -n) is too low for $CLIENTS clients"; exit 1
fi

TMP=$(mktemp -d)
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT

# The benchmark layout plus chanq's Handover section for chanqworld.EntityChannelData.
cat > "$TMP/spatial.json" <<JSON
{
    "SpatialControllerType": "Static2DSpatialController",
    "Config": {
        "WorldOffsetX": -15000, "WorldOffsetZ": -15000, "GridWidth": 2000, "GridHeight": 2000,
        "GridCols": 15, "GridRows": 15, "ServerCols": 3, "ServerRows": 3,
        "ServerInterestBorderSize": 1
    },
    "Handover": {"PositionPath": "transform.position", "Axes": "xyz",
                 "EntitiesField": "entities", "EntityDataField": "entityData",
                 "SubscribeClients": ${SUBSCRIBE_CLIENTS:-false}}
}
JSON

run_once() {
    rm -f "$TMP/ready"
    "$CHANQD" --client-addr 127.0.0.1:0 --server-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 \
        --mq-addr 127.0.0.1:0 --mq-http-addr 127.0.0.1:0 --ws-addr 127.0.0.1:0 \
        --kcp-addr 127.0.0.1:0 --store-dir "$TMP/store" --spatial-settings "$TMP/spatial.json" --channel-data-types "$WORLD_FDS" \
        --workers "$WORKERS" --ready-file "$TMP/ready" >"$TMP/chanqd.log" 2>&1 &
    PID=$!
    for _ in $(seq 100); do [ -s "$TMP/ready" ] && break; sleep 0.1; done
    if [ ! -s "$TMP/ready" ]; then log "chanqd did not start:"; cat "$TMP/chanqd.log" >&2; return 1; fi
    local srv cli
    srv=$(sed -n 's/.*server=\([^ ]*\).*/\1/p' "$TMP/ready")
    cli=$(sed -n 's/^client=\([^ ]*\).*/\1/p' "$TMP/ready")
    local rc=0
    "$SPATIALBENCH" --server "$srv" --client "$cli" --servers 9 --clients "$CLIENTS" --rate "$RATE" \
        --seconds "$DURATION" --warmup "$WARMUP" --radius "$RADIUS" --speed "$SPEED" \
        --pid "$PID" --spatial-settings "$TMP/spatial.json" "${CHECK[@]}" >"$TMP/line" || rc=$?
    # What the overload policy did (doc/spatial.md "Overload"), from chanqd's /metrics.
    local admin coarsen
    admin=$(sed -n 's/.*admin=\([^ ]*\).*/\1/p' "$TMP/ready")
    coarsen=$(curl -s "http://$admin/metrics" | awk '
        /^chanq_data_(coarsen_level|windows_stretched_total|windows_merged_total|resyncs_total|coarsen_rises_total|coarsen_falls_total) / {
            sub(/^chanq_data_/, "", $1); printf ",\"%s\":%s", $1, $2 }')
    kill "$PID" 2>/dev/null; wait "$PID" 2>/dev/null || true; PID=
    # Updates chanqd refused (rate-limited log lines: a lower bound; 0 means none).
    local refused
    refused=$(grep -c 'refused\|no write access' "$TMP/chanqd.log" || true)
    sed "s/,\"ok\"/,\"refused_log_lines\":$refused$coarsen,\"ok\"/" "$TMP/line" | tee -a "$RESULTS"
    if [ ${#CHECK[@]} -gt 0 ] && [ "$refused" != 0 ]; then
        log "chanqd refused updates:"; grep 'refused\|no write access' "$TMP/chanqd.log" | head -5 >&2
        rc=3
    fi
    return $rc
}

log "load before: $(uptime)"
rc=0
for _ in $(seq "$REPS"); do run_once || rc=$?; done
log "load after: $(uptime)"
log "results: $RESULTS"
exit $rc
