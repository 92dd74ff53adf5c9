#!/bin/bash
# test_nats.sh NATS_SH RUN_NATS_SH - TAP test of tests/support/nats.sh and
# tests/integration/run_nats.sh: a 3-server cluster really is routed, kill / restart / stop do
# what the header says, the credentials of the environment are enforced, and run_nats.sh hands
# a test its servers and skips without nats-server. Skips (TAP "1..0 # SKIP") when nats-server
# is not installed. The checks go through python3, not through nats.sh's own probes.
set -u
[ $# -eq 2 ] || {
    echo "usage: $0 NATS_SH RUN_NATS_SH" >&2
    exit 64
}
NATS=$1
RUN=$2
BASE=$(mktemp -d "${TMPDIR:-/tmp}/cq_nats_XXXXXX") || exit 1
trap '"$NATS" stop "$BASE/c" 2>/dev/null; "$NATS" stop "$BASE/a" 2>/dev/null; rm -rf "$BASE"' EXIT
trap 'exit 130' INT TERM
# shellcheck source=tests/support/tap.sh
. "$(dirname "$0")/tap.sh"

# probe health PORT | routes PORT | info PORT | connect PORT JSON | refused PORT
probe() {
    python3 - "$@" <<'PY'
import json, socket, sys, urllib.request, urllib.error
what, port = sys.argv[1], int(sys.argv[2])
def http(path):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, b""
    except OSError:
        return 0, b""
if what == "health":
    print(http("/healthz")[0])
elif what == "routes":
    st, body = http("/routez")
    print(json.loads(body)["num_routes"] if st == 200 else "down")
elif what == "refused":
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        print("accepted")
    except ConnectionRefusedError:
        print("refused")
else:  # info: the server's INFO; connect: its first answer to CONNECT JSON + PING
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    f = s.makefile("rb")
    info = json.loads(f.readline().split(b" ", 1)[1])
    if what == "info":
        print(info["server_name"], info.get("auth_required", False))
    else:
        s.sendall(b"CONNECT " + sys.argv[3].encode() + b"\r\nPING\r\n")
        print(f.readline().decode().strip())
PY
}
port_of() { echo "${1##*:}"; }
# wait_for EXPECTED CMD...: CMD's output until it is EXPECTED, at most 30 s (a safety stop,
# not a timing assertion); prints the last output.
wait_for() {
    local want=$1 got i=0
    shift
    got=$("$@")
    while [ "$got" != "$want" ] && [ $i -lt 600 ]; do
        sleep 0.05
        got=$("$@")
        i=$((i + 1))
    done
    echo "$got"
}
all_routes() {
    local i out=""
    for i in 1 2 3; do out="$out${out:+ }$(probe routes "$(cat "$BASE/mon$i")")"; done
    echo "$out"
}
# A zombie counts as gone: the servers' parent exits after start, and the process that
# inherits them may never reap them.
alive() {
    local st
    st=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null)
    [ -n "$st" ] && [ "$st" != Z ]
}

C=$BASE/c
urls=$("$NATS" start "$C" 3 2>"$BASE/start.log")
rc=$?
if [ $rc -eq 2 ]; then
    echo "1..0 # SKIP nats-server is not installed: $(head -n 1 "$BASE/start.log")"
    exit 0
fi
echo "1..22"
same "start 3 exits 0" 0 "$rc"
[ $rc -eq 0 ] || {
    sed 's/^/# /' "$BASE/start.log"
    exit 1
}
IFS=, read -r u1 u2 u3 rest <<<"$urls"
same "start prints three client URLs on 127.0.0.1" "nats://127.0.0.1:$(port_of "$u1") nats://127.0.0.1:$(port_of "$u2") nats://127.0.0.1:$(port_of "$u3") " \
    "$u1 $u2 $u3 $rest"
same "url I and urls print what start printed" "$urls $urls" \
    "$("$NATS" url "$C" 1),$("$NATS" url "$C" 2),$("$NATS" url "$C" 3) $("$NATS" urls "$C")"
for i in 1 2 3; do "$NATS" monitor "$C" $i >"$BASE/mon$i"; done
same "URL i is server n<i>, no auth required" "n1 False n2 False n3 False" \
    "$(probe info "$(port_of "$u1")") $(probe info "$(port_of "$u2")") $(probe info "$(port_of "$u3")")"
same "/healthz 200 on all three" "200 200 200" \
    "$(probe health "$(cat "$BASE/mon1")") $(probe health "$(cat "$BASE/mon2")") $(probe health "$(cat "$BASE/mon3")")"
