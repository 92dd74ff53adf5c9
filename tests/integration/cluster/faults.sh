#!/usr/bin/env bash
# tests/integration/cluster/faults.sh N DRIVER CHANQD - one fault of issue 11's fault run, on a
# fresh local cluster (scripts/cluster.sh: 3 ZooKeeper nodes, shards 1 and 2 of 2 MariaDB + 2
# chanqd).
#
#   1  SIGKILL the master chanqd of shard FS
#   2  SIGKILL the primary MariaDB of shard FS
#   3  SIGSTOP the master chanqd of shard FS for the session timeout + 2 s, then SIGCONT: it must
#      acknowledge nothing after its lease (freeze + session/2)
#   4  SIGKILL the ZooKeeper leader
#   5  SIGKILL the standby MariaDB of shard FS: its master goes on, and its
#      chanq_mq_repl_semi_sync_on goes from exactly 1 to exactly 0
#
# FS is the shard the producer writes to when the fault strikes. The run: fault_driver setup,
# then `fault_driver run` (producer + watcher) for PRE seconds, the fault, then until the
# shard's other server is master (faults 1-3; the metric chanq_mq_cluster_role) or the
# fallback shows (5), until produce acks again (at most RECOVER_S each), POST seconds more,
# SIGTERM to the driver (it stops producing, flushes its cache and lets the watcher drain), and
# `fault_driver verify`: every acknowledged message stored exactly once at its (shard, offset),
# seen by the watcher, nothing acknowledged by a fenced server. The recovery times are printed
# (lines "TIME ..."), not asserted.
#
# Exit: 0 pass, 1 fail (the logs' tails are printed), 77 skip (java / ZooKeeper / MariaDB missing).
# Env: CLUSTER_FAULT_LONG=1 (30 s before and after the fault instead of 3), ZK_SESSION_MS [4000],
#   DB_DOWN_MS [3000], SEMI_TIMEOUT_MS [2000], RATE [300], DISCOVERY [zk] (static: the SDK gets the
#   cluster's server list instead of reading ZooKeeper), KEEP=1 (keep a copy of the cluster's dir and
#   logs; the services are stopped anyway), FREEZE_MS [session + 2000] (fault 3), RELAY_NODES [0]
#   (cluster.sh's relay nodes; the faults strike the shards).
set -euo pipefail

[ $# -eq 3 ] || {
    echo "usage: $0 FAULT(1-5) FAULT_DRIVER CHANQD" >&2
    exit 64
}
FAULT=$1
DRIVER=$2
export CHANQD=$3
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
export RELAY_NODES=${RELAY_NODES:-0}
RATE=${RATE:-300}
TOPIC=fault$FAULT

# shellcheck source=tests/integration/cluster/lib.sh
. "$ROOT/tests/integration/cluster/lib.sh"
cluster_settings "${CLUSTER_FAULT_LONG:-0}"

BASE=$(mktemp -d "${TMPDIR:-/tmp}/cqfault$FAULT.XXXXXX")
DIR=$BASE/cluster
LOG=$BASE/driver.log
DPID=
FAILED=0

cleanup() {
    local rc=$?
    set +e # stop everything whatever fails here
    if [ -n "$DPID" ] && kill -0 "$DPID" 2>/dev/null; then
        kill -KILL "$DPID" 2>/dev/null || true
        wait "$DPID" 2>/dev/null || true
    fi
    if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then
        say "---- driver log (last 30 lines of $LOG)"
        tail -n 30 "$LOG" 2>/dev/null || true
        local f
        for f in "$DIR"/shard*/node*/log; do
            [ -f "$f" ] || continue
            say "---- $f (last 15 lines)"
            tail -n 15 "$f"
        done
    fi
    if [ "${KEEP:-0}" = 1 ]; then
        "$CLUSTER" status "$DIR" 2>&1 | sed 's/^/# /' || true
        # stop by PID, keep the files: cluster.sh stop would remove the dir
        for f in "$DIR"/shard*/node*/pid; do [ -f "$f" ] && kill -CONT "$(cat "$f")" 2>/dev/null || true; done
        cp -a "$DIR" "$BASE/kept" 2>/dev/null || true
        say "kept $BASE"
        "$CLUSTER" stop "$DIR" >/dev/null 2>&1 || true
    else
        "$CLUSTER" stop "$DIR" >/dev/null 2>&1 || true
        rm -rf "$BASE"
    fi
    exit "$rc"
}
trap cleanup EXIT

# ---- the cluster ------------------------------------------------------------------------------
cluster_up
sed 's/^/# /' "$BASE/cluster.out"

SERVERS=$(servers_of 2)
say "servers $SERVERS"

