#!/bin/bash
# run-interop.sh KCP_ECHO GO_OUTDIR - chanq's KCP engine against kcp-go (no chanqd needed).
#
# Builds the kcp-go peer (build.sh GO_OUTDIR; exit 77 = skipped when Go or kcp-go is missing),
# starts KCP_ECHO (cq_kcp as a UDP echo server) and runs the kcp-go client against it, which
# writes messages of 1 byte to 40 KB as one stream (byte i = i mod 251) and checks every echoed
# byte in order, and that nothing extra follows:
#   1. kcp-go defaults (channeld's client) -> engine, fast profile (chanqd's)
#   2. kcp-go fast profile                 -> engine, fast profile
#   3. kcp-go defaults                     -> engine, kcp-go defaults
#   4. kcp-go defaults -> proxy 10 % loss -> engine, fast profile
#   5. kcp-go fast -> proxy 10 % loss, reordering, duplication -> engine, fast profile
#   6. TCP -> bridge (kcp-go defaults) -> engine, fast profile (checks the bridge mode)
#   7. kcp-go client -> kcp-go echo (checks the tool itself)
#   8. kcp-go fast -> proxy 10 % loss -> engine, kcp-go defaults: 200 messages of 1000 bytes,
#      10 ms apart (issue 10 item 13, the game-client case), and 9. the same against a kcp-go
#      echo, for comparison of the printed times
# Prints one line per case with the client's elapsed time; exits 1 if any case failed.
# Processes are started in a temp dir and stopped by PID.
set -u
if [ $# -ne 2 ]; then
    echo "usage: $0 KCP_ECHO GO_OUTDIR" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
echo_exe=$1
"$here/build.sh" "$2"
rc=$?
[ $rc -eq 0 ] || exit $rc
peer=$(cd "$2" && pwd)/kcppeer

tmp=$(mktemp -d "${TMPDIR:-/tmp}/chanq-kcp-interop.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do
        kill "$p" 2>/dev/null
    done
    for p in "${pids[@]}"; do
        wait "$p" 2>/dev/null
    done
    rm -rf "$tmp"
}
trap cleanup EXIT

# start NAME CMD... : runs CMD in the background, waits for "ready PORT", sets $port.
start() {
    local name=$1
    shift
    "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
    pids+=($!)
    for _ in $(seq 100); do
        port=$(awk '/^ready /{print $2; exit}' "$tmp/$name.out")
        [ -n "$port" ] && return 0
        sleep 0.1
    done
    echo "$name did not become ready:" >&2
    cat "$tmp/$name.err" >&2
    exit 1
}

pass=0
fail=0
# check NAME CMD... : runs a client command, which prints "ok ... ms=T" on success.
check() {
    local name=$1
    shift
    local out
    if out=$("$@" 2>&1); then
        pass=$((pass + 1))
        echo "ok   $name: $out"
    else
        fail=$((fail + 1))
        echo "FAIL $name: $out"
    fi
}

start echo_fast "$echo_exe" -P fast
p_fast=$port
start echo_def "$echo_exe" -P default
p_def=$port
start proxy_loss "$peer" proxy -to "127.0.0.1:$p_fast" -loss 0.1 -seed 7
p_loss=$port
start proxy_all "$peer" proxy -to "127.0.0.1:$p_fast" -loss 0.1 -seed 8 -reorder -dup
p_all=$port
start bridge "$peer" bridge -kcp "127.0.0.1:$p_fast"
p_bridge=$port
start goecho "$peer" echo
p_goecho=$port
start proxy_def "$peer" proxy -to "127.0.0.1:$p_def" -loss 0.1 -seed 9
p_loss_def=$port
start proxy_go "$peer" proxy -to "127.0.0.1:$p_goecho" -loss 0.1 -seed 9
p_loss_go=$port

check "kcp-go defaults -> engine fast" "$peer" client -kcp "127.0.0.1:$p_fast"
check "kcp-go fast -> engine fast" "$peer" client -kcp "127.0.0.1:$p_fast" -fast
check "kcp-go defaults -> engine defaults" "$peer" client -kcp "127.0.0.1:$p_def"
check "kcp-go defaults -> 10% loss -> engine fast" "$peer" client -kcp "127.0.0.1:$p_loss"
check "kcp-go fast -> 10% loss+reorder+dup -> engine fast" \
    "$peer" client -kcp "127.0.0.1:$p_all" -fast
check "tcp -> bridge (kcp-go defaults) -> engine fast" /usr/bin/python3 - "$p_bridge" <<'EOF'
import socket, sys, threading, time
total = 200000
data = bytes(i % 251 for i in range(total))
start = time.monotonic()
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=120)
threading.Thread(target=s.sendall, args=(data,), daemon=True).start()
got = bytearray()
while len(got) < total:
    b = s.recv(65536)
    if not b:
        sys.exit("closed after %d bytes" % len(got))
    got += b
if bytes(got[:total]) != data or len(got) != total:
    sys.exit("echo differs")
print("ok bytes=%d ms=%d" % (total, (time.monotonic() - start) * 1000))
EOF
check "kcp-go client -> kcp-go echo (tool check)" "$peer" client -kcp "127.0.0.1:$p_goecho"
game=(-fast -n 200 -sizes 1000 -gap 10ms)
check "kcp-go fast -> 10% loss -> engine defaults, 200 x 1000 B" \
    "$peer" client -kcp "127.0.0.1:$p_loss_def" "${game[@]}"
check "kcp-go fast -> 10% loss -> kcp-go echo, 200 x 1000 B (comparison)" \
    "$peer" client -kcp "127.0.0.1:$p_loss_go" "${game[@]}"

for p in "${pids[@]}"; do
    kill "$p" 2>/dev/null
done
for p in "${pids[@]}"; do
    wait "$p" 2>/dev/null
done
pids=()
cat "$tmp/echo_fast.err" "$tmp/echo_def.err" "$tmp/proxy_loss.err" "$tmp/proxy_all.err"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
