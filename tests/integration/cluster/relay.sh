#!/usr/bin/env bash
# tests/integration/cluster/relay.sh CHANQD - scripts/cluster.sh's relay (doc/cluster.md): one
# shard beside 3 NATS servers and 3 relay nodes. TAP.
#
#   1  start prints the ZooKeeper, NATS (3 URLs), shard (2 chanqd) and relay (3 nodes, each with
#      its client, server, ws, kcp, mq and admin address and pid) lines
#   2  every relay node's /metrics: chanq_relay_members 3, chanq_relay_peers_up 2,
#      chanq_relay_nats_connected 1
#   3  status: ZooKeeper and the shard's chanqd up; 3 NATS servers up with 2 routes each; 3 relay
#      nodes up (members=3 peers_up=2 nats_connected=1) with 2 links each, none with a gap or a
#      reset
#   4  a game server on node 1 creates a channel and subscribes a client of node 3, which
#      receives its broadcast (relay_client.py, raw sockets)
#   5  stop: no process of the cluster left (none recorded, none naming DIR) and no DIR
#
# Exit: TAP on stdout (0 pass, 1 fail); 77 skip (java / ZooKeeper / MariaDB / nats-server missing).
set -euo pipefail

[ $# -eq 1 ] || {
    echo "usage: $0 CHANQD" >&2
    exit 64
}
export CHANQD=$1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
CLUSTER="$ROOT/scripts/cluster.sh"
HERE="$ROOT/tests/integration/cluster"

skip() {
    echo "1..0 # SKIP $*"
    exit 77
}
command -v java >/dev/null 2>&1 || skip "java is not installed (apt-get install zookeeper)"
[ -f /usr/share/java/zookeeper.jar ] || skip "ZooKeeper is not installed (apt-get install zookeeper)"
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] ||
    skip "mariadbd is not installed (apt-get install mariadb-server)"
command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ] ||
    skip "nats-server is not installed (apt-get install nats-server)"

BASE=$(mktemp -d "${TMPDIR:-/tmp}/cqrelay.XXXXXX")
DIR=$BASE/cluster
FAILED=0
N=0

# shellcheck disable=SC2317 # run by the trap
cleanup() {
    local rc=$?
    "$CLUSTER" stop "$DIR" >/dev/null 2>&1 || true
    rm -rf "$BASE"
    exit "$rc"
}
trap cleanup EXIT

# ok COND WHAT [DETAIL...]: one TAP line; DETAIL (a file or text) is printed as a comment on
# failure.
ok() {
    N=$((N + 1))
    if [ "$1" = 0 ]; then
        echo "ok $N - $2"
        return
    fi
    echo "not ok $N - $2"
    FAILED=1
    shift 2
    local d
    for d in "$@"; do
        if [ -f "$d" ]; then sed 's/^/#   /' "$d"; else printf '%s\n' "$d" | sed 's/^/#   /'; fi
    done
}

# count FILE REGEX: the number of lines of FILE matching the extended REGEX.
count() { grep -cE "$2" "$1" || true; }

echo "1..5"

# ---- 1: start ---------------------------------------------------------------------------------
rc=0
SHARDS=1 RELAY_NODES=3 "$CLUSTER" start "$DIR" >"$BASE/start.out" 2>"$BASE/start.err" || rc=$?
if [ "$rc" != 0 ]; then
    ok 1 "cluster.sh start (exit $rc)" "$BASE/start.err"
    exit 1
