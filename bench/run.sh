#!/usr/bin/env bash
# bench/run.sh - chanqd vs redis-server vs nats-server, shape "1 publisher -> N subscribers",
# chanqd's channel-data fan-out (shape "data", chanqd and its floor only), and durable topics
# (shape "durable": chanqd on MariaDB and on SQLite vs raw Connector/C bulk inserts; not in the
# default SHAPES, run it with SHAPES=durable).
#
# Builds chanqd and cqbench (meson, buildtype=release, in build-bench/), starts every server on
# loopback with non-default ports in a temp dir, runs each shape REPS times with the targets
# interleaved (rep 1: chanq-w1 chanq-w2 redis nats, rep 2: ...), and prints a table of medians.
# Raw results (one JSON line per run) go to $OUT (default build-bench/bench-results/).
#
# Environment knobs (defaults in brackets):
#   REPS [5] (closed-loop and rate shapes)  IDLE_REPS [3]  DURATION [3] s measured per run
#   WARMUP [1] s  IDLE_SECONDS [10]  IDLE_CONNS [1000]
#   SHAPES ["closed100 closed1000 rate100 idle data"]
#   TARGETS ["chanq-w1 chanq-w2 redis nats floor"]  floor runs in the data shape only, redis
#           and nats in every shape but data (and durable, transports)
#           chanq-wN-epoll: chanqd with N workers and --io-uring off (write(2) per connection;
#           chanq-wN uses chanqd's default, io_uring where the kernel allows a ring)
#           floor-uring: the floor writer submitting each window's writes as one io_uring
#           batch (cqfloor --uring), the floor for chanqd's io_uring path
#   data shape (channel data, chanq-* targets and floor; a fresh chanqd per run, started with
#   --channel-data-types for testpb.TestChannelDataMessage):
#     DATA_REPS [3]  DATA_SUBS ["1000 10000"]  DATA_RATE [1000] updates/s  DATA_SIZE [64] B
#     DATA_INTERVAL [20] fanOutIntervalMs  DATA_DURATION [$DURATION] s  DATA_WARMUP [$WARMUP] s
#     DATA_CONTROL [1]  1: also run the plain broadcast (rate mode) to the same N subscribers at
#                       1000/DATA_INTERVAL msg/s, i.e. the same deliveries/s without channel data
#     target floor: bench/load/cqfloor.c, the kernel's cost of chanqd's fan-out writes and
#       nothing else: a plain epoll + write(2) loop (one thread, non-blocking sockets,
#       TCP_NODELAY) that writes one FLOOR_SIZE-byte packet per DATA_INTERVAL window to each of
#       the N connections cqbench opens (--target floor: no handshake, no publisher; the
#       packets carry the window's due time for the kernel-rx latency). A fresh cqfloor per
#       run, in the same reps, N, interval, warm-up and window as the chanq targets.
#       FLOOR_SIZE [computed from DATA_SIZE: 132 for 64] bytes per write: the size of chanqd's
#         fan-out in this shape, 5-byte header + Packet{MessageWrapper{channelId 1, msgType 8,
#         ChannelDataUpdateMessage{Any{type_url testpb.TestChannelDataMessage, value of
#         DATA_SIZE B}}}}; checked by `strace -e write` on chanqd (one write(2) of 132 B per
#         fan-out at DATA_SIZE 64), and against the bytes the chanq subscribers read per
#         fan-out in the same run (the summary says when they differ)
#       FLOOR_ALIGN [0]  0: connection k's windows end at ms = k (mod DATA_INTERVAL), spread
#         over the interval as chanqd's SUBWORLD subscriptions are (cq_sched aligns only
#         spatial and entity channels' windows); 1: all on the interval's grid, one burst of N
#         writes per window
#   PERF_STAT [1]  1: `perf stat` counts each server (chanq-wN, redis, nats, floor) over the
#             measurement window of the closed, rate, data and control runs (cqbench
#             --perf-stat, perf started with its counters disabled and enabled through its
#             control pipe): cycles and instructions per delivery where the machine counts them
#             (probed once; a VM without a PMU says "<not supported>", the summary says so
#             once), and task-clock, the server's CPU time, for "ns CPU / delivery". Without
#             perf (or PERF_STAT=0) that column comes from /proc/PID/stat (utime + stime).
#   durable shape (mqbench; chanqd --store-backend mysql against a fresh MariaDB started with
#   tests/support/mariadb.sh (durable: binlog, flush at every commit, sync_binlog=1), and
#   --store-backend sqlite in a temp dir; each rep runs raw-mysql, then produce / rate / consume
#   per backend):
#     DUR_REPS [3]  DUR_DURATION [4] s  DUR_WARMUP [1] s  DUR_BACKENDS ["mysql sqlite"]
#     DUR_PRODUCERS [8] connections  DUR_WINDOW [4] produces in flight each  DUR_BATCH [1000]
#     messages per produce  DUR_RAW_BATCH [1000] rows per INSERT  DUR_SIZE [256] B
#     DUR_RATE [2000] msgs/s (single-message produces)  DUR_CONSUME_MAX [300000] messages
#     DUR_CONSUME_COUNT [1000] max_count per consume
#   PERF [0]  1: also `perf record` chanqd (workers 1) during one 1->1000 closed-loop run (with a
#             closed shape), and
#             (with the data shape) during one data run with PERF_DATA_SUBS [1000] subscribers
#   OUT [build-bench/bench-results]
#   BASE_REV [unset]  a git revision (commit, tag, branch) to measure side by side with the
#             working tree in the same run, e.g. BASE_REV=main or BASE_REV=HEAD~3: its committed
#             tree is extracted with `git archive` into build-bench-base/src/ and its chanqd built
#             there (meson release, build-bench-base/build/); the load generators are always
#             the working tree's. Each chanq-wN in TARGETS gets a base-wN right after it
#             (TARGETS "chanq-w1 chanq-w2 redis nats" runs chanq-w1 base-w1 chanq-w2 base-w2
#             redis nats, interleaved per rep as usual, each chanq/base pair in the other order
#             on even reps, since going first is not neutral; the data and transports shapes take the
#             base-wN targets too), and each backend in DUR_BACKENDS a base-<backend> (mysql
#             base-mysql sqlite base-sqlite: both on the same MariaDB, each in its own
#             database). The closed-loop tables gain a "vs base" column (deliveries per server
#             CPU-s of chanq-wN over base-wN), and the durable summary a "vs base" line per
#             backend (produce, rate p99, consume).
# Needs: meson, ninja, a C compiler, libuv and the project's build deps, python3 (summary),
# redis-server and nats-server (installed with apt-get when missing and running as root),
# protoc (protobuf-compiler) for the data shape.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build-bench"
REPS=${REPS:-5}
IDLE_REPS=${IDLE_REPS:-3}
DURATION=${DURATION:-3}
WARMUP=${WARMUP:-1}
IDLE_SECONDS=${IDLE_SECONDS:-10}
IDLE_CONNS=${IDLE_CONNS:-1000}
SHAPES=${SHAPES-"closed100 closed1000 rate100 idle data"}
TARGETS=${TARGETS:-"chanq-w1 chanq-w2 redis nats floor"}
DATA_REPS=${DATA_REPS:-3}
DATA_SUBS=${DATA_SUBS:-"1000 10000"}
DATA_RATE=${DATA_RATE:-1000}
DATA_SIZE=${DATA_SIZE:-64}
DATA_INTERVAL=${DATA_INTERVAL:-20}
DATA_DURATION=${DATA_DURATION:-$DURATION}
DATA_WARMUP=${DATA_WARMUP:-$WARMUP}
DATA_CONTROL=${DATA_CONTROL:-1}
PERF=${PERF:-0}
PERF_STAT=${PERF_STAT:-1}
FLOOR_ALIGN=${FLOOR_ALIGN:-0}
DUR_REPS=${DUR_REPS:-3}
DUR_DURATION=${DUR_DURATION:-4}
DUR_WARMUP=${DUR_WARMUP:-1}
DUR_BACKENDS=${DUR_BACKENDS:-"mysql sqlite"}
DUR_PRODUCERS=${DUR_PRODUCERS:-8}
DUR_WINDOW=${DUR_WINDOW:-4}
DUR_BATCH=${DUR_BATCH:-1000}
DUR_RAW_BATCH=${DUR_RAW_BATCH:-1000}
DUR_SIZE=${DUR_SIZE:-256}
DUR_RATE=${DUR_RATE:-2000}
DUR_CONSUME_MAX=${DUR_CONSUME_MAX:-300000}
DUR_CONSUME_COUNT=${DUR_CONSUME_COUNT:-1000}
PERF_DATA_SUBS=${PERF_DATA_SUBS:-1000}
OUT=${OUT:-$BUILD/bench-results}
unset SERVER_BIN # set by the caller of start_chanq for one call only (BASE_REV targets)

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
# redis-server and nats-server are needed only by the shapes other than durable.
NON_DURABLE=0
for s in $SHAPES; do [ "$s" = durable ] || NON_DURABLE=1; done
if [ "$NON_DURABLE" = 1 ]; then
    case " $TARGETS " in *" redis "*) need_pkg redis-server redis-server ;; esac
    case " $TARGETS " in *" nats "*) need_pkg nats-server nats-server ;; esac
