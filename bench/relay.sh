#!/usr/bin/env bash
# bench/relay.sh - issue 23's benchmark: three chanqd nodes as one relay (doc/relay-cluster.md)
# over ONE nats-server, membership in one standalone ZooKeeper, all on loopback, against one
# chanqd alone and against a plain 3-server NATS cluster. Parts (PARTS, in this order):
#   bcast  the 1 -> SUBS x 64 B closed-loop broadcast of bench/run.sh (cqbench --mode closed:
#          a SERVER connection possesses GLOBAL and publishes with ALL_BUT_SERVER, at most 500
#          messages outstanding against the slowest subscriber), in deliveries per server
#          CPU-s, the server being every process of the target (from /proc/PID/stat over the
#          window). Targets, interleaved per rep (the order rotates, since going first is not
#          neutral on 2 cores):
#            relay        publisher on node 1 (GLOBAL's home), subscribers spread over nodes
#                         1-3 in turn (cqbench --sub-addrs); server = chanqd x3 + nats-server
#            single       one chanqd, no relay, all subscribers on it; server = that chanqd
#            relay-local  the relay, all subscribers on node 1 (nothing crosses); the relay's
#                         own cost, for reference; server = chanqd x3 + nats-server
#            nats3        a 3-server NATS cluster (tests/support/nats.sh start DIR 3), the
#                         publisher on server 1, subscribers spread over the 3 in turn, one
#                         subject; cqbench's NATS client (raw text protocol, the one run.sh's
#                         nats target uses); server = the three nats-servers
#          Targets: relay >= 0.7x single, relay >= 3x nats3.
#   lat    cqbench --mode rate: LAT_RATE msg/s to LAT_SUBS subscribers, publisher on node 1.
#            mixed   half the subscribers on node 1, half on node 2 (every message crosses
#                    NATS once): the same messages in the same run, each half's latencies
#                    apart (cqbench's lat_by_sub_addr); the hop = node 2's - node 1's
#            remote  all on node 2, for reference
#            single  one chanqd, no relay, for reference
#          Kernel-rx and app latency percentiles (see cqbench.c). Target: p99 hop <= 1 ms.
#   data   cqbench --mode data (run.sh's data shape): the owner on node 1 sends DATA_RATE
#          updates/s of DATA_SIZE B on a SUBWORLD channel, DATA_SUBS subscribers spread over
#          the 3 nodes at fanOutIntervalMs DATA_INTERVAL; % of the ideal fan-outs
#          (subscribers x 1000 / interval per s), and single for reference. Target: 100 %.
#   loss   relayloss (bench/load/relayloss.c): a fresh relay per run with --zk-session-ms S
#          for each S in LOSS_SESSIONS; the owner on node 1, LOSS_VICTIMS clients on node 3
#          and LOSS_SURVIVORS on nodes 1 and 2, broadcasts at LOSS_RATE/s; node 3 SIGKILLed:
#          time until the owner has every victim's UNSUB result (target: the session + 1 s),
#          time until a victim that reconnected to node 2 receives again, and the survivors'
#          longest gap.
# Each run prints its readable line; the summary at the end has a table of medians per part
# with the ratios and the targets, the load (/proc/loadavg) at the start and end of each part,
# and what the nodes' links counted (gaps, resets, lost packets, drops: /metrics, read before
# each relay stops). Raw results (one JSON line per run) go to $OUT/relay-<time>.jsonl.
#
# Environment knobs [defaults]:
#   PARTS ["bcast lat data loss"]  REPS [3]  WORKERS [1] (every chanqd)
#   DURATION [3] s measured per run  WARMUP [1] s  SUBS [1000]  BCAST_TARGETS
#     ["relay single relay-local nats3"]
#   LAT_SUBS [100]  LAT_RATE [1000]  LAT_DURATION [5] s
#   DATA_SUBS [1000]  DATA_RATE [1000]  DATA_SIZE [64]  DATA_INTERVAL [20]
#   LOSS_SESSIONS ["2000 4000"] ms  LOSS_VICTIMS [50]  LOSS_SURVIVORS [50]
#   LOSS_RATE [200] broadcasts/s
#   RELAY_SMOKE [0]  1: the CI size (suite bench, test relay-smoke): REPS 1, 30 subscribers,
#                    1 s runs, one loss run at 2000 ms; checks only that every part ran and
#                    every run ended without an error, and that no chanqd log has a sanitizer
#                    report (no timing is checked); exits 77 when nats-server or ZooKeeper is
#                    not installed
#   BUILD [build-bench] (meson release build, created if missing)  OUT [$BUILD/bench-results]
#   CHANQD, CQBENCH, RELAYLOSS, TESTPB_FDS: use these instead of building (TESTPB_FDS: the
#     descriptor set of tests/data/testpb.proto, for the data part)
# Needs: nats-server, ZooKeeper (java and /usr/share/java/zookeeper.jar), python3, protoc (when
# building TESTPB_FDS). The services are started by tests/support/zk.sh and nats.sh in a temp
# dir and stopped by their PIDs.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SMOKE=${RELAY_SMOKE:-0}
PARTS=${PARTS:-"bcast lat data loss"}
REPS=${REPS:-3} WORKERS=${WORKERS:-1} DURATION=${DURATION:-3} WARMUP=${WARMUP:-1}
SUBS=${SUBS:-1000} BCAST_TARGETS=${BCAST_TARGETS:-"relay single relay-local nats3"}
LAT_SUBS=${LAT_SUBS:-100} LAT_RATE=${LAT_RATE:-1000} LAT_DURATION=${LAT_DURATION:-5}
DATA_SUBS=${DATA_SUBS:-1000} DATA_RATE=${DATA_RATE:-1000} DATA_SIZE=${DATA_SIZE:-64}
DATA_INTERVAL=${DATA_INTERVAL:-20}
LOSS_SESSIONS=${LOSS_SESSIONS:-"2000 4000"} LOSS_VICTIMS=${LOSS_VICTIMS:-50}
LOSS_SURVIVORS=${LOSS_SURVIVORS:-50} LOSS_RATE=${LOSS_RATE:-200}
if [ "$SMOKE" = 1 ]; then
    # not nats3 in CI: a 3-server NATS cluster carries a subscription to the publisher's server
    # some time after the subscriber's server took it, and a closed loop whose first messages
    # went nowhere stalls (it did, 1 run in 3 under ASan); the full run's warmup covers it
    BCAST_TARGETS=${RELAY_SMOKE_TARGETS:-"relay single relay-local"}
    REPS=1 DURATION=1 LAT_DURATION=1 WARMUP=0.5 SUBS=30 LAT_SUBS=10 DATA_SUBS=30 LOSS_SESSIONS=2000
    LOSS_VICTIMS=5 LOSS_SURVIVORS=5
