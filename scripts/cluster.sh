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
#       and prints "zk=HOSTS" and, per chanqd, "shard=S node=N mq=H:P admin=H:P pid=PID".
#       Ports are free ones in 26000-29999 (none in 24xxx/25xxx). On any failure everything
#       started so far is stopped again.
#   scripts/cluster.sh stop DIR     stops every chanqd, then every MariaDB, then ZooKeeper, each
#       by the PID this script (or the fixture scripts) recorded, and removes DIR.
#   scripts/cluster.sh status DIR   one line per service: name, port(s), pid, up/down, role
#       (ZooKeeper: leader/follower; MariaDB: rw/ro, semi-sync and replica state; chanqd: its
#       role from /metrics, else from its shard's members in ZooKeeper).
#
# Environment: CHANQD (default build/src/main/chanqd, built with meson/ninja when missing),
#   SHARDS [2], ZK_ROOT [/chanq], ZK_SESSION_MS [4000], DB_DOWN_MS [5000],
#   SEMI_TIMEOUT_MS [2000], LOG_LEVEL [info], CLUSTER_OPTS [1] (0: start chanqd without the
#   cluster options, i.e. two standalone chanqd per shard, both on the primary, since a
#   standalone chanqd cannot open a read-only store - for checking the other services),
#   CHANQD_ARGS [""] (more options for every chanqd, split on blanks: e.g. the managers to
#   report to, "--mgr-servers 127.0.0.1:12120 --mgr-token-file F").
# Only processes this script (or zk.sh / mariadb-pair.sh) started are ever signalled.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ZKSH="$ROOT/tests/support/zk.sh"
PAIR="$ROOT/tests/support/mariadb-pair.sh"
SHARDS=${SHARDS:-2}
ZK_ROOT=${ZK_ROOT:-/chanq}
ZK_SESSION_MS=${ZK_SESSION_MS:-4000}
DB_DOWN_MS=${DB_DOWN_MS:-5000}
SEMI_TIMEOUT_MS=${SEMI_TIMEOUT_MS:-2000}
LOG_LEVEL=${LOG_LEVEL:-info}
CLUSTER_OPTS=${CLUSTER_OPTS:-1}
CHANQD_ARGS=${CHANQD_ARGS:-}

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

# ---- helpers -----------------------------------------------------------------------------------
# free_ports N: N distinct ports in 26000-29999 that nothing listens on and that this cluster
# has not taken (one python run: it takes a second on a loaded machine).
free_ports() {
    local taken
    taken=$(cat "$DIR"/zk/zk*/*port* "$DIR"/shard*/db/*/port "$DIR"/shard*/node*/*_port \
        2>/dev/null | tr -s ' \n' ' ' || true)
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

# start_chanqd S N: launches it (setsid, own process group) and waits for its ready file.
start_chanqd() {
    local s=$1 n=$2 d="$DIR/shard$1/node$2" p i ports
    mkdir -p "$d"
    read -ra ports <<<"$(free_ports 4)"
    [ ${#ports[@]} = 4 ] || die "no free ports"
    for p in mq admin client server; do
        echo "${ports[0]}" >"$d/${p}_port"
        ports=("${ports[@]:1}")
    done
    read -r DB_PORT DB_STANDBY_PORT <"$DIR/shard$s/db.ports"
    # (a standalone chanqd, CLUSTER_OPTS=0, cannot open a read-only store: both on the primary)
    [ "$n" = 1 ] || [ "$CLUSTER_OPTS" != 1 ] || DB_PORT=$DB_STANDBY_PORT
    chanqd_cmd "$s" "$n"
    printf '%q ' "${CMD[@]}" >"$d/cmdline"
    setsid "${CMD[@]}" >"$d/log" 2>&1 </dev/null &
    echo $! >"$d/pid"
    for i in $(seq 1 600); do # 30 s
        [ -s "$d/ready" ] && return 0
        alive "$(cat "$d/pid")" || break
        sleep 0.05
    done
    die "chanqd shard $s node $n did not start; $d/log: $(tail -n 5 "$d/log")"
}

# ---- start / stop / status ---------------------------------------------------------------------
start() {
    [ ! -e "$DIR" ] || [ -z "$(ls -A "$DIR")" ] || die "$DIR exists and is not empty"
    mkdir -p "$DIR"
    DIR=$(cd "$DIR" && pwd)
    find_chanqd
    echo "$SHARDS" >"$DIR/shards"
    # whatever fails from here on (die, or set -e), everything started so far is stopped
    trap 'rc=$?; [ $rc = 0 ] || { log "start failed: stopping what was started"; stop; }' EXIT
    local rc=0 s n zkjob
    local -a dbjob
    # ZooKeeper and the MariaDB pairs start side by side (each takes seconds); all are waited
    # for before any failure is acted on, so no start is still running when stop runs.
    "$ZKSH" start "$DIR/zk" >"$DIR/zk_hosts" 2>"$DIR/zk_start.err" &
    zkjob=$!
    for s in $(seq 1 "$SHARDS"); do
        mkdir -p "$DIR/shard$s"
        MARIADB_PAIR_SEMI_TIMEOUT_MS=$SEMI_TIMEOUT_MS "$PAIR" start "$DIR/shard$s/db" \
            >"$DIR/shard$s/db.ports" 2>"$DIR/shard$s/db_start.err" &
        dbjob[s]=$!
    done
    wait "$zkjob" || rc=$?
    for s in $(seq 1 "$SHARDS"); do
        wait "${dbjob[$s]}" || { rc=$?; log "MariaDB pair $s: $(cat "$DIR/shard$s/db_start.err")"; }
    done
    [ -s "$DIR/zk_hosts" ] || die "ZooKeeper did not start: $(cat "$DIR/zk_start.err")"
    [ "$rc" = 0 ] || die "a MariaDB pair did not start"
    echo "zk=$(cat "$DIR/zk_hosts")"
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
    trap - EXIT
}

stop() {
    [ -d "$DIR" ] || return 0
    local d s
    for d in "$DIR"/shard*/node*; do
        [ -f "$d/pid" ] && stop_pid "$(cat "$d/pid")" && rm -f "$d/pid"
    done
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
}

case "$cmd" in
start) start ;;
stop) stop ;;
status) status ;;
*) usage ;;
esac
