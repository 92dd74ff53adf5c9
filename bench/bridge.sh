#!/usr/bin/env bash
# bench/bridge.sh - issue 24's benchmark: durable topics delivered into channels by chanqd's
# bridge (doc/bridge.md), with resume. One chanqd (--bridge-file binding the topic "bench" to
# GLOBAL as msg_type 200, --client-fsm config/client_authoratative_fsm.json so that players SUB
# themselves) per part and backend, all on loopback; the load client is bench/load/bridgebench.c
# (its header comment says exactly what each mode measures). Parts (PARTS, in this order), each
# run for every backend in BACKENDS:
#   live       LIVE_SUBS players on GLOBAL, LIVE_RATE single-message produces/s over the seed
#              protocol, open loop, for LIVE_WARMUP + LIVE_DURATION s: delivery latency (event's
#              send time -> a player's kernel receive time, and -> the app) next to the produce
#              answer's latency in the same run, from the same send times (chanqd answers after
#              the commit: the store's commit as a producer sees it; the store's own commit
#              histogram, chanq_mq_writer_commit_seconds, is reported too, at its bucket
#              resolution). Target (issue 24): delivery p99 <= commit p99 + 2 ms.
#   follow     the same as live, the events produced to a durable chanqd of their own (shard 1)
#              and delivered by a front chanqd that follows it (--bridge-follow, doc/bridge.md
#              "Shards"): what following a shard over the seed protocol adds. Not in the
#              default PARTS.
#   catchup    one player (libchanq's chanq_topics) gets one event, drops, CATCHUP_N events are
#              produced while it is away, it reconnects, SUBs and resumes: events/s from the
#              resume request to the last catch-up event. Two chanqd: "ring" with
#              --bridge-ring-events CATCHUP_RING (>= CATCHUP_N: the position is in the ring) and
#              "store" with --bridge-ring-events STORE_RING (the default 8192 < CATCHUP_N: the
#              position is older than the ring, the events come from store reads). Target:
#              >= 100,000 events/s.
#   reconnect  RECON_PLAYERS players on GLOBAL get one event, RECON_BEFORE s of quiet, all drop,
#              RECON_EVENTS events are produced, all reconnect at once and resume: the time until
#              every player has its events, chanq_bridge_resume_reads_total (store reads), and
#              the latency of live traffic on another channel (a SERVER connection broadcasting
#              RECON_LIVE_RATE 64-byte messages/s on a SUBWORLD channel to RECON_LIVE_SUBS
#              players, from a process of its own) before the drop and during the reconnect.
#              Once per worker count in RECON_WORKERS (chanqd --workers). With RECON_CONTROL=1
#              each rep also runs the control (bridgebench --no-resume, in alternating order):
#              the same reconnect without the resumes, so that what the resumes add to the
#              live traffic's latency shows apart from what 10,000 AUTHs and SUBs cost. With
#              RECON_STORE_RING > 0 each rep also runs "store": a chanqd whose ring keeps only
#              RECON_STORE_RING events (< RECON_EVENTS), so that every position is older than the
#              ring and each resume reads the store: how the reads grow with the players.
#   routelogin a route binding's catch-up at login (doc/bridge.md "Route bindings"; the topic
#              "vip" routed on user_id as msg_type 201): ROUTE_PLAYERS players that never
#              connected, ROUTE_EVENTS events each produced while they are away (interleaved:
#              one player's events are one every ROUTE_PLAYERS offsets), ROUTE_BEFORE s of
#              quiet, then all log in at once (no request: the catch-up starts at AUTH). Each
#              must get exactly its own events, in order, once. Measured: the time until every
#              player has them, per player p50/p99/max, the route's store reads (issued and
#              shared), rows, events by source and offset reads, and the live traffic on another
#              channel as in reconnect (RECON_LIVE_SUBS, RECON_LIVE_RATE) before and during.
#              The kinds of ROUTE_KINDS per rep, each on a fresh chanqd and store (a player that
#              acknowledged nothing would get an earlier run's events again): "ring", whose ring
#              holds every pending event (--bridge-ring-events ROUTE_PLAYERS * ROUTE_EVENTS, at
#              least 8192), and "store", with a ring of ROUTE_STORE_RING events, so the catch-ups
#              read the store, shared: the reads issued must stay far below one per player. In
#              both the players' offsets are not cached (each login reads its own from the
#              store); "ring-warm" and "store-warm" are the same after every player logged in
#              once before the events (bridgebench --login-first: offsets cached, none read).
#              Not in the default PARTS (about 150 s per backend at the default size, 2 CPUs);
#              the BRIDGE_SMOKE size runs it. Only this part's chanqd has the route binding, so
#              that the other parts' logins start no route catch-up.
# Each run prints its readable line; the summary at the end has a table of medians over REPS
# per part, the load (/proc/loadavg) at the start and end of each part, and the targets. Raw
# results (one JSON line per run) go to $OUT/bridge-<time>.jsonl. Nothing here asserts a time.
#
# Environment knobs [defaults]:
#   PARTS ["live catchup reconnect"; BRIDGE_SMOKE adds routelogin]  BACKENDS ["sqlite mysql"]  REPS [3]  WORKERS [2] (chanqd
#     --workers of the live and catchup parts)  SIZE [64] content bytes per event
#   LIVE_SUBS [100]  LIVE_RATE [2000]  LIVE_DURATION [5] s  LIVE_WARMUP [1] s
#   CATCHUP_N [50000]  CATCHUP_RING [65536]  STORE_RING [8192]  CATCHUP_BATCH [1000] per produce
#   RECON_PLAYERS [10000]  RECON_EVENTS [100]  RECON_BEFORE [3] s  RECON_LIVE_SUBS [8]
#   RECON_LIVE_RATE [100]  RECON_WORKERS ["1 2"]  RECON_CONTROL [1]  RECON_STORE_RING [50]
#   RECON_UNPACED [0]  1: also a chanqd with --bridge-resume-inflight 65536 (the A/B of pacing)
#   RECON_INFLIGHT [chanqd's default]  --bridge-resume-inflight of the resume runs
#   ROUTE_PLAYERS [10000]  ROUTE_EVENTS [10] per player  ROUTE_BEFORE [3] s
#   ROUTE_STORE_RING [1000]  ROUTE_WORKERS [2]  ROUTE_BATCH [1000] events per produce
#   ROUTE_KINDS ["ring store"] (any of ring store ring-warm store-warm)
#   BRIDGE_SMOKE [0]  1: the CI size (suite bench, test bridge-smoke): REPS 1, sqlite only, 10
#                     players at 200 events/s for 1 s, a catch-up of 2000 events (ring, and
#                     store with a ring of 500), 200 players reconnecting for 20 events, and
#                     (PARTS adds routelogin) 100 players logging in for 3 events each (ring,
#                     store with a ring of 50, store-warm); checks only that every part ran and every
#                     run ended without an error (every event once, in order, resumes
#                     recovered), and that no chanqd log has a sanitizer report (no timing is
#                     checked); exits 77 when python3 is missing
#   BUILD [build-bench] (meson release build, created if missing)  OUT [$BUILD/bench-results]
#   CHANQD, BRIDGEBENCH: use these instead of building
# Needs: python3; MariaDB (tests/support/mariadb.sh) for the mysql backend, which is skipped with
# a message when it cannot start. ulimit -n is raised to the hard limit; the reconnect part is
# skipped when that leaves fewer than RECON_PLAYERS + 1000 descriptors (routelogin: ROUTE_PLAYERS).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SMOKE=${BRIDGE_SMOKE:-0}
DEFAULT_PARTS="live catchup reconnect"
[ "$SMOKE" = 1 ] && DEFAULT_PARTS="$DEFAULT_PARTS routelogin"
PARTS=${PARTS:-$DEFAULT_PARTS} BACKENDS=${BACKENDS:-"sqlite mysql"}
REPS=${REPS:-3} WORKERS=${WORKERS:-2} SIZE=${SIZE:-64}
LIVE_SUBS=${LIVE_SUBS:-100} LIVE_RATE=${LIVE_RATE:-2000} LIVE_DURATION=${LIVE_DURATION:-5}
LIVE_WARMUP=${LIVE_WARMUP:-1}
CATCHUP_N=${CATCHUP_N:-50000} CATCHUP_RING=${CATCHUP_RING:-65536} STORE_RING=${STORE_RING:-8192}
CATCHUP_BATCH=${CATCHUP_BATCH:-1000}
RECON_PLAYERS=${RECON_PLAYERS:-10000} RECON_EVENTS=${RECON_EVENTS:-100}
RECON_BEFORE=${RECON_BEFORE:-3} RECON_LIVE_SUBS=${RECON_LIVE_SUBS:-8}
RECON_LIVE_RATE=${RECON_LIVE_RATE:-100} RECON_WORKERS=${RECON_WORKERS:-"1 2"}
RECON_CONTROL=${RECON_CONTROL:-1} RECON_STORE_RING=${RECON_STORE_RING:-50}
RECON_UNPACED=${RECON_UNPACED:-0} RECON_INFLIGHT=${RECON_INFLIGHT:-}
ROUTE_PLAYERS=${ROUTE_PLAYERS:-10000} ROUTE_EVENTS=${ROUTE_EVENTS:-10}
ROUTE_BEFORE=${ROUTE_BEFORE:-3} ROUTE_STORE_RING=${ROUTE_STORE_RING:-1000}
ROUTE_WORKERS=${ROUTE_WORKERS:-2} ROUTE_BATCH=${ROUTE_BATCH:-1000}
ROUTE_KINDS=${ROUTE_KINDS:-"ring store"}
if [ "$SMOKE" = 1 ]; then
    BACKENDS=sqlite REPS=1 LIVE_SUBS=10 LIVE_RATE=200 LIVE_DURATION=1 LIVE_WARMUP=0.5
    CATCHUP_N=2000 CATCHUP_RING=8192 STORE_RING=500 RECON_PLAYERS=200 RECON_EVENTS=20
    RECON_BEFORE=0.5 RECON_LIVE_SUBS=2 RECON_WORKERS=2 RECON_CONTROL=0
    RECON_STORE_RING=10 ROUTE_PLAYERS=100 ROUTE_EVENTS=3 ROUTE_BEFORE=0.5 ROUTE_STORE_RING=50
    ROUTE_KINDS="ring store store-warm"
