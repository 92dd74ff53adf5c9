# shellcheck shell=bash
# tests/integration/cluster/lib.sh - sourced by the cluster test scripts (faults.sh, bridge.sh):
# the TAP-style output, the checks for the services scripts/cluster.sh needs, and the waits.
# The caller sets ROOT and, for cluster_up and its helpers, BASE (its temp dir) and DIR.

say() { printf '# %s\n' "$*"; }
skip() {
    say "SKIP: $*"
    exit 77
}
ms() { date +%s%3N; }

# need_cluster_services: skips (77) unless ZooKeeper (and java) and MariaDB are installed.
need_cluster_services() {
    command -v java >/dev/null 2>&1 || skip "java is not installed (apt-get install zookeeper)"
    [ -f /usr/share/java/zookeeper.jar ] ||
        skip "ZooKeeper is not installed (apt-get install zookeeper)"
    command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] ||
        skip "mariadbd is not installed (apt-get install mariadb-server)"
}

# stop_pid PID: SIGTERM, SIGKILL after 10 s, then waits for it (a child of the caller).
stop_pid() {
    local p=$1 i=0
    [ -n "$p" ] && kill -0 "$p" 2>/dev/null || return 0
    kill -TERM "$p" 2>/dev/null || true
    while kill -0 "$p" 2>/dev/null && [ $i -lt 100 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
}

# cluster_settings LONG: what the cluster tests share: CLUSTER (scripts/cluster.sh), its fault
# timings (exported: ZK_SESSION_MS [4000], DB_DOWN_MS [3000], SEMI_TIMEOUT_MS [2000]), PRE and
# POST (the seconds before and after the fault: 30 when LONG is 1, else 3) and RECOVER_S (the
# longest wait for a recovery); skips without the services, fails without cluster.sh.
cluster_settings() {
    CLUSTER="$ROOT/scripts/cluster.sh"
    export ZK_SESSION_MS=${ZK_SESSION_MS:-4000}
    export DB_DOWN_MS=${DB_DOWN_MS:-3000}
    export SEMI_TIMEOUT_MS=${SEMI_TIMEOUT_MS:-2000}
    if [ "$1" = 1 ]; then PRE=30 POST=30; else PRE=3 POST=3; fi
    RECOVER_S=$((ZK_SESSION_MS / 1000 + DB_DOWN_MS / 1000 + 20))
    need_cluster_services
    [ -x "$CLUSTER" ] || {
        say "FAIL: $CLUSTER is missing"
        exit 1
    }
}

# wait_for SECONDS WHAT CMD...: polls CMD every 100 ms; 0 when it held, 1 on timeout (said).
wait_for() {
    local secs=$1 what=$2
    local end=$((SECONDS + secs))
    shift 2
    until "$@"; do
        if [ $SECONDS -ge "$end" ]; then
            say "timed out after $secs s waiting for $what"
            return 1
        fi
        sleep 0.1
    done
}

# cluster_up: scripts/cluster.sh start DIR, its output in BASE/cluster.out. Up to 3 tries: under
# load, one of the two mariadb-install-db that cluster.sh runs side by side sometimes fails (a
# fixture flake, not the system under test); cluster.sh then stops it all.
cluster_up() {
    local t0 try
    t0=$(ms)
    for try in 1 2 3; do
        "$CLUSTER" start "$DIR" >"$BASE/cluster.out" 2>"$BASE/cluster.err" && break
        say "NOTE: cluster.sh start failed (try $try):"
        grep -v '^ *$' "$BASE/cluster.err" | head -n 3 | sed 's/^/#   /'
        [ "$try" = 3 ] && {
            say "FAIL: cluster.sh start failed 3 times"
            tail -n 20 "$BASE/cluster.err"
            exit 1
        }
        rm -rf "$DIR"
        sleep 2
    done
    say "cluster up after $(($(ms) - t0)) ms"
}

# field S N KEY: KEY (mq, admin, pid) of chanqd node N of shard S, from cluster.sh's output.
field() { sed -n "s/^shard=$1 node=$2 .*$3=\([^ ]*\).*/\1/p" "$BASE/cluster.out"; }
# node_of ADDR: "S N" of the chanqd whose seed address is ADDR.
node_of() { sed -n "s|^shard=\([0-9]*\) node=\([0-9]*\) mq=$1 .*|\1 \2|p" "$BASE/cluster.out"; }
# servers_of SHARDS: "S/H:P,..." of every chanqd of shards 1..SHARDS.
servers_of() {
    local s n list=
    for s in $(seq 1 "$1"); do
        for n in 1 2; do list="$list${list:+,}$s/$(field "$s" "$n" mq)"; done
    done
    echo "$list"
}
