#!/usr/bin/env bash
# bench/run.sh - chanqd vs redis-server vs nats-server, shape "1 publisher -> N subscribers".
#
# Builds chanqd and cqbench (meson, buildtype=release, in build-bench/), starts every server on
# loopback with non-default ports in a temp dir, runs each shape REPS times with the targets
# interleaved (rep 1: chanq-w1 chanq-w2 redis nats, rep 2: ...), and prints a table of medians.
# Raw results (one JSON line per run) go to $OUT (default build-bench/bench-results/).
#
# Environment knobs (defaults in brackets):
#   REPS [5] (closed-loop and rate shapes)  IDLE_REPS [3]  DURATION [3] s measured per run
#   WARMUP [1] s  IDLE_SECONDS [10]  IDLE_CONNS [1000]
#   SHAPES ["closed100 closed1000 rate100 idle"]  TARGETS ["chanq-w1 chanq-w2 redis nats"]
#   PERF [0]  1: also `perf record` chanqd (workers 1) during one 1->1000 closed-loop run
#   OUT [build-bench/bench-results]
# Needs: meson, ninja, a C compiler, libuv and the project's build deps, python3 (summary),
# redis-server and nats-server (installed with apt-get when missing and running as root).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build-bench"
REPS=${REPS:-5}
IDLE_REPS=${IDLE_REPS:-3}
DURATION=${DURATION:-3}
WARMUP=${WARMUP:-1}
IDLE_SECONDS=${IDLE_SECONDS:-10}
IDLE_CONNS=${IDLE_CONNS:-1000}
SHAPES=${SHAPES-"closed100 closed1000 rate100 idle"}
TARGETS=${TARGETS:-"chanq-w1 chanq-w2 redis nats"}
PERF=${PERF:-0}
OUT=${OUT:-$BUILD/bench-results}

log() { printf '[run.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# ---- prerequisites -------------------------------------------------------------------------
need_pkg() { # program package
    command -v "$1" >/dev/null 2>&1 && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        log "installing $2"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
    fi
    command -v "$1" >/dev/null 2>&1 || { log "missing $1 (Debian package $2)"; exit 1; }
}
need_pkg redis-server redis-server
need_pkg nats-server nats-server
command -v python3 >/dev/null || { log "python3 is needed for the summary"; exit 1; }

# ---- build -----------------------------------------------------------------------------------
if [ ! -f "$BUILD/build.ninja" ]; then
    meson setup "$BUILD" "$ROOT" --buildtype=release -Dtests=disabled >/dev/null
fi
ninja -C "$BUILD" src/main/chanqd bench/cqbench >/dev/null
CHANQD="$BUILD/src/main/chanqd"
CQBENCH="$BUILD/bench/cqbench"

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
mkdir -p "$OUT"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
JSONL="$OUT/run-$STAMP.jsonl"
: >"$JSONL"
TMP=$(mktemp -d /tmp/chanq-bench.XXXXXX)

# ---- servers ---------------------------------------------------------------------------------
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do
        kill "$p" 2>/dev/null || true
    done
    for p in "${PIDS[@]}"; do
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$TMP"
}
trap cleanup EXIT

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# Ports below the ephemeral range, so no client socket of an earlier run holds the port.
EPH_LOW=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
free_port() {
    local p
    for _ in $(seq 1 200); do
        p=$((10000 + RANDOM % (EPH_LOW - 10000)))
        if port_free "$p"; then
            echo "$p"
            return
        fi
    done
    log "no free port"
    exit 1
}
wait_port() { # port pid -> 0 when listening, 1 when the server died or never listened
    for _ in $(seq 1 100); do
        port_free "$1" || return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}

