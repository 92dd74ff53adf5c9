#!/usr/bin/env bash
# tests/integration/cluster/bridge.sh DRIVER PLAYER CHANQD - issue 24's cluster acceptance: a
# game client receives a durable topic's events through the bridge of a chanqd that follows a
# real cluster's shards (doc/bridge.md "Shards"), across a SIGKILL of the master its events
# come from.
#
# The run: scripts/cluster.sh (3 ZooKeeper nodes, shards 1 and 2 of 2 MariaDB + 2 chanqd);
# a front chanqd with its own store, a broadcast binding of topic "brvip" on GLOBAL and
# --bridge-follow naming all four servers; two players (bridge_player, libchanq's position
# tracker) subscribed to GLOBAL on the front; the fault driver producing with libchanq's cluster
# SDK (round-robin failover, the same (producer_id, seq) on retry). Each player resumes with no
# position right after its SUB: the result is its baseline, one position per shard, so player
# 2's resume covers a shard it had no event of yet when it dropped (the first clean-clone run
# with the cluster under load lost 123 such events of shard 2, with no hole to show for it). After PRE seconds the master
# of the shard the producer writes to is SIGKILLed; the producer moves on, the shard's standby
# is promoted. Player 1 stays connected throughout; player 2 drops its connection a second into
# the run, stays away DROP_MS and resumes from its positions, one per shard (the front keeps 16
# events per ring, so its catch-up reads the followed shards' servers), before the fault. POST
# seconds after the fault the producer stops, and the players get until every acked seq
# arrived (at most 60 s). (A resume across the failover itself is answered recovered: false:
# the promotion gives the shard a new epoch, doc/bridge.md "Shards".)
#
# Checked, exactly, for each player:
#   - every seq the producer had acknowledged reached it exactly once;
#   - no (producer_id, seq) reached it twice: the copies a retry stored on two shards (counted
#     by the driver's verify, printed) were dropped by the bridge;
#   - per shard, offsets strictly increase and each event's prev_offset is the previous event's
#     offset it got from that shard (no hole; a dropped copy and the resume included);
#   - each player's baseline was answered recovered, and player 2's resume too;
#   - the front's chanq_bridge_follow_events_total is at least the player's event count, and
#     the driver's own verify passes (every ack stored at its shard and offset).
# Printed, not asserted: the copies, the follower's reconnections, the time from the fault to
# the first event from the promoted standby.
#
# Exit: 0 pass, 1 fail (logs' tails printed), 77 skip (java / ZooKeeper / MariaDB missing).
# Env: ZK_SESSION_MS [4000], DB_DOWN_MS [3000], SEMI_TIMEOUT_MS [2000], RATE [200], LONG=1 (30 s
#   before and after the fault instead of 3), DROP_MS [1500], KEEP=1 (keep the files).
set -euo pipefail

[ $# -eq 3 ] || {
    echo "usage: $0 FAULT_DRIVER BRIDGE_PLAYER CHANQD" >&2
    exit 64
}
DRIVER=$1
PLAYER=$2
export CHANQD=$3
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
export RELAY_NODES=0
RATE=${RATE:-200}
TOPIC=brvip
MSG_TYPE=200

# shellcheck source=tests/integration/cluster/lib.sh
. "$ROOT/tests/integration/cluster/lib.sh"
cluster_settings "${LONG:-0}"

BASE=$(mktemp -d "${TMPDIR:-/tmp}/cqbridge.XXXXXX")
DIR=$BASE/cluster
FRONT=$BASE/front
LOG=$BASE/driver.log
PLOG=$BASE/player.log
P2LOG=$BASE/player2.log
DPID='' PPID_='' P2PID='' FPID=''
FAILED=0