same "/routez: 2 routes on each" "2 2 2" "$(all_routes)"
pids="$("$NATS" pid "$C" 1) $("$NATS" pid "$C" 2) $("$NATS" pid "$C" 3)"
same "pid I: a nats-server running on I's config" "nats-server nats-server nats-server" \
    "$(for p in $pids; do tr '\0' '\n' <"/proc/$p/cmdline" | grep -qx "$(cd "$C" && pwd -P)/n[123]/nats.conf" &&
        cat "/proc/$p/comm"; done | paste -sd' ')"

# shellcheck disable=SC2086
set -- $pids
old2=$2
"$NATS" kill "$C" 2
same "kill 2 exits 0 with server 2 gone" "0 gone" "$? $(alive "$old2" && echo alive || echo gone)"
same "kill 2: its client port refuses" "refused" "$(probe refused "$(port_of "$u2")")"
same "kill 2: 1 and 3 keep one route each" "1 down 1" "$(wait_for "1 down 1" all_routes)"
"$NATS" restart "$C" 2
same "restart 2 exits 0" 0 "$?"
new2=$("$NATS" pid "$C" 2)
same "restart 2: a new process on the same URL, healthy" "yes $u2 200 n2 False" \
    "$([ "$new2" != "$old2" ] && alive "$new2" && echo yes) $("$NATS" url "$C" 2) $(probe health "$(cat "$BASE/mon2")") $(probe info "$(port_of "$u2")")"
same "restart 2: routed again, 2 routes on each (restart waits for it)" "2 2 2" "$(all_routes)"

pids="$pids $new2"
"$NATS" stop "$C"
same "stop exits 0" 0 "$?"
same "stop: every server gone and DIR removed" "no" \
    "$(for p in $pids; do alive "$p" && echo "$p"; done)$([ -e "$C" ] && echo yes || echo no)"
same "stop again: nothing to do, exits 0" 0 "$("$NATS" stop "$C"; echo $?)"

A=$BASE/a
u=$(NATS_TOKEN=s3cret "$NATS" start "$A")
p=$(port_of "$u")
same "NATS_TOKEN: start 1, auth required" "0 n1 True" "$? $(probe info "$p")"
same "NATS_TOKEN: a wrong token is refused, the right one served" \
    "-ERR 'Authorization Violation' PONG" \
    "$(probe connect "$p" '{"auth_token":"nope","verbose":false}') $(probe connect "$p" '{"auth_token":"s3cret","verbose":false}')"
"$NATS" stop "$A"
u=$(NATS_USER=relay NATS_PASS=pw.1 "$NATS" start "$A")
p=$(port_of "$u")
same "NATS_USER/NATS_PASS: a wrong password is refused, the right one served" \
    "-ERR 'Authorization Violation' PONG" \
    "$(probe connect "$p" '{"user":"relay","pass":"pw.2","verbose":false}') $(probe connect "$p" '{"user":"relay","pass":"pw.1","verbose":false}')"
"$NATS" stop "$A"

# run_nats.sh: the test sees the servers and their DIR, its exit status passes through, and
# the servers are stopped after it.
# shellcheck disable=SC2016
out=$(CQ_NATS_NODES=3 "$RUN" bash -c 'echo "$CQ_NATS_URLS $("$CQ_NATS_SH" urls "$CQ_NATS_DIR") $CQ_NATS_DIR"
    echo "$(python3 -c "import socket; socket.create_connection((\"127.0.0.1\", ${CQ_NATS_URLS##*:})).close()" && echo up)"
    exit 7')
rc=$?
# shellcheck disable=SC2086
set -- $out
same "run_nats.sh: CQ_NATS_URLS (3 servers) = nats.sh urls CQ_NATS_DIR; the test's exit status" \
    "3 $1 up 7" "$(echo "$1" | tr , '\n' | grep -c '^nats://127\.0\.0\.1:[0-9]*$') ${2:-} ${4:-} $rc"
same "run_nats.sh: CQ_NATS_DIR removed afterwards" "no" "$([ -e "${3:-/}" ] && echo yes || echo no)"
same "run_nats.sh without nats-server: the TAP skip, exit 0, the test not run" \
    "1..0 # SKIP nats-server is not installed 0" \
    "$(NATS_SERVER=/nonexistent/nats-server "$RUN" echo ran 2>/dev/null) $?"
exit "$failed"
