#!/bin/sh
# test_mariadb_pair.sh PAIR_SH - TAP test of tests/support/mariadb-pair.sh: the pair it starts
# really is a semi-sync primary + read-only standby, the store user is fenced by read_only, and
# kill / restart / stop do what its header says. Skips (TAP "1..0 # SKIP") when MariaDB is not
# installed (the script exits 2).
set -u
[ $# -eq 1 ] || { echo "usage: $0 PAIR_SH" >&2; exit 64; }
PAIR=$1
BASE=$(mktemp -d "${TMPDIR:-/tmp}/cq_pair_XXXXXX") || exit 1
rmdir "$BASE"
# A short semi-sync timeout keeps the "standby down" case quick.
export MARIADB_PAIR_SEMI_TIMEOUT_MS=500
trap '"$PAIR" stop "$BASE" 2>/dev/null; rm -rf "$BASE" "$BASE.log"' EXIT
trap 'exit 130' INT TERM

n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1"; }
check() { # check DESCRIPTION EXPECTED ACTUAL
    if [ "$2" = "$3" ]; then ok "$1"; else not_ok "$1"; echo "#   expected '$2', got '$3'"; fi
}
root() { _p=$1; shift; mariadb --no-defaults -uroot -h127.0.0.1 -P"$_p" -N -B -e "$*" 2>&1; }
store() { _p=$1; shift; mariadb --no-defaults -uchanq -pchanqpw -h127.0.0.1 -P"$_p" chanq -N -B -e "$*" 2>&1; }
status() { root "$1" "SHOW GLOBAL STATUS LIKE '$2'" | cut -f2; }
# wait_status PORT VAR VALUE: up to 30 s (a safety stop, not a timing assertion)
wait_status() {
    i=0
    while [ $i -lt 600 ] && [ "$(status "$1" "$2")" != "$3" ]; do sleep 0.05; i=$((i + 1)); done
    status "$1" "$2"
}

ports=$("$PAIR" start "$BASE" 2>"$BASE.log")
rc=$?
if [ $rc -eq 2 ]; then
    echo "1..0 # SKIP MariaDB unavailable: $(head -n 1 "$BASE.log")"
    exit 0
fi
echo "1..14"
check "start exits 0" 0 "$rc"
[ $rc -eq 0 ] || { sed 's/^/# /' "$BASE.log"; exit 1; }
set -- $ports
P=$1
S=${2:-}
check "ports prints what start printed" "$ports" "$("$PAIR" ports "$BASE")"
check "primary: semi-sync ON with one client" "ON 1" \
    "$(status "$P" Rpl_semi_sync_master_status) $(status "$P" Rpl_semi_sync_master_clients)"
check "standby: read_only, slave semi-sync ON, parallel optimistic" "1 ON optimistic" \
    "$(root "$S" "SELECT @@read_only") $(status "$S" Rpl_semi_sync_slave_status) $(root "$S" "SELECT @@slave_parallel_mode")"

check "store user writes on the primary" "" \
    "$(store "$P" "CREATE TABLE t (a INT PRIMARY KEY); INSERT INTO t VALUES (1)")"
gtid=$(root "$P" "SELECT @@gtid_binlog_pos")
check "the write reaches the standby" "0 1" \
    "$(root "$S" "SELECT MASTER_GTID_WAIT('$gtid', 30)") $(store "$S" "SELECT a FROM t")"
check "read_only fences the store user on the standby (1290)" "ERROR 1290" \
    "$(store "$S" "INSERT INTO t VALUES (2)" | grep -o 'ERROR 1290')"
check "the store user has no SUPER / READ_ONLY ADMIN" "ERROR 1227" \
    "$(store "$P" "SET GLOBAL read_only=ON" | grep -o 'ERROR 1227')"

"$PAIR" kill-standby "$BASE"
check "kill-standby: the next commit degrades semi-sync to OFF" "OFF" \
    "$(store "$P" "INSERT INTO t VALUES (3)"; status "$P" Rpl_semi_sync_master_status)"
"$PAIR" restart-standby "$BASE"
check "restart-standby: semi-sync back ON" "ON" "$(wait_status "$P" Rpl_semi_sync_master_status ON)"

"$PAIR" kill-primary "$BASE"
check "kill-primary: the primary is gone" "" "$(root "$P" "SELECT 1" | grep -v ERROR)"
"$PAIR" restart-primary "$BASE"
check "restart-primary: writable, semi-sync ON, one client" "0 ON 1" \
    "$(root "$P" "SELECT @@read_only") $(status "$P" Rpl_semi_sync_master_status) $(status "$P" Rpl_semi_sync_master_clients)"

"$PAIR" kill-primary "$BASE"
"$PAIR" restart-primary "$BASE" as-replica
check "restart-primary as-replica: read_only, semi-sync master off, slave role" \
    "1 0 --init-rpl-role=SLAVE --skip-slave-start" \
    "$(root "$P" "SELECT @@read_only, @@rpl_semi_sync_master_enabled" | tr '\t' ' ') $(tr '\0' '\n' \
        <"/proc/$(cat "$BASE/primary/launcher.pid")/cmdline" | grep -E '^--(init-rpl-role|skip-slave-start)' | paste -sd' ')"

pids=$(cat "$BASE/primary/launcher.pid" "$BASE/standby/launcher.pid" 2>/dev/null)
"$PAIR" stop "$BASE"
alive=
for p in $pids; do # a zombie counts as gone: its parent (not us) may reap it later
    [ "$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$p/status" 2>/dev/null)" ] &&
        [ "$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$p/status")" != Z ] && alive="$alive $p"
done
check "stop: both servers gone and BASE removed" "2 no" \
    "$(echo $pids | wc -w)$alive $([ -e "$BASE" ] && echo yes || echo no)"
[ $failed -eq 0 ]
