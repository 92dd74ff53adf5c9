#!/bin/sh
# tests/support/mariadb-pair.sh - a throwaway MariaDB primary + standby for cluster tests and
# benchmarks, without systemd (doc: /work/shared/doc/cluster-recipes.md section 4).
#
#   mariadb-pair.sh start BASE
#       creates BASE (must not exist or be empty), runs mariadb-install-db once and copies the
#       data dir twice, starts the PRIMARY (server-id 1, BASE/primary) and the STANDBY
#       (server-id 2, BASE/standby, --read-only=ON) on 127.0.0.1 at free ports in 22000-23999.
#       Both: binlog (ROW, sync-binlog=1, flush at every commit), GTID strict mode,
#       log-slave-updates, semi-sync AFTER_SYNC (timeout 2000 ms; slave side enabled on both),
#       parallel optimistic apply (4 threads). The standby replicates from the primary
#       (MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1); only AFTER its START SLAVE is
#       rpl_semi_sync_master_enabled turned ON on the primary (turning it on earlier makes the
#       first commit wait the whole timeout). Creates, on the primary (replicated):
#         repl    / replpw     REPLICATION SLAVE ON *.*  (the replication stream)
#         cqadmin / cqadminpw  ALL ON *.* WITH GRANT    (replication control, promotion)
#         chanq   / chanqpw    ALL ON chanq.* only      (the store user: NOT SUPER, so
#                                                       read_only fences it)
#         database chanq
#       (root over TCP with an empty password works too, like tests/support/mariadb.sh.)
#       Waits until Rpl_semi_sync_master_clients=1 and the standby has applied all of the
#       above, then prints "PRIMARY_PORT STANDBY_PORT".
#   mariadb-pair.sh stop BASE
#       stops both servers by their PIDs (SIGTERM, SIGKILL after 30 s) and removes BASE.
#   mariadb-pair.sh kill-primary BASE | kill-standby BASE
#       SIGKILLs that server (a crash) and waits until it is gone; its data dir stays.
#   mariadb-pair.sh restart-primary BASE [as-replica]
#   mariadb-pair.sh restart-standby BASE [as-replica]
#       starts that server again on its data dir and port (crash recovery runs first) and
#       waits until it answers. Without "as-replica": the primary comes back as a writable
#       primary with semi-sync master ON again (it waits, up to 30 s, for the standby to
#       reattach when the standby runs); the standby comes back --read-only=ON and its slave
#       threads restart by themselves (master.info is kept).
#       With "as-replica": --init-rpl-role=SLAVE --skip-slave-start --read-only=ON, i.e. crash
#       recovery cuts transactions that no replica acknowledged, and the caller then runs
#       CHANGE MASTER TO ... MASTER_USE_GTID=current_pos; START SLAVE itself.
#   mariadb-pair.sh ports BASE
#       prints "PRIMARY_PORT STANDBY_PORT".
#
# "primary" and "standby" name the two servers by the role they were STARTED with; they keep
# those names (dirs, ports) after a failover swaps their roles.
# Layout: BASE/{primary,standby}/{data,port,launcher.pid,err.log,sock}.
# Env: MARIADB_PAIR_BUFFER_POOL (default 128M), MARIADB_PAIR_SEMI_TIMEOUT_MS (default 2000).
# Exit status: 0 on success; 2 when the MariaDB programs are missing (the caller skips); 1 when
# a server could not be started (details on stderr, logs in BASE/*/err.log); 64 on bad usage.
# Only the processes this script started are ever signalled.
set -eu

usage() {
    echo "usage: $0 start|stop|kill-primary|kill-standby|ports BASE" >&2
    echo "       $0 restart-primary|restart-standby BASE [as-replica]" >&2
    exit 64
}

[ $# -ge 2 ] && [ $# -le 3 ] || usage
cmd=$1
BASE=$2
how=${3:-}
case "$how" in "" | as-replica) ;; *) usage ;; esac