# Each start_* sets SPID (server pid) and ARGS (cqbench address arguments).
start_chanq() { # workers
    local dir="$TMP/chanq-$1-$RANDOM"
    mkdir -p "$dir"
    "$CHANQD" --client-addr 127.0.0.1:0 --server-addr 127.0.0.1:0 --admin-addr '' \
        --ready-file "$dir/ready" --workers "$1" --log-level warn >"$dir/log" 2>&1 &
    SPID=$!
    PIDS+=("$SPID")
    for _ in $(seq 1 100); do
        [ -s "$dir/ready" ] && break
        sleep 0.05
    done
    [ -s "$dir/ready" ] || { log "chanqd did not start: $(cat "$dir/log")"; exit 1; }
    ARGS=(--target chanq --ready-file "$dir/ready")
}
start_redis() {
    local dir port
    for _ in 1 2 3; do
        dir="$TMP/redis-$RANDOM"
        port=$(free_port)
        mkdir -p "$dir"
        (cd "$dir" && exec redis-server --port "$port" --bind 127.0.0.1 --save '' \
            --appendonly no --daemonize no --logfile "$dir/log") &
        SPID=$!
        PIDS+=("$SPID")
        if wait_port "$port" "$SPID"; then
            ARGS=(--target redis --addr "127.0.0.1:$port")
            return
        fi
        log "redis-server on port $port did not start: $(tail -2 "$dir/log")"
        stop_server "$SPID"
    done
    exit 1
}
start_nats() {
    local dir port
    for _ in 1 2 3; do
        dir="$TMP/nats-$RANDOM"
        port=$(free_port)
        mkdir -p "$dir"
        (cd "$dir" && exec nats-server -a 127.0.0.1 -p "$port" >"$dir/log" 2>&1) &
        SPID=$!
        PIDS+=("$SPID")
        if wait_port "$port" "$SPID"; then
            ARGS=(--target nats --addr "127.0.0.1:$port")
            return
        fi
        log "nats-server on port $port did not start: $(tail -2 "$dir/log")"
        stop_server "$SPID"
    done
    exit 1
}
start_target() { # name
    case "$1" in
    chanq-w1) start_chanq 1 ;;
    chanq-w2) start_chanq 2 ;;
    redis) start_redis ;;
    nats) start_nats ;;
    *) log "unknown target $1"; exit 1 ;;
    esac
}
stop_server() { # pid
    kill "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
    local keep=() p
    for p in "${PIDS[@]}"; do
        [ "$p" = "$1" ] || keep+=("$p")
    done
    PIDS=("${keep[@]}")
}

declare -A TPID TARGS
start_all() {
    local t
    for t in $TARGETS; do
        start_target "$t"
        TPID[$t]=$SPID
        TARGS[$t]="${ARGS[*]}"
    done
}
stop_all() {
    local t
    for t in $TARGETS; do
        stop_server "${TPID[$t]}"
    done
}

# bench LABEL TARGET-ARGS... -- CQBENCH-ARGS...
bench() {
    local label=$1 line
    shift
    if ! line=$("$CQBENCH" --label "$label" "$@" 2>>"$TMP/cqbench.err" | tee -a "$JSONL"); then
        log "cqbench failed ($label): $(tail -3 "$TMP/cqbench.err")"
    fi
    printf '%s\n' "$line" | grep '^#' >&2 || true
}

# ---- shapes ----------------------------------------------------------------------------------
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
T0=$(date +%s)
log "load at start: $LOAD_START; results -> $JSONL"

run_shape() { # shape
    local shape=$1 rep t
    case "$shape" in
    closed100 | closed1000 | rate100)
        start_all
        for rep in $(seq 1 "$REPS"); do
            for t in $TARGETS; do
                # shellcheck disable=SC2086
                case "$shape" in
                closed100) bench "$shape/$t" ${TARGS[$t]} --pid "${TPID[$t]}" --mode closed \
                    --subs 100 --duration "$DURATION" --warmup "$WARMUP" ;;
                closed1000) bench "$shape/$t" ${TARGS[$t]} --pid "${TPID[$t]}" --mode closed \
                    --subs 1000 --duration "$DURATION" --warmup "$WARMUP" ;;
                rate100) bench "$shape/$t" ${TARGS[$t]} --pid "${TPID[$t]}" --mode rate \
                    --subs 100 --rate 1000 --duration "$DURATION" --warmup "$WARMUP" ;;
                esac
            done
        done
        stop_all
        ;;
    idle)
        # A fresh server per run, so the RSS baseline is that of an unused server.
        for rep in $(seq 1 "$IDLE_REPS"); do
            for t in $TARGETS; do
                start_target "$t"
                sleep 0.5
                bench "idle/$t" "${ARGS[@]}" --pid "$SPID" --mode idle --subs "$IDLE_CONNS" \
                    --duration "$IDLE_SECONDS" --warmup 1
                stop_server "$SPID"
            done
        done
        ;;
    *) log "unknown shape $shape"; exit 1 ;;
    esac
}

for s in $SHAPES; do
    log "shape $s"
    run_shape "$s"
done