fi
case " $SHAPES " in *" data "*) need_pkg protoc protobuf-compiler ;; esac
command -v python3 >/dev/null || { log "python3 is needed for the summary"; exit 1; }

# ---- build -----------------------------------------------------------------------------------
if [ ! -f "$BUILD/build.ninja" ]; then
    meson setup "$BUILD" "$ROOT" --buildtype=release -Dtests=disabled >/dev/null
fi
BUILD_TARGETS=(src/main/chanqd bench/cqbench)
case " $SHAPES " in *" durable "*) BUILD_TARGETS+=(bench/mqbench) ;; esac
case " $TARGETS " in *" floor "* | *" floor-uring "*) BUILD_TARGETS+=(bench/cqfloor) ;; esac
ninja -C "$BUILD" "${BUILD_TARGETS[@]}" >/dev/null
CHANQD="$BUILD/src/main/chanqd"
CQBENCH="$BUILD/bench/cqbench"
MQBENCH="$BUILD/bench/mqbench"
CQFLOOR="$BUILD/bench/cqfloor"

# FLOOR_SIZE: the bytes of chanqd's fan-out write in the data shape (see the header), from
# DATA_SIZE: the protobuf encoding of the fan-out chanqd sends on a fresh server's first channel.
FLOOR_SIZE=${FLOOR_SIZE:-$(python3 - "$DATA_SIZE" <<'EOF'
import sys
def field(n):  # tag + length varint + n bytes
    return 1 + (1 if n < 128 else 2 if n < 16384 else 3) + n
type_url = 'type.googleapis.com/testpb.TestChannelDataMessage'
value = int(sys.argv[1])  # cqbench's TestChannelDataMessage, DATA_SIZE bytes
any_ = field(len(type_url)) + field(value)
update = field(any_)                # ChannelDataUpdateMessage{data}
wrapper = 2 + 2 + field(update)     # channelId 1, msgType 8, msgBody
print(5 + field(wrapper))           # header + Packet{messages}
EOF
)}

# perf stat: the events this machine counts (cycles and instructions need a PMU; with perf's
# -D -1 one unsupported event would leave the others uncounted, so only supported ones go).
PERF_EVENTS=
PERF_NOTE=
if [ "$PERF_STAT" = 1 ] && command -v perf >/dev/null; then
    PERF_PROBE=$(perf stat -x, -e cycles,instructions,task-clock -- sh -c : 2>&1 >/dev/null || true)
    for ev in cycles instructions task-clock; do
        if printf '%s\n' "$PERF_PROBE" | grep -q "^[0-9][0-9.]*,[^,]*,$ev,"; then
            PERF_EVENTS=${PERF_EVENTS:+$PERF_EVENTS,}$ev
        fi
    done
    case ",$PERF_EVENTS," in *,cycles,*) ;; *) PERF_NOTE="cycles: not supported on this machine" ;; esac
    case ",$PERF_EVENTS," in
    *,task-clock,*) log "perf stat: counting $PERF_EVENTS per run${PERF_NOTE:+ ($PERF_NOTE)}" ;;
    *)
        log "perf stat does not count task-clock here (perf_event_paranoid?); CPU from /proc"
        PERF_EVENTS=
        PERF_NOTE="perf stat: not usable on this machine; ns CPU / delivery from /proc"
        ;;
    esac
elif [ "$PERF_STAT" = 1 ]; then
    PERF_NOTE="perf: not installed; ns CPU / delivery from /proc"
fi
PSTAT=()
[ -z "$PERF_EVENTS" ] || PSTAT=(--perf-stat "$PERF_EVENTS")

# BASE_REV: the revision's chanqd, built from its committed tree (re-extracted when the
# revision resolves to another commit), and its targets next to the working tree's.
BASE_COMMIT=
CHANQD_BASE=
if [ -n "${BASE_REV:-}" ]; then
    BASE_COMMIT=$(git -C "$ROOT" rev-parse --verify --quiet "$BASE_REV^{commit}") ||
        { log "BASE_REV $BASE_REV is not a commit"; exit 1; }
    BASE_DIR="$ROOT/build-bench-base"
    if [ "$(cat "$BASE_DIR/src/.commit" 2>/dev/null)" != "$BASE_COMMIT" ]; then
        log "base: extracting $BASE_REV ($BASE_COMMIT) into $BASE_DIR/src"
        rm -rf "$BASE_DIR"
        mkdir -p "$BASE_DIR/src"
        git -C "$ROOT" archive "$BASE_COMMIT" | tar -x -C "$BASE_DIR/src"
        echo "$BASE_COMMIT" >"$BASE_DIR/src/.commit"
    fi
    if [ ! -f "$BASE_DIR/build/build.ninja" ]; then
        meson setup "$BASE_DIR/build" "$BASE_DIR/src" --buildtype=release -Dtests=disabled \
            >/dev/null
    fi
    ninja -C "$BASE_DIR/build" src/main/chanqd >/dev/null
    CHANQD_BASE="$BASE_DIR/build/src/main/chanqd"
    log "base: $BASE_REV = $BASE_COMMIT, $CHANQD_BASE"
    with_base() { # list: each item X, then base-X when X matches the pattern $1
        local pat=$1 x out=()
        shift
        for x in "$@"; do
            out+=("$x")
            # shellcheck disable=SC2254 # $pat is a glob on purpose
            case "$x" in $pat) out+=("base-${x#chanq-}") ;; esac
        done
        echo "${out[*]}"
    }
    # shellcheck disable=SC2086
    TARGETS=$(with_base 'chanq-w*' $TARGETS)
    BASE_PAIRS=1
    # shellcheck disable=SC2086
    DUR_BACKENDS=$(with_base '*' $DUR_BACKENDS)
