#!/usr/bin/env bash
# bench/soak.sh [MINUTES] - the soak (issue 10): MINUTES (default 30, fractions allowed) of
# broadcast, channel data, durable produce/consume/watch and reconnect churn against one chanqd,
# all at once, driven and checked by bench/load/soak.c (see its header and soak_int.h).
#
# Starts a throwaway MariaDB (tests/support/mariadb.sh; the production backend) or uses SQLite
# (SOAK_BACKEND=sqlite), and chanqd on loopback (port 0 everywhere, a temp dir, its pid used
# for every signal). Fails (exit 1) when the driver counts any violation (an unexpected close, an
# error answer, a sequence gap, a lost delivery, an acked offset not read back exactly once with
# its content, a stalled setup step, chanqd's RSS after the first 20 % not within 10 %), when
# chanqd's log has an ERROR line, or when chanqd does not exit 0 on SIGTERM at the end.
# Exit 77 (skip) when SOAK_SKIP_OK=1 and MariaDB is not installed (the meson test).
#
# Environment knobs (defaults in brackets):
#   SOAK_LOAD [full]    full: the rates of bench/RESULTS.md's "Soak" section, about half of
#                       this 2-core machine for chanqd; ci: a light mix for the meson test, which
#                       shares the machine with the rest of the suite
#   SOAK_BACKEND [mysql]  mysql or sqlite
#   SOAK_WORKERS [2]    chanqd --workers
#   SOAK_SECONDS        overrides MINUTES (seconds of load)
#   SOAK_ARGS           extra driver options, after the load's (e.g. "--bc-rate 2000")
#   CHANQD, SOAK_BIN    prebuilt chanqd and soak driver; when unset both are built in
#                       build-bench/ (meson, buildtype release) as bench/run.sh does
#   TESTPB_FDS          the descriptor set of tests/data/testpb.proto; when unset it is made
#                       with protoc
#   SOAK_KEEP           a directory to copy chanqd's log and the driver's output into
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MINUTES=${1:-30}
SECS=${SOAK_SECONDS:-$(awk -v m="$MINUTES" 'BEGIN { printf "%d", m * 60 }')}
LOAD=${SOAK_LOAD:-full}
BACKEND=${SOAK_BACKEND:-mysql}
WORKERS=${SOAK_WORKERS:-2}

log() { printf '[soak.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

case "$LOAD" in
full)
    LOAD_ARGS=(--bc-subs 100 --bc-rate 2000 --data-subs 100 --data-rate 1000 --data-interval 20
        --mq-rate 5000 --mq-batch 50 --mq-window 8 --churn 20 --churn-life 4 --rss-every 5)
    ;;
ci)
    LOAD_ARGS=(--bc-subs 20 --bc-rate 200 --data-subs 20 --data-rate 100 --data-interval 20
        --mq-rate 500 --mq-batch 10 --mq-window 8 --churn 8 --churn-life 3 --rss-every 2)
    ;;
*) log "SOAK_LOAD must be full or ci"; exit 2 ;;
esac
case "$BACKEND" in mysql | sqlite) ;; *) log "SOAK_BACKEND must be mysql or sqlite"; exit 2 ;; esac

