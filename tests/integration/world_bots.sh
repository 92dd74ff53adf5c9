#!/usr/bin/env bash
# world_bots.sh - the spatial smoke test (issue 12; meson test `world-bots`, suite spatial):
# chanqd with a 4x1 layout (2 servers) plus chanq's Handover section for chanqworld's types,
# driven by tools/world_bots for a few seconds. Asserts counts only, no timing: world_bots ends
# with ok=true, every entity created, updates sent, at least one handover seen by a destination
# owner, and no stale owner (an entity whose cell's server is not the connection that owned it
# at the end). The walk is seeded and stepped by a fixed dt, so the positions (and so the
# handovers) are the same on every run.
# Usage: world_bots.sh CHANQD WORLD_BOTS WORLD_FDS
set -euo pipefail
CHANQD=$1 BOTS=$2 FDS=$3
TMP=$(mktemp -d)
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT
fail() { echo "not ok - $*"; echo "--- chanqd log (tail)"; tail -30 "$TMP/chanqd.log" || true; exit 1; }

cat > "$TMP/w4x1.json" <<'JSON'
{
    "SpatialControllerType": "Static2DSpatialController",
    "Config": {
        "WorldOffsetX": -2000, "WorldOffsetZ": -500, "GridWidth": 1000, "GridHeight": 1000,
        "GridCols": 4, "GridRows": 1, "ServerCols": 2, "ServerRows": 1,
        "ServerInterestBorderSize": 1
    },
    "Handover": {"PositionPath": "transform.position", "Axes": "xyz",
                 "EntitiesField": "entities", "EntityDataField": "entityData"}
}
JSON
"$CHANQD" --client-addr 127.0.0.1:0 --server-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 \
    --mq-addr 127.0.0.1:0 --mq-http-addr 127.0.0.1:0 --ws-addr 127.0.0.1:0 \
    --kcp-addr 127.0.0.1:0 --store-dir "$TMP/store" --spatial-settings "$TMP/w4x1.json" \
    --channel-data-types "$FDS" --ready-file "$TMP/ready" >"$TMP/chanqd.log" 2>&1 &
PID=$!
for _ in $(seq 100); do [ -s "$TMP/ready" ] && break; sleep 0.1; done
[ -s "$TMP/ready" ] || fail "chanqd did not start"
SRV=$(sed -n 's/.*server=\([^ ]*\).*/\1/p' "$TMP/ready")
echo "1..1"
OUT=$(timeout 25 "$BOTS" --server "$SRV" --entities 8 --rate 10 --seconds 4 --seed 7) ||
    fail "world_bots exited with $?: $OUT"
echo "# $OUT"
num() { sed -n "s/.*\"$1\":\([0-9-]*\).*/\1/p" <<<"$OUT"; }
grep -q '"ok":true' <<<"$OUT" || fail "world_bots not ok"
[ "$(num created)" = 8 ] || fail "created $(num created) of 8 entities"
[ "$(num updates_sent)" -gt 0 ] || fail "no update sent"
[ "$(num handovers_seen)" -gt 0 ] || fail "no handover seen"
[ "$(num stale_owners)" = 0 ] || fail "$(num stale_owners) stale owners"
echo "ok 1 - world_bots: $(num handovers_seen) handovers, no stale owner"