POOL=${MARIADB_PAIR_BUFFER_POOL:-128M}
SEMI_TIMEOUT=${MARIADB_PAIR_SEMI_TIMEOUT_MS:-2000}

find_prog() {
    for p in "$@"; do
        if command -v "$p" >/dev/null 2>&1; then
            command -v "$p"
            return 0
        fi
        for d in /usr/sbin /usr/bin /usr/local/sbin /usr/local/bin; do
            if [ -x "$d/$p" ]; then
                echo "$d/$p"
                return 0
            fi
        done
    done
    return 1
}

# A port in 22000-23999 that nothing listens on now (other users of the machine take 24xxx and
# 25xxx, zk.sh and scripts/cluster.sh take 26000-29999; the ephemeral range starts above 32767,
# so no client socket holds it either). Not $1 (the port the other server took).
free_port() {
    python3 "$(dirname "$0")/free-ports.py" 22000 23999 1 "${1:-0}"
}

find_progs() {
    MARIADBD=$(find_prog mariadbd mysqld) || {
        echo "mariadbd not found" >&2
        exit 2
    }
    ADMIN=$(find_prog mariadb-admin mysqladmin) || {
        echo "mariadb-admin not found" >&2
        exit 2
    }
    CLIENT=$(find_prog mariadb mysql) || {
        echo "mariadb client not found" >&2
        exit 2
    }
    user_opt=
    [ "$(id -u)" -eq 0 ] && user_opt=--user=root
}

# sql PORT SQL...: runs SQL as root over TCP, tab-separated output without column names.
sql() {
    _p=$1
    shift
    "$CLIENT" --no-defaults -uroot -h127.0.0.1 -P"$_p" -N -B -e "$*"
}

# True while pid runs (a zombie counts as gone: its parent may never reap it).
alive() {
    kill -0 "$1" 2>/dev/null || return 1
    state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null) || true
    [ "$state" != Z ]
}

server_id() { [ "$1" = primary ] && echo 1 || echo 2; }

# launch NAME PORT [extra options...]: starts mariadbd on BASE/NAME/data and waits until it
# answers (0) or dies / does not answer within 60 s (1, after stopping it).
launch() {
    _n=$1
    _port=$2
    shift 2
    _d="$BASE/$_n"
    "$MARIADBD" --no-defaults --datadir="$_d/data" --socket="$_d/sock" \
        --port="$_port" --bind-address=127.0.0.1 $user_opt \
        --pid-file="$_d/mariadbd.pid" --log-error="$_d/err.log" \
        --server-id="$(server_id "$_n")" --innodb-buffer-pool-size="$POOL" \
        --log-bin=mysql-bin --binlog-format=ROW --sync-binlog=1 \
        --innodb-flush-log-at-trx-commit=1 --log-slave-updates=1 --gtid-strict-mode=1 \
        --relay-log=relay-bin --rpl-semi-sync-master-wait-point=AFTER_SYNC \
        --rpl-semi-sync-master-timeout="$SEMI_TIMEOUT" --rpl-semi-sync-slave-enabled=ON \
        --slave-parallel-threads=4 --slave-parallel-mode=optimistic \
        "$@" >/dev/null 2>&1 </dev/null &
    _pid=$!
    echo "$_pid" >"$_d/launcher.pid"
    _i=0
    while [ $_i -lt 1200 ]; do # 60 s (a restart runs crash recovery first)
        if "$ADMIN" --no-defaults -uroot -h127.0.0.1 -P"$_port" ping >/dev/null 2>&1; then
            return 0
        fi
        alive "$_pid" || break
        sleep 0.05
        _i=$((_i + 1))
    done
    stop_server "$_n"
    return 1
}