fi

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
# The data shape opens max(DATA_SUBS) + 1 client sockets in cqbench and as many in chanqd (each
# its own process, both inheriting this limit). Raise the hard limit too when allowed (root).
DATA_MAX_SUBS=0
for n in $DATA_SUBS; do
    [ "$n" -gt "$DATA_MAX_SUBS" ] && DATA_MAX_SUBS=$n
done
# chanqd's automatic --max-connections is what the limit leaves after its other caps (MQ 1024,
# MQ HTTP 256, admin 16) and --fd-reserve (256): 1552 more than the subscribers need.
FD_NEED=$((DATA_MAX_SUBS + 256 + 1552))
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$FD_NEED" ]; then
    ulimit -Hn "$FD_NEED" 2>/dev/null || true
    ulimit -n "$FD_NEED" 2>/dev/null || true
    if [ "$(ulimit -n)" -lt "$FD_NEED" ]; then
        log "warning: ulimit -n is $(ulimit -n), data runs above $(($(ulimit -n) - 1808)) subscribers will fail"
    fi
fi
# chanqd accepts at most 100000 connections by default (--max-connections 0: automatic); the
# loopback client ports come from the ephemeral range.
EPH_RANGE=$(awk '{print $2 - $1 + 1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 28232)
if [ "$DATA_MAX_SUBS" -ge 100000 ] || [ "$DATA_MAX_SUBS" -ge "$EPH_RANGE" ]; then
    log "DATA_SUBS up to $DATA_MAX_SUBS exceeds chanqd's --max-connections default or the ephemeral port range"
    exit 1
fi
mkdir -p "$OUT"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
JSONL="$OUT/run-$STAMP.jsonl"
: >"$JSONL"
DJSONL="$OUT/durable-$STAMP.jsonl"
TMP=$(mktemp -d /tmp/chanq-bench.XXXXXX)
FDS="$TMP/testpb.fds"
case " $SHAPES " in
*" data "*)
    protoc --include_imports --descriptor_set_out="$FDS" -I"$ROOT/proto" -I"$ROOT/tests/data" \
        "$ROOT/tests/data/testpb.proto"
    ;;
esac

# ---- servers ---------------------------------------------------------------------------------
PIDS=()
MYBASE=
cleanup() {
    local p
    if [ -n "$MYBASE" ]; then
        "$ROOT/tests/support/mariadb.sh" stop "$MYBASE" >/dev/null 2>&1 || true
    fi
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

# Each start_* sets SPID (server pid) and ARGS (cqbench address arguments); start_chanq also
# sets SDIR (its ready file and log). Durable topics are off unless the extra arguments turn
# them on (the last --mq-addr wins), so no store is opened and the fixed MQ ports stay free.
# start_chanq runs the working tree's chanqd, or BASE_REV's when SERVER_BIN is set to it.
# started PID DIR NAME: records a server started in the background and waits for DIR/ready.
started() {
    SPID=$1
    PIDS+=("$SPID")
    for _ in $(seq 1 100); do
        [ -s "$2/ready" ] && break
        sleep 0.05
    done
    [ -s "$2/ready" ] || { log "$3 did not start: $(cat "$2/log")"; exit 1; }
}
start_chanq() { # workers [extra chanqd arguments...]
    local dir="$TMP/chanq-$1-$RANDOM" w=$1
    shift
    mkdir -p "$dir"
    SDIR=$dir
    "${SERVER_BIN:-$CHANQD}" --client-addr 127.0.0.1:0 --server-addr 127.0.0.1:0 --admin-addr '' \
        --mq-addr '' --mq-http-addr '' --ws-addr '' --kcp-addr '' \
        --ready-file "$dir/ready" --workers "$w" --log-level warn "$@" >"$dir/log" 2>&1 &
    started "$!" "$dir" chanqd
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
# The floor writer (data shape only): a fresh cqfloor with the data shape's interval.
start_floor() { # floor | floor-uring
    local dir="$TMP/floor-$RANDOM" uring=()
    [ "${1:-floor}" = floor-uring ] && uring=(--uring)
    mkdir -p "$dir"
    "$CQFLOOR" --addr 127.0.0.1:0 --ready-file "$dir/ready" --interval "$DATA_INTERVAL" \
        --size "$FLOOR_SIZE" --align "$FLOOR_ALIGN" "${uring[@]}" >"$dir/log" 2>&1 &
    started "$!" "$dir" cqfloor
    ARGS=(--target floor --addr "$(sed -n 's/^addr=//p' "$dir/ready")")
}
# chanqd targets: chanq-wN is the working tree's chanqd with N workers, base-wN BASE_REV's.
# chanq_target NAME: sets T_BIN (the binary) and W (workers) for a chanqd target; false for
# any other target.
chanq_target() {
    T_ARGS=()
    case "$1" in
    chanq-w[0-9]*) T_BIN=$CHANQD W=${1#chanq-w} ;;
    base-w[0-9]*) T_BIN=$CHANQD_BASE W=${1#base-w} ;;
    *) return 1 ;;
    esac
    case "$W" in # chanq-wN-epoll: the write(2) path (--io-uring off)
    *-epoll) W=${W%-epoll} T_ARGS=(--io-uring off) ;;
    esac
    [ -n "$T_BIN" ] || { log "target $1 needs BASE_REV"; exit 1; }
}
start_target() { # name
    case "$1" in
    chanq-w* | base-w*) chanq_target "$1" && SERVER_BIN=$T_BIN start_chanq "$W" "${T_ARGS[@]}" ;;
    redis) start_redis ;;
    nats) start_nats ;;
    floor | floor-uring) start_floor "$1" ;;
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

# The targets of the shapes other than data: TARGETS without floor (the floor writer has the
# data shape's writes only).
BC_TARGETS=
for t in $TARGETS; do
    case "$t" in floor | floor-uring) ;; *) BC_TARGETS=${BC_TARGETS:+$BC_TARGETS }$t ;; esac
done

