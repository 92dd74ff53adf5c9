#!/usr/bin/env bash
# scripts/cluster.sh - a whole local chanq cluster on loopback, in one command (doc/cluster.md).
#
#   scripts/cluster.sh start DIR    DIR must not exist or be empty. Starts, all on 127.0.0.1:
#       - a 3-node ZooKeeper ensemble (tests/support/zk.sh, DIR/zk);
#       - SHARDS shards (default 2), each: a MariaDB pair (tests/support/mariadb-pair.sh,
#         DIR/shardS/db: GTID, semi-sync AFTER_SYNC primary + read-only standby, store user
#         chanq/chanqpw, admin cqadmin/cqadminpw, replication repl/replpw), then chanqd node 1
#         on the primary and, once node 1 is ready (so it joins ZooKeeper first and is the
#         shard's first master), chanqd node 2 on the standby (DIR/shardS/nodeN);
#       - a relay of RELAY_NODES chanqd nodes (default 3; doc/relay-cluster.md) over a 3-server
#         NATS cluster (tests/support/nats.sh, DIR/nats) and the ZooKeeper above: node N
#         (DIR/relayN) is `--relay-node-id N`, a channel node (its MQ port, on a SQLite store
#         of its own, is there for its reports to the managers CHANQD_ARGS names: no shard's),
#         started in order (node 1 claims GLOBAL's home), and start waits until every node has
#         heard every other (chanq_relay_peers_up = RELAY_NODES - 1);
#       and prints "zk=HOSTS", "nats=URLS", per shard chanqd "shard=S node=N mq=H:P admin=H:P
#       pid=PID", and per relay node "relay node=N client=H:P server=H:P ws=H:P kcp=H:P
#       mq=H:P admin=H:P pid=PID". Ports are free ones in 26000-29999 (NATS: 30000-32767; none in
#       24xxx/25xxx). On any failure everything started so far is stopped again.
#   scripts/cluster.sh stop DIR     stops the relay nodes, then NATS, then every shard chanqd,
#       then every MariaDB, then ZooKeeper, each by the PID this script (or the fixture scripts)
#       recorded, and removes DIR.
#   scripts/cluster.sh status DIR   one line per service: name, port(s), pid, up/down, role
#       (ZooKeeper: leader/follower; MariaDB: rw/ro, semi-sync and replica state; chanqd: its
#       role from /metrics, else from its shard's members in ZooKeeper; NATS: its routes; a
#       relay node: members, peers_up, nats_connected and, when it reports to managers,
#       mgr_connected from /metrics), and per relay node one
#       line per peer: its link's packets out and in, gaps and resets.
#
# Environment: CHANQD (default build/src/main/chanqd, built with meson/ninja when missing),
#   SHARDS [2], ZK_ROOT [/chanq], ZK_SESSION_MS [4000], DB_DOWN_MS [5000],
#   SEMI_TIMEOUT_MS [2000], LOG_LEVEL [info], CLUSTER_OPTS [1] (0: start chanqd without the
#   cluster options, i.e. two standalone chanqd per shard, both on the primary, since a
#   standalone chanqd cannot open a read-only store - for checking the other services),
#   CHANQD_ARGS [""] (more options for every chanqd, split on blanks: e.g. the managers to
#   report to, "--mgr-servers 127.0.0.1:12120 --mgr-token-file F"), RELAY_NODES [3] (0..15;
#   0: no NATS and no relay node, the cluster as before them), RELAY_CLUSTER [local] (the
#   relay's name, --relay-cluster).
# Only processes this script (or zk.sh / mariadb-pair.sh / nats.sh) started are ever signalled.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ZKSH="$ROOT/tests/support/zk.sh"
PAIR="$ROOT/tests/support/mariadb-pair.sh"
NATSSH="$ROOT/tests/support/nats.sh"
SHARDS=${SHARDS:-2}
ZK_ROOT=${ZK_ROOT:-/chanq}
ZK_SESSION_MS=${ZK_SESSION_MS:-4000}
DB_DOWN_MS=${DB_DOWN_MS:-5000}
SEMI_TIMEOUT_MS=${SEMI_TIMEOUT_MS:-2000}
LOG_LEVEL=${LOG_LEVEL:-info}
CLUSTER_OPTS=${CLUSTER_OPTS:-1}
CHANQD_ARGS=${CHANQD_ARGS:-}
RELAY_NODES=${RELAY_NODES:-3}
RELAY_CLUSTER=${RELAY_CLUSTER:-local}

