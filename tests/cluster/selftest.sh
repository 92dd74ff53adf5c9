#!/usr/bin/env bash
# tests/cluster/selftest.sh DRIVER CHANQD CHANQ - checks fault_driver itself, without ZooKeeper or
# MariaDB: two standalone chanqd (SQLite) act as shards 1 and 2. The driver runs, shard 1's
# server is SIGKILLed mid-run (the producer moves to shard 2), and verify must pass; then
# verify must FAIL, naming the exact seq, on logs doctored the ways a broken cluster would
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

free_port() {
    python3 "$(dirname "$0")/../support/free-ports.py" 26000 29999 1 "$@"
}

start() { # start I PORT
    local d="$BASE/s$1"
    mkdir -p "$d"
    "$CHANQD" --client-addr 127.0.0.1:0 --server-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 \
        --mq-addr "127.0.0.1:$2" --mq-http-addr '' --ws-addr '' --kcp-addr '' \
        --store-dir "$d/store" --ready-file "$d/ready" --log-level warn >"$d/log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 1 200); do
        [ -s "$d/ready" ] && return 0
        sleep 0.05
    done
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

"$DRIVER" run --servers "$SERVERS" --topic self --rate 200 --drain-ms 5000 >"$LOG" &
D=$!
PIDS+=("$D")
for _ in $(seq 1 200); do grep -q '^ack ' "$LOG" && break; sleep 0.05; done
sleep 1
T=$(date +%s%3N)
kill -KILL "${PIDS[0]}"
sleep 1.5
# back on the same port and store: the watcher must still read what shard 1 acked last
start 1 "$P1"
sleep 1
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

# seq 2's ack moved to the next offset: stored elsewhere in the same shard
read -r s2 sh2 off2 <<<"$(awk '$1 == "ack" && $2 == 2 { print $2, $3, $4 }' "$LOG")"
awk -v o=$((off2 + 1)) '$1 == "ack" && $2 == 2 { $4 = o } { print }' "$LOG" >"$BASE/moved.log"
fails "FAIL: seq 2 acked at $sh2/$((off2 + 1)) but stored at $sh2/$off2" "$BASE/moved.log"
ok "verify fails on an ack at the wrong offset (seq 2)" $?

# the watcher's line for seq 5 removed
awk '!($1 == "seen" && $4 == 4242 && $5 == 5)' "$LOG" >"$BASE/unseen.log"
fails "FAIL: seq 5 acked at .* was never seen by the watcher" "$BASE/unseen.log"
ok "verify fails when the watcher missed an acked seq (seq 5)" $?

# every ack of shard 1's server after a fence 1 ms after its first ack
first=$(awk '$1 == "ack" && $3 == 1 { print $5; exit }' "$LOG")
late=$(awk -v t="$first" '$1 == "ack" && $3 == 1 && $5 > t' "$LOG" | wc -l)
fails "fenced_violations=$late " "$LOG" --fenced "127.0.0.1:$P1" --after "$first"
ok "verify fails on acks by a fenced server ($late after the fence)" $?

# a copy of seq 4 on shard 2 (a cross-shard retry would leave one): counted, not an error
cross0=$(sed -n 's/.* cross_shard_copies=\([0-9]*\) .*/\1/p' <<<"$out0")
printf 'fd p=4242 s=4\n' | "$CHANQ" --addr "127.0.0.1:$P2" produce self >/dev/null
out=$("$DRIVER" verify --servers "$SERVERS" --topic self --log "$LOG") && rc=0 || rc=$?
echo "$out" | grep '^VERIFY' | sed 's/^/# /'
[ $rc = 0 ] && grep -q "cross_shard_copies=$((cross0 + 1)) .*-> OK$" <<<"$out"
ok "a copy on another shard is counted (cross_shard_copies $cross0 -> $((cross0 + 1))), not an error" $?

# seq 3 (acked on shard 1, where the producer starts) stored a second time on shard 1
grep -q '^ack 3 1 ' "$LOG"
ok "seq 3 was acked on shard 1" $?
printf 'fd p=4242 s=3\n' | "$CHANQ" --addr "127.0.0.1:$P1" produce self >/dev/null
fails "FAIL: seq 3 stored twice in shard 1" "$LOG"
ok "verify fails on a seq stored twice in one shard (seq 3)" $?

exit $failed