cleanup() {
    local rc=$?
    set +e
    stop_pid "$DPID"
    stop_pid "$PPID_"
    stop_pid "$P2PID"
    stop_pid "$FPID"
    if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then
        say "---- driver log (last 20 lines)"
        tail -n 20 "$LOG" 2>/dev/null
        say "---- player logs (last 10 lines each)"
        tail -n 10 "$PLOG" "$P2LOG" 2>/dev/null
        say "---- front chanqd log (last 30 lines)"
        tail -n 30 "$FRONT/log" 2>/dev/null
        local f
        for f in "$DIR"/shard*/node*/log; do
            [ -f "$f" ] || continue
            say "---- $f (last 10 lines)"
            tail -n 10 "$f"
        done
    fi
    "$CLUSTER" stop "$DIR" >/dev/null 2>&1 || true
    if [ "${KEEP:-0}" = 1 ]; then say "kept $BASE"; else rm -rf "$BASE"; fi
    exit "$rc"
}
trap cleanup EXIT

# ---- the cluster ------------------------------------------------------------------------------
cluster_up
SERVERS=$(servers_of 2)
say "servers $SERVERS"
"$DRIVER" setup --servers "$SERVERS" --topic "$TOPIC" | tail -n 4

# ---- the front chanqd and the player ----------------------------------------------------------
mkdir -p "$FRONT"
read -r CPORT SPORT APORT MPORT <<<"$(python3 "$ROOT/tests/support/free-ports.py" 30000 32999 4)"
printf '{"bindings":[{"topic":"%s","broadcast":"global","msg_type":%d}]}\n' "$TOPIC" "$MSG_TYPE" \
    >"$FRONT/bindings.json"
"$CHANQD" --dev --client-fsm "$ROOT/config/client_authoratative_fsm.json" \
    --client-addr "127.0.0.1:$CPORT" --server-addr "127.0.0.1:$SPORT" \
    --admin-addr "127.0.0.1:$APORT" --mq-addr "127.0.0.1:$MPORT" --mq-http-addr '' \
    --ws-addr '' --kcp-addr '' --store-dir "$FRONT/data" --ready-file "$FRONT/ready" \
    --bridge-file "$FRONT/bindings.json" --bridge-follow "$SERVERS" --bridge-ring-events 16 \
    >"$FRONT/log" 2>&1 &
FPID=$!
for _ in $(seq 1 300); do
    [ -e "$FRONT/ready" ] && break
    kill -0 "$FPID" 2>/dev/null || {
        say "FAIL: the front chanqd exited: $(tail -n 5 "$FRONT/log")"
        exit 1
    }
    sleep 0.1
done
[ -e "$FRONT/ready" ] || {
    say "FAIL: the front chanqd is not ready after 30 s"
    exit 1
}
metric() { # metric NAME: the front's metric line "NAME VALUE" ("" when absent)
    curl -s --max-time 2 "http://127.0.0.1:$APORT/metrics" 2>/dev/null |
        awk -v n="$1" '$1 == n { print $2 }'
}
both_up() {
    [ "$(metric 'chanq_bridge_follow_up{shard="1"}')" = 1 ] &&
        [ "$(metric 'chanq_bridge_follow_up{shard="2"}')" = 1 ]
}
wait_for 30 "the front to follow both shards" both_up || exit 1
"$PLAYER" "127.0.0.1:$CPORT" player1 "$MSG_TYPE" >"$PLOG" 2>"$BASE/player.err" &
PPID_=$!
"$PLAYER" "127.0.0.1:$CPORT" player2 "$MSG_TYPE" "${DROP_MS:-1500}" >"$P2LOG" \
    2>"$BASE/player2.err" &
P2PID=$!
subbed() { grep -q '^sub ' "$PLOG" && grep -q '^sub ' "$P2LOG"; }
wait_for 30 "the players' subscriptions" subbed || exit 1
# Every topic of both links is live once an event of each shard can reach the player: the
# follower starts a topic at its live position, so the producer starts after that.
topics_live() { # the front logged no refusal and both links are up; give the watches a moment
    both_up
}
wait_for 10 "the follow" topics_live || exit 1
sleep 1

