#!/usr/bin/python3
"""ws_check.py - runs ws_conformance.py (echo mode) and a ws_bridge.py round trip against an
echo server, over ws and over wss, and sums up.

Usage:
  ws_check.py --c-echo BUILD/tests/unit/transport/ws/cq_ws_echo   chanq's engines (cq_wsup, cq_ws, cq_tls)
  ws_check.py --node-echo [--ws-node-dir DIR] [--npm-install]
                                                      npm ws (the reference peer)

A self-signed certificate for wss is made with the openssl CLI in a temp dir. --node-echo
resolves `ws` from DIR/node_modules (default $WS_NODE_DIR or ${TMPDIR:-/tmp}/chanq-ws-node);
--npm-install runs `npm install ws@8` there first when it is missing, never inside the repo.
Servers are started on 127.0.0.1 port 0 and stopped by PID. Prints the probe's lines, then
"N passed, N failed" over everything; exits 1 on any failure, 77 when a tool is missing (the
bridge round trip is skipped, not failed, without python3-websockets).
"""
import argparse
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3"


def skip(why):
    print("skipped: " + why)
    sys.exit(77)


def start(cmd, env=None):
    """Starts cmd, waits for "ready <port>" on its stdout; returns (process, port)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=sys.stderr, env=env, text=True)
    deadline = time.time() + 15
    while time.time() < deadline:
        line = p.stdout.readline()
        if line.startswith("ready "):
            return p, int(line.split()[1])
        if not line and p.poll() is not None:
            break
    stop(p)
    raise RuntimeError("%s did not get ready" % cmd[0])


def stop(p):
    """Stops p with SIGTERM (SIGKILL after 10 s); returns its exit status."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return p.returncode


def make_cert(d):
    if not shutil.which("openssl"):
        skip("the openssl command is missing")
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                    "-out", cert, "-days", "2", "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return cert, key


def probe(url):
    """Runs the 26 cases; returns (passed, failed)."""
    r = subprocess.run([PY, os.path.join(HERE, "ws_conformance.py"), "--mode", "echo", url],
                       stdout=subprocess.PIPE, text=True)
    out = r.stdout.strip().splitlines()
    for line in out:
        print("  " + line)
    last = out[-1].split() if out else []
    if len(last) == 4 and last[1] == "passed,":
        return int(last[0]), int(last[2])
    return 0, 1


def bridge_round_trip(url):
    """Sends 100 KB through ws_bridge.py and expects it back; returns None when skipped."""
    if importlib.util.find_spec("websockets") is None:
        return None
    p, port = start([PY, os.path.join(HERE, "ws_bridge.py"), url])
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        data = bytes((i * 7) % 251 for i in range(100000))
        s.sendall(data)
        got = b""
        while len(got) < len(data):
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        s.shutdown(socket.SHUT_WR)
        eof = s.recv(1) == b""
        s.close()
        return got == data and eof
    finally:
        stop(p)


def server_cmd(args, tls, cert, key):
    extra = ["--cert", cert, "--key", key] if tls else []
    if args.c_echo:
        return [args.c_echo, "--port", "0"] + extra, None
    env = dict(os.environ, WS_NODE_DIR=args.ws_node_dir)
    return ["node", os.path.join(HERE, "ws_echo_server.mjs"), "--port", "0"] + extra, env


def node_setup(args):
    if not shutil.which("node"):
        skip("node is missing")
    if os.path.isdir(os.path.join(args.ws_node_dir, "node_modules", "ws")):
        return
    if not args.npm_install:
        skip("npm ws not found under %s (use --npm-install)" % args.ws_node_dir)
    os.makedirs(args.ws_node_dir, exist_ok=True)
    subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", args.ws_node_dir,
                    "ws@8"], check=True, stdout=subprocess.DEVNULL)


def main():
    p = argparse.ArgumentParser(description="conformance + bridge check (see the docstring)")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--c-echo", help="path of the cq_ws_echo executable")
    g.add_argument("--node-echo", action="store_true", help="npm ws echo server")
    p.add_argument("--ws-node-dir", default=os.environ.get(
        "WS_NODE_DIR", os.path.join(tempfile.gettempdir(), "chanq-ws-node")))
    p.add_argument("--npm-install", action="store_true")
    args = p.parse_args()
    if args.node_echo:
        node_setup(args)
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="chanq-ws-") as d:
        cert, key = make_cert(d)
        for tls in (False, True):
            cmd, env = server_cmd(args, tls, cert, key)
            srv, port = start(cmd, env)
            try:
                url = "%s://127.0.0.1:%d/" % ("wss" if tls else "ws", port)
                print("== %s against %s" % (url, os.path.basename(cmd[1 if env else 0])))
                a, b = probe(url)
                passed, failed = passed + a, failed + b
                ok = bridge_round_trip(url)
                if ok is None:
                    print("  bridge round trip skipped (no python3-websockets)")
                else:
                    print("  %s bridge round trip (100000 bytes, EOF)" % ("ok  " if ok else "FAIL"))
                    passed, failed = passed + (1 if ok else 0), failed + (0 if ok else 1)
            finally:
                rc = stop(srv)
            if rc != 0:  # e.g. a sanitizer report at exit
                print("  FAIL server exited with status %d" % rc)
                failed += 1
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