# The SDK finds the servers in ZooKeeper (DISCOVERY=zk, the default) or takes the static list.
SRV=(--servers "$SERVERS")
SETUP_DONE=0
if [ "${DISCOVERY:-zk}" = zk ]; then
    if "$DRIVER" setup --zk "$(cat "$DIR/zk_hosts")" --zk-root /chanq --topic "$TOPIC" \
        >"$BASE/setup.out" 2>&1; then
        SRV=(--zk "$(cat "$DIR/zk_hosts")" --zk-root /chanq)
        SETUP_DONE=1
        tail -n 4 "$BASE/setup.out"
    else
        say "NOTE: setup through ZooKeeper discovery failed; the static list is used:"
        sed 's/^/#   /' "$BASE/setup.out"
    fi
fi
say "servers: ${SRV[*]}"
[ "$SETUP_DONE" = 1 ] || "$DRIVER" setup "${SRV[@]}" --topic "$TOPIC" | tail -n 4

# ---- the run ----------------------------------------------------------------------------------
"$DRIVER" run "${SRV[@]}" --topic "$TOPIC" --rate "$RATE" >"$LOG" 2>"$BASE/driver.err" &
DPID=$!

# ack_after SHARD T: an ack on SHARD (any shard when "") received after T (wall ms).
ack_after() {
    awk -v s="$1" -v t="$2" '$1 == "ack" && (s == "" || $3 == s) && $5 > t { f = 1; exit }
        END { exit !f }' "$LOG"
}
# last_acker SHARD: the server address of the last ack on SHARD.
last_acker() { awk -v s="$1" '$1 == "ack" && $3 == s { a = $6 } END { print a }' "$LOG"; }
metric() { # metric ADMIN NAME: the value of a metric line "NAME VALUE" ("" when absent / down)
    curl -s --max-time 2 "http://$1/metrics" 2>/dev/null | awk -v n="$2" '$1 == n { print $2 }'
}
# is_master ADMIN: its chanq_mq_cluster_role{role="master"} is 1.
is_master() { [ "$(metric "$1" "chanq_mq_cluster_role{shard=\"$FS\",role=\"master\"}")" = 1 ]; }
not_master() { [ "$(metric "$1" "chanq_mq_cluster_role{shard=\"$FS\",role=\"master\"}")" = 0 ]; }

wait_for 90 "the first ack" ack_after "" 0 || exit 1
sleep "$PRE"
# The faulted shard is the one the producer writes to now (the SDK prefers the healthier
# shard, so it need not be the lowest), and its master is the server that acknowledged last.
FS=$(awk '$1 == "ack" { s = $3 } END { print s }' "$LOG")
MASTER=$(last_acker "$FS")
read -r MS MN <<<"$(node_of "$MASTER")"
[ "$MS" = "$FS" ] || {
    say "FAIL: the master of shard $FS ($MASTER) is not in the cluster's list"
    exit 1
}
ON=$((3 - MN)) # the shard's other node
MADMIN=$(field "$FS" "$MN" admin)
MPID=$(field "$FS" "$MN" pid)
OADMIN=$(field "$FS" "$ON" admin)
OTHER=$(field "$FS" "$ON" mq)
say "shard $FS: master node $MN ($MASTER, admin $MADMIN, pid $MPID, master metric" \
    "$(is_master "$MADMIN" && echo 1 || echo 0)); slave node $ON ($OTHER)"
# node N stores in the pair's primary dir when N = 1, else in its standby dir (the names of the
# pair's dirs stay those of the roles they were started with)
dbdir() { [ "$1" = 1 ] && echo primary || echo standby; }

VERIFY_EXTRA=()
case "$FAULT" in
1)
    T=$(ms)
    kill -KILL "$MPID"
    say "fault 1: SIGKILLed the master chanqd (shard $FS node $MN) at $T"
    ;;
2)
    T=$(ms)
    "$ROOT/tests/support/mariadb-pair.sh" "kill-$(dbdir "$MN")" "$DIR/shard$FS/db"
    say "fault 2: SIGKILLed the master's MariaDB (shard $FS, $(dbdir "$MN") dir) at $T"
    ;;
3)
    kill -STOP "$MPID"
    T=$(ms) # after the signal: the server may have run until then
    FREEZE_MS=${FREEZE_MS:-$((ZK_SESSION_MS + 2000))}
    say "fault 3: SIGSTOPped the master chanqd (shard $FS node $MN) at $T for $FREEZE_MS ms"
    # while it is frozen: when does the other node say it is master?
    TP=
    while [ $(($(ms) - T)) -lt "$FREEZE_MS" ]; do
        [ -z "$TP" ] && is_master "$OADMIN" && TP=$(ms)
        sleep 0.1
    done
    kill -CONT "$MPID"
    if [ -n "$TP" ]; then
        say "shard $FS: node $ON is master +$((TP - T)) ms after the freeze (before SIGCONT)"
    else
        say "NOTE: shard $FS: node $ON was not master before SIGCONT"
    fi
    TC=$(ms)
    say "fault 3: SIGCONT at $TC (+$((TC - T)) ms)"
    # its lease ended at most session/2 after its last heartbeat, which was before the freeze
    VERIFY_EXTRA=(--fenced "$MASTER" --after "$((T + ZK_SESSION_MS / 2))")
    ;;
4)
    T=$(ms)
    L=$("$ROOT/tests/support/zk.sh" kill-leader "$DIR/zk")
    say "fault 4: SIGKILLed the ZooKeeper leader zk$L at $T; the ensemble serves again" \
        "+$(($(ms) - T)) ms"
    ;;