# ---- the run ----------------------------------------------------------------------------------
"$DRIVER" run --servers "$SERVERS" --topic "$TOPIC" --rate "$RATE" >"$LOG" 2>"$BASE/driver.err" &
DPID=$!
ack_after() {
    awk -v t="$1" '$1 == "ack" && $5 > t { f = 1; exit } END { exit !f }' "$LOG"
}
wait_for 90 "the first ack" ack_after 0 || exit 1
sleep 1
kill -USR1 "$P2PID"
say "player 2 drops its connection for ${DROP_MS:-1500} ms, then resumes"
resumed() { grep -q '^resume ' "$P2LOG"; }
wait_for 30 "player 2's resume" resumed || exit 1
say "player 2: $(grep '^resume ' "$P2LOG")"
sleep "$PRE"
FS=$(awk '$1 == "ack" { s = $3 } END { print s }' "$LOG")
MASTER=$(awk -v s="$FS" '$1 == "ack" && $3 == s { a = $6 } END { print a }' "$LOG")
read -r MS MN <<<"$(node_of "$MASTER")"
[ "$MS" = "$FS" ] || {
    say "FAIL: the master of shard $FS ($MASTER) is not in the cluster's list"
    exit 1
}
MPID=$(field "$FS" "$MN" pid)
T=$(ms)
kill -KILL "$MPID"
EPOCH0=$(metric "chanq_bridge_follow_epoch{shard=\"$FS\"}")
say "SIGKILLed the master chanqd of shard $FS (node $MN, $MASTER) at $T"
new_epoch() { [ "$(metric "chanq_bridge_follow_epoch{shard=\"$FS\"}")" != "$EPOCH0" ]; }
wait_for "$RECOVER_S" "a new epoch of shard $FS at the front" new_epoch &&
    say "shard $FS: epoch $EPOCH0 -> $(metric "chanq_bridge_follow_epoch{shard=\"$FS\"}")" \
        "at the front +$(($(ms) - T)) ms after the fault"
wait_for "$RECOVER_S" "an ack after the fault" ack_after "$T" ||
    say "NOTE: nothing was acknowledged for $RECOVER_S s after the fault"
sleep "$POST"
kill -TERM "$DPID"
wait "$DPID" || {
    say "FAIL: the driver exited with $?"
    FAILED=1
}
DPID=
grep '^# \(producer\|run\)' "$LOG" || true
PID=$(sed -n 's/^# run: producer_id \([0-9]*\).*/\1/p' "$LOG")

# ---- the players' events ----------------------------------------------------------------------
# all_seen LOG: every acked seq of our producer reached that player
all_seen() {
    awk -v p="$PID" 'FNR == NR { if ($1 == "ev" && $4 == p) got[$5] = 1; next }
        $1 == "ack" && !got[$2] { exit 1 }' "$1" "$LOG"
}
wait_for 60 "every acked seq at player 1" all_seen "$PLOG" ||
    say "NOTE: some acked seqs did not reach player 1 within 60 s"
wait_for 30 "every acked seq at player 2" all_seen "$P2LOG" ||
    say "NOTE: some acked seqs did not reach player 2 within 30 s more"
FOLLOWED=$(metric chanq_bridge_follow_events_total)
DUPS=$(metric chanq_bridge_duplicates_total)
CONNECTS=$(metric chanq_bridge_follow_connects_total)
RESUMES=$(metric 'chanq_bridge_resumes_total{outcome="recovered"}')
READS=$(metric chanq_bridge_resume_reads_total)
stop_pid "$PPID_"
stop_pid "$P2PID"
PPID_='' P2PID=''
say "player 1: $(grep -c '^ev ' "$PLOG") events; player 2: $(grep -c '^ev ' "$P2LOG") events," \
    "$(grep '^resume ' "$P2LOG" | head -n 1)"
say "front: follow_events_total=$FOLLOWED duplicates_total=$DUPS follow_connects_total=$CONNECTS" \
    "resumes recovered=$RESUMES resume reads=$READS"
grep '^# events' "$PLOG" "$P2LOG" | sed 's/^/# /'
# publish -> player latency (the driver's ack to the player's receipt, wall ms; printed only)
for L in "$PLOG" "$P2LOG"; do
    awk -v p="$PID" 'FNR == NR { if ($1 == "ack") at[$2] = $5; next }
        $1 == "ev" && $4 == p && ($5 in at) { print $8 - at[$5] }' "$LOG" "$L" | sort -n |
        awk -v f="$(basename "$L")" '{ d[++n] = $1 }
            END { if (n) printf "# latency ack -> %s: n=%d p50=%d p99=%d max=%d ms\n", f, n,
                d[int(n * 0.5) + 1], d[int(n * 0.99) + 1], d[n] }'
done
first_new=$(awk -v s="$FS" -v t="$T" '$1 == "ev" && $2 == s && $8 > t { print $8 - t; exit }' "$PLOG")
say "first event of shard $FS after the fault at player 1: +${first_new:-none} ms"

# check LOG NAME: the exact checks (awk prints each failure, at most 20 per kind)
check() {
    awk -v p="$PID" -v who="$2" '
        function bad(kind, msg) { if (++nb[kind] <= 20) print "# FAIL: " who ": " msg; failed = 1 }
        FNR == NR {
            # no reset at a "drop": the resume must carry the chain across the new connection
            if ($1 != "ev") next
            sh = $2; off = $3; prev = $7
            if (sh in last) {
                if (off <= last[sh]) bad("order", "shard " sh ": offset " off " after " last[sh])
                if (prev != last[sh]) bad("hole", "shard " sh ": offset " off " has prev_offset " prev ", the last one received is " last[sh])
            }
            last[sh] = off
            if ($4 != p) next
            n[$5]++
            if (n[$5] == 2) bad("dup", "seq " $5 " received twice (shard " sh " offset " off ")")
            next
        }
        $1 == "ack" { acked++; if (!n[$2]) bad("missing", "acked seq " $2 " (shard " $3 " offset " $4 ") never reached it") }
        END {
            printf "# %s: checked %d acked seqs\n", who, acked
            exit failed
        }' "$1" "$LOG"
}
check "$PLOG" "player 1" || FAILED=1
check "$P2LOG" "player 2" || FAILED=1
[ "${READS:-0}" -ge 1 ] || {
    say "FAIL: the resume read nothing (chanq_bridge_resume_reads_total '$READS'): the ring served it"
    FAILED=1
}
for L in "$PLOG" "$P2LOG"; do
    grep -q '^baseline 1 ' "$L" || {
        say "FAIL: $(basename "$L")'s baseline: '$(grep '^baseline' "$L" || echo none)'"
        FAILED=1
    }
done
grep -q '^resume 1 ' "$P2LOG" || {
    say "FAIL: player 2's resume: '$(grep '^resume' "$P2LOG" || echo none)', expected recovered"
    FAILED=1
}
grep -q '^# events .* holes 0 skipped' "$P2LOG" || {
    say "FAIL: player 2's tracker counted holes: $(grep '^# events' "$P2LOG")"
    FAILED=1
}
got=$(grep -c '^ev ' "$PLOG" || true)
# the front stores nothing itself: every event it delivered came through the follower
[ -n "$FOLLOWED" ] && [ "$FOLLOWED" -ge "$got" ] && [ "$got" -ge 1 ] || {
    say "FAIL: chanq_bridge_follow_events_total is '$FOLLOWED', the player got $got"
    FAILED=1
}
"$DRIVER" verify --servers "$SERVERS" --topic "$TOPIC" --log "$LOG" --fault-ms "$T" \
    --fault-shard "$FS" >"$BASE/verify.out" 2>&1 || FAILED=1
sed 's/^/# verify: /' "$BASE/verify.out"
[ "$FAILED" = 0 ] && say "PASS: bridge across a master SIGKILL and a resume" || say "FAIL: bridge"
exit "$FAILED"