fi
BUILD=${BUILD:-build-bench}
log() { printf '[bridge.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

# ---- prerequisites and build ---------------------------------------------------------------
skip() {
    log "skipped: $*"
    [ "$SMOKE" = 1 ] && exit 77
    exit 1
}
command -v python3 >/dev/null || skip "python3 is needed"
if [ -z "${CHANQD:-}" ] || [ -z "${BRIDGEBENCH:-}" ]; then
    [ -f "$BUILD/build.ninja" ] ||
        meson setup "$BUILD" -Dbuildtype=release -Dtests=disabled >/dev/null
    ninja -C "$BUILD" src/main/chanqd bench/bridgebench >/dev/null
    CHANQD=$ROOT/$BUILD/src/main/chanqd BRIDGEBENCH=$ROOT/$BUILD/bench/bridgebench
fi
OUT=${OUT:-$ROOT/$BUILD/bench-results}
mkdir -p "$OUT"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
JSONL=$OUT/bridge-$STAMP.jsonl
: >"$JSONL"
TMP=$(mktemp -d /tmp/chanq-bridgebench.XXXXXX)
BINDINGS=$TMP/bindings.json
echo '{"bindings":[{"topic":"bench","broadcast":"global","msg_type":200}]}' >"$BINDINGS"
# routelogin's: the same and a route binding (with one, every login with a PIT starts a
# catch-up, which the other parts must not measure)
ROUTE_BINDINGS=$TMP/bindings-route.json
echo '{"bindings":[{"topic":"bench","broadcast":"global","msg_type":200},' \
    '{"topic":"vip","route":"user_id","msg_type":201}]}' >"$ROUTE_BINDINGS"

# 10,000 players are 10,000 sockets in bridgebench and as many in chanqd (which raises its own
# limit to the hard one at start).
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
fd_check() { # PART PLAYERS: the part dropped from PARTS when the descriptors are too few
    case " $PARTS " in *" $1 "*) ;; *) return 0 ;; esac
    if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt $(($2 + 1000)) ]; then
        log "part $1 skipped: ulimit -n is $(ulimit -n) (hard limit), not the" \
            "$(($2 + 1000)) that $2 players need"
        PARTS=${PARTS//$1/}
    fi
}
fd_check reconnect "$RECON_PLAYERS"
fd_check routelogin "$ROUTE_PLAYERS"

