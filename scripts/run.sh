#!/usr/bin/env bash
# One command: install what is missing, build, and run chanqd on its embedded defaults
# (clients on 127.0.0.1:12108, servers on 127.0.0.1:11288, /metrics on 127.0.0.1:8080), next to
# a manager (`chanqd --role mgr`: management port 127.0.0.1:12120, admin console on
# http://127.0.0.1:12121/, its /metrics on 127.0.0.1:8081) that chanqd reports to. The
# manager's files live in chanq-mgr/ (state.json, audit.log, admin.token, server.token: the
# tokens are generated once, mode 0600). The console URL and the admin token's file are printed.
# chanq admin (build/tools/chanq) is built too.
# Extra arguments go to chanqd, e.g. scripts/run.sh --workers 2 --log-level debug
# CHANQ_MGR=0 runs chanqd alone, as before.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh build
[ -f build/build.ninja ] || meson setup build -Dtests=disabled >/dev/null
ninja -C build src/main/chanqd tools/chanq >/dev/null
[ "${CHANQ_MGR:-1}" = 1 ] || exec build/src/main/chanqd "$@"

mgr_dir=chanq-mgr
mkdir -p "$mgr_dir"
chmod 700 "$mgr_dir"
new_token() { # FILE: 32 random bytes as hex, once
    [ -s "$1" ] && return 0
    (umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$1")
}
new_token "$mgr_dir/admin.token"
new_token "$mgr_dir/server.token"
rm -f "$mgr_dir/ready"

build/src/main/chanqd --role mgr --mgr-state-file "$mgr_dir/state.json" \
    --mgr-audit-log "$mgr_dir/audit.log" --mgr-admin-token-file "$mgr_dir/admin.token" \
    --mgr-token-file "$mgr_dir/server.token" --admin-addr 127.0.0.1:8081 \
    --ready-file "$mgr_dir/ready" >"$mgr_dir/mgr.log" 2>&1 &
mgr_pid=$!
stop_mgr() { kill "$mgr_pid" 2>/dev/null || true; wait "$mgr_pid" 2>/dev/null || true; }
trap stop_mgr EXIT
for _ in $(seq 100); do # up to 10 s for its ready file
    [ -s "$mgr_dir/ready" ] && break
    kill -0 "$mgr_pid" 2>/dev/null || break
    sleep 0.1
done
if [ ! -s "$mgr_dir/ready" ]; then
    echo "the manager did not start; $mgr_dir/mgr.log:" >&2
    tail -n 20 "$mgr_dir/mgr.log" >&2
    exit 1
fi
http=$(tr ' ' '\n' <"$mgr_dir/ready" | sed -n 's/^http=//p')
cat <<EOF
chanq console: http://${http:-127.0.0.1:12121}/
  log in with the admin token in $PWD/$mgr_dir/admin.token
  (manager log: $mgr_dir/mgr.log, audit log: $mgr_dir/audit.log)
  durable topics: chanqd's own permissions until the manager has a module (Modules view, or
  build/tools/chanq admin module set), then only the manager's modules
EOF
build/src/main/chanqd --mgr-servers 127.0.0.1:12120 --mgr-token-file "$mgr_dir/server.token" "$@"
