#!/bin/bash
# run_zk.sh TEST [ARGS...] - runs TEST with CQ_ZK_HOSTS set to a throwaway 3-node ZooKeeper
# ensemble (tests/support/zk.sh), stopped by PID afterwards whatever TEST's outcome. With
# CQ_ZK_NODES=1 in the environment: one standalone node (a test that needs no quorum starts
# faster). TEST also gets CQ_ZK_SH (zk.sh) and CQ_ZK_BASE, to kill and start the nodes.
# Skips (TAP "1..0 # SKIP", exit 0) when java or ZooKeeper is not installed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
zk="$here/../support/zk.sh"
if [ ! -x "$zk" ]; then
    echo "1..0 # SKIP $zk is missing"
    exit 0
fi
base=$(mktemp -d "${TMPDIR:-/tmp}/cq-zk.XXXXXX")
rmdir "$base"
hosts=$("$zk" start "$base")
rc=$?
if [ $rc -eq 2 ]; then
    echo "1..0 # SKIP ZooKeeper is not installed (java or zookeeper.jar missing)"
    exit 0
fi
if [ $rc -ne 0 ]; then
    echo "run_zk.sh: the ensemble did not start" >&2
    "$zk" stop "$base" >/dev/null 2>&1
    exit 1
fi
CQ_ZK_HOSTS="$hosts" CQ_ZK_SH="$zk" CQ_ZK_BASE="$base" "$@"
rc=$?
"$zk" stop "$base" >/dev/null 2>&1
exit $rc
