#!/bin/bash
# run_nats.sh TEST [ARGS...] - runs TEST with throwaway nats-server processes
# (tests/support/nats.sh), stopped by PID afterwards whatever TEST's outcome. CQ_NATS_NODES in
# the environment: how many (default 1, a standalone server; 3 for a routed cluster).
# TEST gets CQ_NATS_URLS (the client URLs, comma-separated, server i = the i-th), CQ_NATS_DIR
# and CQ_NATS_SH, to kill or restart a server: "$CQ_NATS_SH" kill "$CQ_NATS_DIR" 2.
# NATS_USER / NATS_PASS or NATS_TOKEN in the environment: the servers require them.
# Skips (TAP "1..0 # SKIP", exit 0) when nats-server is not installed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
nats="$here/../support/nats.sh"
if [ ! -x "$nats" ]; then
    echo "1..0 # SKIP $nats is missing"
    exit 0
fi
base=$(mktemp -d "${TMPDIR:-/tmp}/cq-nats.XXXXXX") || exit 1
urls=$("$nats" start "$base" "${CQ_NATS_NODES:-1}")
rc=$?
if [ $rc -eq 2 ]; then
    rmdir "$base"
    echo "1..0 # SKIP nats-server is not installed"
    exit 0
fi
if [ $rc -ne 0 ]; then
    echo "run_nats.sh: nats-server did not start" >&2
    "$nats" stop "$base" >/dev/null 2>&1
    exit 1
fi
trap '"$nats" stop "$base" >/dev/null 2>&1; exit 130' INT TERM
CQ_NATS_URLS="$urls" CQ_NATS_DIR="$base" CQ_NATS_SH="$nats" "$@"
rc=$?
"$nats" stop "$base" >/dev/null 2>&1
exit $rc
