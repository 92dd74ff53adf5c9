#!/usr/bin/env bash
# bench/cluster.sh - issue 11: what semi-sync replication (AFTER_SYNC) costs acked produce,
# against async replication, on 1 shard and on 2 shards, plus the raw Connector/C baseline.
#
# A shard here = one standalone chanqd (no ZooKeeper: the cost measured is the database's) with
# --store-backend mysql on the PRIMARY of its own MariaDB pair (tests/support/mariadb-pair.sh:
# GTID, semi-sync AFTER_SYNC, parallel apply on the read-only standby, binlog + flush at every
# commit on both), as the plain store user `chanq` (GRANT ALL ON chanq.*). Both pairs and both
# chanqd run for the whole script; the 1-shard runs use shard 1 only.
#
# Each rep runs, for every SHARDS x BATCHES, a produce run with semi-sync ON and one with it OFF
# (`SET GLOBAL rpl_semi_sync_master_enabled` on the primaries between runs; the order alternates
# per rep: ON OFF, then OFF ON), then the raw baselines (mqbench raw-mysql, text and array
# INSERTs of RAW_BATCH rows, one connection, autocommit) against shard 1's primary, ON and OFF.
# Produce = mqbench produce, PRODUCERS connections x WINDOW requests in flight x BATCH messages of
# SIZE bytes; on 2 shards the same producers are split over both chanqd (producer i -> shard
# i mod 2). A fresh topic per run. Around every run the primaries' and standbys' status
# counters are read; their differences (semi-sync yes/no transactions, waits and wait times,
# fsyncs, binlog group commits) go into the run's JSON line, so a run that silently fell back
# to async (no_tx > 0 with semi-sync ON) shows, and so does where the time goes.
#
# Environment (defaults in brackets): REPS [3]  DURATION [4] s measured  WARMUP [1] s
#   SHARDS ["1 2"]  BATCHES ["1000 100 1"]  PRODUCERS [8]  WINDOW [4]  SIZE [256] B
#   RAW_BATCH [1000]  POOL [256M] InnoDB buffer pool per server  SEMI_TIMEOUT_MS [2000]
#   OUT [build-bench/bench-results]  BUILD [build-bench] (meson, buildtype release)
# Output: a table of medians on stdout; one JSON line per run in $OUT/cluster-STAMP.jsonl.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-bench}
REPS=${REPS:-3}
DURATION=${DURATION:-4}
WARMUP=${WARMUP:-1}
SHARDS=${SHARDS:-"1 2"}
BATCHES=${BATCHES:-"1000 100 1"}
PRODUCERS=${PRODUCERS:-8}
WINDOW=${WINDOW:-4}
SIZE=${SIZE:-256}
RAW_BATCH=${RAW_BATCH:-1000}
POOL=${POOL:-256M}
SEMI_TIMEOUT_MS=${SEMI_TIMEOUT_MS:-2000}
OUT=${OUT:-$BUILD/bench-results}
PAIR="$ROOT/tests/support/mariadb-pair.sh"

