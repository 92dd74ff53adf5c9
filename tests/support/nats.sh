#!/bin/bash
# tests/support/nats.sh - throwaway nats-server processes for tests, without systemd
# (cluster-recipes.md section 5). Core NATS only: no JetStream.
#
#   nats.sh start DIR [N]   creates DIR (must not exist or be empty), writes N configs (default
#                           1: a standalone server; N > 1: a cluster, every server routing to
#                           the others) with free loopback ports (30000-32767), starts the
#                           servers, waits until each answers 200 on /healthz and, for a
#                           cluster, until every server has N-1 routes, and prints the client
#                           URLs "nats://127.0.0.1:P1,...,nats://127.0.0.1:PN" (server i = the
#                           i-th entry).
#   nats.sh urls DIR        prints those URLs again.
#   nats.sh url DIR I       prints server I's client URL (I is 1-based).
#   nats.sh monitor DIR I   prints server I's monitoring port (/healthz, /varz, /routez...).
#   nats.sh pid DIR I       prints server I's PID (the last one started).
#   nats.sh kill DIR I      SIGKILLs server I and waits until it is gone.
#   nats.sh restart DIR I   starts server I again with the same config and ports, and waits as
#                           start does (healthy; every running server routed to every other).
#   nats.sh stop DIR        stops every server by its PID (SIGTERM, SIGKILL after 20 s, SIGCONT
#                           first in case it is frozen), waits for them to exit and removes DIR.
#                           Does nothing when DIR does not exist.
#
# Environment: NATS_USER and NATS_PASS, or NATS_TOKEN, at start: an authorization block in the
# configs (clients then need those credentials; /healthz and the routes do not). Letters,
# digits and ._~+/=@%:- only. NATS_SERVER: the program to run (default: nats-server on PATH or
# in /usr/sbin, where Debian installs it).
# Layout: DIR/nI/{nats.conf,out.log,pid,client_port,monitor_port,cluster_port}.
#
# A route forms before the subscriptions it carries: a client that subscribes on one server
# and publishes on another right away may lose the first messages. Tests wait for the
# subscription to reach the other servers (a probe message) before they count anything.
#
# The servers stay in the caller's process group (no setsid), so a test runner that kills a
# timed-out test's group kills them too.
# Exit status: 0 on success; 2 when nats-server is not installed (the caller skips); 1 on
# failure (details and the log tail on stderr, logs in DIR/nI/out.log); 64 on bad usage.
# Waits are bounded (60 s). Only the processes this script started (PIDs in DIR/nI/pid, and
# only while their command line names DIR's config) are ever signalled.
set -eu

usage() {
    echo "usage: $0 start DIR [N] | urls|stop DIR | url|monitor|pid|kill|restart DIR I" >&2
    exit 64
}