fi
BUILD=${BUILD:-build-bench}
log() { printf '[relay.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

# ---- prerequisites and build ---------------------------------------------------------------
skip() {
    log "skipped: $*"
    [ "$SMOKE" = 1 ] && exit 77
    exit 1
}
command -v python3 >/dev/null || skip "python3 is needed"
if [ -z "${CHANQD:-}" ] || [ -z "${CQBENCH:-}" ] || [ -z "${RELAYLOSS:-}" ]; then
    [ -f "$BUILD/build.ninja" ] ||
        meson setup "$BUILD" -Dbuildtype=release -Dtests=disabled >/dev/null
    ninja -C "$BUILD" src/main/chanqd bench/cqbench bench/relayloss >/dev/null
    CHANQD=$ROOT/$BUILD/src/main/chanqd CQBENCH=$ROOT/$BUILD/bench/cqbench
    RELAYLOSS=$ROOT/$BUILD/bench/relayloss
fi
OUT=${OUT:-$ROOT/$BUILD/bench-results}
mkdir -p "$OUT"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
JSONL=$OUT/relay-$STAMP.jsonl
: >"$JSONL"
TMP=$(mktemp -d /tmp/chanq-relaybench.XXXXXX)
if [ -z "${TESTPB_FDS:-}" ]; then
    command -v protoc >/dev/null || skip "protoc is needed for the data part"
    TESTPB_FDS=$TMP/testpb.fds
    protoc --include_imports --descriptor_set_out="$TESTPB_FDS" -I"$ROOT/proto" \
        -I"$ROOT/tests/data" "$ROOT/tests/data/testpb.proto"
fi
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
NEED_FD=$((SUBS > DATA_SUBS ? SUBS : DATA_SUBS))
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt $((NEED_FD + 2000)) ]; then
    ulimit -n $((NEED_FD + 2000)) 2>/dev/null || skip "ulimit -n $(ulimit -n) is too low"
