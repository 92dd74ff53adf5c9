#!/usr/bin/env bash
# tests/cluster/faults.sh N DRIVER CHANQD - one fault of issue 11's fault run, on a fresh local
# cluster (scripts/cluster.sh: 3 ZooKeeper nodes, shards 1 and 2 of 2 MariaDB + 2 chanqd).
#
#   1  SIGKILL the master chanqd of shard 1
#   2  SIGKILL the primary MariaDB of shard 1
#   3  SIGSTOP the master chanqd of shard 1 for the session timeout + 2 s, then SIGCONT: it must
#      acknowledge nothing after its lease (freeze + session/2)
#   4  SIGKILL the ZooKeeper leader
#   5  SIGKILL the standby MariaDB of shard 1: its master goes on, and its
#      chanq_mq_repl_semi_sync_on goes from exactly 1 to exactly 0
#
# Shard 1 is the one faulted because the producer starts there (its master is the lowest-numbered
# server). The run: fault_driver setup, then `fault_driver run` (producer + watcher) for PRE
# seconds, the fault, then until shard 1 takes writes again (or RECOVER_S), POST seconds more,
# SIGTERM to the driver (it stops producing, flushes its cache and lets the watcher drain), and
# `fault_driver verify`: every acknowledged message stored exactly once at its (shard, offset),
# seen by the watcher, nothing acknowledged by a fenced server. The recovery times are printed
# (lines "TIME ..."), not asserted.
#
# Exit: 0 pass, 1 fail (the logs' tails are printed), 77 skip (java / ZooKeeper / MariaDB missing).
# Env: CLUSTER_FAULT_LONG=1 (30 s before and after the fault instead of 3), ZK_SESSION_MS [4000],
#   DB_DOWN_MS [3000], SEMI_TIMEOUT_MS [2000], RATE [300], DISCOVERY [zk] (static: the SDK gets the
#   cluster's server list instead of reading ZooKeeper), KEEP=1 (keep the cluster's dir on failure
#   - the services are stopped anyway).
set -euo pipefail

[ $# -eq 3 ] || {
    echo "usage: $0 FAULT(1-5) FAULT_DRIVER CHANQD" >&2
    exit 64
}
FAULT=$1
DRIVER=$2
export CHANQD=$3
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CLUSTER="$ROOT/scripts/cluster.sh"
export ZK_SESSION_MS=${ZK_SESSION_MS:-4000}
export DB_DOWN_MS=${DB_DOWN_MS:-3000}
export SEMI_TIMEOUT_MS=${SEMI_TIMEOUT_MS:-2000}
RATE=${RATE:-300}
if [ "${CLUSTER_FAULT_LONG:-0}" = 1 ]; then PRE=30 POST=30; else PRE=3 POST=3; fi
RECOVER_S=$((ZK_SESSION_MS / 1000 + DB_DOWN_MS / 1000 + 20))
TOPIC=fault$FAULT

say() { printf '# %s\n' "$*"; }
skip() {
    say "SKIP: $*"
    exit 77
}
ms() { date +%s%3N; }

command -v java >/dev/null 2>&1 || skip "java is not installed (apt-get install zookeeper)"
[ -f /usr/share/java/zookeeper.jar ] || skip "ZooKeeper is not installed (apt-get install zookeeper)"
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] ||
    skip "mariadbd is not installed (apt-get install mariadb-server)"
[ -x "$CLUSTER" ] || {
    say "FAIL: $CLUSTER is missing"
    exit 1
}

BASE=$(mktemp -d "${TMPDIR:-/tmp}/cqfault$FAULT.XXXXXX")
DIR=$BASE/cluster
LOG=$BASE/driver.log
DPID=
FAILED=0

cleanup() {
    local rc=$?
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
    if [ "$rc" != 0 ] && [ "${KEEP:-0}" = 1 ]; then
        "$CLUSTER" status "$DIR" 2>&1 | sed 's/^/# /' || true
        # stop by PID, keep the files: cluster.sh stop would remove the dir
        for f in "$DIR"/shard*/node*/pid; do [ -f "$f" ] && kill -CONT "$(cat "$f")" 2>/dev/null; done
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
t0=$(ms)
if ! "$CLUSTER" start "$DIR" >"$BASE/cluster.out" 2>"$BASE/cluster.err"; then
    say "FAIL: cluster.sh start:"
    tail -n 20 "$BASE/cluster.err"
    exit 1
fi
say "cluster up after $(($(ms) - t0)) ms"
sed 's/^/# /' "$BASE/cluster.out"

# field S N KEY: KEY (mq, admin, pid) of chanqd node N of shard S, from cluster.sh's output.
field() { sed -n "s/^shard=$1 node=$2 .*$3=\([^ ]*\).*/\1/p" "$BASE/cluster.out"; }
SERVERS=
for s in 1 2; do
    for n in 1 2; do SERVERS="$SERVERS${SERVERS:+,}$s/$(field $s $n mq)"; done
done
say "servers $SERVERS"
# node_of ADDR: "S N" of the chanqd whose seed address is ADDR.
node_of() { sed -n "s|^shard=\([0-9]*\) node=\([0-9]*\) mq=$1 .*|\1 \2|p" "$BASE/cluster.out"; }

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

# wait_for SECONDS WHAT CMD...: polls CMD every 100 ms; 0 when it held, 1 on timeout.
wait_for() {
    local end=$((SECONDS + $1)) what=$2
    shift 2
    until "$@"; do
        if [ $SECONDS -ge "$end" ]; then
            say "timed out after $1 s waiting for $what"
            return 1
        fi
        sleep 0.1
    done
}
# ack_after SHARD T [NOT_ADDR]: an ack on SHARD received after T (wall ms) from a server other
# than NOT_ADDR.
ack_after() {
    awk -v s="$1" -v t="$2" -v x="${3:-}" '$1 == "ack" && $3 == s && $5 > t && $6 != x { f = 1; exit }
        END { exit !f }' "$LOG"
}
# last_acker SHARD: the server address of the last ack on SHARD.
last_acker() { awk -v s="$1" '$1 == "ack" && $3 == s { a = $6 } END { print a }' "$LOG"; }
metric() { # metric ADMIN NAME: the value of an unlabelled metric ("" when absent / no answer)
    curl -s --max-time 2 "http://$1/metrics" 2>/dev/null | awk -v n="$2" '$1 == n { print $2 }'
}

wait_for 60 "the first ack on shard 1" ack_after 1 0 || exit 1
sleep "$PRE"
MASTER=$(last_acker 1)
read -r MS MN <<<"$(node_of "$MASTER")"
[ "$MS" = 1 ] || {
    say "FAIL: the master of shard 1 ($MASTER) is not in the cluster's list"
    exit 1
}
MADMIN=$(field 1 "$MN" admin)
MPID=$(field 1 "$MN" pid)
say "shard 1: master is node $MN ($MASTER, admin $MADMIN, pid $MPID)"

VERIFY_EXTRA=()
case "$FAULT" in
1)
    T=$(ms)
    kill -KILL "$MPID"
    say "fault 1: SIGKILLed chanqd node $MN at $T"
    ;;