declare -A TPID TARGS
start_all() {
    local t
    for t in $BC_TARGETS; do
        start_target "$t"
        TPID[$t]=$SPID
        TARGS[$t]="${ARGS[*]}"
    done
}
stop_all() {
    local t
    for t in $BC_TARGETS; do
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

# mqbench LABEL MQBENCH-ARGS...: one durable-topic run, its JSON line appended to $DJSONL.
mqbench() {
    local label=$1 line
    shift
    if ! line=$("$MQBENCH" "$@" --label "$label" 2>>"$TMP/mqbench.err" | tee -a "$DJSONL"); then
        log "mqbench failed ($label): $(tail -3 "$TMP/mqbench.err")"
    fi
    printf '%s\n' "$line" | grep '^#' >&2 || true
}
# Synced 4 KiB writes per second on the disk of $TMP (the MariaDB data dir and the SQLite store).
dsync_rate() {
    local t0 t1
    t0=$(date +%s.%N)
    dd if=/dev/zero of="$TMP/dsync.test" bs=4k count=1000 oflag=dsync 2>/dev/null || true
    t1=$(date +%s.%N)
    rm -f "$TMP/dsync.test"
    python3 -c "print(round(1000 / ($t1 - $t0)))"
}

# rep_order REP LIST...: LIST as it is on odd reps; on even reps with BASE_REV, each X followed
# by base-X is run base-X first. Which of two back-to-back runs goes first is not neutral on this
# 2-core machine (measured: the first of a pair gets about 20 % more system time in the 1000
# msg/s shape, whichever binary it is), so a pair alternates its order.
rep_order() {
    local rep=$1 out=() i
    shift
    local -a l=("$@")
    for ((i = 0; i < ${#l[@]}; i++)); do
        if [ -n "${BASE_PAIRS:-}" ] && ((rep % 2 == 0)) && ((i + 1 < ${#l[@]})) &&
            [ "${l[i + 1]}" = "base-${l[i]#chanq-}" ]; then
            out+=("${l[i + 1]}" "${l[i]}")
            i=$((i + 1))
        else
            out+=("${l[i]}")
        fi
    done
    echo "${out[*]}"
}

# ---- shapes ----------------------------------------------------------------------------------
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
T0=$(date +%s)
log "load at start: $LOAD_START; results -> $JSONL"

run_shape() { # shape
    local shape=$1 t rep
    case "$shape" in
    closed100 | closed1000 | rate100)
        start_all
        for rep in $(seq 1 "$REPS"); do
            # shellcheck disable=SC2086
            for t in $(rep_order "$rep" $BC_TARGETS); do
                # shellcheck disable=SC2086
                case "$shape" in
                closed100) bench "$shape/$t" ${TARGS[$t]} --pid "${TPID[$t]}" --mode closed \
                    --subs 100 --duration "$DURATION" --warmup "$WARMUP" "${PSTAT[@]}" ;;
                closed1000) bench "$shape/$t" ${TARGS[$t]} --pid "${TPID[$t]}" --mode closed \
                    --subs 1000 --duration "$DURATION" --warmup "$WARMUP" "${PSTAT[@]}" ;;
                rate100) bench "$shape/$t" ${TARGS[$t]} --pid "${TPID[$t]}" --mode rate \
                    --subs 100 --rate 1000 --duration "$DURATION" --warmup "$WARMUP" \
                    "${PSTAT[@]}" ;;
                esac
            done
        done
        stop_all
        ;;
    idle)
        # A fresh server per run, so the RSS baseline is that of an unused server.
        for rep in $(seq 1 "$IDLE_REPS"); do
            # shellcheck disable=SC2086
            for t in $(rep_order "$rep" $BC_TARGETS); do
                start_target "$t"
                sleep 0.5
                bench "idle/$t" "${ARGS[@]}" --pid "$SPID" --mode idle --subs "$IDLE_CONNS" \
                    --duration "$IDLE_SECONDS" --warmup 1
                stop_server "$SPID"
            done
        done
        ;;
    data)
        # Channel data: a fresh chanqd (with the test type's descriptor set) per run, so that
        # RSS and channel state start from zero. chanq targets and the floor writer only.
        local n any=0
        for rep in $(seq 1 "$DATA_REPS"); do
            for n in $DATA_SUBS; do
                # shellcheck disable=SC2086
                for t in $(rep_order "$rep" $TARGETS); do
                    if [ "$t" = floor ] || [ "$t" = floor-uring ]; then
                        any=1
                        start_floor "$t"
                        bench "data$n/$t" "${ARGS[@]}" --pid "$SPID" --mode data --subs "$n" \
                            --size "$FLOOR_SIZE" --interval "$DATA_INTERVAL" \
                            --duration "$DATA_DURATION" --warmup "$DATA_WARMUP" "${PSTAT[@]}"
                        stop_server "$SPID"
                        continue
                    fi
                    chanq_target "$t" || continue
                    any=1
                    SERVER_BIN=$T_BIN start_chanq "$W" "${T_ARGS[@]}" --channel-data-types "$FDS"
                    bench "data$n/$t" "${ARGS[@]}" --pid "$SPID" --mode data --subs "$n" \
                        --rate "$DATA_RATE" --size "$DATA_SIZE" --interval "$DATA_INTERVAL" \
                        --duration "$DATA_DURATION" --warmup "$DATA_WARMUP" "${PSTAT[@]}"
                    stop_server "$SPID"
                    [ "$DATA_CONTROL" = 1 ] || continue
                    SERVER_BIN=$T_BIN start_chanq "$W" "${T_ARGS[@]}"
                    bench "bcast$n/$t" "${ARGS[@]}" --pid "$SPID" --mode rate --subs "$n" \
                        --rate "$(python3 -c "print(1000 / $DATA_INTERVAL)")" --size "$DATA_SIZE" \
                        --duration "$DATA_DURATION" --warmup "$DATA_WARMUP" "${PSTAT[@]}"
                    stop_server "$SPID"
                done
            done
        done
        [ "$any" = 1 ] || log "shape data: no chanq-* or floor target in TARGETS, skipped"
        ;;
    durable) run_durable ;;
    transports) run_transports ;;
    *) log "unknown shape $shape"; exit 1 ;;
    esac
}

# Durable topics (issue 4): chanqd on MariaDB and chanqd on SQLite run for the whole shape; per
# rep: raw Connector/C bulk inserts into the same MariaDB, then per backend produce
# (throughput), rate (ack latency at DUR_RATE msgs/s) and consume (from offset 0). A fresh topic
# per rep. A base-<backend> (BASE_REV) runs BASE_REV's chanqd on the same MariaDB (its own
# database) or in its own SQLite directory.
run_durable() {
    local my_port='' my_pid='' my_tried=0 b r ready mq rc dstart dend fs0 fs1 bin sfx
    local -a cpid common
    local -A MQADDR MQPID
    dstart=$(cut -d' ' -f1-3 /proc/loadavg)
    fs0=$(dsync_rate)
    log "durable: load $dstart, disk $fs0 synced 4k writes/s"
    for b in $DUR_BACKENDS; do
        bin=$CHANQD sfx=''
        case "$b" in base-*) bin=$CHANQD_BASE sfx=_base ;; esac
        case "${b#base-}" in
        mysql)
            if [ "$my_tried" = 0 ]; then
                my_tried=1
                MYBASE="$TMP/mariadb"
                rc=0
                my_port=$("$ROOT/tests/support/mariadb.sh" start "$MYBASE") || rc=$?
                if [ "$rc" != 0 ]; then
                    log "durable: MariaDB did not start (mariadb.sh exit $rc), backend $b skipped"
                    MYBASE=
                    my_port=
                    continue
                fi
                my_pid=$(cat "$MYBASE/mariadbd.pid")
            fi
            [ -n "$my_port" ] || { log "durable: no MariaDB, backend $b skipped"; continue; }
            SERVER_BIN=$bin start_chanq 1 --mq-addr 127.0.0.1:0 --store-backend mysql \
                --mysql-port "$my_port" --mysql-user root --mysql-database "chanq_bench$sfx"
            ;;
        sqlite)
            SERVER_BIN=$bin start_chanq 1 --mq-addr 127.0.0.1:0 --store-backend sqlite \
                --store-dir "$TMP/sqlite-store$sfx"
            ;;
        *) log "durable: unknown backend $b"; exit 1 ;;
        esac
        ready=$(cat "$SDIR/ready")
        mq=${ready##*mq=}
        mq=${mq%% *}
        MQADDR[$b]=$mq
        MQPID[$b]=$SPID
        log "durable: chanqd on $b at mq=$mq (pid $SPID)"
    done
    common=(--size "$DUR_SIZE" --duration "$DUR_DURATION" --warmup "$DUR_WARMUP")
    for r in $(seq 1 "$DUR_REPS"); do
        if [ -n "$my_port" ]; then
            mqbench "durable/raw-mysql" raw-mysql --mysql-port "$my_port" --mysql-user root \
                --mysql-database rawbench --topic "raw_r$r" --batch "$DUR_RAW_BATCH" \
                --pid "mariadbd=$my_pid" "${common[@]}"
            mqbench "durable/raw-mysql-array" raw-mysql --raw-method array \
                --mysql-port "$my_port" --mysql-user root --mysql-database rawbench \
                --topic "rawa_r$r" --batch "$DUR_RAW_BATCH" --pid "mariadbd=$my_pid" "${common[@]}"
        fi
        # shellcheck disable=SC2086
        for b in $(rep_order "$r" $DUR_BACKENDS); do
            [ -n "${MQADDR[$b]:-}" ] || continue
            mq=${MQADDR[$b]}
            cpid=(--pid "chanqd=${MQPID[$b]}")
            case "$b" in mysql | base-mysql) cpid+=(--pid "mariadbd=$my_pid") ;; esac
            mqbench "durable/produce/$b" produce --addr "$mq" --topic "bench_r$r" \
                --producers "$DUR_PRODUCERS" --window "$DUR_WINDOW" --batch "$DUR_BATCH" \
                "${cpid[@]}" "${common[@]}"
            mqbench "durable/rate/$b" rate --addr "$mq" --topic "rate_r$r" --rate "$DUR_RATE" \
                "${cpid[@]}" "${common[@]}"
            mqbench "durable/consume/$b" consume --addr "$mq" --topic "bench_r$r" \
                --max-count "$DUR_CONSUME_COUNT" --max-msgs "$DUR_CONSUME_MAX" "${cpid[@]}"
        done
    done
    for b in $DUR_BACKENDS; do
        if [ -n "${MQPID[$b]:-}" ]; then
            stop_server "${MQPID[$b]}"
        fi
    done
    if [ -n "$MYBASE" ]; then
        "$ROOT/tests/support/mariadb.sh" stop "$MYBASE" >/dev/null 2>&1 || true
        MYBASE=
    fi
    fs1=$(dsync_rate)
    dend=$(cut -d' ' -f1-3 /proc/loadavg)
    log "durable: load $dend, disk $fs1 synced 4k writes/s"
    printf '{"mode":"env","load_start":"%s","load_end":"%s","dsync_start":%s,"dsync_end":%s}\n' \
        "$dstart" "$dend" "$fs0" "$fs1" >>"$DJSONL"
}