usage() {
    echo "usage: $0 start|stop|status DIR" >&2
    exit 64
}
[ $# -eq 2 ] || usage
cmd=$1
DIR=$2

log() { printf '[cluster.sh] %s\n' "$*" >&2; }
die() {
    log "$*"
    exit 1
}

# ---- the chanqd command line: the one place to adjust ------------------------------------------
# chanqd_cmd S N: sets CMD to the command line of chanqd node N (1|2) of shard S. Node 1 stores
# in the pair's primary, node 2 in its standby; the ports were chosen by start (DIR/shardS/nodeN/
# *_port) and DB_PORT is that node's MariaDB.
chanqd_cmd() {
    local s=$1 n=$2 d="$DIR/shard$1/node$2"
    local mq admin client server
    mq=$(cat "$d/mq_port")
    admin=$(cat "$d/admin_port")
    client=$(cat "$d/client_port")
    server=$(cat "$d/server_port")
    CMD=("$CHANQD" --client-addr "127.0.0.1:$client" --server-addr "127.0.0.1:$server"
        --admin-addr "127.0.0.1:$admin" --mq-addr "127.0.0.1:$mq" --mq-http-addr ''
        --ws-addr '' --kcp-addr '' --ready-file "$d/ready" --log-level "$LOG_LEVEL"
        --store-backend mysql --mysql-host 127.0.0.1 --mysql-port "$DB_PORT"
        --mysql-user chanq --mysql-password chanqpw --mysql-database chanq)
    if [ "$CLUSTER_OPTS" = 1 ]; then
        CMD+=(--shard "$s" --zk-hosts "$(cat "$DIR/zk_hosts")" --zk-root "$ZK_ROOT"
            --zk-session-ms "$ZK_SESSION_MS" --cluster-advertise "127.0.0.1:$mq"
            --cluster-promote --cluster-db-down-ms "$DB_DOWN_MS"
            --repl-admin-user cqadmin --repl-admin-password cqadminpw
            --repl-user repl --repl-password replpw
            --repl-semi-sync-timeout-ms "$SEMI_TIMEOUT_MS" --repl-semi-sync-wait-no-slave)
    fi
    # shellcheck disable=SC2206 # CHANQD_ARGS is a word list on purpose
    [ -z "$CHANQD_ARGS" ] || CMD+=($CHANQD_ARGS)
}

# relay_cmd N: sets CMD to the command line of relay node N, a channel node of the relay
# RELAY_CLUSTER over the cluster's NATS servers and ZooKeeper (ports in DIR/relayN); its MQ
# port carries its reports to managers (doc/relay-cluster.md "Operations").
relay_cmd() {
    local n=$1 d="$DIR/relay$1"
    CMD=("$CHANQD" --client-addr "127.0.0.1:$(cat "$d/client_port")"
        --server-addr "127.0.0.1:$(cat "$d/server_port")"
        --ws-addr "127.0.0.1:$(cat "$d/ws_port")" --kcp-addr "127.0.0.1:$(cat "$d/kcp_port")"
        --admin-addr "127.0.0.1:$(cat "$d/admin_port")" --mq-addr "127.0.0.1:$(cat "$d/mq_port")"
        --mq-http-addr '' --store-dir "$d/data" --ready-file "$d/ready" --log-level "$LOG_LEVEL"
        --relay-nats "$(cat "$DIR/nats_urls")" --relay-zk-hosts "$(cat "$DIR/zk_hosts")"
        --zk-root "$ZK_ROOT" --zk-session-ms "$ZK_SESSION_MS"
        --relay-cluster "$RELAY_CLUSTER" --relay-node-id "$n")
    # shellcheck disable=SC2206 # CHANQD_ARGS is a word list on purpose
    [ -z "$CHANQD_ARGS" ] || CMD+=($CHANQD_ARGS)
}

# ---- helpers -----------------------------------------------------------------------------------
# free_ports N: N distinct ports in 26000-29999 that nothing listens on and that this cluster
# has not taken (one python run: it takes a second on a loaded machine).
free_ports() {
    local taken
    taken=$(cat "$DIR"/zk/zk*/*port* "$DIR"/shard*/db/*/port "$DIR"/shard*/node*/*_port \
        "$DIR"/relay*/*_port 2>/dev/null | tr -s ' \n' ' ' || true)
    # shellcheck disable=SC2086 # taken is a list of numbers
    python3 "$ROOT/tests/support/free-ports.py" 26000 29999 "$1" $taken
}

# True while pid runs (a zombie counts as gone).
alive() {
    [ -n "$1" ] && kill -0 "$1" 2>/dev/null || return 1
    [ "$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null)" != Z ]
}

stop_pid() { # SIGCONT (it may be frozen), SIGTERM, SIGKILL after 20 s; waits until it is gone
    local pid=$1 i=0
    kill -CONT "$pid" 2>/dev/null || true
    kill -TERM "$pid" 2>/dev/null || return 0
    while alive "$pid" && [ $i -lt 500 ]; do
        [ $i -eq 400 ] && kill -KILL "$pid" 2>/dev/null
        sleep 0.05
        i=$((i + 1))
    done
}

find_chanqd() {
    if [ -z "${CHANQD:-}" ]; then
        CHANQD="$ROOT/build/src/main/chanqd"
        if [ ! -x "$CHANQD" ]; then
            [ -f "$ROOT/build/build.ninja" ] ||
                meson setup "$ROOT/build" "$ROOT" -Dtests=disabled >/dev/null
            ninja -C "$ROOT/build" src/main/chanqd >/dev/null
        fi
    fi
    [ -x "$CHANQD" ] || die "no chanqd at $CHANQD"
}

# take_ports D NAME...: one free port per NAME, written to D/NAME_port (D is created).
take_ports() {
    local d=$1 p ports
    shift
    mkdir -p "$d"
    read -ra ports <<<"$(free_ports $#)"
    [ ${#ports[@]} = $# ] || die "no free ports"
    for p in "$@"; do
        echo "${ports[0]}" >"$d/${p}_port"
        ports=("${ports[@]:1}")
    done
}

# launch D WHAT: runs CMD (setsid, own process group; log, pid and cmdline in D) and waits for
# its ready file.
launch() {
    local d=$1 i
    printf '%q ' "${CMD[@]}" >"$d/cmdline"
    setsid "${CMD[@]}" >"$d/log" 2>&1 </dev/null &
    echo $! >"$d/pid"
    for i in $(seq 1 600); do # 30 s
        [ -s "$d/ready" ] && return 0
        alive "$(cat "$d/pid")" || break
        sleep 0.05
    done
    die "$2 did not start; $d/log: $(tail -n 5 "$d/log")"
}

# start_chanqd S N: launches it and waits for its ready file.
start_chanqd() {
    local s=$1 n=$2
    take_ports "$DIR/shard$s/node$n" mq admin client server
    read -r DB_PORT DB_STANDBY_PORT <"$DIR/shard$s/db.ports"
    # (a standalone chanqd, CLUSTER_OPTS=0, cannot open a read-only store: both on the primary)
    [ "$n" = 1 ] || [ "$CLUSTER_OPTS" != 1 ] || DB_PORT=$DB_STANDBY_PORT
    chanqd_cmd "$s" "$n"
    launch "$DIR/shard$s/node$n" "chanqd shard $s node $n"
}

# start_relay N: launches relay node N and waits for its ready file (written once the node
# knows GLOBAL's home).
start_relay() {
    take_ports "$DIR/relay$1" client server ws kcp mq admin
    relay_cmd "$1"
    launch "$DIR/relay$1" "relay node $1"
}

# metric PORT NAME: the value of the line "NAME VALUE" of the /metrics on admin port PORT
# (nothing when it is down or has no such line).
metric() {
    curl -s --max-time 2 "http://127.0.0.1:$1/metrics" 2>/dev/null |
        awk -v n="$2" '$1 == n { print $2 }' || true
}

# wait_relay: until every relay node has heard every other over NATS (60 s at most).
wait_relay() {
    local n end=$((SECONDS + 60))
    for n in $(seq 1 "$RELAY_NODES"); do
        until [ "$(metric "$(cat "$DIR/relay$n/admin_port")" chanq_relay_peers_up)" = \
            $((RELAY_NODES - 1)) ]; do
            alive "$(cat "$DIR/relay$n/pid")" ||
                die "relay node $n exited; $DIR/relay$n/log: $(tail -n 5 "$DIR/relay$n/log")"
            [ $SECONDS -lt $end ] || die "relay node $n: chanq_relay_peers_up is" \
                "'$(metric "$(cat "$DIR/relay$n/admin_port")" chanq_relay_peers_up)'" \
                "after 60 s, not $((RELAY_NODES - 1))"
            sleep 0.1
        done
    done
}

# hostport D NAME: 127.0.0.1:<D/NAME_port>
hostport() { echo "127.0.0.1:$(cat "$1/$2_port")"; }

# ---- start / stop / status ---------------------------------------------------------------------
start() {
    [ ! -e "$DIR" ] || [ -z "$(ls -A "$DIR")" ] || die "$DIR exists and is not empty"
    case "$RELAY_NODES" in [0-9] | 1[0-5]) ;; *) die "RELAY_NODES must be 0..15" ;; esac
    mkdir -p "$DIR"
    DIR=$(cd "$DIR" && pwd)
    find_chanqd
    echo "$SHARDS" >"$DIR/shards"
    # whatever fails from here on (die, or set -e), everything started so far is stopped
    trap 'rc=$?; [ $rc = 0 ] || { log "start failed: stopping what was started"; stop; }' EXIT
    local rc=0 s n zkjob natsjob=
    local -a dbjob
    # ZooKeeper, NATS and the MariaDB pairs start side by side (each takes seconds); all are
    # waited for before any failure is acted on, so no start is still running when stop runs.
    "$ZKSH" start "$DIR/zk" >"$DIR/zk_hosts" 2>"$DIR/zk_start.err" &
    zkjob=$!
    if [ "$RELAY_NODES" -gt 0 ]; then
        "$NATSSH" start "$DIR/nats" 3 >"$DIR/nats_urls" 2>"$DIR/nats_start.err" &
        natsjob=$!
    fi
    for s in $(seq 1 "$SHARDS"); do
        mkdir -p "$DIR/shard$s"
        MARIADB_PAIR_SEMI_TIMEOUT_MS=$SEMI_TIMEOUT_MS "$PAIR" start "$DIR/shard$s/db" \
            >"$DIR/shard$s/db.ports" 2>"$DIR/shard$s/db_start.err" &
        dbjob[s]=$!
    done
    wait "$zkjob" || rc=$?
    [ -z "$natsjob" ] || wait "$natsjob" || {
        [ $? != 2 ] || die "nats-server is not installed (scripts/deps.sh test), or RELAY_NODES=0"
        die "NATS did not start: $(cat "$DIR/nats_start.err")"
    }
    for s in $(seq 1 "$SHARDS"); do
        wait "${dbjob[$s]}" || { rc=$?; log "MariaDB pair $s: $(cat "$DIR/shard$s/db_start.err")"; }
    done
    [ -s "$DIR/zk_hosts" ] || die "ZooKeeper did not start: $(cat "$DIR/zk_start.err")"
    [ "$rc" = 0 ] || die "a MariaDB pair did not start"
    echo "zk=$(cat "$DIR/zk_hosts")"
    [ "$RELAY_NODES" = 0 ] || echo "nats=$(cat "$DIR/nats_urls")"
    for s in $(seq 1 "$SHARDS"); do
        echo "shard=$s db_primary=127.0.0.1:$(cut -d' ' -f1 "$DIR/shard$s/db.ports")" \
            "db_standby=127.0.0.1:$(cut -d' ' -f2 "$DIR/shard$s/db.ports")"
    done
    for s in $(seq 1 "$SHARDS"); do
        for n in 1 2; do
            start_chanqd "$s" "$n"
            echo "shard=$s node=$n mq=127.0.0.1:$(cat "$DIR/shard$s/node$n/mq_port")" \
                "admin=127.0.0.1:$(cat "$DIR/shard$s/node$n/admin_port")" \
                "pid=$(cat "$DIR/shard$s/node$n/pid")"
        done
    done
    start_relays
    trap - EXIT
}

start_relays() {
    local n d
    [ "$RELAY_NODES" -gt 0 ] || return 0
    for n in $(seq 1 "$RELAY_NODES"); do start_relay "$n"; done
    wait_relay
    for n in $(seq 1 "$RELAY_NODES"); do
        d="$DIR/relay$n"
        echo "relay node=$n client=$(hostport "$d" client) server=$(hostport "$d" server)" \
            "ws=$(hostport "$d" ws) kcp=$(hostport "$d" kcp) mq=$(hostport "$d" mq)" \
            "admin=$(hostport "$d" admin)" \
            "pid=$(cat "$d/pid")"
    done
}

stop() {
    [ -d "$DIR" ] || return 0
    local d s
    for d in "$DIR"/relay* "$DIR"/shard*/node*; do
        [ -f "$d/pid" ] && stop_pid "$(cat "$d/pid")" && rm -f "$d/pid"
    done
    [ -d "$DIR/nats" ] && { "$NATSSH" stop "$DIR/nats" || true; }
    for s in "$DIR"/shard*; do
        [ -d "$s/db" ] && { "$PAIR" stop "$s/db" || true; }
    done
    [ -d "$DIR/zk" ] && { "$ZKSH" stop "$DIR/zk" || true; }
    rm -rf "$DIR"
}

sql() { # sql PORT SQL (root; empty output when the server is down)
    mariadb --no-defaults -uroot -h127.0.0.1 -P"$1" -N -B -e "$2" 2>/dev/null || true
}

db_status() { # db_status NAME BASE ROLE-DIR
    local name=$1 d="$2/$3" port pid state=down role=- ro semi slave
    port=$(cat "$d/port" 2>/dev/null || echo -)
    pid=$(cat "$d/launcher.pid" 2>/dev/null || echo -)
    if alive "$pid"; then
        state=up
        ro=$(sql "$port" "SELECT IF(@@read_only, 'ro', 'rw')")
        semi=$(sql "$port" "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_status'" | cut -f2)
        slave=$(mariadb --no-defaults -uroot -h127.0.0.1 -P"$port" -e "SHOW SLAVE STATUS\\G" \
            2>/dev/null | sed -n 's/^ *Slave_\(IO\|SQL\)_Running: /\1=/p' | paste -sd, || true)
        role="${ro:-?} semi_master=${semi:-?} replica=${slave:-none}"
    fi
    printf '%-22s port=%-5s pid=%-7s %-4s %s\n' "$name" "$port" "$pid" "$state" "$role"
}

# chanqd_role S DIR: sets ROLE to the role of that chanqd: its /metrics lines with "role" in
# them, else master/slave from its shard's members in ZooKeeper (lowest eligible = master).
# (Not in a subshell: zk_members caches per shard.)
chanqd_role() {
    local s=$1 d=$2 m
    m=$(curl -s --max-time 2 "http://127.0.0.1:$(cat "$d/admin_port")/metrics" 2>/dev/null |
        grep -v '^#' | grep -i 'role' | tr '\n' ' ' || true)
    if [ -n "$m" ]; then
        ROLE="metrics: $m"
        return
    fi
    zk_members "$s"
    ROLE=$(zk_role "$s" "127.0.0.1:$(cat "$d/mq_port")")
}

ZKCLI=/usr/share/zookeeper/bin/zkCli.sh
declare -A ZK_MEMBERS # shard -> its member nodes' data, one per line, in sequence order
# zk_members S: /<root>/shards/S/members and each member's data (two zkCli runs, once per shard)
zk_members() {
    local s=$1 path="$ZK_ROOT/shards/$1/members" out kids cmds="" k
    [ -z "${ZK_MEMBERS[$s]+set}" ] || return 0
    ZK_MEMBERS[$s]=
    out=$(printf 'ls %s\n' "$path" | timeout 20 "$ZKCLI" -server "$(cat "$DIR/zk_hosts")" \
        2>/dev/null | grep '^\[' | tail -n 1 || true)
    kids=$(echo "$out" | tr -d '[],' | tr ' ' '\n' | grep . | sort || true)
    [ -n "$kids" ] || return 0
    for k in $kids; do cmds="${cmds}get $path/$k
"; done
    ZK_MEMBERS[$s]=$(printf '%s' "$cmds" | timeout 20 "$ZKCLI" -server "$(cat "$DIR/zk_hosts")" \
        2>/dev/null | grep '^v1 ' || true)
}

# zk_role S ADV: master / slave / not a member (lowest eligible member = master).
zk_role() {
    [ -x "$ZKCLI" ] || { echo "role ? (no zkCli.sh)"; return; }
    [ -n "${ZK_MEMBERS[$1]:-}" ] || { echo "zk: no members"; return; }
    echo "${ZK_MEMBERS[$1]}" | awk -v adv="adv=$2" '
        { elig = ($0 ~ /elig=1/); mine = (index($0 " ", adv " ") > 0)
          if (elig && !found) { found = 1; if (mine) role = "master" }
          if (mine && role == "") role = elig ? "slave" : "slave (not eligible)" }
        END { print "zk: " (role == "" ? "not a member" : role) }'
}

status() {
    [ -d "$DIR" ] || die "no cluster in $DIR"
    local i s n d pid state
    for i in 1 2 3; do
        pid=$(cat "$DIR/zk/zk$i/pid" 2>/dev/null || echo -)
        state=down
        alive "$pid" && state=up
        printf '%-22s port=%-5s pid=%-7s %-4s %s\n' "zk$i" \
            "$("$ZKSH" port "$DIR/zk" "$i" 2>/dev/null || echo -)" "$pid" "$state" \
            "$("$ZKSH" mode "$DIR/zk" "$i" 2>/dev/null || true)"
    done
    for s in $(seq 1 "$(cat "$DIR/shards")"); do
        db_status "shard$s db primary" "$DIR/shard$s/db" primary
        db_status "shard$s db standby" "$DIR/shard$s/db" standby
        for n in 1 2; do
            d="$DIR/shard$s/node$n"
            [ -d "$d" ] || continue
            pid=$(cat "$d/pid" 2>/dev/null || echo -)
            state=down
            ROLE=-
            alive "$pid" && state=up && chanqd_role "$s" "$d"
            printf '%-22s port=%-5s pid=%-7s %-4s %s\n' "shard$s chanqd node$n" \
                "$(cat "$d/mq_port")" "$pid" "$state" "$ROLE"
        done
    done
    [ ! -d "$DIR/nats" ] || nats_status
    for d in "$DIR"/relay*; do
        [ ! -d "$d" ] || relay_status "$d"
    done
}

# nats_status: per NATS server, its client port, pid, up/down and its routes (/routez).
nats_status() {
    local i pid state routes
    for i in $(seq 1 "$(cat "$DIR/nats/nodes")"); do
        pid=$("$NATSSH" pid "$DIR/nats" "$i" 2>/dev/null || echo -)
        state=down
        routes=-
        if alive "$pid"; then
            state=up
            routes=$(curl -s --max-time 2 \
                "http://127.0.0.1:$("$NATSSH" monitor "$DIR/nats" "$i")/routez" 2>/dev/null |
                sed -n 's/.*"num_routes": *\([0-9]*\).*/\1/p' || true)
        fi
        printf '%-22s port=%-5s pid=%-7s %-4s routes=%s\n' "nats$i" \
            "$(cat "$DIR/nats/n$i/client_port")" "$pid" "$state" "${routes:-?}"
    done
}

# relay_status D: relay node D's line (members, peers up, NATS connection from its /metrics),
# then one line per peer of its link counters.
relay_status() {
    local d=$1 name pid state=down m="" want='^chanq_relay_'
    name="relay node${d##*/relay}"
    pid=$(cat "$d/pid" 2>/dev/null || echo -)
    # its manager connection, when it was started to report to managers
    ! grep -q -- '--mgr-servers' "$d/cmdline" 2>/dev/null || want="$want|^chanq_mq_mgr_connected "
    if alive "$pid"; then
        state=up
        m=$(curl -s --max-time 2 "http://127.0.0.1:$(cat "$d/admin_port")/metrics" 2>/dev/null |
            grep -E "$want" || true)
    fi
    printf '%-22s port=%-5s pid=%-7s %-4s %s\n' "$name" "$(cat "$d/client_port")" "$pid" \
        "$state" "$(echo "$m" | awk '$1 == "chanq_relay_members" { a = $2 }
            $1 == "chanq_relay_peers_up" { b = $2 } $1 == "chanq_relay_nats_connected" { c = $2 }
            $1 == "chanq_mq_mgr_connected" { g = " mgr_connected=" $2 }
            END { if (a b c != "") printf "members=%s peers_up=%s nats_connected=%s%s", a, b, c, g }')"
    # chanq_relay_link_packets_total{peer="2",dir="out"} 5 -> peer 2: out=5 (in the peers' order)
    [ -z "$m" ] || echo "$m" | awk -v name="$name" '
        match($1, /peer="[0-9]+"/) {
            p = substr($1, RSTART + 6, RLENGTH - 7)
            if (!(p in seen)) { seen[p] = 1; order[++np] = p }
            if ($1 ~ /^chanq_relay_link_packets_total/ && $1 ~ /dir="out"/) out[p] = $2
            else if ($1 ~ /^chanq_relay_link_packets_total/) in_[p] = $2
            else if ($1 ~ /^chanq_relay_link_gaps_total/) gaps[p] = $2
            else if ($1 ~ /^chanq_relay_link_resets_total/) resets[p] = $2
        }
        END { for (i = 1; i <= np; i++) { p = order[i]
            printf "%-22s packets out=%s in=%s gaps=%s resets=%s\n", name " peer" p,
                out[p], in_[p], gaps[p], resets[p] } }'
}

case "$cmd" in
start) start ;;
stop) stop ;;
status) status ;;
*) usage ;;
esac