# start_server NAME [extra options...]: a free port, three tries (the port may be taken).
start_server() {
    _name=$1
    shift
    _other=$(cat "$BASE/primary/port" 2>/dev/null || echo 0)
    for _ in 1 2 3; do
        _fp=$(free_port "$_other")
        if launch "$_name" "$_fp" "$@"; then
            echo "$_fp" >"$BASE/$_name/port"
            return 0
        fi
    done
    echo "mariadbd ($_name) did not start; last lines of $BASE/$_name/err.log:" >&2
    tail -n 20 "$BASE/$_name/err.log" >&2 2>/dev/null || true
    return 1
}

# Stops the server NAME whose PID this script recorded, and waits until it is gone.
stop_server() {
    [ -f "$BASE/$1/launcher.pid" ] || return 0
    _sp=$(cat "$BASE/$1/launcher.pid")
    rm -f "$BASE/$1/launcher.pid"
    kill -CONT "$_sp" 2>/dev/null || true # a test may have frozen it
    kill -TERM "$_sp" 2>/dev/null || return 0
    _i=0
    while alive "$_sp" && [ $_i -lt 800 ]; do
        if [ $_i -eq 600 ]; then # 30 s: force it
            kill -KILL "$_sp" 2>/dev/null || true
        fi
        sleep 0.05
        _i=$((_i + 1))
    done
}

# wait_for PORT SQL VALUE SECONDS: polls until the query's output is VALUE (0) or time is up (1).
wait_for() {
    _i=0
    while [ $_i -lt $(($4 * 20)) ]; do
        [ "$(sql "$1" "$2" 2>/dev/null)" = "$3" ] && return 0
        sleep 0.05
        _i=$((_i + 1))
    done
    return 1
}

semi_clients_sql="SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS
 WHERE VARIABLE_NAME='RPL_SEMI_SYNC_MASTER_CLIENTS'"

fail_start() {
    echo "$1" >&2
    stop_server standby
    stop_server primary
    exit 1
}

start() {
    INSTALL_DB=$(find_prog mariadb-install-db mysql_install_db) || {
        echo "mariadb-install-db not found" >&2
        exit 2
    }
    find_progs
    mkdir -p "$BASE/primary" "$BASE/standby"
    # Installs run one at a time on this machine (flock), and a failed one is retried once:
    # concurrent installs under load failed now and then (issue 11's fault runs); the head of
    # the log, where the reason is, is printed.
    _ok=0
    for _try in 1 2; do
        rm -rf "$BASE/tpl"
        if flock "${TMPDIR:-/tmp}/chanq-mariadb-install.lock" "$INSTALL_DB" --no-defaults \
            --datadir="$BASE/tpl" $user_opt --auth-root-authentication-method=normal \
            --skip-test-db >"$BASE/install.log" 2>&1; then
            _ok=1
            break
        fi
        echo "mariadb-install-db failed (try $_try):" >&2
        head -n 30 "$BASE/install.log" >&2
    done
    [ "$_ok" = 1 ] || exit 1
    # One install copied twice: MariaDB has no per-server UUID, and it saves ~2 s.
    cp -a "$BASE/tpl" "$BASE/primary/data"
    mv "$BASE/tpl" "$BASE/standby/data"
    start_server primary || fail_start "primary did not start"
    start_server standby --read-only=ON || fail_start "standby did not start"
    pp=$(cat "$BASE/primary/port")
    sp=$(cat "$BASE/standby/port")
    sql "$pp" "CREATE USER 'repl'@'%' IDENTIFIED BY 'replpw';
        GRANT REPLICATION SLAVE ON *.* TO 'repl'@'%';
        CREATE USER 'cqadmin'@'%' IDENTIFIED BY 'cqadminpw';
        GRANT ALL ON *.* TO 'cqadmin'@'%' WITH GRANT OPTION;
        CREATE DATABASE chanq;
        CREATE USER 'chanq'@'%' IDENTIFIED BY 'chanqpw';
        GRANT ALL ON chanq.* TO 'chanq'@'%';" || fail_start "creating the users failed"
    sql "$sp" "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=$pp, MASTER_USER='repl',
        MASTER_PASSWORD='replpw', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1;
        START SLAVE;" || fail_start "starting the standby's replication failed"
    sql "$pp" "SET GLOBAL rpl_semi_sync_master_enabled=ON" || fail_start "semi-sync failed"
    wait_for "$pp" "$semi_clients_sql" 1 60 ||
        fail_start "the standby did not attach as a semi-sync replica within 60 s"
    gtid=$(sql "$pp" "SELECT @@gtid_binlog_pos")
    wait_for "$sp" "SELECT MASTER_GTID_WAIT('$gtid', 1)" 0 60 ||
        fail_start "the standby did not apply the setup within 60 s"
    echo "$pp $sp"
}