# Transports (issue 5): the 1 -> TR_SUBS closed loop (64 B, as closed100) with the subscribers
# over tcp, ws and kcp, against ONE chanqd per chanq-* target (all three listeners on port 0,
# from its ready file); the publisher is always a TCP SERVER connection. Each rep runs every
# chanq target and, per target, the transports in a rotating order (rep 1: tcp ws kcp, rep 2:
# ws kcp tcp, ...). Before each run the server's /metrics must show no CLIENT connection left
# from the run before (cqbench DISCONNECTs its KCP subscribers through the publisher, since KCP
# has no close; --kcp-idle-timeout-ms 5000 clears leftovers of a crashed run). The table of
# medians is printed when the shape ends; the JSON lines go to $JSONL with labels
# transports/<target>/<transport>.
#   TR_REPS [$REPS]  TR_SUBS [100]  TR_TRANSPORTS ["tcp ws kcp"]  TR_WINDOW [500] messages
#   outstanding  TR_DURATION [$DURATION] s  TR_WARMUP [$WARMUP] s
#   TR_CHANQD_ARGS [""] extra chanqd arguments, e.g. "--kcp-profile kcp-go"
TR_REPS=${TR_REPS:-$REPS}
TR_SUBS=${TR_SUBS:-100}
TR_TRANSPORTS=${TR_TRANSPORTS:-"tcp ws kcp"}
TR_DURATION=${TR_DURATION:-$DURATION}
TR_WARMUP=${TR_WARMUP:-$WARMUP}
TR_WINDOW=${TR_WINDOW:-500}
TR_CHANQD_ARGS=${TR_CHANQD_ARGS:-}

# CLIENT connections chanqd reports on its admin listener (HOST:PORT), or -1.
tr_clients() {
    python3 - "$1" <<'EOF' 2>/dev/null || echo -1
import re, sys, urllib.request
body = urllib.request.urlopen(f'http://{sys.argv[1]}/metrics', timeout=2).read().decode()
m = re.search(r'^connection_num\{type="CLIENT"\} (\d+)', body, re.M)
print(m.group(1) if m else -1)
EOF
}
# Waits (200 polls, at most 10-20 s) until chanqd at admin address $1 has no CLIENT connection.
tr_wait_idle() {
    local n
    for _ in $(seq 1 200); do
        n=$(tr_clients "$1")
        [ "$n" = 0 ] && return 0
        sleep 0.05
    done
    log "transports: $n CLIENT connections still open on $1, measuring anyway"
}

run_transports() {
    local t r i tr order lstart lend
    local -A tpid targs tadmin
    local -a trs chanqs=()
    read -r -a trs <<<"$TR_TRANSPORTS"
    for t in $TARGETS; do
        chanq_target "$t" || continue
        # shellcheck disable=SC2086
        SERVER_BIN=$T_BIN start_chanq "$W" --ws-addr 127.0.0.1:0 --kcp-addr 127.0.0.1:0 \
            --admin-addr 127.0.0.1:0 --kcp-max-per-addr 100000 --kcp-idle-timeout-ms 5000 \
            $TR_CHANQD_ARGS
        tpid[$t]=$SPID
        targs[$t]="${ARGS[*]}"
        tadmin[$t]=$(grep -o 'admin=[^ ]*' "$SDIR/ready" | cut -d= -f2)
        chanqs+=("$t")
    done
    if [ "${#chanqs[@]}" = 0 ]; then
        log "shape transports: no chanq-* target in TARGETS, skipped"
        return
    fi
    lstart=$(cut -d' ' -f1-3 /proc/loadavg)
    for r in $(seq 1 "$TR_REPS"); do
        order=()
        for i in "${!trs[@]}"; do
            order+=("${trs[$(((i + r - 1) % ${#trs[@]}))]}")
        done
        for t in $(rep_order "$r" "${chanqs[@]}"); do
            for tr in "${order[@]}"; do
                tr_wait_idle "${tadmin[$t]}"
                # shellcheck disable=SC2086
                bench "transports/$t/$tr" ${targs[$t]} --pid "${tpid[$t]}" --mode closed \
                    --subs "$TR_SUBS" --window "$TR_WINDOW" --duration "$TR_DURATION" \
                    --warmup "$TR_WARMUP" --transport "$tr"
            done
        done
    done
    lend=$(cut -d' ' -f1-3 /proc/loadavg)
    for t in "${chanqs[@]}"; do
        stop_server "${tpid[$t]}"
    done
    tr_summary "$lstart" "$lend" "$TR_CHANQD_ARGS"
}

