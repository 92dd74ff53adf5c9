#!/bin/sh
# run_mariadb.sh MARIADB_SH TEST [ARGS...] - runs TEST against a throwaway MariaDB server.
#
# Starts a server with MARIADB_SH (tests/support/mariadb.sh) in a fresh temp dir, runs TEST with
# CQ_MARIADB_PORT set to its port (and CQ_MARIADB_SH / CQ_MARIADB_BASE, so that a crash test can
# run "$CQ_MARIADB_SH kill|restart $CQ_MARIADB_BASE"), then stops the server by PID and removes the dir, whatever
# TEST did. When MariaDB is not installed or does not start, prints a TAP plan that skips
# everything ("1..0 # SKIP reason") and succeeds. The exit status is TEST's.
set -u
[ $# -ge 2 ] || { echo "usage: $0 MARIADB_SH TEST [ARGS...]" >&2; exit 64; }
fixture=$1
shift
base=$(mktemp -d "${TMPDIR:-/tmp}/cq_mariadb_XXXXXX") || exit 1
log="$base.log"
if ! port=$("$fixture" start "$base" 2>"$log"); then
    echo "1..0 # SKIP MariaDB unavailable: $(head -n 1 "$log")"
    sed 's/^/# /' "$log"
    "$fixture" stop "$base" 2>/dev/null
    rm -rf "$base" "$log"
    exit 0
fi
rm -f "$log"
trap '"$fixture" stop "$base"; rm -rf "$base"' EXIT
trap 'exit 130' INT TERM
fixture_abs=$(cd "$(dirname "$fixture")" && pwd)/$(basename "$fixture")
CQ_MARIADB_PORT=$port CQ_MARIADB_SH=$fixture_abs CQ_MARIADB_BASE=$base "$@"
rc=$?
exit $rc