2)
    # node 1 stores in the pair's primary, node 2 in its standby; the master's DB is the primary
    [ "$MN" = 1 ] || say "note: node $MN is master; its database is the pair's standby dir"
    T=$(ms)
    if [ "$MN" = 1 ]; then which=primary; else which=standby; fi
    "$ROOT/tests/support/mariadb-pair.sh" "kill-$which" "$DIR/shard1/db"
    say "fault 2: SIGKILLed the master's MariaDB ($which of shard 1) at $T"
    ;;
3)
    T=$(ms)
    kill -STOP "$MPID"
    T=$(ms) # after the signal: the server may have run until then
    say "fault 3: SIGSTOPped chanqd node $MN at $T for $((ZK_SESSION_MS + 2000)) ms"
    sleep "$(((ZK_SESSION_MS + 2000) / 1000))"
    kill -CONT "$MPID"
    TC=$(ms)
    say "fault 3: SIGCONT at $TC"
    LEASE_END=$((T + ZK_SESSION_MS / 2))
    VERIFY_EXTRA=(--fenced "$MASTER" --after "$LEASE_END")
    ;;
4)
    T=$(ms)
    L=$("$ROOT/tests/support/zk.sh" kill-leader "$DIR/zk")
    say "fault 4: SIGKILLed the ZooKeeper leader zk$L at $T; the ensemble serves again at $(ms)"
    ;;
5)
    v=$(metric "$MADMIN" chanq_mq_repl_semi_sync_on)
    say "before: chanq_mq_repl_semi_sync_on=$v on $MADMIN"
    [ "$v" = 1 ] || {
        say "FAIL: chanq_mq_repl_semi_sync_on of the master is '$v' before the fault, expected 1"
        FAILED=1
    }
    if [ "$MN" = 1 ]; then which=standby; else which=primary; fi
    T=$(ms)
    "$ROOT/tests/support/mariadb-pair.sh" "kill-$which" "$DIR/shard1/db"
    say "fault 5: SIGKILLed the standby MariaDB ($which dir of shard 1) at $T"
    ;;
*)
    say "FAIL: no fault $FAULT"
    exit 64
    ;;
esac

# ---- recovery ---------------------------------------------------------------------------------
# Faults 1-3 end the master's role: shard 1 is back when another server acknowledges there
# (promotion). Faults 4-5 keep the roles: back at the first ack after the fault (+0.5 s for
# answers that were on the way when it struck).
NOT=
case "$FAULT" in
1 | 2 | 3) SINCE=$T NOT=$MASTER ;;
*) SINCE=$((T + 500)) ;;
esac
if wait_for "$RECOVER_S" "shard 1 to take writes again" ack_after 1 "$SINCE" "$NOT"; then
    say "shard 1 took writes again: $(last_acker 1) (+$(($(ms) - T)) ms at most)"
else
    say "NOTE: shard 1 took no writes within $RECOVER_S s after the fault (printed, not asserted)"
fi
if [ "$FAULT" = 5 ]; then
    semi_off() { [ "$(metric "$MADMIN" chanq_mq_repl_semi_sync_on)" = 0 ]; }
    wait_for 30 "chanq_mq_repl_semi_sync_on 0 on $MADMIN" semi_off || true
    v=$(metric "$MADMIN" chanq_mq_repl_semi_sync_on)
    say "after: chanq_mq_repl_semi_sync_on=$v" \
        "chanq_mq_repl_semi_sync_no_tx_total=$(metric "$MADMIN" chanq_mq_repl_semi_sync_no_tx_total)"
    [ "$v" = 0 ] || {
        say "FAIL: chanq_mq_repl_semi_sync_on of the master is '$v' after the standby died, expected 0"
        FAILED=1
    }
fi
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
    --fault-shard 1 "${VERIFY_EXTRA[@]}" || FAILED=1
[ "$FAILED" = 0 ] && say "PASS: fault $FAULT" || say "FAIL: fault $FAULT"
exit "$FAILED"