fi

# ---- services: ZooKeeper, nats-server(s), chanqd nodes -------------------------------------
PIDS=() # chanqd processes still to stop
ZKDIR=$TMP/zk NATSDIR=$TMP/nats NATS3DIR=$TMP/nats3
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do gone "$p" || true; done
    "$ROOT/tests/support/nats.sh" stop "$NATS3DIR" >/dev/null 2>&1 || true
    "$ROOT/tests/support/nats.sh" stop "$NATSDIR" >/dev/null 2>&1 || true
    [ ! -d "$ZKDIR" ] || "$ROOT/tests/support/zk.sh" stop "$ZKDIR" >/dev/null 2>&1 || true
    rm -rf "$TMP"
}
trap cleanup EXIT

# start_service NAME CMD...: runs a tests/support start command; its exit 2 (not installed) is
# a skip.
start_service() {
    local name=$1 rc=0 out
    shift
    out=$("$@" 2>"$TMP/$name.err") || rc=$?
    if [ $rc = 2 ]; then skip "$name is not installed: $(tail -1 "$TMP/$name.err")"; fi
    if [ $rc != 0 ]; then
        log "$name did not start: $(tail -5 "$TMP/$name.err")"
        exit 1
    fi
    echo "$out"
}
ZK_HOSTS=$(CQ_ZK_NODES=1 start_service zookeeper "$ROOT/tests/support/zk.sh" start "$ZKDIR")
NATS_URL=$(start_service nats-server "$ROOT/tests/support/nats.sh" start "$NATSDIR" 1)
NATS_PID=$("$ROOT/tests/support/nats.sh" pid "$NATSDIR" 1)
log "ZooKeeper $ZK_HOSTS, nats-server $NATS_URL (pid $NATS_PID); load $(load)"

field() { sed -n "s/.*\\b$2=\\([^ ]*\\).*/\\1/p" "$1/ready"; } # field DIR NAME: from a ready file

# chanq_start DIR ARGS...: a chanqd in DIR (ready file, log), waits for its ready file; sets
# SPID.
chanq_start() {
    local dir=$1
    shift
    mkdir -p "$dir"
    "$CHANQD" --client-addr 127.0.0.1:0 --server-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 \
        --mq-addr '' --mq-http-addr '' --ws-addr '' --kcp-addr '' --ready-file "$dir/ready" \
        --workers "$WORKERS" --channel-data-types "$TESTPB_FDS" --log-level info "$@" \
        >"$dir/log" 2>&1 &
    SPID=$!
    # Not a job of this shell: the loss part SIGKILLs node 3 behind bash's back, and bash
    # would print "Killed" for a job of its own; gone() polls instead of wait.
    disown "$SPID"
    PIDS+=("$SPID")
    echo "$SPID" >"$dir/pid"
    for _ in $(seq 1 400); do
        [ -s "$dir/ready" ] && return 0
        kill -0 "$SPID" 2>/dev/null || break
        sleep 0.05
    done
    log "chanqd in $dir did not start: $(tail -5 "$dir/log")"
    exit 1
}
gone() { # PID: true once the process has exited (at most 10 s after a SIGTERM, then SIGKILL)
    local i
    for i in $(seq 1 200); do
        kill -0 "$1" 2>/dev/null || return 0
        [ "$i" != 100 ] || kill -KILL "$1" 2>/dev/null || true
        sleep 0.05
    done
    return 1
}
chanq_stop() { # PID
    local keep=() p
    kill "$1" 2>/dev/null || true
    gone "$1" || log "chanqd $1 did not exit"
    for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
    PIDS=("${keep[@]}")
}
metric() { # ADMIN NAME: the value of a metric on chanqd's /metrics, or -1
    python3 - "$1" "$2" <<'EOF' 2>/dev/null || echo -1
import re, sys, urllib.request
body = urllib.request.urlopen(f'http://{sys.argv[1]}/metrics', timeout=2).read().decode()
m = re.search(r'^' + re.escape(sys.argv[2]) + r' (\S+)', body, re.M)
print(m.group(1) if m else -1)
EOF
}