log() { printf '[cluster.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# ---- build -----------------------------------------------------------------------------------
if [ ! -f "$BUILD/build.ninja" ]; then
    meson setup "$BUILD" "$ROOT" --buildtype=release -Dtests=disabled >/dev/null
fi
ninja -C "$BUILD" src/main/chanqd bench/mqbench >/dev/null
CHANQD="$BUILD/src/main/chanqd"
MQBENCH="$BUILD/bench/mqbench"

mkdir -p "$OUT"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
JSONL="$OUT/cluster-$STAMP.jsonl"
: >"$JSONL"
TMP=$(mktemp -d /tmp/chanq-cbench.XXXXXX)
NSHARDS=1
for s in $SHARDS; do [ "$s" -gt "$NSHARDS" ] && NSHARDS=$s; done

# ---- servers ---------------------------------------------------------------------------------
CQPIDS=()
cleanup() {
    local p s
    for p in "${CQPIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${CQPIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    for s in $(seq 1 "$NSHARDS"); do "$PAIR" stop "$TMP/pair$s" >/dev/null 2>&1 || true; done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

sql() { # sql PORT SQL: as root, tab-separated, no column names
    mariadb --no-defaults -uroot -h127.0.0.1 -P"$1" -N -B -e "$2"
}

declare -A PPORT SPORT PPID_ MQ CQPID
start_shard() { # start_shard S: its MariaDB pair and its chanqd
    local s=$1 ports dir rc=0
    dir="$TMP/chanq$s"
    ports=$(MARIADB_PAIR_BUFFER_POOL=$POOL MARIADB_PAIR_SEMI_TIMEOUT_MS=$SEMI_TIMEOUT_MS \
        "$PAIR" start "$TMP/pair$s") || rc=$?
    [ "$rc" = 0 ] || { log "mariadb-pair.sh start failed (exit $rc)"; exit 1; }
    PPORT[$s]=${ports% *}
    SPORT[$s]=${ports#* }
    PPID_[$s]=$(cat "$TMP/pair$s/primary/launcher.pid")
    mkdir -p "$dir"
    "$CHANQD" --client-addr 127.0.0.1:0 --server-addr 127.0.0.1:0 --admin-addr '' \
        --mq-addr 127.0.0.1:0 --mq-http-addr '' --ws-addr '' --kcp-addr '' \
        --ready-file "$dir/ready" --workers 1 --log-level warn \
        --store-backend mysql --mysql-host 127.0.0.1 --mysql-port "${PPORT[$s]}" \
        --mysql-user chanq --mysql-password chanqpw --mysql-database chanq >"$dir/log" 2>&1 &
    CQPID[$s]=$!
    CQPIDS+=("${CQPID[$s]}")
    for _ in $(seq 1 200); do
        [ -s "$dir/ready" ] && break
        sleep 0.05
    done
    [ -s "$dir/ready" ] || { log "chanqd $s did not start: $(cat "$dir/log")"; exit 1; }
    MQ[$s]=$(sed -n 's/.*mq=\([^ ]*\).*/\1/p' "$dir/ready")
    log "shard $s: primary ${PPORT[$s]} (pid ${PPID_[$s]}), standby ${SPORT[$s]}, chanqd mq=${MQ[$s]} (pid ${CQPID[$s]})"
}

# semi MODE SHARD...: semi-sync ON|OFF on those primaries; ON waits for status ON (30 s).
semi() {
    local mode=$1 s i
    shift
    for s in "$@"; do
        sql "${PPORT[$s]}" "SET GLOBAL rpl_semi_sync_master_enabled=$mode"
        for i in $(seq 1 600); do
            [ "$(sql "${PPORT[$s]}" "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_status'" |
                cut -f2)" = "$mode" ] && break
            [ "$i" = 600 ] && { log "shard $s: semi-sync status did not become $mode"; exit 1; }
            sleep 0.05
        done
    done
}

STATUS_VARS="'Rpl_semi_sync_master_yes_tx','Rpl_semi_sync_master_no_tx',
 'Rpl_semi_sync_master_tx_waits','Rpl_semi_sync_master_tx_wait_time',
 'Rpl_semi_sync_master_net_waits','Rpl_semi_sync_master_net_wait_time',
 'Rpl_semi_sync_master_wait_sessions','Innodb_data_fsyncs',
 'Binlog_commits','Binlog_group_commits','Com_insert','Com_commit'"
# counters SHARD...: "role.name value" lines summed over those shards' primaries and standbys
counters() {
    local s
    for s in "$@"; do
        sql "${PPORT[$s]}" "SHOW GLOBAL STATUS WHERE Variable_name IN ($STATUS_VARS)" |
            sed 's/^/primary./'
        sql "${SPORT[$s]}" "SHOW GLOBAL STATUS WHERE Variable_name IN ($STATUS_VARS)" |
            sed 's/^/standby./'
    done | awk '{ v[$1] += $2 } END { for (k in v) print k, v[k] }' | sort
}

# run LABEL SEMI SHARDS-LIST -- MQBENCH-ARGS...: one mqbench run, its JSON line plus the counter
# differences appended to $JSONL, the readable line to stderr.
run() {
    local label=$1 mode=$2 shards=$3 line before after
    shift 4
    # shellcheck disable=SC2086
    before=$(counters $shards)
    if ! line=$("$MQBENCH" "$@" --label "$label" 2>>"$TMP/mqbench.err"); then
        log "mqbench failed ($label): $(tail -3 "$TMP/mqbench.err")"
        return 0
    fi
    # shellcheck disable=SC2086
    after=$(counters $shards)
    printf '%s\n' "$line" | grep '^#' >&2 || true
    python3 - "$mode" "$shards" "$before" "$after" "$(printf '%s\n' "$line" | grep '^{')" \
        >>"$JSONL" <<'PY'
import json, sys
mode, shards, before, after, line = sys.argv[1:6]
kv = lambda t: {l.split()[0]: int(l.split()[1]) for l in t.splitlines() if l.strip()}
b, a = kv(before), kv(after)
j = json.loads(line)
j.update(semi=mode, shards=len(shards.split()), delta={k: a[k] - b.get(k, 0) for k in a})
print(json.dumps(j))
PY
}

dsync_rate() { # synced 4 KiB writes per second on the disk of $TMP
    local t0 t1
    t0=$(date +%s.%N)
    dd if=/dev/zero of="$TMP/dsync.test" bs=4k count=1000 oflag=dsync 2>/dev/null || true
    t1=$(date +%s.%N)
    rm -f "$TMP/dsync.test"
    python3 -c "print(round(1000 / ($t1 - $t0)))"
}

# ---- the run ---------------------------------------------------------------------------------
load0=$(cut -d' ' -f1-3 /proc/loadavg)
up0=$(uptime)
fs0=$(dsync_rate)
log "load $load0; disk $fs0 synced 4k writes/s"
for s in $(seq 1 "$NSHARDS"); do start_shard "$s"; done
ALL=$(seq 1 "$NSHARDS" | tr '\n' ' ')
common=(--size "$SIZE" --duration "$DURATION" --warmup "$WARMUP")
for r in $(seq 1 "$REPS"); do
    order="ON OFF"
    [ $((r % 2)) = 0 ] && order="OFF ON"
    for n in $SHARDS; do
        on=$(seq 1 "$n" | tr '\n' ' ')
        addrs=$(for s in $on; do printf '%s,' "${MQ[$s]}"; done)
        pids=()
        for s in $on; do pids+=(--pid "chanqd$s=${CQPID[$s]}" --pid "primary$s=${PPID_[$s]}"); done
        for batch in $BATCHES; do
            for mode in $order; do
                # shellcheck disable=SC2086
                semi "$mode" $ALL
                run "cluster/produce/s$n/b$batch/$mode" "$mode" "$on" -- produce \
                    --addr "${addrs%,}" --topic "p_s${n}_b${batch}_${mode}_r$r" \
                    --producers "$PRODUCERS" --window "$WINDOW" --batch "$batch" \
                    "${pids[@]}" "${common[@]}"
            done
        done
    done
    for mode in $order; do
        # shellcheck disable=SC2086
        semi "$mode" $ALL
        for method in text array; do
            run "cluster/raw-$method/$mode" "$mode" 1 -- raw-mysql --raw-method "$method" \
                --mysql-port "${PPORT[1]}" --mysql-user chanq --mysql-password chanqpw \
                --mysql-database chanq --topic "raw_${method}_${mode}_r$r" \
                --batch "$RAW_BATCH" --pid "primary1=${PPID_[1]}" "${common[@]}"
        done
    done
done
# shellcheck disable=SC2086
semi ON $ALL
fs1=$(dsync_rate)
load1=$(cut -d' ' -f1-3 /proc/loadavg)
log "load $load1; disk $fs1 synced 4k writes/s"
printf '{"mode":"env","uptime_start":"%s","uptime_end":"%s","dsync_start":%s,"dsync_end":%s}\n' \
    "$up0" "$(uptime)" "$fs0" "$fs1" >>"$JSONL"

# ---- summary (medians) -----------------------------------------------------------------------
python3 - "$JSONL" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
env = [r for r in rows if r.get('mode') == 'env'][-1]
runs = [r for r in rows if r.get('mode') != 'env']
def pick(label): return [r for r in runs if r['label'] == label]
def med(rs, f): return statistics.median(f(r) for r in rs) if rs else float('nan')
def semi_wait(rs):  # mean semi-sync wait per transaction on the primaries, us
    w = sum(r['delta'].get('primary.Rpl_semi_sync_master_tx_waits', 0) for r in rs)
    t = sum(r['delta'].get('primary.Rpl_semi_sync_master_tx_wait_time', 0) for r in rs)
    return f'{t / w:,.0f}' if w else '-'
def per_commit(rs, role):
    c = sum(r['delta'].get(role + '.Binlog_group_commits', 0) for r in rs)
    v = sum(r['delta'].get(role + '.Innodb_data_fsyncs', 0) for r in rs)
    return f'{v / c:.1f}' if c else '-'
print(f'uptime at start: {env["uptime_start"].strip()}')
print(f'uptime at end:   {env["uptime_end"].strip()}')
print(f'disk: {env["dsync_start"]} -> {env["dsync_end"]} synced 4 KiB writes/s\n')
print('| shards | batch | async msg/s | semi-sync msg/s | semi-sync cost | cost, paired | '
      'p99 async / semi ms '
      '| yes_tx / no_tx (ON runs) | semi wait per tx us | group commits/s ON | '
      'InnoDB fsyncs per group commit, primary / standby |')
print('|---|---|---|---|---|---|---|---|---|---|---|')
labels = sorted({r['label'].rsplit('/', 1)[0] for r in runs})
def key(l):
    p = l.split('/')
    return (0, int(p[2][1:]), -int(p[3][1:])) if p[1] == 'produce' else (1, 0, 0)
for base in sorted(labels, key=key):
    on, off = pick(base + '/ON'), pick(base + '/OFF')
    mon, moff = med(on, lambda r: r['msgs_per_s']), med(off, lambda r: r['msgs_per_s'])
    cost = 100 * (1 - mon / moff) if moff else float('nan')
    # ON and OFF of one rep ran back to back: the median of their per-rep ratio is less
    # sensitive to the machine's drift (other jobs, the disk's fsync rate) than the medians
    pairs = [1 - a['msgs_per_s'] / b['msgs_per_s'] for a, b in zip(on, off) if b['msgs_per_s']]
    paired = 100 * statistics.median(pairs) if pairs else float('nan')
    p = base.split('/')
    sh, b = (p[2][1:], p[3][1:]) if p[1] == 'produce' else ('raw ' + p[1][4:], on[0]['batch'] if on else '?')
    yes = sum(r['delta'].get('primary.Rpl_semi_sync_master_yes_tx', 0) for r in on)
    no = sum(r['delta'].get('primary.Rpl_semi_sync_master_no_tx', 0) for r in on)
    gc = med(on, lambda r: r['delta'].get('primary.Binlog_group_commits', 0) / r['secs'])
    print(f'| {sh} | {b} | {moff:,.0f} | {mon:,.0f} | {cost:.1f} % | {paired:.1f} % | '
          f'{med(off, lambda r: r["p99_ms"]):.2f} / {med(on, lambda r: r["p99_ms"]):.2f} | '
          f'{yes:,} / {no:,} | {semi_wait(on)} | {gc:,.0f} | '
          f'{per_commit(on, "primary")} / {per_commit(on, "standby")} |')
print('\nper run (msg/s):')
for base in sorted(labels, key=key):
    for m in ('ON', 'OFF'):
        print(f'  {base}/{m}: ' + ', '.join(f'{r["msgs_per_s"]:,.0f}' for r in pick(f'{base}/{m}')))
PY
log "raw results: $JSONL"