fi
A='127\.0\.0\.1:[0-9]+'
r=0
[ "$(count "$BASE/start.out" "^zk=$A,$A,$A$")" = 1 ] || r=1
[ "$(count "$BASE/start.out" "^nats=nats://$A,nats://$A,nats://$A$")" = 1 ] || r=1
[ "$(count "$BASE/start.out" "^shard=1 node=[12] mq=$A admin=$A pid=[0-9]+$")" = 2 ] || r=1
for n in 1 2 3; do
    [ "$(count "$BASE/start.out" "^relay node=$n client=$A server=$A ws=$A kcp=$A mq=$A admin=$A pid=[0-9]+$")" = 1 ] || r=1
done
[ "$(count "$BASE/start.out" "^relay ")" = 3 ] || r=1
ok "$r" "start: zk, nats (3 URLs), shard 1 (2 chanqd) and relay nodes 1-3" "$BASE/start.out"

# relay FIELD N: FIELD (client, server, admin...) of relay node N, from start's output.
relay() { sed -n "s/^relay node=$2 .*$1=\([^ ]*\).*/\1/p" "$BASE/start.out"; }
metric() { # metric ADMIN NAME
    curl -s --max-time 5 "http://$1/metrics" | awk -v n="$2" '$1 == n { print $2 }' || true
}

# ---- 2: every node heard every other -----------------------------------------------------------
r=0
got=
for n in 1 2 3; do
    a=$(relay admin $n)
    v="node$n members=$(metric "$a" chanq_relay_members) peers_up=$(metric "$a" chanq_relay_peers_up)"
    v="$v nats_connected=$(metric "$a" chanq_relay_nats_connected)"
    got="$got$v
"
    [ "$v" = "node$n members=3 peers_up=2 nats_connected=1" ] || r=1
done
ok "$r" "relay nodes 1-3: members 3, peers_up 2, nats_connected 1" "$got"

# ---- 3: status ------------------------------------------------------------------------------
"$CLUSTER" status "$DIR" >"$BASE/status.out" 2>&1 || true
r=0
[ "$(count "$BASE/status.out" '^zk[123] +port=[0-9]+ +pid=[0-9]+ +up ')" = 3 ] || r=1
[ "$(count "$BASE/status.out" '^shard1 chanqd node[12] +port=[0-9]+ +pid=[0-9]+ +up ')" = 2 ] || r=1
[ "$(count "$BASE/status.out" '^nats[123] +port=[0-9]+ +pid=[0-9]+ +up +routes=2$')" = 3 ] || r=1
[ "$(count "$BASE/status.out" '^nats')" = 3 ] || r=1
[ "$(count "$BASE/status.out" \
    '^relay node[123] +port=[0-9]+ +pid=[0-9]+ +up +members=3 peers_up=2 nats_connected=1$')" = 3 ] || r=1
for n in 1 2 3; do
    [ "$(count "$BASE/status.out" \
        "^relay node$n peer[123] +packets out=[1-9][0-9]* in=[1-9][0-9]* gaps=0 resets=0$")" = 2 ] || r=1
    ! grep -qE "^relay node$n peer$n " "$BASE/status.out" || r=1
done
[ "$(count "$BASE/status.out" '^relay ')" = 9 ] || r=1
ok "$r" "status: 3 NATS servers up with 2 routes each, 3 relay nodes up with 6 links" \
    "$BASE/status.out"

# ---- 4: a broadcast from node 1 reaches a client of node 3 ---------------------------------------
rc=0
python3 "$HERE/relay_client.py" "$(relay server 1)" "$(relay client 3)" >"$BASE/client.out" 2>&1 ||
    rc=$?
sed -n 's/^# /# client: /p' "$BASE/client.out"
ok "$rc" "a client of node 3 receives the broadcast of a server of node 1" "$BASE/client.out"

# ---- 5: stop --------------------------------------------------------------------------------------
# every PID the cluster recorded, then: none of them runs, no process names DIR, no DIR
pids=$(find "$DIR" -name '*pid' -type f -exec cat {} + 2>/dev/null | grep -E '^[0-9]+$' | sort -u)
rc=0
"$CLUSTER" stop "$DIR" >"$BASE/stop.out" 2>&1 || rc=$?
left=
for p in $pids; do
    st=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$p/status" 2>/dev/null || true)
    [ -z "$st" ] || [ "$st" = Z ] || left="$left $p"
done
for p in /proc/[0-9]*; do
    tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -qF "$DIR/" && left="$left ${p#/proc/}(names DIR)"
done
r=0
[ "$rc" = 0 ] && [ -z "$left" ] && [ ! -e "$DIR" ] || r=1
ok "$r" "stop: no process left, no DIR (recorded pids: $(echo "$pids" | wc -w))" \
    "exit $rc; still running:${left:- none}; DIR $([ -e "$DIR" ] && echo exists || echo gone)" \
    "$BASE/stop.out"
exit "$FAILED"