# relay_start NAME [chanqd ARGS...]: the relay's 3 nodes in $TMP/NAME/n{1,2,3}. Node 1 first,
# alone until ready, so that it claims GLOBAL's home (the publisher's node, as in the issue's
# shape); then nodes 2 and 3; then until every node has heard the 2 others
# (chanq_relay_peers_up). Sets NODE_DIR[1..3], NODE_PID[1..3].
declare -a NODE_DIR NODE_PID
RELAY_SEQ=0
relay_start() {
    local name=$1 n i up
    shift
    RELAY_SEQ=$((RELAY_SEQ + 1))
    for n in 1 2 3; do
        NODE_DIR[n]=$TMP/$name/n$n
        chanq_start "${NODE_DIR[n]}" --relay-nats "$NATS_URL" --relay-zk-hosts "$ZK_HOSTS" \
            --relay-cluster "b$$_$RELAY_SEQ" --relay-node-id "$n" "$@"
        NODE_PID[n]=$SPID
    done
    grep -q "GLOBAL's home is node 1" "${NODE_DIR[1]}/log" ||
        { log "GLOBAL's home is not node 1: $(grep "GLOBAL's home" "${NODE_DIR[1]}/log")"; exit 1; }
    for n in 1 2 3; do
        for i in $(seq 1 200); do
            up=$(metric "$(field "${NODE_DIR[n]}" admin)" chanq_relay_peers_up)
            [ "$up" = 2 ] && break
            sleep 0.05
        done
        [ "$up" = 2 ] || { log "relay $name: node $n has $up peers up, not 2"; exit 1; }
    done
}
# link_counts LABEL N...: what the links of those nodes counted (gaps, resets, lost packets,
# records dropped or refused, bad packets), summed, as one JSON line in $JSONL: 0 everywhere
# in a run without loss.
link_counts() {
    local label=$1 n admins=()
    shift
    for n in "$@"; do admins+=("$(field "${NODE_DIR[n]}" admin)"); done
    python3 - "$label" "${admins[@]}" >>"$JSONL" <<'EOF' || true
import json, re, sys, urllib.request
names = ('chanq_relay_link_gaps_total', 'chanq_relay_link_resets_total',
         'chanq_relay_link_lost_packets_total', 'chanq_relay_messages_dropped_total',
         'chanq_relay_refused_sends_total', 'chanq_relay_bad_packets_total',
         'chanq_relay_unknown_records_total')
out = {'label': 'links/' + sys.argv[1]}
for n in names:
    out[n] = 0
for a in sys.argv[2:]:
    body = urllib.request.urlopen(f'http://{a}/metrics', timeout=2).read().decode()
    for n in names:
        out[n] += sum(int(float(v)) for v in re.findall(r'^' + n + r'(?:\{[^}]*\})? (\S+)$', body, re.M))
print(json.dumps(out))
EOF
}
relay_stop() {
    local n
    for n in 1 2 3; do chanq_stop "${NODE_PID[n]}"; done
}
relay_pids() { echo "${NODE_PID[1]},${NODE_PID[2]},${NODE_PID[3]},$NATS_PID"; }
clients() { # N...: the client listeners of those relay nodes, comma-separated
    local n out=
    for n in "$@"; do out=$out${out:+,}$(field "${NODE_DIR[n]}" client); done
    echo "$out"
}

# bench LABEL ARGS...: one cqbench run, its JSON line to $JSONL, its readable line to stderr.
bench() {
    local label=$1 line
    shift
    if ! line=$("$CQBENCH" --label "$label" "$@" 2>>"$TMP/cqbench.err"); then
        log "cqbench failed ($label): $(tail -3 "$TMP/cqbench.err")"
    fi
    printf '%s\n' "$line" | grep '^{' | sed "s/^{/{\"part_load\":\"$(load)\",/" >>"$JSONL" || true
    printf '%s\n' "$line" | grep '^#' >&2 || true
}
# rotate REP LIST...: LIST rotated left by REP - 1.
rotate() {
    local r=$1 i
    shift
    local -a l=("$@")
    for ((i = 0; i < ${#l[@]}; i++)); do printf '%s ' "${l[$(((i + r - 1) % ${#l[@]}))]}"; done
}
part_env() { # PART start|end
    printf '{"label":"env/%s/%s","load":"%s","uptime":"%s"}\n' "$1" "$2" "$(load)" \
        "$(uptime | sed 's/^ *//')" >>"$JSONL"
}

# ---- parts ---------------------------------------------------------------------------------
SINGLE_DIR=$TMP/single
part_bcast() {
    local rep t nats3 a1 n3pids
    local -a common=(--mode closed --subs "$SUBS" --duration "$DURATION" --warmup "$WARMUP")
    chanq_start "$SINGLE_DIR"
    local single_pid=$SPID
    case " $BCAST_TARGETS " in
    *" nats3 "*)
        nats3=$(start_service nats-server "$ROOT/tests/support/nats.sh" start "$NATS3DIR" 3)
        nats3=${nats3//nats:\/\//}
        a1=${nats3%%,*}
        n3pids=$(for i in 1 2 3; do "$ROOT/tests/support/nats.sh" pid "$NATS3DIR" "$i"; done |
            paste -sd,)
        ;;
    esac
    for rep in $(seq 1 "$REPS"); do
        # shellcheck disable=SC2086
        for t in $(rotate "$rep" $BCAST_TARGETS); do
            case "$t" in
            relay) bench bcast/relay --target chanq --ready-file "${NODE_DIR[1]}/ready" \
                --sub-addrs "$(clients 1 2 3)" --pid "$(relay_pids)" "${common[@]}" ;;
            relay-local) bench bcast/relay-local --target chanq \
                --ready-file "${NODE_DIR[1]}/ready" --sub-addrs "$(clients 1)" \
                --pid "$(relay_pids)" "${common[@]}" ;;
            single) bench bcast/single --target chanq --ready-file "$SINGLE_DIR/ready" \
                --pid "$single_pid" "${common[@]}" ;;
            nats3) bench bcast/nats3 --target nats --addr "$a1" --sub-addrs "$nats3" \
                --pid "$n3pids" "${common[@]}" ;;
            *) log "unknown target $t"; exit 1 ;;
            esac
        done
    done
    [ -z "${nats3:-}" ] || "$ROOT/tests/support/nats.sh" stop "$NATS3DIR" >/dev/null
    chanq_stop "$single_pid"
}

