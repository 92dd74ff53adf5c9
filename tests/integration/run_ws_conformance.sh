#!/usr/bin/env bash
# run_ws_conformance.sh - the RFC 6455 conformance probe (tests/interop/ws/ws_conformance.py,
# 27 cases with the message limit one, stdlib-only raw sockets) against a real chanqd, over ws
# and over wss with a test certificate made here. chanq mode: the data is a channeld AUTH
# packet, sent whole, chopped or fragmented, and success means a binary reply starting with
# "CH"; a failed connection must show its Close frame and code (1002, 1007, 1009) before the
# TCP close, over wss too. Output is TAP.
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
: "${CHANQD:?set CHANQD}"
if ! [ -x /usr/bin/python3 ] || ! command -v openssl >/dev/null; then
    echo "1..0 # SKIP /usr/bin/python3 or openssl is missing"
    exit 0
fi
tmp=$(mktemp -d)
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/key.pem" -out "$tmp/cert.pem" -days 2 \
    -subj /CN=localhost 2>/dev/null || { echo "Bail out! openssl failed"; exit 1; }
"$CHANQD" --client-addr 127.0.0.1:0 --server-addr 127.0.0.1:0 --admin-addr '' --mq-addr '' \
    --mq-http-addr '' --kcp-addr '' --ws-addr 127.0.0.1:0 --wss-addr 127.0.0.1:0 \
    --tls-cert "$tmp/cert.pem" --tls-key "$tmp/key.pem" --ready-file "$tmp/ready" \
    --ws-max-message 131072 \
    --store-dir "$tmp/data" --workers 2 >"$tmp/log" 2>&1 &
pid=$!
for _ in $(seq 100); do [ -s "$tmp/ready" ] && break; sleep 0.1; done
[ -s "$tmp/ready" ] || { echo "Bail out! chanqd did not start"; cat "$tmp/log" >&2; exit 1; }
ws=$(sed 's/.* ws=\([^ ]*\).*/\1/' "$tmp/ready")
wss=$(sed 's/.* wss=\([^ ]*\).*/\1/' "$tmp/ready")
echo "1..54"
n=0 rc=0
run() { # label, probe args...
    local label=$1 line
    shift
    while IFS= read -r line; do
        case "$line" in
        "ok "*) n=$((n + 1)); echo "ok $n - $label ${line#ok * [0-9]* }" ;;
        "FAIL "*) n=$((n + 1)); rc=1; echo "not ok $n - $label ${line#FAIL }" ;;
        *) echo "# $line" ;;
        esac
    done < <(/usr/bin/python3 "$here/tests/interop/ws/ws_conformance.py" --mode chanq \
        --max-message 131072 "$@" 2>&1)
}
run ws "ws://$ws/"
run wss --tls "wss://$wss/"
kill -0 "$pid" 2>/dev/null || { echo "# chanqd died"; cat "$tmp/log" >&2; rc=1; }
[ $n -eq 54 ] || rc=1
exit $rc