# ---- services: MariaDB, chanqd -------------------------------------------------------------
PIDS=() # chanqd processes still to stop
MYBASE='' MYPORT=''
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do gone "$p" || true; done
    [ -z "$MYBASE" ] || "$ROOT/tests/support/mariadb.sh" stop "$MYBASE" >/dev/null 2>&1 || true
    rm -rf "$TMP"
}
trap cleanup EXIT

gone() { # PID: true once the process has exited (at most 10 s after a SIGTERM, then SIGKILL)
    local i
    for i in $(seq 1 200); do
        kill -0 "$1" 2>/dev/null || return 0
        [ "$i" != 100 ] || kill -KILL "$1" 2>/dev/null || true
        sleep 0.05
    done
    return 1
}

# mariadb_start: a throwaway MariaDB (durable settings: binlog, flush at every commit); on
# failure the mysql backend is dropped with a message, the other backends still run.
mariadb_start() {
    local rc=0
    MYBASE=$TMP/mariadb
    MYPORT=$("$ROOT/tests/support/mariadb.sh" start "$MYBASE" 2>"$TMP/mariadb.err") || rc=$?
    if [ $rc != 0 ]; then
        if [ $rc = 2 ]; then
            log "backend mysql skipped: MariaDB is not installed ($(tail -1 "$TMP/mariadb.err"))"
        else
            log "backend mysql skipped: MariaDB did not start: $(tail -3 "$TMP/mariadb.err")"
        fi
        MYBASE='' MYPORT=''
        BACKENDS=${BACKENDS//mysql/}
        return
    fi
    log "MariaDB on 127.0.0.1:$MYPORT (pid $(cat "$MYBASE/mariadbd.pid"))"
}

# chanq_start NAME BACKEND ARGS...: a fresh chanqd in $TMP/NAME with a fresh store (a new
# SQLite directory, or a new MariaDB database named after NAME); waits for its ready file. Sets
# SPID and SDIR.
chanq_start() {
    local name=$1 backend=$2
    shift 2
    SDIR=$TMP/$name
    mkdir -p "$SDIR"
    local -a store
    case "$backend" in
    sqlite) store=(--store-backend sqlite --store-dir "$SDIR/store") ;;
    mysql) store=(--store-backend mysql --mysql-port "$MYPORT" --mysql-user root
        --mysql-database "bb_${name//[^A-Za-z0-9_]/_}") ;;
    *) log "unknown backend $backend"; exit 1 ;;
    esac
    "$CHANQD" --client-addr 127.0.0.1:0 --server-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 \
        --mq-addr 127.0.0.1:0 --mq-http-addr '' --ws-addr '' --kcp-addr '' \
        --ready-file "$SDIR/ready" --workers "$WORKERS" \
        --client-fsm "$ROOT/config/client_authoratative_fsm.json" \
        --bridge-file "${BRIDGE_FILE:-$BINDINGS}" \
        --log-level info "${store[@]}" "$@" >"$SDIR/log" 2>&1 &
    SPID=$!
    PIDS+=("$SPID")
    for _ in $(seq 1 400); do
        [ -s "$SDIR/ready" ] && return 0
        kill -0 "$SPID" 2>/dev/null || break
        sleep 0.05
    done
    log "chanqd in $SDIR did not start: $(tail -5 "$SDIR/log")"
    exit 1
}
chanq_stop() { # PID
    local keep=() p
    kill "$1" 2>/dev/null || true
    gone "$1" || log "chanqd $1 did not exit"
    for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
    PIDS=("${keep[@]}")
}