# ---- binaries ----------------------------------------------------------------------------------
if [ -z "${CHANQD:-}" ] || [ -z "${SOAK_BIN:-}" ]; then
    BUILD="$ROOT/build-bench"
    if [ ! -f "$BUILD/build.ninja" ]; then
        meson setup "$BUILD" "$ROOT" --buildtype=release -Dtests=disabled >/dev/null
    fi
    ninja -C "$BUILD" src/main/chanqd bench/soak >/dev/null
    CHANQD=${CHANQD:-$BUILD/src/main/chanqd}
    SOAK_BIN=${SOAK_BIN:-$BUILD/bench/soak}
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/chanq-soak.XXXXXX")
MYBASE=
CPID=
cleanup() {
    if [ -n "$CPID" ] && kill -0 "$CPID" 2>/dev/null; then
        kill -KILL "$CPID" 2>/dev/null || true
        wait "$CPID" 2>/dev/null || true
    fi
    if [ -n "$MYBASE" ]; then
        "$ROOT/tests/support/mariadb.sh" stop "$MYBASE" >/dev/null 2>&1 || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

FDS=${TESTPB_FDS:-}
if [ -z "$FDS" ]; then
    command -v protoc >/dev/null || { log "protoc is needed (Debian package protobuf-compiler)"; exit 2; }
    FDS="$TMP/testpb.fds"
    protoc --include_imports --descriptor_set_out="$FDS" -I"$ROOT/proto" -I"$ROOT/tests/data" \
        "$ROOT/tests/data/testpb.proto"
fi

# ---- the store ---------------------------------------------------------------------------------
STORE_ARGS=()
if [ "$BACKEND" = mysql ]; then
    MYBASE="$TMP/mariadb"
    for try in 1 2; do # one retry: mariadb-install-db has failed once on a machine at load 17
        rc=0
        port=$("$ROOT/tests/support/mariadb.sh" start "$MYBASE" 2>"$TMP/mariadb.err") || rc=$?
        if [ "$rc" != 1 ] || [ "$try" = 2 ]; then
            break
        fi
        log "MariaDB did not start, trying once more:"
        cat "$TMP/mariadb.err" >&2
        "$ROOT/tests/support/mariadb.sh" stop "$MYBASE" >/dev/null 2>&1 || true
    done
    if [ "$rc" != 0 ]; then
        MYBASE=
        log "MariaDB did not start (mariadb.sh exit $rc):"
        cat "$TMP/mariadb.err" >&2
        if [ "$rc" = 2 ] && [ "${SOAK_SKIP_OK:-0}" = 1 ]; then
            exit 77
        fi
        exit 1
    fi
    STORE_ARGS=(--store-backend mysql --mysql-port "$port" --mysql-user root
        --mysql-database chanq_soak)
else
    STORE_ARGS=(--store-backend sqlite --store-dir "$TMP/store")
fi

# ---- chanqd --------------------------------------------------------------------------------------
"$CHANQD" --client-addr 127.0.0.1:0 --server-addr 127.0.0.1:0 --admin-addr '' \
    --mq-addr 127.0.0.1:0 --mq-http-addr '' --ws-addr '' --kcp-addr '' \
    --ready-file "$TMP/ready" --workers "$WORKERS" --log-level info \
    --channel-data-types "$FDS" "${STORE_ARGS[@]}" >"$TMP/chanqd.log" 2>&1 &
CPID=$!
for _ in $(seq 1 600); do
    [ -s "$TMP/ready" ] && break
    kill -0 "$CPID" 2>/dev/null || break
    sleep 0.05
done
if [ ! -s "$TMP/ready" ]; then
    log "chanqd did not start:"
    cat "$TMP/chanqd.log" >&2
    exit 1
fi
log "chanqd pid $CPID ($BACKEND, $WORKERS workers): $(cat "$TMP/ready")"
log "load $LOAD for $SECS s; load average $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- the run -------------------------------------------------------------------------------------
# utime + stime of a process in clock ticks (0 when it is gone), for the MariaDB server's share.
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
mpid=
[ -n "$MYBASE" ] && mpid=$(cat "$MYBASE/mariadbd.pid" 2>/dev/null || true)
m0=0
[ -n "$mpid" ] && m0=$(ticks "$mpid")
t0=$(date +%s.%N)
fail=0
rc=0
# shellcheck disable=SC2086 # SOAK_ARGS is a list of options on purpose
"$SOAK_BIN" --ready-file "$TMP/ready" --pid "$CPID" --duration "$SECS" "${LOAD_ARGS[@]}" \
    ${SOAK_ARGS:-} >"$TMP/soak.out" || rc=$?
cat "$TMP/soak.out"
if [ -n "$mpid" ]; then
    m1=$(ticks "$mpid")
    awk -v a="$m0" -v b="$m1" -v t0="$t0" -v t1="$(date +%s.%N)" -v hz="$(getconf CLK_TCK)" \
        'BEGIN { printf "# mariadbd: %.3f cores over the run (setup and drain included)\n", (b - a) / hz / (t1 - t0) }'
fi
[ "$rc" = 0 ] || { log "the driver reported violations (exit $rc)"; fail=1; }
log "load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"

if ! kill -0 "$CPID" 2>/dev/null; then
    log "chanqd died during the run"
    fail=1
else
    kill -TERM "$CPID"
    crc=0
    wait "$CPID" || crc=$?
    CPID=
    [ "$crc" = 0 ] || { log "chanqd exited $crc after SIGTERM"; fail=1; }
fi

errors=$(grep -c ' ERROR ' "$TMP/chanqd.log" || true)
warns=$(grep -c ' WARN ' "$TMP/chanqd.log" || true)
log "chanqd log: $errors ERROR lines, $warns WARN lines"
if [ "$errors" != 0 ]; then
    grep ' ERROR ' "$TMP/chanqd.log" | head -n 20 >&2
    fail=1
fi
if [ "$warns" != 0 ]; then
    grep ' WARN ' "$TMP/chanqd.log" | head -n 5 >&2
fi
if [ -n "${SOAK_KEEP:-}" ]; then
    mkdir -p "$SOAK_KEEP"
    cp "$TMP/chanqd.log" "$TMP/soak.out" "$SOAK_KEEP/"
fi
if [ "$fail" != 0 ]; then
    log "FAIL"
    tail -n 30 "$TMP/chanqd.log" | sed 's/^/  chanqd: /' >&2
    exit 1
fi
log "PASS"
