#!/bin/bash
# tests/support/zk.sh - run a throwaway 3-node ZooKeeper ensemble for tests, without systemd.
# (cluster-recipes.md §3: tickTime 500, syncLimit 4, session timeouts 1000..30000 ms.)
#
#   (CQ_ZK_NODES=1 zk.sh start BASE: one standalone node instead, for tests that need a
#   ZooKeeper but not its quorum; the other commands then see one node.)
#   zk.sh start BASE        creates BASE (must not exist or be empty), writes three node configs
#                           with free loopback ports (26000-29999), starts the three nodes, waits
#                           until all serve (a "Mode:" line to srvr) and prints the connect string
#                           "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3" (node i = the i-th entry).
#   zk.sh hosts BASE        prints that connect string again.
#   zk.sh port BASE I       prints node I's client port.
#   zk.sh stop BASE         stops every node by its PID (SIGTERM, SIGKILL after 20 s, SIGCONT
#                           first in case it is frozen), waits for them to exit and removes BASE.
#   zk.sh leader BASE       prints the index (1..3) of the current leader (nothing if none).
#   zk.sh mode BASE I       prints node I's mode: leader, follower or nothing (down/not serving).
#   zk.sh kill-leader BASE  SIGKILLs the leader, waits until the two others serve again (one
#                           leader, one follower) and prints the killed node's index.
#   zk.sh kill-node BASE I  SIGKILLs node I and waits until it is gone.
#   zk.sh stop-node BASE I  SIGTERMs node I and waits until it is gone.
#   zk.sh start-node BASE I starts node I again (same config and data) and waits until it serves.
#   zk.sh freeze BASE I     SIGSTOPs node I (I may be "leader": prints the frozen index).
#   zk.sh thaw BASE I       SIGCONTs node I.
#
# Exit status: 0 on success; 2 when java or ZooKeeper's jar is missing (the caller skips);
# 1 on failure (details on stderr, node logs in BASE/zkI/out.log). Waits are bounded (60 s).
# Only the processes this script started (PIDs in BASE/zkI/pid) are ever signalled.
set -eu

usage() {
    echo "usage: $0 start|hosts|stop|leader|kill-leader BASE" \
        "| port|mode|kill-node|stop-node|start-node|freeze|thaw BASE I" >&2
    exit 64
}