# bench LABEL DIR PID MODE ARGS...: one bridgebench run against the chanqd of DIR, its JSON
# line to $JSONL (with the load at its end), its readable line to stderr.
bench() {
    local label=$1 dir=$2 pid=$3 line
    shift 3
    if ! line=$("$BRIDGEBENCH" "$@" --label "$label" --ready-file "$dir/ready" --pid "$pid" \
        --size "$SIZE" 2>>"$TMP/bridgebench.err"); then
        log "bridgebench failed ($label): $(tail -3 "$TMP/bridgebench.err")"
    fi
    if ! printf '%s\n' "$line" | grep -q '^{'; then
        line="{\"label\":\"$label\",\"error\":\"no result (see above)\"}"
    fi
    printf '%s\n' "$line" | grep '^{' | sed "s/^{/{\"part_load\":\"$(load)\",/" >>"$JSONL" || true
    printf '%s\n' "$line" | grep '^#' >&2 || true
}
part_env() { # PART BACKEND start|end
    printf '{"label":"env/%s/%s/%s","load":"%s","uptime":"%s"}\n' "$1" "$2" "$3" "$(load)" \
        "$(uptime | sed 's/^ *//')" >>"$JSONL"
}
rotate() { # REP LIST...: LIST rotated left by REP - 1
    local r=$1 i
    shift
    local -a l=("$@")
    for ((i = 0; i < ${#l[@]}; i++)); do printf '%s ' "${l[$(((i + r - 1) % ${#l[@]}))]}"; done
}

# ---- parts ---------------------------------------------------------------------------------
part_live() { # BACKEND
    local b=$1 rep
    chanq_start "live_$b" "$b"
    local dir=$SDIR pid=$SPID
    for rep in $(seq 1 "$REPS"); do
        bench "live/$b" "$dir" "$pid" live --subs "$LIVE_SUBS" --rate "$LIVE_RATE" \
            --duration "$LIVE_DURATION" --warmup "$LIVE_WARMUP"
    done
    chanq_stop "$pid"
}

# The live part through a followed shard (doc/bridge.md "Shards"): the events are produced to a
# durable chanqd of its own (shard 1, on the backend's store) and reach the players through a
# front chanqd (a SQLite store of its own, no event stored there) that follows it over the seed
# protocol (--bridge-follow): the delivery latency next to the same run's produce answers.
part_follow() { # BACKEND
    local b=$1 rep src
    chanq_start "follow_src_$b" "$b" --shard 1
    local sdir=$SDIR spid=$SPID
    src=$(sed -n 's/.*\bmq=\([^ ]*\).*/\1/p' "$sdir/ready")
    chanq_start "follow_front_$b" sqlite --bridge-follow "1/$src"
    local dir=$SDIR pid=$SPID
    for rep in $(seq 1 "$REPS"); do
        # (bridgebench waits 1.5 s after its add_topic: the follow of a topic starts at its live
        # position once the front's watch is in)
        bench "follow/$b" "$dir" "$pid" live --mq-ready-file "$sdir/ready" --subs "$LIVE_SUBS" \
            --rate "$LIVE_RATE" --duration "$LIVE_DURATION" --warmup "$LIVE_WARMUP"
    done
    chanq_stop "$pid"
    chanq_stop "$spid"
}

part_catchup() { # BACKEND
    local b=$1 rep t
    [ "$CATCHUP_RING" -ge "$CATCHUP_N" ] ||
        log "catchup: CATCHUP_RING $CATCHUP_RING < CATCHUP_N $CATCHUP_N: 'ring' reads the store too"
    chanq_start "catchup_ring_$b" "$b" --bridge-ring-events "$CATCHUP_RING"
    local rdir=$SDIR rpid=$SPID
    chanq_start "catchup_store_$b" "$b" --bridge-ring-events "$STORE_RING"
    local sdir=$SDIR spid=$SPID
    for rep in $(seq 1 "$REPS"); do
        for t in $(rotate "$rep" ring store); do
            case "$t" in
            ring) bench "catchup/ring/$b" "$rdir" "$rpid" catchup --events "$CATCHUP_N" \
                --batch "$CATCHUP_BATCH" ;;
            store) bench "catchup/store/$b" "$sdir" "$spid" catchup --events "$CATCHUP_N" \
                --batch "$CATCHUP_BATCH" ;;
            esac
        done
    done
    chanq_stop "$rpid"
    chanq_stop "$spid"
}

part_reconnect() { # BACKEND
    local b=$1 rep w t kinds=resume spid=''
    [ "$RECON_CONTROL" = 1 ] && kinds="$kinds control"
    [ "$RECON_STORE_RING" -gt 0 ] && kinds="$kinds store"
    [ "$RECON_UNPACED" = 1 ] && kinds="$kinds unpaced"
    local -a common=(--players "$RECON_PLAYERS" --events "$RECON_EVENTS" --before "$RECON_BEFORE"
        --live-subs "$RECON_LIVE_SUBS" --live-rate "$RECON_LIVE_RATE" --timeout 300)
    local -a maxc=(--max-connections $((RECON_PLAYERS + RECON_LIVE_SUBS + 100)))
    for w in $RECON_WORKERS; do
        WORKERS=$w chanq_start "reconnect_${b}_w$w" "$b" "${maxc[@]}" \
            ${RECON_INFLIGHT:+--bridge-resume-inflight "$RECON_INFLIGHT"}
        local dir=$SDIR pid=$SPID
        if [ "$RECON_STORE_RING" -gt 0 ]; then
            WORKERS=$w chanq_start "reconnect_store_${b}_w$w" "$b" "${maxc[@]}" \
                --bridge-ring-events "$RECON_STORE_RING"
            local sdir=$SDIR spid=$SPID
        fi
        local udir='' upid=''
        if [ "$RECON_UNPACED" = 1 ]; then # the A/B: every chunk handed to the workers at once
            WORKERS=$w chanq_start "reconnect_unpaced_${b}_w$w" "$b" "${maxc[@]}" \
                --bridge-resume-inflight 65536
            udir=$SDIR upid=$SPID
        fi
        for rep in $(seq 1 "$REPS"); do
            # shellcheck disable=SC2086 # kinds is a word list
            for t in $(rotate "$rep" $kinds); do
                case "$t" in
                resume) bench "reconnect/$b/w$w" "$dir" "$pid" reconnect "${common[@]}" ;;
                control) bench "reconnect-control/$b/w$w" "$dir" "$pid" reconnect \
                    "${common[@]}" --no-resume ;;
                store) bench "reconnect-store/$b/w$w" "$sdir" "$spid" reconnect "${common[@]}" ;;
                unpaced) bench "reconnect-unpaced/$b/w$w" "$udir" "$upid" reconnect \
                    "${common[@]}" ;;
                esac
            done
        done
        chanq_stop "$pid"
        [ -z "$spid" ] || chanq_stop "$spid"
        [ -z "$upid" ] || chanq_stop "$upid"
    done
}

