#!/usr/bin/env bash
# tests/integration/cluster/invalidate.sh CHANQD CHANQ - issue 25's invalidation on a real
# cluster (scripts/cluster.sh: 3 ZooKeeper nodes, shards 1 and 2 of 2 MariaDB + 2 chanqd) with a
# manager (`chanqd --role mgr`) they report to: a message produced on shard 1 is invalidated
# with `chanq admin invalidate` (the manager's command 3 to the shard's master), consume skips
# it, the lookup (command 4, on the standby) shows state 0; then the master is SIGKILLed by PID,
# the standby is promoted, and the promoted standby agrees: the lookup shows state 0 and consume
# on it skips the message. Exact checks, TAP-style lines; waits poll with a safety stop.
#
# Exit: 0 pass, 1 fail (logs' tails printed), 77 skip (java / ZooKeeper / MariaDB missing).
# Env: ZK_SESSION_MS [4000], DB_DOWN_MS [3000], SEMI_TIMEOUT_MS [2000], KEEP=1 (keep the files).
set -euo pipefail

[ $# -eq 2 ] || {
    echo "usage: $0 CHANQD CHANQ" >&2
    exit 64
}
export CHANQD=$1
CHANQ=$2
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
export RELAY_NODES=0
TOPIC=relev

# shellcheck source=tests/integration/cluster/lib.sh
. "$ROOT/tests/integration/cluster/lib.sh"
cluster_settings 0

BASE=$(mktemp -d "${TMPDIR:-/tmp}/cqinval.XXXXXX")
DIR=$BASE/cluster
MGR=$BASE/mgr
MPID=''
FAILED=0

cleanup() {
    local rc=$?
    set +e
    "$CLUSTER" stop "$DIR" >/dev/null 2>&1 || true
    stop_pid "$MPID"
    if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then
        say "---- manager log (last 20 lines)"
        tail -n 20 "$MGR/log" 2>/dev/null
        local f
        for f in "$DIR"/shard1/node*/log; do
            [ -f "$f" ] || continue
            say "---- $f (last 15 lines)"
            tail -n 15 "$f"
        done
    fi
    if [ "${KEEP:-0}" = 1 ]; then say "kept $BASE"; else rm -rf "$BASE"; fi
    exit "$rc"
}
trap cleanup EXIT

check() { # WHAT CONDITION...: one TAP-style line
    local what=$1
    shift
    if "$@"; then say "ok - $what"; else
        say "not ok - $what"
        FAILED=1
    fi
}

# ---- the manager, then the cluster reporting to it ------------------------------------------
mkdir -p "$MGR"
echo adm1n >"$MGR/admin.token"
echo srv >"$MGR/server.token"
chmod 600 "$MGR/admin.token"
"$CHANQD" --role mgr --mgr-addr 127.0.0.1:0 --mgr-http-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 \
    --mgr-state-file "$MGR/state.json" --mgr-admin-token-file "$MGR/admin.token" \
    --mgr-token-file "$MGR/server.token" --mgr-audit-log "$MGR/audit.log" \
    --ready-file "$MGR/ready" >"$MGR/log" 2>&1 &
MPID=$!
wait_for 20 "the manager's ready file" test -s "$MGR/ready"
MADDR=$(sed -n 's/.*mgr=\([^ ]*\).*/\1/p' "$MGR/ready")
MHTTP=$(sed -n 's/.* http=\([^ ]*\).*/\1/p' "$MGR/ready")
export CHANQD_ARGS="--mgr-servers $MADDR --mgr-token-file $MGR/server.token --mgr-report-ms 200 --mq-http-addr 127.0.0.1:0"
cluster_up
ADM=("$CHANQ" admin --mgr-http "$MHTTP" --admin-token-file "$MGR/admin.token")

http_of() { sed -n 's/.*mqhttp=\([^ ]*\).*/\1/p' "$DIR/shard1/node$1/ready"; }
role_of() { # N: master or standby, as node N's /metrics says
    curl -s "http://$(field 1 "$1" admin)/metrics" |
        awk '$1 ~ /^chanq_mq_cluster_role/ && $2 == 1 { print }' | grep -q 'role="master"' &&
        echo master || echo standby
}
master_node() {
    local n
    for n in 1 2; do [ "$(role_of $n)" = master ] && echo $n && return 0; done
    return 1
}
manager_knows_master() { "${ADM[@]}" --json shards | grep -q '"master": *[1-9]'; }
wait_for 60 "a master on shard 1" master_node >/dev/null
M=$(master_node)
S=$((3 - M))
MH=$(http_of "$M")
SH=$(http_of "$S")
say "shard 1: master node $M ($MH), standby node $S ($SH)"
wait_for 30 "the manager to know shard 1's master" manager_knows_master

curl -s -H 'Content-Type: application/json' -d "{\"topic\":\"$TOPIC\"}" "http://$MH/v1/topics" >/dev/null
OUT=$(curl -s -H 'Content-Type: application/json' \
    -d '{"messages":[{"content":"v1","producer_id":9,"seq":1},{"content":"bad v2","producer_id":9,"seq":2},{"content":"v3","producer_id":9,"seq":3}]}' \
    "http://$MH/v1/topics/$TOPIC/messages")
read -r O1 O2 O3 <<<"$(echo "$OUT" | python3 -c 'import json,sys; print(*json.load(sys.stdin)["offsets"])')"
say "produced at $O1 $O2 $O3"

RES=$("${ADM[@]}" invalidate "$TOPIC" 1 "$O2" --reason "bad release v2")
check "chanq admin invalidate on shard 1's master" [ "$RES" = "topic $TOPIC shard 1 offset $O2: invalid (state 0)" ]
consumed() { # HTTP: the offsets a consume from 0 returns
    curl -s "http://$1/v1/topics/$TOPIC/messages" |
        python3 -c 'import json,sys; print(*[m["offset"] for m in json.load(sys.stdin)["messages"]])'
}
check "consume on the master skips it" [ "$(consumed "$MH")" = "$O1 $O3" ]
state_on() { "${ADM[@]}" --json message "$TOPIC" 1 "$O2" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["role"], d["message"]["state"], d["message"]["producer_id"])'; }
standby_agrees() { [ "$(state_on)" = "standby 0 9" ]; }
wait_for 30 "the lookup on the standby to show state 0" standby_agrees || true
check "the lookup reads the standby, state 0, producer 9" standby_agrees

# ---- fail the master over --------------------------------------------------------------------
MP=$(field 1 "$M" pid)
say "SIGKILL the master, node $M, pid $MP"
kill -KILL "$MP"
promoted() { [ "$(role_of "$S")" = master ]; }
wait_for "$RECOVER_S" "node $S promoted" promoted || true
check "the standby is promoted" promoted
master_agrees() { [ "$(state_on 2>/dev/null)" = "master 0 9" ]; }
wait_for 30 "the lookup on the promoted standby" master_agrees || true
check "the promoted standby agrees: state 0" master_agrees
check "consume on the promoted standby skips it" [ "$(consumed "$SH")" = "$O1 $O3" ]
check "the audit has the reason" grep -q '"action":"message.invalidate","target":"'"$TOPIC/1/$O2"'".*"reason":"bad release v2"' "$MGR/audit.log"
[ "$FAILED" = 0 ] || exit 1
say "pass"