5)
    v=$(metric "$MADMIN" chanq_mq_repl_semi_sync_on)
    say "before: chanq_mq_repl_semi_sync_on=$v on the master"
    [ "$v" = 1 ] || {
        say "FAIL: chanq_mq_repl_semi_sync_on of the master is '$v' before the fault, expected 1"
        FAILED=1
    }
    T=$(ms)
    "$ROOT/tests/support/mariadb-pair.sh" "kill-$(dbdir "$ON")" "$DIR/shard$FS/db"
    say "fault 5: SIGKILLed the standby MariaDB (shard $FS, $(dbdir "$ON") dir) at $T"
    ;;
*)
    say "FAIL: no fault $FAULT"
    exit 64
    ;;
esac

# ---- recovery ---------------------------------------------------------------------------------
case "$FAULT" in
1 | 2 | 3)
    # the role moves: the slave promotes its standby (--cluster-promote), printed not asserted
    # (fault 3 printed it already if it happened during the freeze)
    if [ -n "${TP:-}" ]; then
        :
    elif wait_for "$RECOVER_S" "node $ON to become master" is_master "$OADMIN"; then
        say "shard $FS: node $ON is master +$(($(ms) - T)) ms after the fault"
    else
        say "NOTE: shard $FS: node $ON did not become master within $RECOVER_S s"
    fi
    if [ "$FAULT" = 3 ]; then
        wait_for 30 "the thawed node $MN to report it is not master" not_master "$MADMIN" || true
        say "thawed node $MN: master metric $(metric "$MADMIN" \
            "chanq_mq_cluster_role{shard=\"$FS\",role=\"master\"}")" \
            "not_master_total=$(metric "$MADMIN" chanq_mq_not_master_total)" \
            "produced_total=$(metric "$MADMIN" chanq_mq_produced_total)"
    fi
    ;;
4)
    sleep 1
    say "after: node $MN master metric $(is_master "$MADMIN" && echo 1 || echo 0) (roles kept?)"
    ;;
5)
    semi_off() { [ "$(metric "$MADMIN" chanq_mq_repl_semi_sync_on)" = 0 ]; }
    wait_for 30 "chanq_mq_repl_semi_sync_on 0 on the master" semi_off || true
    v=$(metric "$MADMIN" chanq_mq_repl_semi_sync_on)
    say "after +$(($(ms) - T)) ms: chanq_mq_repl_semi_sync_on=$v" \
        "chanq_mq_repl_semi_sync_no_tx_total=$(metric "$MADMIN" chanq_mq_repl_semi_sync_no_tx_total)"
    [ "$v" = 0 ] || {
        say "FAIL: chanq_mq_repl_semi_sync_on of the master is '$v' after its standby died," \
            "expected 0"
        FAILED=1
    }
    ;;
esac
TR=$(ms)
wait_for "$RECOVER_S" "an ack after the recovery" ack_after "" "$TR" ||
    say "NOTE: nothing was acknowledged for $RECOVER_S s after the recovery"
sleep "$POST"

# ---- stop, drain, verify ----------------------------------------------------------------------
kill -TERM "$DPID"
wait "$DPID" || {
    say "FAIL: the driver exited with $?"
    FAILED=1
}
DPID=
grep '^# \(producer\|run\)' "$LOG" || true
if [ "$FAULT" = 3 ]; then
    say "frozen server after SIGCONT: chanq_mq_not_master_total=$(metric "$MADMIN" chanq_mq_not_master_total)" \
        "chanq_mq_produced_total=$(metric "$MADMIN" chanq_mq_produced_total)"
fi
say "acks by server: $(awk '$1 == "ack" { n[$6]++ } END { for (a in n) printf "%s=%d ", a, n[a] }' "$LOG")"
"$DRIVER" verify "${SRV[@]}" --topic "$TOPIC" --log "$LOG" --fault-ms "$T" \
    --fault-shard "$FS" "${VERIFY_EXTRA[@]}" || FAILED=1
[ "$FAILED" = 0 ] && say "PASS: fault $FAULT" || say "FAIL: fault $FAULT"
exit "$FAILED"