part_routelogin() { # BACKEND
    local b=$1 rep t ring=$((ROUTE_PLAYERS * ROUTE_EVENTS))
    [ "$ring" -ge 8192 ] || ring=8192
    if [ "$ring" -gt 1048576 ]; then # chanqd's limit
        log "routelogin: $((ROUTE_PLAYERS * ROUTE_EVENTS)) events pending: 'ring' reads the store too"
        ring=1048576
    fi
    [ "$ROUTE_STORE_RING" -lt $((ROUTE_PLAYERS * ROUTE_EVENTS)) ] ||
        log "routelogin: ROUTE_STORE_RING $ROUTE_STORE_RING holds every event: 'store' reads none"
    local -a args=(--topic vip --msg-type 201 --players "$ROUTE_PLAYERS" --events "$ROUTE_EVENTS"
        --before "$ROUTE_BEFORE" --batch "$ROUTE_BATCH" --live-subs "$RECON_LIVE_SUBS"
        --live-rate "$RECON_LIVE_RATE" --timeout 300)
    local -a maxc=(--max-connections $((ROUTE_PLAYERS + RECON_LIVE_SUBS + 100)))
    for rep in $(seq 1 "$REPS"); do
        # shellcheck disable=SC2086 # ROUTE_KINDS is a word list
        for t in $(rotate "$rep" $ROUTE_KINDS); do
            local -a rg=(--bridge-ring-events "$ring") warm=()
            case "$t" in
            ring | ring-warm) ;;
            store | store-warm) rg=(--bridge-ring-events "$ROUTE_STORE_RING") ;;
            *) log "routelogin: unknown kind $t"; exit 1 ;;
            esac
            [ "${t%-warm}" = "$t" ] || warm=(--login-first)
            BRIDGE_FILE=$ROUTE_BINDINGS WORKERS=$ROUTE_WORKERS \
                chanq_start "routelogin_${t//-/_}_${b}_$rep" "$b" "${maxc[@]}" "${rg[@]}"
            bench "routelogin/$t/$b" "$SDIR" "$SPID" routelogin "${args[@]}" ${warm[@]+"${warm[@]}"}
            chanq_stop "$SPID"
        done
    done
}