# The transports table (medians) from $JSONL.
tr_summary() {
    python3 - "$JSONL" "$1" "$2" "$3" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
rows = [r for r in rows if r['label'].startswith('transports/')]
by, order = {}, []
for r in rows:
    k = tuple(r['label'].split('/')[1:3])
    if k not in by:
        order.append(k)
    by.setdefault(k, []).append(r)

def ok(r):
    return r.get('error') is None

def med(k, fn):
    v = [fn(r) for r in by.get(k, []) if ok(r)]
    v = [x for x in v if x is not None and x >= 0]
    return statistics.median(v) if v else None

def fmt(x, nd=0):
    return '-' if x is None else f'{x:,.{nd}f}'

def per(a, b):
    return lambda r: r[a] / r[b] if r[b] > 0 else None

errs = sum(1 for r in rows if not ok(r))
n = max((len(v) for v in by.values()), default=0)
subs = rows[0]['subs'] if rows else 0
win = rows[0]['window'] if rows else 0
extra = f'; chanqd {sys.argv[4]}' if sys.argv[4] else ''
print(f'\n### transports: closed loop, 1 -> {subs} subscribers, 64 B, window {win} (median of {n}; '
      f'load {sys.argv[2]} -> {sys.argv[3]}; runs {len(rows)}, errors {errs}{extra})\n')
print('| target | transport | deliveries/s | server cores | server CPU-s | deliveries / server CPU-s '
      '| vs tcp | client CPU-s | wire B / delivery | deliveries / read | KCP dup segments | '
      'server UDP drops | run-queue wait server / client | missing |')
print('|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
order.sort(key=lambda k: (k[0], ['tcp', 'ws', 'kcp'].index(k[1]) if k[1] in ('tcp', 'ws', 'kcp') else 9))
for k in order:
    d = med(k, lambda r: r['deliveries_per_server_cpu_s'])
    base = med((k[0], 'tcp'), lambda r: r['deliveries_per_server_cpu_s'])
    vs = '-' if d is None or not base else f'{d / base:.2f}x'
    sw = med(k, per('server_runq_wait_s', 'duration_s'))
    cw = med(k, per('client_runq_wait_s', 'duration_s'))
    print(f'| {k[0]} | {k[1]} | {fmt(med(k, lambda r: r["deliveries_per_s"]))} '
          f'| {fmt(med(k, lambda r: r["server_cores"]), 2)} | {fmt(med(k, lambda r: r["server_cpu_s"]), 2)} '
          f'| {fmt(d)} | {vs} | {fmt(med(k, lambda r: r["client_cpu_s"]), 2)} '
          f'| {fmt(med(k, per("sub_rx_bytes", "deliveries")), 1)} | {fmt(med(k, per("deliveries", "sub_reads")), 1)} '
          f'| {fmt(med(k, lambda r: r["kcp_dup_segs"]))} | {fmt(med(k, lambda r: r.get("server_udp_drops", -1)))} '
          f'| {fmt(sw, 2)} / {fmt(cw, 2)} '
          f'| {fmt(med(k, lambda r: r["missing"]))} |')
print('\nwire B / delivery: bytes the subscribers read (TCP/WS stream bytes, KCP datagram bytes) per '
      'delivery; deliveries / read: per recvmsg() (one KCP datagram per read). KCP dup segments: '
      'data segments the subscribers received twice (server retransmissions), in the window. '
      'Server UDP drops: datagrams the kernel dropped on chanqd\'s KCP socket(s) (receive buffer '
      'full), in the window. Run-queue wait is per second of the window.')
EOF
}

for s in $SHAPES; do
    log "shape $s"
    run_shape "$s"
done

if [ "$PERF" = 1 ] && command -v perf >/dev/null && [[ " $SHAPES " == *" closed"* ]]; then
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
if [ "$PERF" = 1 ] && command -v perf >/dev/null && [[ " $SHAPES " == *" data "* ]]; then
    log "perf: chanqd --workers 1, data shape with $PERF_DATA_SUBS subscribers"
    start_chanq 1 --channel-data-types "$FDS"
    "$CQBENCH" --label perf-data "${ARGS[@]}" --pid "$SPID" --mode data --subs "$PERF_DATA_SUBS" \
        --rate "$DATA_RATE" --size "$DATA_SIZE" --interval "$DATA_INTERVAL" \
        --duration $((DATA_DURATION + 2)) --warmup "$DATA_WARMUP" | grep '^#' >&2 &
    BPID=$!
    # record the steady state: after setup and warm-up, for DATA_DURATION seconds
    sleep $((DATA_WARMUP + 2))
    perf record -g -o "$OUT/perf-data-$STAMP.data" -p "$SPID" -- sleep "$DATA_DURATION" \
        >/dev/null 2>&1 || true
    wait "$BPID" || true
    perf report -i "$OUT/perf-data-$STAMP.data" --no-children --stdio --percent-limit 1.5 \
        2>/dev/null | grep -v '^$' | head -80 >"$OUT/perf-data-$STAMP.txt" || true
    log "perf report -> $OUT/perf-data-$STAMP.txt"
    stop_server "$SPID"
fi

LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
log "load at end: $LOAD_END; wall time $(($(date +%s) - T0)) s"

# ---- summary (medians) -------------------------------------------------------------------------
# CQ_BENCH_BASE (BASE_REV only) names the base revision; its targets get a "vs base" column.
# CQ_PERF_NOTE: what perf stat could not count here (printed once); CQ_FLOOR_SIZE: the floor's
# bytes per write.
CQ_BENCH_BASE=${BASE_REV:+$BASE_REV ($BASE_COMMIT)} CQ_PERF_NOTE=$PERF_NOTE CQ_FLOOR_SIZE=$FLOOR_SIZE \
    CQ_FLOOR_ALIGN=$FLOOR_ALIGN python3 - "$JSONL" "$LOAD_START" "$LOAD_END" <<'EOF'
import json, os, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
by = {}
for r in rows:
    by.setdefault(r['label'], []).append(r)

def med(label, key):
    v = [r.get(key) for r in by.get(label, []) if r.get('error') is None]
    v = [x for x in v if x is not None and x >= 0]
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
base = os.environ.get('CQ_BENCH_BASE', '')
if base:
    print(f'base: base-wN targets are chanqd at {base}; "vs base" = chanq-wN / base-wN')
# server CPU per delivery: perf stat's task-clock over the window (cpu_source perf), else /proc;
# cycles per delivery only where perf counted cycles
srcs = sorted({r.get('cpu_source', 'proc') for r in rows if r.get('error') is None})
print('ns CPU / delivery: server CPU time over the measurement window / deliveries in it, from '
      + (' and '.join('perf stat task-clock' if x == 'perf' else '/proc utime+stime' for x in srcs) or '-'))
if os.environ.get('CQ_PERF_NOTE'):
    print(os.environ['CQ_PERF_NOTE'])
have_cycles = any(r.get('cycles_per_delivery', -1) >= 0 for r in rows)

def cpu_cols(L):  # the "ns CPU / delivery" (and "cycles / delivery") cells
    c = f' {fmt(med(L, "ns_cpu_per_delivery"))} |'
    return c + (f' {fmt(med(L, "cycles_per_delivery"))} |' if have_cycles else '')

cpu_head = ' ns CPU / delivery |' + (' cycles / delivery |' if have_cycles else '')
cpu_rule = '---:|' + ('---:|' if have_cycles else '')

def vs_base(shape, t, d):
    if not t.startswith('chanq-w'):
        return '-'
    return ratio(d, med(f'{shape}/base-w{t[len("chanq-w"):]}', 'deliveries_per_server_cpu_s'))

for shape, title in (('closed100', 'closed loop, 1 -> 100 subscribers, 64 B'),
                     ('closed1000', 'closed loop, 1 -> 1000 subscribers, 64 B')):
    if not any(k.startswith(shape + '/') for k in by):
        continue
    print(f'\n### {title} (median of {max(len(by.get(shape + "/" + t, [])) for t in targets)})\n')
    print('| target | deliveries/s | server cores | deliveries / server CPU-s |' + cpu_head
          + ' client CPU-s | missing | vs redis | vs nats |' + (' vs base |' if base else ''))
    print('|---|---:|---:|---:|' + cpu_rule + '---:|---:|---:|---:|' + ('---:|' if base else ''))
    for t in targets:
        L = f'{shape}/{t}'
        if L not in by:
            continue
        d = med(L, 'deliveries_per_server_cpu_s')
        print(f'| {t} | {fmt(med(L, "deliveries_per_s"))} | {fmt(med(L, "server_cores"), 2)} | {fmt(d)} |'
              + cpu_cols(L) +
              f' {fmt(med(L, "client_cpu_s"), 2)} | {fmt(med(L, "missing"))} '
              f'| {ratio(d, med(shape + "/redis", "deliveries_per_server_cpu_s"))} '
              f'| {ratio(d, med(shape + "/nats", "deliveries_per_server_cpu_s"))} |'
              + (f' {vs_base(shape, t, d)} |' if base else ''))

if any(k.startswith('rate100/') for k in by):
    print('\n### 1 -> 100 subscribers at 1000 msg/s, 64 B (medians)\n')
    print('| target | deliveries/s | server cores | deliveries / server CPU-s |' + cpu_head
          + ' kernel-rx p50 us | kernel-rx p99 us | app p50 us | app p99 us | app max us | missing |')
    print('|---|---:|---:|---:|' + cpu_rule + '---:|---:|---:|---:|---:|---:|')
    for t in targets:
        L = f'rate100/{t}'
        if L not in by:
            continue
        print(f'| {t} | {fmt(med(L, "deliveries_per_s"))} | {fmt(med(L, "server_cores"), 3)} '
              f'| {fmt(med(L, "deliveries_per_server_cpu_s"))} |' + cpu_cols(L) + f' {fmt(med(L, "kp50_us"), 1)} '
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

# channel data: one table, a row per (subscribers, target)
data_shapes = sorted({k.split('/', 1)[0] for k in by if k.startswith('data')}, key=lambda s: int(s[4:]))
if data_shapes:
    r0 = by[next((k for k in by if k.startswith('data') and '/floor' not in k),
                 next(k for k in by if k.startswith('data')))][0]
    iv = r0['interval_ms']
    what = (f'owner sends {r0["rate"]:.0f} updates/s of {r0["size"]} B' if not r0['target'].startswith('floor')
            else f'floor only, one {r0["size"]} B write per subscriber and window')
    print(f'\n### channel data: {what}, '
          f'subscribers at fanOutIntervalMs {iv} (median of '
          f'{max(len(v) for k, v in by.items() if k.startswith("data"))})\n')
    has_floor = any(k.startswith('data') and k.endswith('/floor') for k in by)
    print('| subscribers | target | fan-outs/s | of ideal | server cores | of which user mode | fan-outs / server CPU-s |'
          + cpu_head + (' server CPU / floor |' if has_floor else '') +
          ' app p50 ms | app p99 ms | app max ms | kernel-rx p50 ms | kernel-rx p99 ms '
          '| server RSS MB | run-queue wait server / client | targets: rate, <=0.1 core, p99 |')
    print('|---:|---|---:|---:|---:|---:|---:|' + cpu_rule + ('---:|' if has_floor else '')
          + '---:|---:|---:|---:|---:|---:|---:|---|')
    def medf(label, fn):
        v = [fn(r) for r in by.get(label, []) if r.get('error') is None]
        v = [x for x in v if x is not None and x >= 0]
        return statistics.median(v) if v else None
    def ms(label, key):
        x = med(label, key)
        return None if x is None else x / 1000
    for shape in data_shapes:
        for t in targets:
            L = f'{shape}/{t}'
            if L not in by:
                continue
            ideal = med(L, 'of_ideal')
            cores = med(L, 'server_cores')
            p99 = ms(L, 'p99_us')
            kp99 = ms(L, 'kp99_us')
            sw = medf(L, lambda r: r['server_runq_wait_s'] / r['duration_s'] if r['duration_s'] > 0 and r['server_runq_wait_s'] >= 0 else None)
            cw = medf(L, lambda r: r['client_runq_wait_s'] / r['duration_s'] if r['duration_s'] > 0 and r['client_runq_wait_s'] >= 0 else None)
            rss = med(L, 'rss_kb')
            yes = lambda ok: '-' if ok is None else ('yes' if ok else 'no')
            verdict = ', '.join((yes(None if ideal is None else ideal >= 0.99),
                                 yes(None if cores is None else cores <= 0.1),
                                 yes(None if kp99 is None else kp99 <= iv + 2)))
            vs_floor = ''
            if has_floor:  # CPU per fan-out against the floor writer's CPU per write, same N
                vs_floor = ' - |' if t == 'floor' else f' {ratio(med(L, "ns_cpu_per_delivery"), med(f"{shape}/floor", "ns_cpu_per_delivery"))} |'
            print(f'| {shape[4:]} | {t} | {fmt(med(L, "deliveries_per_s"))} | {fmt(None if ideal is None else 100 * ideal, 1)} % '
                  f'| {fmt(cores, 3)} | {fmt(med(L, "server_user_cores"), 3)} | {fmt(med(L, "deliveries_per_server_cpu_s"))} |'
                  + cpu_cols(L) + vs_floor +
                  f' {fmt(ms(L, "p50_us"), 1)} | {fmt(p99, 1)} | {fmt(ms(L, "max_us"), 1)} '
                  f'| {fmt(ms(L, "kp50_us"), 1)} | {fmt(kp99, 1)} | {fmt(None if rss is None else rss / 1024, 1)} '
                  f'| {fmt(sw, 2)} / {fmt(cw, 2)} | {verdict} |')
    ctl = sorted({k.split('/', 1)[0] for k in by if k.startswith('bcast')}, key=lambda s: int(s[5:]))
    if ctl:
        print(f'\nControl: plain broadcast (msgType 100 via GLOBAL, no channel data) to the same N subscribers at '
              f'{1000 / iv:.0f} msg/s, i.e. the same ideal deliveries/s (medians)\n')
        print('| subscribers | target | deliveries/s | of ideal | server cores | of which user mode | deliveries / server CPU-s |'
              + cpu_head + ' kernel-rx p50 ms | kernel-rx p99 ms | run-queue wait server / client |')
        print('|---:|---|---:|---:|---:|---:|---:|' + cpu_rule + '---:|---:|---:|')
        for shape in ctl:
            n = int(shape[5:])
            for t in targets:
                L = f'{shape}/{t}'
                if L not in by:
                    continue
                d = med(L, 'deliveries_per_s')
                sw = medf(L, lambda r: r['server_runq_wait_s'] / r['duration_s'] if r.get('server_runq_wait_s', -1) >= 0 and r['duration_s'] > 0 else None)
                cw = medf(L, lambda r: r['client_runq_wait_s'] / r['duration_s'] if r.get('client_runq_wait_s', -1) >= 0 and r['duration_s'] > 0 else None)
                print(f'| {n} | {t} | {fmt(d)} | {fmt(None if d is None else 100 * d / (n * 1000 / iv), 1)} % '
                      f'| {fmt(med(L, "server_cores"), 3)} | {fmt(med(L, "server_user_cores"), 3)} | {fmt(med(L, "deliveries_per_server_cpu_s"))} |'
                      + cpu_cols(L) + f' {fmt(ms(L, "kp50_us"), 1)} | {fmt(ms(L, "kp99_us"), 1)} | {fmt(sw, 2)} / {fmt(cw, 2)} |')
    bad = sum(r['bad'] + r['stale'] + r['closed'] for k, v in by.items() if k.startswith('data') for r in v)
    print(f'\nIdeal = subscribers x 1000 / {iv} fan-outs/s. "p99" in the targets column is the kernel-rx p99 '
          f'against {iv} + 2 ms. Run-queue wait is per second of the window (0.5 = runnable but not '
          f'running half the time). Bad, stale (out-of-order) fan-outs and lost connections: {bad}.')
    if has_floor:
        fs = int(os.environ.get('CQ_FLOOR_SIZE', '0') or 0)
        grid = ('all on the interval grid (one burst per window)' if os.environ.get('CQ_FLOOR_ALIGN') == '1'
                else f'spread over the {iv} ms interval, as chanqd\'s SUBWORLD windows')
        print(f'floor: cqfloor, one plain write(2) of {fs} B per connection and window from one epoll '
              f'loop, {grid}; its kernel-rx latency is from the window\'s due time. "server CPU / floor" = '
              'the target\'s ns CPU per fan-out / the floor\'s ns CPU per write, same subscribers.')
        wire = [r['sub_rx_bytes'] / r['deliveries'] for k, v in by.items()
                if k.startswith('data') and '/floor' not in k for r in v
                if r.get('error') is None and r.get('deliveries', 0) > 0 and r.get('sub_rx_bytes', 0) > 0]
        if wire:
            w = statistics.median(wire)
            same = abs(w - fs) < 1
            print(f'chanq fan-outs on the wire: {w:.1f} B per fan-out (median over the chanq data runs, '
                  f'bytes read / fan-outs)' + ('; the floor writes the same size.' if same else
                  f'; WARNING: the floor writes {fs} B (set FLOOR_SIZE to match).'))
EOF
log "raw results: $JSONL"

[ -s "$DJSONL" ] || exit 0
# ---- durable summary (medians) -----------------------------------------------------------------
python3 - "$DJSONL" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
env = next((r for r in rows if r['mode'] == 'env'), {})
by = {}
for r in rows:
    if r['mode'] != 'env':
        by.setdefault(r['label'], []).append(r)

def med(label, key, sub=None):
    v = []
    for r in by.get(label, []):
        x = r.get(key) if sub is None else r.get(key, {}).get(sub)
        if x is not None and x >= 0:
            v.append(x)
    return statistics.median(v) if v else None

def fmt(x, nd=0):
    return '-' if x is None else f'{x:,.{nd}f}'

def rng(label, key):
    v = [r[key] for r in by.get(label, []) if r.get(key) is not None]
    return '-' if not v else f'{min(v):,.0f}-{max(v):,.0f}'

print(f'\n### durable topics: load {env.get("load_start")} -> {env.get("load_end")}, disk '
      f'{env.get("dsync_start")} / {env.get("dsync_end")} synced 4k writes/s (start / end)\n')
raw = med('durable/raw-mysql', 'msgs_per_s')
raw_a = med('durable/raw-mysql-array', 'msgs_per_s')
print('| run | what | msgs/s (median) | min-max | p50 ms | p99 ms | chanqd CPU % | mariadbd CPU % | mqbench CPU % | errors |')
print('|---|---|---:|---:|---:|---:|---:|---:|---:|---:|')
for L in sorted(by):
    r0 = by[L][0]
    mode = r0['mode']
    if mode == 'raw-mysql':
        what = (f'{r0.get("method", "text")} INSERT of {r0["batch"]} rows x {r0["size"]} B, '
                'one connection')
    elif mode == 'produce':
        what = f'{r0["producers"]} conns x {r0["window"]} in flight x {r0["batch"]} msgs, {r0["size"]} B'
    elif mode == 'rate':
        what = f'{r0["rate"]:.0f} msgs/s, 1 msg per produce, {r0["size"]} B'
    else:
        what = f'from offset 0, max_count {r0["max_count"]}, one request at a time'
    p50 = med(L, 'p50_ms') if mode != 'consume' else med(L, 'req_p50_ms')
    p99 = med(L, 'p99_ms') if mode != 'consume' else med(L, 'req_p99_ms')
    err = sum(r.get('errors', 0) for r in by[L])
    print(f'| {L[len("durable/"):]} | {what} | {fmt(med(L, "msgs_per_s"))} | {rng(L, "msgs_per_s")} '
          f'| {fmt(p50, 2)} | {fmt(p99, 2)} | {fmt(med(L, "cpu", "chanqd"))} | {fmt(med(L, "cpu", "mariadbd"))} '
          f'| {fmt(med(L, "cpu", "mqbench"))} | {err} |')
print()
for b in ('mysql', 'base-mysql', 'sqlite', 'base-sqlite'):
    p = med(f'durable/produce/{b}', 'msgs_per_s')
    lat = med(f'durable/rate/{b}', 'p99_ms')
    c = med(f'durable/consume/{b}', 'msgs_per_s')
    if p is None:
        continue
    rel = ''
    for rl, rm in (('durable/raw-mysql', raw), ('durable/raw-mysql-array', raw_a)):
        if not rm:
            continue
        rel += f'; {100 * p / rm:.0f} % of the {rl[len("durable/"):]} median {rm:,.0f}/s'
        pr = [q['msgs_per_s'] / w['msgs_per_s'] for q, w in
              zip(by.get(f'durable/produce/{b}', []), by.get(rl, [])) if w['msgs_per_s'] > 0]
        if pr:
            rel += (f' (per rep: median {100 * statistics.median(pr):.0f} %, '
                    + ' / '.join(f'{100 * x:.0f}' for x in pr) + ' %)')
    print(f'- {b}: produce {p:,.0f}/s (target >= 100,000 and >= 60 % of raw{rel}); '
          f'rate p99 {fmt(lat, 2)} ms (target <= 5); consume {fmt(c)}/s (target >= 200,000)')

def rel(a, b):
    return '-' if a is None or not b else f'{a / b:.2f}x'

# BASE_REV: the working tree against the base revision, per backend (reps paired in run order)
for b in ('mysql', 'sqlite'):
    cur, old = by.get(f'durable/produce/{b}', []), by.get(f'durable/produce/base-{b}', [])
    if not cur or not old:
        continue
    pr = [q['msgs_per_s'] / w['msgs_per_s'] for q, w in zip(cur, old) if w['msgs_per_s'] > 0]
    per = ' / '.join(f'{x:.2f}' for x in pr)
    print(f'- {b} vs base-{b}: produce '
          f'{rel(med(f"durable/produce/{b}", "msgs_per_s"), med(f"durable/produce/base-{b}", "msgs_per_s"))} '
          f'(per rep: {per}); rate p99 {fmt(med(f"durable/rate/{b}", "p99_ms"), 2)} vs '
          f'{fmt(med(f"durable/rate/base-{b}", "p99_ms"), 2)} ms; consume '
          f'{rel(med(f"durable/consume/{b}", "msgs_per_s"), med(f"durable/consume/base-{b}", "msgs_per_s"))}')
EOF
log "durable raw results: $DJSONL"