part_lat() {
    local rep t
    local -a common=(--mode rate --rate "$LAT_RATE" --subs "$LAT_SUBS" --duration "$LAT_DURATION"
        --warmup "$WARMUP")
    chanq_start "$SINGLE_DIR"
    local single_pid=$SPID
    for rep in $(seq 1 "$REPS"); do
        for t in $(rotate "$rep" mixed remote single); do
            case "$t" in
            mixed) bench lat/mixed --target chanq --ready-file "${NODE_DIR[1]}/ready" \
                --sub-addrs "$(clients 1 2)" --pid "$(relay_pids)" "${common[@]}" ;;
            remote) bench lat/remote --target chanq --ready-file "${NODE_DIR[1]}/ready" \
                --sub-addrs "$(clients 2)" --pid "$(relay_pids)" "${common[@]}" ;;
            single) bench lat/single --target chanq --ready-file "$SINGLE_DIR/ready" \
                --pid "$single_pid" "${common[@]}" ;;
            esac
        done
    done
    chanq_stop "$single_pid"
}

part_data() {
    local rep t
    local -a common=(--mode data --subs "$DATA_SUBS" --rate "$DATA_RATE" --size "$DATA_SIZE"
        --interval "$DATA_INTERVAL" --duration "$DURATION" --warmup "$WARMUP")
    chanq_start "$SINGLE_DIR"
    local single_pid=$SPID
    for rep in $(seq 1 "$REPS"); do
        for t in $(rotate "$rep" relay single); do
            case "$t" in
            relay) bench data/relay --target chanq --ready-file "${NODE_DIR[1]}/ready" \
                --sub-addrs "$(clients 1 2 3)" --pid "$(relay_pids)" "${common[@]}" ;;
            single) bench data/single --target chanq --ready-file "$SINGLE_DIR/ready" \
                --pid "$single_pid" "${common[@]}" ;;
            esac
        done
    done
    chanq_stop "$single_pid"
}