T0=$(date +%s)
log "start: load $(load); $(nproc) CPUs, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
printf '{"label":"env/machine","nproc":%s,"cpu":"%s","kernel":"%s","load_start":"%s"}\n' \
    "$(nproc)" "$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)" "$(uname -r)" \
    "$(load)" >>"$JSONL"
case " $BACKENDS " in *" mysql "*) mariadb_start ;; esac
for b in $BACKENDS; do
    for part in $PARTS; do
        log "part $part, backend $b: load $(load)"
        part_env "$part" "$b" start
        case "$part" in
        live) part_live "$b" ;;
        follow) part_follow "$b" ;;
        catchup) part_catchup "$b" ;;
        reconnect) part_reconnect "$b" ;;
        routelogin) part_routelogin "$b" ;;
        *) log "unknown part $part"; exit 1 ;;
        esac
        part_env "$part" "$b" end
    done
done
log "wall time $(($(date +%s) - T0)) s; load $(load)"
printf '{"label":"env/end","load_end":"%s"}\n' "$(load)" >>"$JSONL"

# ---- summary (medians) ---------------------------------------------------------------------
SAN_RC=0
if [ "$SMOKE" = 1 ] && grep -l 'ERROR: AddressSanitizer\|ERROR: LeakSanitizer\|runtime error:' \
    "$TMP"/*/log 2>/dev/null; then
    log "a sanitizer reported an error in the chanqd logs above:"
    grep -h -A20 'ERROR: AddressSanitizer\|ERROR: LeakSanitizer\|runtime error:' \
        "$TMP"/*/log 2>/dev/null | head -60 >&2
    SAN_RC=1
fi
CQ_SMOKE=$SMOKE CQ_PARTS=$PARTS CQ_BACKENDS=$BACKENDS CQ_STORE_RING=$RECON_STORE_RING \
    CQ_ROUTE_STORE_RING=$ROUTE_STORE_RING python3 - "$JSONL" <<'EOF'
import json, os, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
env = {r['label']: r for r in rows if r['label'].startswith('env/')}
runs = [r for r in rows if not r['label'].startswith('env/')]
by = {}
for r in runs:
    by.setdefault(r['label'], []).append(r)

def ok(r):
    return r.get('error') is None

def med(label, key):
    v = [r[key] for r in by.get(label, []) if ok(r) and r.get(key) is not None]
    return statistics.median(v) if v else None

def all_of(label, key, nd=0):
    return ', '.join(fmt(r.get(key), nd) for r in by.get(label, []) if ok(r))

def fmt(x, nd=0):
    return '-' if x is None else f'{x:,.{nd}f}'

def ms(x, nd=2):
    return '-' if x is None or x < 0 else f'{x / 1000:,.{nd}f}'

def loads(part, b):
    s, e = env.get(f'env/{part}/{b}/start'), env.get(f'env/{part}/{b}/end')
    return f'load {s["load"] if s else "?"} -> {e["load"] if e else "?"}'

def n(label):
    return sum(1 for r in by.get(label, []) if ok(r))

errors = [r for r in runs if not ok(r)]
m = env.get('env/machine', {})
print(f'\nruns: {len(runs)}, errors: {len(errors)}; {m.get("nproc")} CPUs ({m.get("cpu")}), '
      f'kernel {m.get("kernel")}; load {m.get("load_start")} -> {env.get("env/end", {}).get("load_end")}')
for r in errors:
    print(f'  ERROR {r["label"]}: {r["error"]}')
backends = os.environ.get('CQ_BACKENDS', '').split()

