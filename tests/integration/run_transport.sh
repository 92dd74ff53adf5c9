#!/usr/bin/env bash
# run_transport.sh KIND EXE [ARGS...] - runs an integration executable with its client
# connections going through a real third-party client stack (the shared scenarios, issue 5):
#   ws   python3-websockets (Debian, run with /usr/bin/python3) via tests/interop/ws/ws_bridge.py
#   wss  the same over TLS, with a test certificate made here by the openssl CLI
#   kcp  kcp-go (Debian golang-github-xtaci-kcp-dev) via tests/interop/kcp kcppeer "bridge"
#   kcp-lossy  the same through kcppeer's UDP proxy dropping 10% of datagrams each way
# Prints a TAP skip plan when the peer cannot be installed, so the suite says why.
set -uo pipefail
kind=$1
shift
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${MESON_BUILD_ROOT:-$(pwd)}
case "$kind" in
ws | wss)
    if ! /usr/bin/python3 -c 'import websockets' 2>/dev/null; then
        echo "1..0 # SKIP python3-websockets is not installed (scripts/deps.sh test)"
        exit 0
    fi
    export CHANQ_WS_BRIDGE="$here/tests/interop/ws/ws_bridge.py"
    if [ "$kind" = wss ]; then
        tmp=$(mktemp -d)
        trap 'rm -rf "$tmp"' EXIT
        openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/key.pem" -out "$tmp/cert.pem" \
            -days 2 -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
            2>/dev/null || { echo "Bail out! openssl cannot make a test certificate"; exit 1; }
        export CHANQ_TLS_CERT="$tmp/cert.pem" CHANQ_TLS_KEY="$tmp/key.pem"
    fi
    ;;
kcp | kcp-lossy)
    out="$build/interop/kcp"
    if [ ! -x "$out/kcppeer" ] || [ "$here/tests/interop/kcp/kcppeer/main.go" -nt "$out/kcppeer" ]; then
        sh "$here/tests/interop/kcp/build.sh" "$out" >&2
        rc=$?
        if [ $rc -eq 77 ]; then
            echo "1..0 # SKIP kcp-go is not installed (scripts/deps.sh test)"
            exit 0
        elif [ $rc -ne 0 ]; then
            echo "Bail out! cannot build the kcp-go peer"
            exit 1
        fi
    fi
    export CHANQ_KCP_PEER="$out/kcppeer"
    ;;
*)
    echo "usage: $0 ws|wss|kcp|kcp-lossy EXE [ARGS...]" >&2
    exit 2
    ;;
esac
# cmocka writes "not ok N # SKIP" for a skipped test; TAP (and meson) want "ok N # SKIP".
"$@" --transport="$kind" | sed -u 's/^not ok \([0-9]*\) # SKIP/ok \1 # SKIP/'
exit "${PIPESTATUS[0]}"
