#!/usr/bin/env bash
# tests/integration/cluster/selftest.sh DRIVER CHANQD CHANQ - checks fault_driver itself, without
# ZooKeeper or MariaDB: two standalone chanqd (SQLite) act as shards 1 and 2. The driver runs,
# shard 1's server is SIGKILLed mid-run (the producer moves to shard 2), and verify must pass;
# then verify must FAIL, naming the exact seq, on logs doctored the ways a broken cluster would
# write them: an ack of a message that is not stored, an ack at the wrong offset, an acked seq
# the watcher never saw, and acks by a server after it was fenced.
# TAP output; exit 0 when every check holds.
set -uo pipefail

DRIVER=$1
CHANQD=$2
CHANQ=$3
BASE=$(mktemp -d "${TMPDIR:-/tmp}/cqfaultself.XXXXXX")
PIDS=()
n=0
failed=0

cleanup() {
    local p
    for p in "${PIDS[@]}"; do
        kill -KILL "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$BASE"
}
trap cleanup EXIT

ok() { # ok DESCRIPTION CONDITION-EXIT-CODE
    n=$((n + 1))
    if [ "$2" = 0 ]; then echo "ok $n - $1"; else
        echo "not ok $n - $1"
        failed=1
    fi
}

# wait_for DESCRIPTION COMMAND...: until COMMAND succeeds. The bound only keeps a broken run
# from hanging; the checks after it fail if the condition never came.
wait_for() {
    local what=$1
    shift
    for _ in $(seq 1 1200); do
        "$@" && return 0
        sleep 0.05
    done
    echo "# no $what after 60 s"
    return 1
}

free_port() {
    python3 "$(dirname "$0")/../../support/free-ports.py" 26000 29999 1 "$@"
}

start() { # start I PORT
    local d="$BASE/s$1"
    mkdir -p "$d"
    "$CHANQD" --client-addr 127.0.0.1:0 --server-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 \
        --mq-addr "127.0.0.1:$2" --mq-http-addr '' --ws-addr '' --kcp-addr '' \
        --store-dir "$d/store" --ready-file "$d/ready" --log-level warn >"$d/log" 2>&1 &
    PIDS+=($!)
    wait_for "ready file of chanqd $1" test -s "$d/ready" && return 0
    echo "# chanqd $1 did not start:"
    sed 's/^/# /' "$d/log"
    exit 1
}

P1=$(free_port)
P2=$(free_port "$P1")
start 1 "$P1"
start 2 "$P2"
SERVERS="1/127.0.0.1:$P1,2/127.0.0.1:$P2"
LOG=$BASE/driver.log
echo "1..11"

"$DRIVER" setup --servers "$SERVERS" --topic self >/dev/null
ok "setup adds the topic on both shards" $?

"$DRIVER" run --servers "$SERVERS" --topic self --rate 200 --drain-ms 60000 >"$LOG" &
D=$!
PIDS+=("$D")
# The producer picks a shard by the servers' keepalive weights, which follow their commit times:
# under I/O load it moves between the shards at any time. So kill shard 1 while it is the one
# taking the acks, after it took enough for the checks below (several at their first try).
wait_for "10 acks by shard 1, the last one included" \
    awk '$1 == "ack" { n += $3 == 1; last = $3 } END { exit !(n >= 10 && last == 1) }' "$LOG"
T=$(date +%s%3N)
kill -KILL "${PIDS[0]}"
wait_for "an ack by shard 2 after the kill" \
    awk -v t="$T" '$1 == "ack" && $3 == 2 && $5 > t { f = 1; exit } END { exit !f }' "$LOG"
# back on the same port and store: the watcher must still read what shard 1 acked last
start 1 "$P1"
wait_for "the watcher reading shard 1 again" \
    awk -v t="$T" '$1 == "readable" && $2 == 1 && $3 == 1 && $4 > t { f = 1; exit } END { exit !f }' "$LOG"
kill -TERM "$D"
wait "$D"
ok "run exits 0" $?

acks1=$(awk '$1 == "ack" && $3 == 1' "$LOG" | wc -l)
acks2=$(awk '$1 == "ack" && $3 == 2 && $5 > '"$T" "$LOG" | wc -l)
echo "# acks on shard 1: $acks1; on shard 2 after the kill: $acks2"
[ "$acks1" -gt 0 ] && [ "$acks2" -gt 0 ]
ok "the producer acked on shard 1, then on shard 2 after shard 1 died" $?

out0=$("$DRIVER" verify --servers "$SERVERS" --topic self --log "$LOG" --fault-ms "$T" \
    --fault-shard 1) && rc=0 || rc=$?
