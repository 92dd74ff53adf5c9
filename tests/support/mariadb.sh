#!/bin/sh
# tests/support/mariadb.sh - run a throwaway MariaDB server for tests, without systemd.
#
#   mariadb.sh start BASE   creates BASE (must not exist or be empty), initializes a data dir in
#                           it, starts mariadbd on 127.0.0.1 at a free non-default port with
#                           durable settings (binlog on, flush at every commit), waits until it
#                           answers, and prints the port. Root over TCP, empty password.
#   mariadb.sh stop BASE    stops that server by its PID (SIGTERM, then SIGKILL after 30 s),
#                           waits for it to exit and removes BASE.
#   mariadb.sh kill BASE    SIGKILLs that server (a crash: no clean shutdown) and waits until it
#                           is gone; BASE and the data dir stay.
#   mariadb.sh restart BASE starts the server again on the same data dir and port (crash
#                           recovery runs first) and waits until it answers.
#
# Exit status: 0 on success; 2 when the MariaDB programs are missing (the caller skips);
# 1 when the server could not be started (details on stderr, server log in BASE/err.log).
# Only the process this script started is ever signalled.
set -eu

usage() {
    echo "usage: $0 start|stop|kill|restart BASE" >&2
    exit 64
}

[ $# -eq 2 ] || usage
cmd=$1
BASE=$2

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

free_port() {
    python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

find_server_progs() {
    MARIADBD=$(find_prog mariadbd mysqld) || {
        echo "mariadbd not found" >&2
        exit 2
    }
    ADMIN=$(find_prog mariadb-admin mysqladmin) || {
        echo "mariadb-admin not found" >&2
        exit 2
    }
    user_opt=
    [ "$(id -u)" -eq 0 ] && user_opt=--user=root
}

# Launches mariadbd on BASE/data at port $1 and waits until it answers (0) or dies / does not
# answer within 60 s (1, after stopping it).
launch() {
    "$MARIADBD" --no-defaults --datadir="$BASE/data" --socket="$BASE/sock" \
        --port="$1" --bind-address=127.0.0.1 $user_opt \
        --pid-file="$BASE/mariadbd.pid" --log-error="$BASE/err.log" \
        --log-bin=mysql-bin --server-id=1 --binlog-format=ROW \
        --innodb-flush-log-at-trx-commit=1 --sync-binlog=1 \
        --innodb-buffer-pool-size=128M >/dev/null 2>&1 &
    pid=$!
    echo "$pid" >"$BASE/launcher.pid"
    i=0
    while [ $i -lt 1200 ]; do # 60 s (a restart runs crash recovery first)
        if "$ADMIN" --no-defaults -uroot --socket="$BASE/sock" ping >/dev/null 2>&1; then
            return 0
        fi
        alive "$pid" || break
        sleep 0.05
        i=$((i + 1))
    done
    stop_pid
    return 1
}

start() {
    INSTALL_DB=$(find_prog mariadb-install-db mysql_install_db) || {
        echo "mariadb-install-db not found" >&2
        exit 2
    }
    find_server_progs
    mkdir -p "$BASE"
    if ! "$INSTALL_DB" --no-defaults --datadir="$BASE/data" $user_opt \
        --auth-root-authentication-method=normal --skip-test-db >"$BASE/install.log" 2>&1; then
        echo "mariadb-install-db failed:" >&2
        tail -n 20 "$BASE/install.log" >&2
        exit 1
    fi
    for _ in 1 2 3; do
        port=$(free_port)
        if launch "$port"; then
            echo "$port" >"$BASE/port"
            echo "$port"
            return 0
        fi
        # it died (port taken?) or never answered: try another port
    done
    echo "mariadbd did not start; last lines of $BASE/err.log:" >&2
    tail -n 20 "$BASE/err.log" >&2 2>/dev/null || true
    exit 1
}

# True while pid runs (a zombie counts as gone: its parent may never reap it).
alive() {
    kill -0 "$1" 2>/dev/null || return 1
    state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null) || true
    [ "$state" != Z ]
}

# Stops the server whose PID this script recorded, and waits until it is gone.
stop_pid() {
    [ -f "$BASE/launcher.pid" ] || return 0
    pid=$(cat "$BASE/launcher.pid")
    rm -f "$BASE/launcher.pid"
    kill -TERM "$pid" 2>/dev/null || return 0
    i=0
    while alive "$pid" && [ $i -lt 800 ]; do
        if [ $i -eq 600 ]; then # 30 s: force it
            kill -KILL "$pid" 2>/dev/null || true
        fi
        sleep 0.05
        i=$((i + 1))
    done
}

stop() {
    [ -d "$BASE" ] || return 0
    stop_pid
    rm -rf "$BASE"
}

# A crash: SIGKILL, no clean shutdown. The launcher.pid file stays for restart's sake only
# until the process is gone.
crash() {
    [ -f "$BASE/launcher.pid" ] || {
        echo "no server recorded in $BASE" >&2
        exit 1
    }
    pid=$(cat "$BASE/launcher.pid")
    kill -KILL "$pid" 2>/dev/null || true
    i=0
    while alive "$pid" && [ $i -lt 600 ]; do
        sleep 0.05
        i=$((i + 1))
    done
    rm -f "$BASE/launcher.pid"
    alive "$pid" && exit 1
    return 0
}

restart() {
    [ -f "$BASE/port" ] && [ -d "$BASE/data" ] || {
        echo "no data dir / port recorded in $BASE" >&2
        exit 1
    }
    [ -f "$BASE/launcher.pid" ] && alive "$(cat "$BASE/launcher.pid")" && {
        echo "the server in $BASE still runs" >&2
        exit 1
    }
    find_server_progs
    port=$(cat "$BASE/port")
    for _ in 1 2 3 4 5; do # the port may still be held for a moment after the kill
        if launch "$port"; then
            echo "$port"
            return 0
        fi
        sleep 1
    done
    echo "mariadbd did not restart; last lines of $BASE/err.log:" >&2
    tail -n 20 "$BASE/err.log" >&2 2>/dev/null || true
    exit 1
}

case "$cmd" in
start) start ;;
stop) stop ;;
kill) crash ;;
restart) restart ;;
*) usage ;;
esac
