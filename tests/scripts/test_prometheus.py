#!/usr/bin/env python3
"""test_prometheus.py - a real Prometheus (Debian's `prometheus`) scrapes chanqd and the manager
on loopback; the values are read back through its HTTP query API (issue 13, doc/metrics.md).

  CHANQD=build/src/main/chanqd CHANQ=build/tools/chanq tests/scripts/test_prometheus.py

Starts (each by PID, in a temp directory, stopped by PID whatever the outcome):
  - `chanqd --role mgr` (file state), its /metrics on --admin-addr;
  - chanqd (sqlite store) reporting to it (--mgr-servers, --mgr-report-ms 200);
  - prometheus with a temp config (scrape_interval 1s, both targets), a temp TSDB and
    --web.listen-address on a free loopback port.
Then holds K raw TCP connections on the client port, produces N messages with the chanq CLI and
checks exact values: chanq_mq_topic_produced_total{topic="t"} == N,
connection_num{type="CLIENT"} == K, chanq_mgr_servers{state="live"} == 1, up == 1 for both jobs.
Waits poll the query API with a 30 s safety stop. TAP output; skips (1..0 # SKIP) only when
prometheus is not installed.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cqproc  # noqa: E402

N = 37  # messages produced
K = 3  # raw client connections held open
WAIT_S = 30.0

procs = cqproc.Procs()  # started here, stopped by PID
results = []


def tap(ok, what, detail=""):
    results.append(ok)
    print(("ok" if ok else "not ok") + " %d - %s" % (len(results), what), flush=True)
    if not ok and detail:
        for line in str(detail).splitlines():
            print("#   " + line)
    return ok


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def query(base, q):
    """The single sample value of instant query q as a float, or None (no sample)."""
    body = http_get(base + "/api/v1/query?query=" + urllib.parse.quote(q))
    doc = json.loads(body)
    if doc.get("status") != "success":
        raise RuntimeError("query %s: %s" % (q, body))
    res = doc["data"]["result"]
    if len(res) != 1:
        return None if not res else ("%d series" % len(res))
    return float(res[0]["value"][1])


def query_until(base, q, want):
    """Polls q until it equals want (or the safety stop); returns the last value."""
    end = time.time() + WAIT_S
    v = None
    while time.time() < end:
        v = query(base, q)
        if v == want:
            return v
        time.sleep(0.25)
    return v


def main():
    chanqd = os.environ.get("CHANQD")
    chanq = os.environ.get("CHANQ")
    if not chanqd or not chanq:
        print("1..0 # SKIP CHANQD and CHANQ must be set (meson test sets them)")
        return 0
    prom = shutil.which("prometheus")
    if not prom:
        print("1..0 # SKIP prometheus is not installed (scripts/deps.sh test installs it)")
        return 0
    tmp = tempfile.mkdtemp(prefix="cq-prom.")
    keep = False
    held = []
    try:
        print("1..8", flush=True)
        with open(tmp + "/admin.token", "w") as f:
            f.write("prom-admin\n")
        os.chmod(tmp + "/admin.token", 0o600)
        with open(tmp + "/m1.token", "w") as f:
            f.write("m1-token\n")
        mr = cqproc.start_mgr(procs, chanqd, tmp,
                              ["--dev", "--mgr-admin-token-file", tmp + "/admin.token"])
        # the K raw connections never authenticate: --auth-timeout-ms 0 keeps them
        sr = cqproc.start_server(procs, chanqd, tmp, "srv", [
            "--auth-timeout-ms", "0", "--mgr-servers", mr["mgr"],
            "--mgr-report-ms", "200"])
        port = cqproc.free_port()
        base = "http://127.0.0.1:%d" % port
        with open(tmp + "/prometheus.yml", "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n"
                    "  - job_name: chanqd\n    static_configs:\n"
                    "      - targets: ['%s']\n"
                    "  - job_name: mgr\n    static_configs:\n"
                    "      - targets: ['%s']\n"
                    % (sr["admin"], mr["admin"]))
        pr = procs.start([prom, "--config.file", tmp + "/prometheus.yml",
                          "--storage.tsdb.path", tmp + "/tsdb",
                          "--web.listen-address", "127.0.0.1:%d" % port],
                         tmp + "/prometheus.log")
        end = time.time() + WAIT_S
        ready = False
        while time.time() < end and not ready:
            if pr.poll() is not None:
                break
            try:
                ready = http_get(base + "/-/ready", timeout=1).strip() != ""
            except OSError:
                time.sleep(0.1)
        if not tap(ready, "prometheus serves its API on 127.0.0.1:%d" % port):
            raise RuntimeError("prometheus did not start")

        host, cport = sr["client"].rsplit(":", 1)
        for _ in range(K):
            held.append(socket.create_connection((host, int(cport)), timeout=5))
        mq = sr["mq"]
        # a managed server takes its permissions from the manager: module 1 may do anything
        r = subprocess.run([chanq, "admin", "--mgr-http", mr["mgrhttp"], "--admin-token-file",
                            tmp + "/admin.token", "module", "set", "1", "--produce", "*",
                            "--consume", "*", "--admin", "--token-file", tmp + "/m1.token"],
                           capture_output=True)
        if r.returncode != 0:
            raise RuntimeError("chanq admin module set 1: %s" % r.stderr.decode())
        cli = [chanq, "--addr", mq, "--module", "1", "--token", "m1-token"]
        end = time.time() + WAIT_S  # until the server applied the published configuration
        while True:
            r = subprocess.run(cli + ["add-topic", "t"], capture_output=True)
            if r.returncode == 0 or time.time() > end:
                break
            time.sleep(0.1)
        tap(r.returncode == 0, "chanq add-topic t", r.stderr.decode())
        lines = "".join("m%d\n" % i for i in range(N)).encode()
        r = subprocess.run(cli + ["produce", "t"], input=lines,
                           capture_output=True)
        acked = r.stdout.decode().split()
        tap(r.returncode == 0 and len(acked) == N, "chanq produce acked %d/%d" % (len(acked), N))

        v = query_until(base, 'up{job="chanqd"}', 1)
        tap(v == 1, 'up{job="chanqd"} == 1 (got %s)' % v)
        v = query_until(base, 'up{job="mgr"}', 1)
        tap(v == 1, 'up{job="mgr"} == 1 (got %s)' % v)
        v = query_until(base, 'chanq_mq_topic_produced_total{topic="t"}', N)
        tap(v == N, 'chanq_mq_topic_produced_total{topic="t"} == %d (got %s)' % (N, v))
        v = query_until(base, 'connection_num{job="chanqd",type="CLIENT"}', K)
        tap(v == K, 'connection_num{type="CLIENT"} == %d (got %s)' % (K, v))
        v = query_until(base, 'chanq_mgr_servers{state="live"}', 1)
        tap(v == 1, 'chanq_mgr_servers{state="live"} == 1 (got %s)' % v)
    except Exception as e:  # a failed start: every remaining check fails
        print("# error: %s" % e, flush=True)
        while len(results) < 8:
            tap(False, "not reached")
    finally:
        for s in held:
            s.close()
        procs.stop_all()
        if all(results) and len(results) == 8:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            keep = True
            for name in ("mgr", "srv", "prometheus"):
                try:
                    with open("%s/%s.log" % (tmp, name), errors="replace") as f:
                        tail = f.read()[-3000:]
                    print("# --- %s.log (tail) ---" % name)
                    for line in tail.splitlines():
                        print("# " + line)
                except OSError:
                    pass
            print("# logs kept in %s" % tmp)
    return 0 if not keep else 1


if __name__ == "__main__":
    sys.exit(main())
