"""cqproc.py - start chanqd and its manager for the script tests (test_prometheus.py,
test_dashboard.py, test_admin_cli.py): loopback only, each process tracked by PID and stopped by
it (stop_all), never by name.

Both roles get port 0 everywhere and write --ready-file with the ports they bound.
"""
import os
import signal
import socket
import subprocess
import time

WAIT_S = 20.0


class Procs:
    def __init__(self):
        self.list = []

    def start(self, argv, log):
        with open(log, "wb") as f:
            p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL)
        self.list.append(p)
        return p

    def stop_all(self):
        for p in reversed(self.list):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_ready(path, p, what):
    """The ready file's key=value pairs once the process wrote it."""
    end = time.time() + WAIT_S
    while time.time() < end:
        if p.poll() is not None:
            raise RuntimeError("%s exited with %s before it was ready" % (what, p.returncode))
        if os.path.exists(path):
            with open(path) as f:
                text = f.read()
            if text.strip():
                return dict(kv.split("=", 1) for kv in text.split() if "=" in kv)
        time.sleep(0.05)
    raise RuntimeError("%s: no ready file after %ss" % (what, WAIT_S))


def start_server(procs, chanqd, tmp, name, extra=()):
    """chanqd with a sqlite store in tmp/name.data; returns its ready-file dict."""
    argv = [chanqd, "--client-addr", "127.0.0.1:0", "--server-addr", "127.0.0.1:0",
            "--admin-addr", "127.0.0.1:0", "--mq-addr", "127.0.0.1:0", "--mq-http-addr", "",
            "--ws-addr", "", "--kcp-addr", "", "--store-backend", "sqlite", "--store-dir",
            "%s/%s.data" % (tmp, name), "--ready-file", "%s/%s.ready" % (tmp, name)]
    p = procs.start(argv + list(extra), "%s/%s.log" % (tmp, name))
    return wait_ready("%s/%s.ready" % (tmp, name), p, name)


def start_mgr(procs, chanqd, tmp, extra=()):
    """`chanqd --role mgr` (file state in tmp, port 0 everywhere); returns {"mgr", "mgrhttp",
    "admin"} (H:P each) from its ready file ("mgr=H:P http=H:P admin=H:P"). Raises RuntimeError
    when it exits or does not get ready within WAIT_S."""
    argv = [chanqd, "--role", "mgr", "--mgr-addr", "127.0.0.1:0", "--mgr-http-addr",
            "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--mgr-state-file",
            tmp + "/mgr-state.json", "--ready-file", tmp + "/mgr.ready"]
    p = procs.start(argv + list(extra), tmp + "/mgr.log")
    r = wait_ready(tmp + "/mgr.ready", p, "the manager")
    return {"mgr": r["mgr"], "mgrhttp": r["http"], "admin": r["admin"]}