[ $# -ge 2 ] || usage
cmd=$1
DIR=$2
ARG=${3:-}

WAIT_S=60
STOP_S=20
MARK=.nats.sh # start writes it; stop removes only a DIR that has it
# One spelling of DIR, the one in the servers' command lines (ours matches on it).
[ ! -d "$DIR" ] || DIR=$(cd "$DIR" && pwd -P)

die() {
    echo "nats.sh: $*" >&2
    exit 1
}

find_server() {
    local d
    NATS=${NATS_SERVER:-}
    if [ -z "$NATS" ]; then
        NATS=$(command -v nats-server 2>/dev/null) || true
        for d in /usr/sbin /usr/local/sbin /usr/bin /usr/local/bin; do
            [ -n "$NATS" ] || [ ! -x "$d/nats-server" ] || NATS=$d/nats-server
        done
    fi
    if [ -z "$NATS" ] || [ ! -x "$NATS" ]; then
        echo "nats.sh: nats-server not found (apt-get install nats-server, or scripts/deps.sh test)" >&2
        exit 2
    fi
}

# Ports in 30000-32767 that nothing listens on now: other users of the machine take 24xxx and
# 25xxx, mariadb-pair.sh 22000-23999, zk.sh and scripts/cluster.sh 26000-29999, and the
# kernel's ephemeral range starts above 32767.
free_ports() { python3 "$(dirname "$0")/free-ports.py" 30000 32767 "$1"; }

node_dir() { echo "$DIR/n$1"; }
count() { cat "$DIR/nodes" 2>/dev/null || echo 0; }
client_port() { cat "$DIR/n$1/client_port"; }
monitor_port() { cat "$DIR/n$1/monitor_port"; }

# True while server I's process exists and is not a zombie (an orphan's new parent may never
# reap it). Right after the fork the command line is still the shell's: see ours.
running() {
    local p st
    p=$(cat "$DIR/n$1/pid" 2>/dev/null) || return 1
    st=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$p/status" 2>/dev/null) || return 1
    [ -n "$st" ] && [ "$st" != Z ]
}

# running, and still the nats-server of DIR's config: a recycled PID is never signalled.
ours() {
    running "$1" || return 1
    tr '\0' '\n' <"/proc/$(cat "$DIR/n$1/pid")/cmdline" 2>/dev/null | grep -qxF "$DIR/n$1/nats.conf"
}

signal_node() { # signal_node I SIG
    ours "$1" || return 0
    kill "-$2" "$(cat "$DIR/n$1/pid")" 2>/dev/null || true
}

# http_get PORT PATH: the monitoring endpoint's whole response (status line first), over
# bash's /dev/tcp so that no HTTP client is needed; nothing when the port refuses.
http_get() {
    (
        exec 3<>"/dev/tcp/127.0.0.1/$1"
        printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" >&3
        timeout 5 cat <&3
    ) 2>/dev/null || true
}

healthy() { http_get "$(monitor_port "$1")" /healthz | head -n 1 | grep -q '^HTTP/1\.[01] 200'; }

routes() { http_get "$(monitor_port "$1")" /routez | sed -n 's/.*"num_routes": *\([0-9]*\).*/\1/p'; }

# Every running server routes to every other running one (a standalone server: nothing to do).
routed() {
    local i up=0
    [ "$(count)" -gt 1 ] || return 0
    for i in $(seq 1 "$(count)"); do running "$i" && up=$((up + 1)); done
    for i in $(seq 1 "$(count)"); do
        running "$i" || continue
        [ "$(routes "$i")" = $((up - 1)) ] || return 1
    done
}

log_tail() {
    echo "--- $DIR/n$1/out.log (last 15 lines):" >&2
    tail -n 15 "$DIR/n$1/out.log" >&2 2>/dev/null || true
}

# wait_ready I...: 0 when every server I serves (and the running ones are routed); 1 when one
# died (its log says why); 3 when the bound passed.
wait_ready() {
    local i end=$((SECONDS + WAIT_S))
    for i in "$@"; do
        until healthy "$i"; do
            running "$i" || return 1
            [ $SECONDS -lt $end ] || return 3
            sleep 0.05
        done
    done
    until routed; do
        [ $SECONDS -lt $end ] || return 3
        sleep 0.05
    done
}

cred_ok() { [ -z "$1" ] || printf '%s' "$1" | grep -qx '[A-Za-z0-9._~+/=@%:-]*'; }

auth_block() {
    local user=${NATS_USER:-} pass=${NATS_PASS:-} token=${NATS_TOKEN:-}
    if ! cred_ok "$user" || ! cred_ok "$pass" || ! cred_ok "$token"; then
        die "NATS_USER, NATS_PASS and NATS_TOKEN take letters, digits and ._~+/=@%:- only"
    fi
    if [ -n "$token" ]; then
        [ -z "$user$pass" ] || die "NATS_TOKEN excludes NATS_USER / NATS_PASS"
        echo "authorization { token: \"$token\" }"
    elif [ -n "$user$pass" ]; then
        [ -n "$user" ] || die "NATS_PASS needs NATS_USER"
        [ -n "$pass" ] || die "NATS_USER needs NATS_PASS"
        echo "authorization { user: \"$user\", password: \"$pass\" }"
    fi
}

# write_configs N: fresh ports for all N servers (a retried start takes new ones everywhere,
# since every config names every route port).
write_configs() {
    local n=$1 i j d routes auth ports
    auth=$(auth_block)
    ports=$(free_ports $((3 * n))) || die "no free ports"
    # shellcheck disable=SC2086
    set -- $ports
    for i in $(seq 1 "$n"); do
        d=$(node_dir "$i")
        mkdir -p "$d"
        echo "$1" >"$d/client_port"
        echo "$2" >"$d/monitor_port"
        echo "$3" >"$d/cluster_port"
        shift 3
    done
    for i in $(seq 1 "$n"); do
        d=$(node_dir "$i")
        cat >"$d/nats.conf" <<CFG
server_name: n$i
listen: 127.0.0.1:$(client_port "$i")
http: 127.0.0.1:$(monitor_port "$i")
$auth
CFG
        [ "$n" -gt 1 ] || continue
        routes=
        for j in $(seq 1 "$n"); do
            [ "$j" = "$i" ] || routes="$routes${routes:+, }nats://127.0.0.1:$(cat "$DIR/n$j/cluster_port")"
        done
        cat >>"$d/nats.conf" <<CFG
cluster {
  name: cq
  listen: 127.0.0.1:$(cat "$d/cluster_port")
  routes: [ $routes ]
}
CFG
    done
}

launch() {
    local d
    d=$(node_dir "$1")
    "$NATS" -c "$d/nats.conf" >>"$d/out.log" 2>&1 </dev/null &
    echo $! >"$d/pid"
}

urls() {
    local i out=""
    for i in $(seq 1 "$(count)"); do
        out="$out${out:+,}nats://127.0.0.1:$(client_port "$i")"
    done
    echo "$out"
}

# wait_gone I BOUND_S: 0 once server I has exited, 1 if it still runs after BOUND_S.
wait_gone() {
    local end=$((SECONDS + $2))
    while ours "$1"; do
        [ $SECONDS -lt $end ] || return 1
        sleep 0.05
    done
}

stop_all() {
    local i
    for i in $(seq 1 "$(count)"); do
        signal_node "$i" CONT
        signal_node "$i" TERM
    done
    for i in $(seq 1 "$(count)"); do
        wait_gone "$i" "$STOP_S" || {
            signal_node "$i" KILL
            wait_gone "$i" 5 || echo "nats.sh: server $i (pid $(cat "$DIR/n$i/pid")) survived SIGKILL" >&2
        }
    done
}

start() {
    local n=${ARG:-1} attempt i rc
    case "$n" in [1-9]) ;; *) die "N must be 1..9" ;; esac
    find_server
    mkdir -p "$DIR"
    DIR=$(cd "$DIR" && pwd -P)
    [ -z "$(ls -A "$DIR")" ] || die "$DIR is not empty"
    touch "$DIR/$MARK"
    echo "$n" >"$DIR/nodes"
    echo "$NATS" >"$DIR/server"
    # A port is free only when free-ports.py looks: a server that lost one to another process
    # exits at once ("address already in use"), and the whole start is retried on new ports.
    for attempt in 1 2 3; do
        write_configs "$n"
        for i in $(seq 1 "$n"); do launch "$i"; done
        rc=0
        wait_ready $(seq 1 "$n") || rc=$?
        [ $rc -ne 0 ] || {
            urls
            return 0
        }
        stop_all
        if [ $rc -ne 1 ] || [ $attempt -eq 3 ] || ! grep -qs 'address already in use' "$DIR"/n*/out.log; then
            break
        fi
        for i in $(seq 1 "$n"); do mv "$DIR/n$i/out.log" "$DIR/n$i/out.log.$attempt"; done
    done
    for i in $(seq 1 "$n"); do log_tail "$i"; done
    [ $rc -ne 1 ] || die "a server exited during start"
    die "not ready after ${WAIT_S} s"
}