for b, part in [(b, p) for b in backends for p in ('live', 'follow')]:
    L = f'{part}/{b}'
    if L not in by:
        continue
    r0 = by[L][0]
    via = ' through a front node following shard 1 (--bridge-follow)' if part == 'follow' else ''
    print(f'\n### {part}, {b}: {r0.get("rate", 0):.0f} events/s to {r0.get("subs")} players on GLOBAL{via}, '
          f'{r0.get("size")} B ({loads(part, b)}; median of {n(L)})\n')
    print('| | p50 ms | p99 ms | p99.9 ms | max ms |')
    print('|---|---:|---:|---:|---:|')
    print(f'| delivery, kernel rx | {ms(med(L, "kp50_us"))} | {ms(med(L, "kp99_us"))} | '
          f'{ms(med(L, "kp999_us"))} | {ms(med(L, "kmax_us"))} |')
    print(f'| delivery, app | {ms(med(L, "p50_us"))} | {ms(med(L, "p99_us"))} | | |')
    print(f'| produce answer (after the commit), kernel rx | {ms(med(L, "ack_kp50_us"))} | '
          f'{ms(med(L, "ack_kp99_us"))} | | |')
    print(f'| last player - produce answer, per event | {ms(med(L, "spread_p50_us"))} | '
          f'{ms(med(L, "spread_p99_us"))} | | |')
    d, a = med(L, 'kp99_us'), med(L, 'ack_kp99_us')
    per = [(r['kp99_us'] - r['ack_kp99_us']) / 1000 for r in by[L] if ok(r)]
    print(f'\nTarget: delivery p99 <= commit p99 + 2 ms: {ms(d)} vs {ms(a)} + 2 ms: '
          f'{"met" if d is not None and a is not None and d <= a + 2000 else "MISSED"} '
          f'(per run, delivery p99 - answer p99: {", ".join(f"{x:+.2f}" for x in per)} ms). '
          f'Store commit histogram p99 <= {fmt(med(L, "commit_p99_le_ms"), 1)} ms (bucket bound; '
          f'mean {fmt(med(L, "commit_mean_ms"), 2)} ms per transaction). chanqd '
          f'{fmt(med(L, "server_cpu_s"), 2)} CPU-s over the {r0.get("duration_s")} s window, the client '
          f'{fmt(med(L, "client_cpu_s"), 2)}. Missing {sum(r.get("missing", 0) for r in by[L])}, '
          f'repeated {sum(r.get("dup", 0) for r in by[L])}, out of order {sum(r.get("holes", 0) for r in by[L])}.')

for b in backends:
    if not any(k.startswith(f'catchup/') and k.endswith(f'/{b}') for k in by):
        continue
    r0 = next(r for r in runs if r['label'].startswith('catchup/') and r['label'].endswith(f'/{b}'))
    print(f'\n### catchup, {b}: one player, {r0.get("events")} events missed ({loads("catchup", b)}; '
          f'median of {max(n(f"catchup/{t}/{b}") for t in ("ring", "store"))})\n')
    print('| position | events/s | all runs | result ms | from ring | from store | store reads '
          '| chanqd CPU-s | client CPU-s |')
    print('|---|---:|---|---:|---:|---:|---:|---:|---:|')
    for t, what in (('ring', 'inside the ring'), ('store', 'older than the ring')):
        L = f'catchup/{t}/{b}'
        if L not in by:
            continue
        print(f'| {what} | {fmt(med(L, "events_per_s"))} | {all_of(L, "events_per_s")} '
              f'| {fmt(med(L, "result_ms"), 2)} | {fmt(med(L, "resume_ring_events"))} '
              f'| {fmt(med(L, "resume_store_events"))} | {fmt(med(L, "resume_reads"))} '
              f'| {fmt(med(L, "server_cpu_s"), 3)} | {fmt(med(L, "client_cpu_s"), 3)} |')
    print('\nTarget: >= 100,000 events/s.')

for b in backends:
    labels = sorted(k for k in by if k.startswith(f'reconnect/{b}/'))
    if not labels:
        continue
    r0 = by[labels[0]][0]
    print(f'\n### reconnect, {b}: {r0.get("players")} players resume {r0.get("events")} events each '
          f'({loads("reconnect", b)}; median of {max(n(k) for k in labels)})\n')
    print('| chanqd workers | run | all back ms | all runs | AUTH max | SUB max | result max '
          '| per player: resume -> last event p50 / p99 / max ms | retries | store reads '
          '| live p99 before ms | live p99 during ms | live max during ms | chanqd CPU-s |')
    print('|---|---|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|')
    for L in labels:
        w = L.rsplit('/w', 1)[1]
        for K, what in ((L, 'resume'), (f'reconnect-control/{b}/w{w}', 'control: no resume'),
                        (f'reconnect-store/{b}/w{w}', 'resume, positions older than the ring'),
                        (f'reconnect-unpaced/{b}/w{w}',
                         'resume, unpaced (--bridge-resume-inflight 65536)')):
            if K not in by:
                continue
            res = what.startswith('resume')
            print(f'| {w} | {what} | {fmt(med(K, "all_ms"))} | {all_of(K, "all_ms")} '
                  f'| {fmt(med(K, "auth_max_ms"))} | {fmt(med(K, "sub_max_ms"))} '
                  f'| {fmt(med(K, "result_max_ms")) if res else "-"} '
                  f'| {(fmt(med(K, "resume_p50_ms")) + " / " + fmt(med(K, "resume_p99_ms")) + " / " + fmt(med(K, "resume_max_ms"))) if res else "-"} '
                  f'| {fmt(med(K, "retries"))} | {fmt(med(K, "resume_reads"))} '
                  f'| {ms(med(K, "live_before_kp99_us"))} | {ms(med(K, "live_during_kp99_us"))} '
                  f'| {ms(med(K, "live_during_kmax_us"))} | {fmt(med(K, "server_cpu_s"), 2)} |')
    print(f'\n"all back": from the reconnect until every player has its events (resume) or its SUB '
          f'result (control). Live traffic: {r0.get("live_rate", 0):.0f} msg/s to {r0.get("live_subs")} '
          'players on a SUBWORLD channel, kernel rx latency; "before" is the quiet window before '
          'the drop, "during" from the reconnect until every player is back. "older than the ring": '
          'chanqd with --bridge-ring-events ' + str(os.environ.get('CQ_STORE_RING')) + ', every resume reads the store.')