echo "$out0" | sed 's/^/# /'
total=$(grep -c '^ack ' "$LOG")
[ $rc = 0 ] && grep -q "^VERIFY acked=$total .* missing=0 dup_in_shard=0 wrong_place=0 unseen=0 fenced_violations=0 incomplete_shards=0 -> OK$" <<<"$out0"
ok "verify passes on the real log ($total acks)" $?

# Four seqs acked by shard 1 at their first try (no try, cached or err line): each is stored
# exactly once, at its ack, so each doctored log or added copy below changes one known thing.
read -r sm su sx sd <<<"$(awk '$1 == "try" || $1 == "cached" || $1 == "err" { bad[$2] = 1 }
    $1 == "ack" && $3 == 1 { acked[++n] = $2 }
    END { for (i = 1; i <= n; i++) if (!bad[acked[i]] && k++ < 4) printf "%s ", acked[i] }' "$LOG")"
[ -n "$sd" ]
ok "shard 1 acked seqs at their first try ($sm $su $sx $sd)" $?

# fails SEQ-PATTERN LOGFILE [extra args]: verify must exit 1 and print the pattern.
fails() {
    local pat=$1 log=$2
    shift 2
    out=$("$DRIVER" verify --servers "$SERVERS" --topic self --log "$log" "$@") && rc=0 || rc=$?
    grep "^FAIL" <<<"$out" | head -n 3 | sed "s/^/# /" || true
    [ $rc = 1 ] && grep -q -- "$pat" <<<"$out"
}

last=$(awk '$1 == "ack" { s = $2 } END { print s }' "$LOG")
ghost=$((last + 7))
cp "$LOG" "$BASE/ghost.log"
echo "ack $ghost 2 999999 $(date +%s%3N) 127.0.0.1:$P2" >>"$BASE/ghost.log"
echo "seen 2 999999 4242 $ghost $(date +%s%3N)" >>"$BASE/ghost.log"
fails "FAIL: seq $ghost acked at 2/999999 by 127.0.0.1:$P2 is not stored there" "$BASE/ghost.log"
ok "verify fails on an acked message that is not stored (seq $ghost)" $?

# seq sm's ack moved to the next offset: stored elsewhere in the same shard
off=$(awk -v s="$sm" '$1 == "ack" && $2 == s { print $4 }' "$LOG")
awk -v s="$sm" -v o=$((off + 1)) '$1 == "ack" && $2 == s { $4 = o } { print }' "$LOG" >"$BASE/moved.log"
fails "FAIL: seq $sm acked at 1/$((off + 1)) but stored at 1/$off" "$BASE/moved.log"
ok "verify fails on an ack at the wrong offset (seq $sm)" $?

# the watcher's line for seq su removed
awk -v s="$su" '!($1 == "seen" && $4 == 4242 && $5 == s)' "$LOG" >"$BASE/unseen.log"
fails "FAIL: seq $su acked at 1/.* was never seen by the watcher" "$BASE/unseen.log"
ok "verify fails when the watcher missed an acked seq (seq $su)" $?

# every ack of shard 1's server after a fence 1 ms after its first ack
first=$(awk '$1 == "ack" && $3 == 1 { print $5; exit }' "$LOG")
late=$(awk -v t="$first" '$1 == "ack" && $3 == 1 && $5 > t' "$LOG" | wc -l)
fails "fenced_violations=$late " "$LOG" --fenced "127.0.0.1:$P1" --after "$first"
ok "verify fails on acks by a fenced server ($late after the fence)" $?

# a copy of seq sx on shard 2 (a cross-shard retry would leave one): counted, not an error
cross0=$(sed -n 's/.* cross_shard_copies=\([0-9]*\) .*/\1/p' <<<"$out0")
printf 'fd p=4242 s=%s\n' "$sx" | "$CHANQ" --addr "127.0.0.1:$P2" produce self >/dev/null
out=$("$DRIVER" verify --servers "$SERVERS" --topic self --log "$LOG") && rc=0 || rc=$?
echo "$out" | grep '^VERIFY' | sed 's/^/# /'
[ $rc = 0 ] && grep -q "cross_shard_copies=$((cross0 + 1)) .*-> OK$" <<<"$out"
ok "a copy on another shard is counted (seq $sx, cross_shard_copies $cross0 -> $((cross0 + 1))), not an error" $?

# seq sd stored a second time on shard 1
printf 'fd p=4242 s=%s\n' "$sd" | "$CHANQ" --addr "127.0.0.1:$P1" produce self >/dev/null
fails "FAIL: seq $sd stored twice in shard 1" "$LOG"
ok "verify fails on a seq stored twice in one shard (seq $sd)" $?

exit $failed