restart() {
    local rc=0
    NATS=$(cat "$DIR/server")
    ours "$ARG" && die "server $ARG is already running"
    launch "$ARG"
    wait_ready "$ARG" || rc=$?
    [ $rc -eq 0 ] && return 0
    log_tail "$ARG"
    [ $rc -ne 1 ] || die "server $ARG exited"
    die "server $ARG not ready after ${WAIT_S} s"
}

# The commands on one server: I must be one of DIR's.
check_node() {
    [ -f "$DIR/$MARK" ] || die "$DIR was not made by nats.sh start"
    case "$ARG" in '' | *[!0-9]*) usage ;; esac
    [ "$ARG" -ge 1 ] || die "no server $ARG in $DIR"
    [ "$ARG" -le "$(count)" ] || die "no server $ARG in $DIR"
}

case "$cmd" in
start) start ;;
urls)
    [ -f "$DIR/$MARK" ] || die "$DIR was not made by nats.sh start"
    urls
    ;;
url)
    check_node
    echo "nats://127.0.0.1:$(client_port "$ARG")"
    ;;
monitor)
    check_node
    monitor_port "$ARG"
    ;;
pid)
    check_node
    cat "$DIR/n$ARG/pid"
    ;;
kill)
    check_node
    signal_node "$ARG" CONT
    signal_node "$ARG" KILL
    wait_gone "$ARG" "$WAIT_S" || die "server $ARG still runs after SIGKILL"
    ;;
restart)
    check_node
    restart
    ;;
stop)
    [ -e "$DIR" ] || exit 0
    [ -f "$DIR/$MARK" ] || die "$DIR was not made by nats.sh start: not removed"
    stop_all
    rm -rf "$DIR"
    ;;
*) usage ;;
esac