part_loss() {
    local s rep line
    for s in $LOSS_SESSIONS; do
        for rep in $(seq 1 "$REPS"); do
            relay_start "loss$s-$rep" --zk-session-ms "$s"
            line=$("$RELAYLOSS" --label "loss/$s" --server "$(field "${NODE_DIR[1]}" server)" \
                --victims "$(clients 3)" --kill-pid "${NODE_PID[3]}" --move-to "$(clients 2)" \
                --survivors "$(clients 1 2)" --victims-n "$LOSS_VICTIMS" \
                --survivors-n "$LOSS_SURVIVORS" --rate "$LOSS_RATE" \
                --timeout $((s / 1000 + 30)) 2>>"$TMP/relayloss.err") ||
                log "relayloss failed (loss/$s): $(tail -3 "$TMP/relayloss.err")"
            printf '%s\n' "$line" | grep '^{' |
                sed "s/^{/{\"part_load\":\"$(load)\",\"session_ms\":$s,/" >>"$JSONL" || true
            printf '%s\n' "$line" | grep '^#' >&2 || true
            link_counts "loss/$s" 1 2
            relay_stop
        done
    done
}

T0=$(date +%s)
RELAY_UP=0
for part in $PARTS; do
    case "$part" in
    bcast | lat | data)
        if [ "$RELAY_UP" = 0 ]; then
            relay_start main
            RELAY_UP=1
        fi
        ;;
    loss)
        if [ "$RELAY_UP" = 1 ]; then
            link_counts main 1 2 3
            relay_stop
            RELAY_UP=0
        fi
        ;;
    *) log "unknown part $part"; exit 1 ;;
    esac
    log "part $part: load $(load)"
    part_env "$part" start
    case "$part" in
    bcast) part_bcast ;;
    lat) part_lat ;;
    data) part_data ;;
    loss) part_loss ;;
    esac
    part_env "$part" end
done
if [ "$RELAY_UP" = 1 ]; then
    link_counts main 1 2 3
    relay_stop
fi
log "wall time $(($(date +%s) - T0)) s; load $(load)"

# ---- summary (medians) ---------------------------------------------------------------------
# The smoke test under a sanitizer: a report in a chanqd's log fails it (the nodes' exit statuses
# are not seen: they are not jobs of this script).
SAN_RC=0
if [ "$SMOKE" = 1 ] && grep -l 'ERROR: AddressSanitizer\|ERROR: LeakSanitizer\|runtime error:' \
    "$TMP"/*/log "$TMP"/*/n*/log 2>/dev/null; then
    log "a sanitizer reported an error in the chanqd logs above:"
    grep -h -A20 'ERROR: AddressSanitizer\|ERROR: LeakSanitizer\|runtime error:' \
        "$TMP"/*/log "$TMP"/*/n*/log 2>/dev/null | head -60 >&2
    SAN_RC=1
fi
CQ_SMOKE=$SMOKE CQ_PARTS=$PARTS python3 - "$JSONL" <<'EOF'
import json, os, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
env = {r['label']: r for r in rows if r['label'].startswith('env/')}
links = [r for r in rows if r['label'].startswith('links/')]
runs = [r for r in rows if not r['label'].startswith(('env/', 'links/'))]
by = {}
for r in runs:
    by.setdefault(r['label'], []).append(r)

def ok(r):
    return r.get('error') is None

def med(label, fn):
    v = []
    for r in by.get(label, []):
        if not ok(r):
            continue
        x = fn(r) if callable(fn) else r.get(fn)
        if x is not None and x >= 0:
            v.append(x)
    return statistics.median(v) if v else None

def fmt(x, nd=0):
    return '-' if x is None else f'{x:,.{nd}f}'

def ratio(a, b):
    return None if a is None or not b else a / b

def loads(part):
    s, e = env.get(f'env/{part}/start'), env.get(f'env/{part}/end')
    return f'load {s["load"] if s else "?"} -> {e["load"] if e else "?"}'

errors = [r for r in runs if not ok(r)]
n = lambda label: sum(1 for r in by.get(label, []) if ok(r))
print(f'\nruns: {len(runs)}, errors: {len(errors)}')
for r in errors:
    print(f'  ERROR {r["label"]}: {r["error"]}')