[ $# -ge 2 ] || usage
cmd=$1
BASE=$2
NODE=${3:-}

ZKJAR=/usr/share/java/zookeeper.jar
ZKCP=/etc/zookeeper/conf:$ZKJAR:/usr/share/java/slf4j-simple.jar
WAIT_S=60

die() {
    echo "zk.sh: $*" >&2
    exit 1
}

need_progs() {
    command -v java >/dev/null 2>&1 || {
        echo "zk.sh: java not found" >&2
        exit 2
    }
    [ -f "$ZKJAR" ] || {
        echo "zk.sh: $ZKJAR not found (apt-get install zookeeper)" >&2
        exit 2
    }
}

# A port in 26000-29999 that nothing listens on now (other users of the machine take 24xxx and
# 25xxx; the kernel's ephemeral range starts above 32767).
free_port() {
    python3 "$(dirname "$0")/free-ports.py" 26000 29999 1 "$@"
}

port_of() { cat "$BASE/zk$1/client_port"; }

# srvr answers with a "Mode:" line only once the node serves clients.
zk_mode() {
    local p
    p=$(port_of "$1") || return 0
    (
        exec 3<>"/dev/tcp/127.0.0.1/$p"
        echo srvr >&3
        timeout 2 cat <&3
    ) 2>/dev/null | sed -n 's/^Mode: //p' || true
}

zk_leader() {
    local i
    for i in 1 2 3; do
        [ "$(zk_mode $i)" = leader ] && echo $i
    done
    return 0
}

alive() { [ -f "$BASE/zk$1/pid" ] && kill -0 "$(cat "$BASE/zk$1/pid")" 2>/dev/null; }

wait_until() { # wait_until WHAT CMD...: poll CMD until it succeeds, at most WAIT_S seconds
    local what=$1 end=$((SECONDS + WAIT_S))
    shift
    until "$@"; do
        [ $SECONDS -lt $end ] || die "timed out waiting for $what"
        sleep 0.05
    done
}

serving() { [ -n "$(zk_mode "$1")" ]; }
gone() { ! alive "$1"; }

# The nodes of BASE: those it has directories for (start: CQ_ZK_NODES, 1 or 3, default 3).
nodes() {
    local i
    for i in 1 2 3; do
        [ -d "$BASE/zk$i" ] && echo $i
    done
    return 0
}

write_config() {
    local used="" i p d n=${CQ_ZK_NODES:-3}
    [ "$n" = 1 ] || [ "$n" = 3 ] || die "CQ_ZK_NODES must be 1 or 3"
    for i in $(seq 1 "$n"); do
        mkdir -p "$BASE/zk$i/data"
        echo "$i" >"$BASE/zk$i/data/myid"
        for p in client_port quorum_port election_port; do
            # shellcheck disable=SC2086
            port=$(free_port $used) || die "no free port"
            used="$used $port"
            echo "$port" >"$BASE/zk$i/$p"
        done
    done
    for i in $(nodes); do
        d="$BASE/zk$i"
        cat >"$d/zoo.cfg" <<CFG
tickTime=500
initLimit=10
syncLimit=4
dataDir=$d/data
clientPort=$(cat "$d/client_port")
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok,mntr,stat
minSessionTimeout=1000
maxSessionTimeout=30000
CFG
        [ "$n" = 1 ] && continue # standalone: no quorum
        for p in 1 2 3; do
            echo "server.$p=127.0.0.1:$(cat "$BASE/zk$p/quorum_port"):$(cat "$BASE/zk$p/election_port")" \
                >>"$d/zoo.cfg"
        done
    done
}

start_node() {
    local d="$BASE/zk$1"
    [ -f "$d/zoo.cfg" ] || die "no node $1 in $BASE"
    alive "$1" && die "node $1 is already running"
    setsid java -Xms32m -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp "$ZKCP" \
        org.apache.zookeeper.server.quorum.QuorumPeerMain "$d/zoo.cfg" >>"$d/out.log" 2>&1 </dev/null &
    echo $! >"$d/pid"
}

signal_node() { # signal_node I SIG
    alive "$1" || return 0
    kill "-$2" "$(cat "$BASE/zk$1/pid")" 2>/dev/null || true
}

hosts() {
    local i out=""
    for i in $(nodes); do
        out="$out${out:+,}127.0.0.1:$(port_of "$i")"
    done
    echo "$out"
}

check_node() {
    case "$NODE" in
    1 | 2 | 3) ;;
    *) usage ;;
    esac
}

case "$cmd" in
start)
    need_progs
    mkdir -p "$BASE"
    [ -z "$(ls -A "$BASE")" ] || die "$BASE is not empty"
    write_config
    for i in $(nodes); do start_node "$i"; done
    for i in $(nodes); do wait_until "node $i to serve" serving "$i"; done
    hosts
    ;;
hosts) hosts ;;
port)
    check_node
    port_of "$NODE"
    ;;
leader) zk_leader ;;
mode)
    check_node
    zk_mode "$NODE"
    ;;
stop)
    for i in 1 2 3; do
        signal_node $i CONT
        signal_node $i TERM
    done
    end=$((SECONDS + 20))
    for i in 1 2 3; do
        while alive $i; do
            if [ $SECONDS -ge $end ]; then
                signal_node $i KILL
            fi
            sleep 0.05
        done
    done
    rm -rf "$BASE"
    ;;
kill-leader)
    L=$(zk_leader)
    [ -n "$L" ] || die "no leader"
    signal_node "$L" KILL
    wait_until "node $L to exit" gone "$L"
    two_serve() {
        local i modes=""
        for i in 1 2 3; do
            [ "$i" = "$L" ] || modes="$modes $(zk_mode $i)"
        done
        case "$modes" in
        *leader*follower* | *follower*leader*) return 0 ;;
        esac
        return 1
    }
    wait_until "a new leader" two_serve
    echo "$L"
    ;;
kill-node | stop-node)
    check_node
    if [ "$cmd" = kill-node ]; then sig=KILL; else sig=TERM; fi
    signal_node "$NODE" CONT
    signal_node "$NODE" $sig
    wait_until "node $NODE to exit" gone "$NODE"
    ;;
start-node)
    need_progs
    check_node
    start_node "$NODE"
    wait_until "node $NODE to serve" serving "$NODE"
    ;;
freeze)
    if [ "$NODE" = leader ]; then
        NODE=$(zk_leader)
        [ -n "$NODE" ] || die "no leader"
        signal_node "$NODE" STOP
        echo "$NODE"
    else
        check_node
        signal_node "$NODE" STOP
    fi
    ;;
thaw)
    check_node
    signal_node "$NODE" CONT
    ;;
*) usage ;;
esac