stop() {
    [ -d "$BASE" ] || return 0
    stop_server standby
    stop_server primary
    rm -rf "$BASE"
}

# A crash: SIGKILL, no clean shutdown; the data dir and port stay for restart.
crash() {
    [ -f "$BASE/$1/launcher.pid" ] || {
        echo "no $1 server recorded in $BASE" >&2
        exit 1
    }
    pid=$(cat "$BASE/$1/launcher.pid")
    kill -KILL "$pid" 2>/dev/null || true
    i=0
    while alive "$pid" && [ $i -lt 600 ]; do
        sleep 0.05
        i=$((i + 1))
    done
    rm -f "$BASE/$1/launcher.pid"
    alive "$pid" && exit 1
    return 0
}

restart() {
    name=$1
    [ -f "$BASE/$name/port" ] && [ -d "$BASE/$name/data" ] || {
        echo "no $name data dir / port recorded in $BASE" >&2
        exit 1
    }
    [ -f "$BASE/$name/launcher.pid" ] && alive "$(cat "$BASE/$name/launcher.pid")" && {
        echo "the $name server in $BASE still runs" >&2
        exit 1
    }
    find_progs
    port=$(cat "$BASE/$name/port")
    if [ "$how" = as-replica ]; then
        set -- --init-rpl-role=SLAVE --skip-slave-start --read-only=ON
    elif [ "$name" = standby ]; then
        set -- --read-only=ON
    else
        set --
    fi
    ok=
    for _ in 1 2 3 4 5; do # the port may still be held for a moment after the kill
        if launch "$name" "$port" "$@"; then
            ok=1
            break
        fi
        sleep 1
    done
    [ -n "$ok" ] || {
        echo "mariadbd ($name) did not restart; last lines of $BASE/$name/err.log:" >&2
        tail -n 20 "$BASE/$name/err.log" >&2 2>/dev/null || true
        exit 1
    }
    [ "$name" = primary ] && [ -z "$how" ] && primary_semi_on
    return 0
}

# After a plain primary restart: semi-sync master ON again (SET GLOBAL does not persist), and
# when the standby runs, wait until it has reattached so the next commit is semi-sync.
primary_semi_on() {
    sql "$port" "SET GLOBAL rpl_semi_sync_master_enabled=ON"
    [ -f "$BASE/standby/launcher.pid" ] && alive "$(cat "$BASE/standby/launcher.pid")" || return 0
    wait_for "$port" "$semi_clients_sql" 1 30 ||
        echo "warning: the standby did not reattach within 30 s" >&2
    return 0
}

ports() {
    [ -f "$BASE/primary/port" ] && [ -f "$BASE/standby/port" ] || {
        echo "no pair recorded in $BASE" >&2
        exit 1
    }
    echo "$(cat "$BASE/primary/port") $(cat "$BASE/standby/port")"
}

case "$cmd" in
start) start ;;
stop) stop ;;
kill-primary) crash primary ;;
kill-standby) crash standby ;;
restart-primary) restart primary ;;
restart-standby) restart standby ;;
ports) ports ;;
*) usage ;;
esac
