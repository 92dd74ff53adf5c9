#!/bin/sh
# run_pair.sh PAIR_SH TEST [ARGS...] - runs TEST against a throwaway MariaDB primary + standby.
#
# Starts the pair with PAIR_SH (tests/support/mariadb-pair.sh) in a fresh temp dir, runs TEST
# with CQ_PAIR_SH (absolute), CQ_PAIR_BASE, CQ_PRIMARY_PORT and CQ_STANDBY_PORT set (so that it
# can kill and restart either server), then stops both by PID and removes the dir, whatever TEST
# did. When MariaDB is missing (exit 2) prints a TAP plan that skips everything; when the pair
# does not start, fails. The exit status is TEST's.
set -u
[ $# -ge 2 ] || { echo "usage: $0 PAIR_SH TEST [ARGS...]" >&2; exit 64; }
fixture=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
shift
base=$(mktemp -d "${TMPDIR:-/tmp}/cq_pair_XXXXXX") || exit 1
log="$base.log"
ports=$("$fixture" start "$base" 2>"$log")
rc=$?
if [ $rc -ne 0 ]; then
    [ $rc -eq 2 ] && echo "1..0 # SKIP MariaDB unavailable: $(head -n 1 "$log")"
    sed 's/^/# /' "$log"
    "$fixture" stop "$base" 2>/dev/null
    rm -rf "$base" "$log"
    [ $rc -eq 2 ] && exit 0
    exit 1
fi
rm -f "$log"
trap '"$fixture" stop "$base"; rm -rf "$base"' EXIT
trap 'exit 130' INT TERM
set -- "$@"
CQ_PAIR_SH=$fixture CQ_PAIR_BASE=$base CQ_PRIMARY_PORT=${ports% *} CQ_STANDBY_PORT=${ports#* } "$@"