if [ "$PERF" = 1 ] && command -v perf >/dev/null; then
    log "perf: chanqd --workers 1, closed loop 1->1000"
    start_chanq 1
    perf record -g -o "$OUT/perf-$STAMP.data" -p "$SPID" -- sleep $((DURATION + 3)) \
        >/dev/null 2>&1 &
    PERFPID=$!
    sleep 0.2
    # shellcheck disable=SC2086
    "$CQBENCH" --label perf "${ARGS[@]}" --pid "$SPID" --mode closed --subs 1000 \
        --duration "$DURATION" --warmup 1 | grep '^#' >&2 || true
    wait "$PERFPID" || true
    perf report -i "$OUT/perf-$STAMP.data" --no-children --stdio --percent-limit 1.5 \
        2>/dev/null | grep -v '^$' | head -80 >"$OUT/perf-$STAMP.txt" || true
    log "perf report -> $OUT/perf-$STAMP.txt"
    stop_server "$SPID"
fi

LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
log "load at end: $LOAD_END; wall time $(($(date +%s) - T0)) s"

# ---- summary (medians) -------------------------------------------------------------------------
python3 - "$JSONL" "$LOAD_START" "$LOAD_END" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
by = {}
for r in rows:
    by.setdefault(r['label'], []).append(r)

def med(label, key):
    v = [r[key] for r in by.get(label, []) if r.get('error') is None and r[key] is not None and r[key] >= 0]
    return statistics.median(v) if v else None

def fmt(x, nd=0):
    return '-' if x is None else f'{x:,.{nd}f}'

def ratio(a, b):
    return '-' if a is None or b in (None, 0) else f'{a / b:.2f}x'

print(f'load average: start {sys.argv[2]}, end {sys.argv[3]}; runs: {len(rows)} '
      f'(errors: {sum(1 for r in rows if r.get("error"))})')
targets = []
for r in rows:
    t = r['label'].split('/', 1)[1]
    if t not in targets:
        targets.append(t)

for shape, title in (('closed100', 'closed loop, 1 -> 100 subscribers, 64 B'),
                     ('closed1000', 'closed loop, 1 -> 1000 subscribers, 64 B')):
    if not any(k.startswith(shape + '/') for k in by):
        continue
    print(f'\n### {title} (median of {max(len(by.get(shape + "/" + t, [])) for t in targets)})\n')
    print('| target | deliveries/s | server cores | deliveries / server CPU-s | client CPU-s | missing | vs redis | vs nats |')
    print('|---|---:|---:|---:|---:|---:|---:|---:|')
    for t in targets:
        L = f'{shape}/{t}'
        if L not in by:
            continue
        d = med(L, 'deliveries_per_server_cpu_s')
        print(f'| {t} | {fmt(med(L, "deliveries_per_s"))} | {fmt(med(L, "server_cores"), 2)} | {fmt(d)} '
              f'| {fmt(med(L, "client_cpu_s"), 2)} | {fmt(med(L, "missing"))} '
              f'| {ratio(d, med(shape + "/redis", "deliveries_per_server_cpu_s"))} '
              f'| {ratio(d, med(shape + "/nats", "deliveries_per_server_cpu_s"))} |')

if any(k.startswith('rate100/') for k in by):
    print('\n### 1 -> 100 subscribers at 1000 msg/s, 64 B (medians)\n')
    print('| target | deliveries/s | server cores | deliveries / server CPU-s | kernel-rx p50 us | kernel-rx p99 us | app p50 us | app p99 us | app max us | missing |')
    print('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
    for t in targets:
        L = f'rate100/{t}'
        if L not in by:
            continue
        print(f'| {t} | {fmt(med(L, "deliveries_per_s"))} | {fmt(med(L, "server_cores"), 3)} '
              f'| {fmt(med(L, "deliveries_per_server_cpu_s"))} | {fmt(med(L, "kp50_us"), 1)} '
              f'| {fmt(med(L, "kp99_us"), 1)} | {fmt(med(L, "p50_us"), 1)} | {fmt(med(L, "p99_us"), 1)} '
              f'| {fmt(med(L, "max_us"), 1)} | {fmt(med(L, "missing"))} |')

if any(k.startswith('idle/') for k in by):
    print('\n### idle connections (medians)\n')
    print('| target | connections | server cores | RSS base kB | RSS kB | RSS / connection B |')
    print('|---|---:|---:|---:|---:|---:|')
    for t in targets:
        L = f'idle/{t}'
        if L not in by:
            continue
        print(f'| {t} | {by[L][0]["subs"] + 1} | {fmt(med(L, "server_cores"), 4)} | {fmt(med(L, "rss_base_kb"))} '
              f'| {fmt(med(L, "rss_kb"))} | {fmt(med(L, "rss_per_conn_b"))} |')
EOF
log "raw results: $JSONL"