if any(k.startswith('bcast/') for k in by):
    subs = next(r['subs'] for r in runs if r['label'].startswith('bcast/'))
    print(f'\n### bcast: closed loop, 1 -> {subs} x 64 B ({loads("bcast")}; median of '
          f'{max(n(k) for k in by if k.startswith("bcast/"))})\n')
    print('| target | deliveries/s | server cores | deliveries / server CPU-s | server CPU-s by process '
          '| client CPU-s | missing | vs single | vs nats3 |')
    print('|---|---:|---:|---:|---|---:|---:|---:|---:|')
    single = med('bcast/single', 'deliveries_per_server_cpu_s')
    nats3 = med('bcast/nats3', 'deliveries_per_server_cpu_s')
    for t in ('relay', 'single', 'relay-local', 'nats3'):
        L = f'bcast/{t}'
        if L not in by:
            continue
        d = med(L, 'deliveries_per_server_cpu_s')
        k = max(len(r.get('server_cpu_each_s', [])) for r in by[L])
        each = ' / '.join(fmt(med(L, lambda r, i=i: r['server_cpu_each_s'][i]
                                  if len(r.get('server_cpu_each_s', [])) > i else None), 2)
                          for i in range(k))
        print(f'| {t} | {fmt(med(L, "deliveries_per_s"))} | {fmt(med(L, "server_cores"), 2)} '
              f'| {fmt(d)} | {each} | {fmt(med(L, "client_cpu_s"), 2)} | {fmt(med(L, "missing"))} '
              f'| {fmt(ratio(d, single), 2)}x | {fmt(ratio(d, nats3), 2)}x |')
    rs = ratio(med('bcast/relay', 'deliveries_per_server_cpu_s'), single)
    rn = ratio(med('bcast/relay', 'deliveries_per_server_cpu_s'), nats3)
    print(f'\nServer CPU-s by process: relay targets chanqd node 1 / 2 / 3 / nats-server; nats3 '
          f'server 1 / 2 / 3. Targets: relay >= 0.7x single: {fmt(rs, 2)}x; relay >= 3x nats3: '
          f'{fmt(rn, 2)}x.')

if any(k.startswith('lat/') for k in by):
    r0 = next(r for r in runs if r['label'].startswith('lat/'))
    print(f'\n### lat: {r0["rate"]:.0f} msg/s to {r0["subs"]} subscribers, 64 B, publisher on node 1 '
          f'({loads("lat")}; median of {max(n(k) for k in by if k.startswith("lat/"))})\n')
    print('| run | subscribers | kernel-rx p50 us | kernel-rx p99 us | app p50 us | app p99 us '
          '| server cores | run-queue wait server / client | missing |')
    print('|---|---|---:|---:|---:|---:|---:|---:|---:|')
    def rq(key):  # run-queue wait per second of the window
        return lambda r: r[key] / r['duration_s'] if r.get(key, -1) >= 0 and r['duration_s'] > 0 else None
    def grp(i, key):  # one address's figure of a mixed run
        return lambda r: r['lat_by_sub_addr'][i][key] if len(r.get('lat_by_sub_addr', [])) > i else None
    rows_ = [('mixed', 'half on node 1 (the publisher\'s)', 0), ('mixed', 'half on node 2 (one NATS hop)', 1),
             ('remote', 'all on node 2', None), ('single', 'one chanqd, no relay', None)]
    for t, what, g in rows_:
        L = f'lat/{t}'
        if L not in by:
            continue
        f = (lambda k: grp(g, k)) if g is not None else (lambda k: k)
        print(f'| {t} | {what} | {fmt(med(L, f("kp50_us")), 1)} | {fmt(med(L, f("kp99_us")), 1)} '
              f'| {fmt(med(L, f("p50_us")), 1)} | {fmt(med(L, f("p99_us")), 1)} '
              f'| {fmt(med(L, "server_cores"), 3)} | {fmt(med(L, rq("server_runq_wait_s")), 2)} / '
              f'{fmt(med(L, rq("client_runq_wait_s")), 2)} | {fmt(med(L, "missing"))} |')
    print('\nRun-queue wait: seconds the processes\' threads were runnable but not running, per '
          'second of the window (summed over the server processes).')
    hop = {}
    for key in ('kp50_us', 'kp99_us', 'p50_us', 'p99_us'):
        v = [r['lat_by_sub_addr'][1][key] - r['lat_by_sub_addr'][0][key] for r in by.get('lat/mixed', [])
             if ok(r) and len(r.get('lat_by_sub_addr', [])) > 1]
        hop[key] = statistics.median(v) if v else None
        hop[key + '_all'] = ', '.join(fmt(x, 1) for x in v)
    print(f'\nThe hop (mixed run, node 2\'s half - node 1\'s half, per run, median): kernel-rx p50 '
          f'{fmt(hop["kp50_us"], 1)} us, kernel-rx p99 {fmt(hop["kp99_us"], 1)} us (runs: {hop["kp99_us_all"]}), '
          f'app p50 {fmt(hop["p50_us"], 1)} us, app p99 {fmt(hop["p99_us"], 1)} us (runs: {hop["p99_us_all"]}). '
          f'Target: p99 hop <= 1000 us.')