ROUTE_KINDS = (('ring', 'in the ring'), ('store', 'older than the ring'),
               ('ring-warm', 'in the ring, offsets cached'),
               ('store-warm', 'older than the ring, offsets cached'))

def route_runs(b):
    return [f'routelogin/{t}/{b}' for t, _ in ROUTE_KINDS if f'routelogin/{t}/{b}' in by]

for b in backends:
    labels = route_runs(b)
    if not labels:
        continue
    r0 = next((r for k in labels for r in by[k] if ok(r)), by[labels[0]][0])
    print(f'\n### routelogin, {b}: {r0.get("players")} players log in at once, {r0.get("events")} '
          f'routed events pending each ({loads("routelogin", b)}; median of {max(n(k) for k in labels)})\n')
    print('| pending events | all caught up ms | all runs | AUTH max | per player: reconnect -> '
          'last event p50 / p99 / max ms | retries | logins | store reads issued | shared '
          '| rows read | events from ring / store | offset reads | live p99 before ms '
          '| live p99 during ms | live max during ms | chanqd CPU-s |')
    print('|---|---:|---|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|')
    for K in labels:
        what = dict(ROUTE_KINDS)[K.split('/')[1]]
        print(f'| {what} | {fmt(med(K, "all_ms"))} | {all_of(K, "all_ms")} | {fmt(med(K, "auth_max_ms"))} '
              f'| {fmt(med(K, "done_p50_ms"))} / {fmt(med(K, "done_p99_ms"))} / {fmt(med(K, "done_max_ms"))} '
              f'| {fmt(med(K, "retries"))} | {fmt(med(K, "route_logins"))} | {fmt(med(K, "route_reads"))} '
              f'| {fmt(med(K, "route_reads_shared"))} | {fmt(med(K, "route_rows"))} '
              f'| {fmt(med(K, "route_ring_events"))} / {fmt(med(K, "route_store_events"))} '
              f'| {fmt(med(K, "route_offset_reads"))} | {ms(med(K, "live_before_kp99_us"))} '
              f'| {ms(med(K, "live_during_kp99_us"))} | {ms(med(K, "live_during_kmax_us"))} '
              f'| {fmt(med(K, "server_cpu_s"), 2)} |')
    bound = []
    for K in labels:
        rs = [r for r in by[K] if ok(r)]
        if not rs:
            continue
        worst = max(rs, key=lambda r: r['route_reads'] / max(r['route_logins'], 1))
        per = worst['route_reads'] / max(worst['route_logins'], 1)
        bound.append(f'"{K.split("/")[1]}" at most {worst["route_reads"]:,.0f} store reads issued for '
                     f'{worst["route_logins"]:,.0f} logins ({per:.4f} per login: '
                     f'{"far below one per player" if per <= 0.1 else "NOT far below one per player"}; '
                     f'{worst["route_reads_shared"]:,.0f} joined a read in flight; '
                     f'{worst["route_rows"]:,.0f} rows read for {worst["players"] * worst["events"]:,} '
                     f'events pending)')
    leaks = sum(r.get('route_store_events', 0) for t in ('ring', 'ring-warm')
                for r in by.get(f'routelogin/{t}/{b}', []) if ok(r))
    print(f'\nThe bound on database reads: {"; ".join(bound)}. Offset reads: one per login of a player '
          'whose offset is not cached (without "offsets cached", every one: they never connected). "all caught up": from the '
          'reconnect until every player has every one of its events, checked each (its own, in order, '
          'at its offset, once). "older than the ring": chanqd with --bridge-ring-events '
          + str(os.environ.get('CQ_ROUTE_STORE_RING')) + '; "offsets cached": every player logged in '
          'once before the events (none acknowledged), so its login reads no offset.'
          + (f' WARNING: "in the ring" took {leaks:,.0f} events from the store.' if leaks else ''))

print(f'\nraw results: {sys.argv[1]}')
want = [(p, b) for b in backends for p in os.environ.get('CQ_PARTS', '').split()]
missing = [f'{p}/{b}' for p, b in want if not any(k.startswith(p + '/') and f'/{b}' in k for k in by)]
if missing:
    print(f'no run of: {" ".join(missing)}')
sys.exit(1 if (errors or missing) and os.environ.get('CQ_SMOKE') == '1' else 0)
EOF
exit $SAN_RC