if any(k.startswith('data/') for k in by):
    r0 = next(r for r in runs if r['label'].startswith('data/'))
    print(f'\n### data: owner on node 1, {r0["rate"]:.0f} updates/s of {r0["size"]} B, {r0["subs"]} '
          f'subscribers at fanOutIntervalMs {r0["interval_ms"]} ({loads("data")}; median of '
          f'{max(n(k) for k in by if k.startswith("data/"))})\n')
    print('| target | fan-outs/s | of ideal | server cores | fan-outs / server CPU-s | kernel-rx p50 ms '
          '| kernel-rx p99 ms | stale | bad |')
    print('|---|---:|---:|---:|---:|---:|---:|---:|---:|')
    for t in ('relay', 'single'):
        L = f'data/{t}'
        if L not in by:
            continue
        oi = med(L, 'of_ideal')
        kp50, kp99 = med(L, 'kp50_us'), med(L, 'kp99_us')
        print(f'| {t} | {fmt(med(L, "deliveries_per_s"))} | {fmt(None if oi is None else 100 * oi, 1)} % '
              f'| {fmt(med(L, "server_cores"), 3)} | {fmt(med(L, "deliveries_per_server_cpu_s"))} '
              f'| {fmt(None if kp50 is None else kp50 / 1000, 1)} | {fmt(None if kp99 is None else kp99 / 1000, 1)} '
              f'| {sum(r["stale"] for r in by[L])} | {sum(r["bad"] for r in by[L])} |')
    print('\nrelay: subscribers spread over nodes 1-3 in turn; server = chanqd x3 + nats-server. '
          'Target: 100 % of ideal.')

loss = sorted({k for k in by if k.startswith('loss/')}, key=lambda k: int(k[5:]))
if loss:
    r0 = by[loss[0]][0]
    print(f'\n### loss: node 3 SIGKILLed, {r0["victims"]} clients on it, {r0["survivors"]} on nodes 1-2, '
          f'{r0["rate"]:.0f} broadcasts/s from the owner on node 1 ({loads("loss")}; median of '
          f'{max(n(k) for k in loss)})\n')
    print('| --zk-session-ms | UNSUBs at the owner: first ms | last ms (detected) | target ms '
          '| moved client receiving again ms (median / max) | survivors: longest gap ms | survivors: lost |')
    print('|---:|---:|---:|---:|---:|---:|---:|')
    for L in loss:
        s = int(L[5:])
        print(f'| {s} | {fmt(med(L, "detect_first_ms"))} | {fmt(med(L, "detect_ms"))} | {s + 1000} '
              f'| {fmt(med(L, "moved_p50_ms"))} / {fmt(med(L, "moved_ms"))} '
              f'| {fmt(med(L, "survivor_max_gap_ms"), 1)} | {fmt(med(L, "survivor_lost"))} |')
        print(f'|  | all runs: {", ".join(fmt(r["detect_ms"]) for r in by[L])} |  |  |  |'
              f' {", ".join(fmt(r["survivor_max_gap_ms"], 1) for r in by[L])} |  |')

if links:
    tot = {}
    for r in links:
        for k, v in r.items():
            if k != 'label':
                tot[k] = tot.get(k, 0) + v
    print('\nThe links (summed over the nodes, the main relay and every loss run\'s survivors): '
          + ', '.join(f'{k[len("chanq_relay_"):]} {v}' for k, v in tot.items()))
print(f'\nraw results: {sys.argv[1]}')
# the smoke test: every run ended without an error, and every part ran
missing = [p for p in os.environ.get('CQ_PARTS', '').split() if not any(k.startswith(p + '/') for k in by)]
if missing:
    print(f'no run of: {" ".join(missing)}')
sys.exit(1 if (errors or missing) and os.environ.get('CQ_SMOKE') == '1' else 0)
EOF
exit $SAN_RC
