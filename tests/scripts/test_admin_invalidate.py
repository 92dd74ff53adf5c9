#!/usr/bin/env python3
"""test_admin_invalidate.py - invalidating a message (issue 25) end to end: a real manager
(`chanqd --role mgr`) and one chanqd (sqlite store, its HTTP API on) reporting to it. Messages
are produced over the server's HTTP API; `chanq admin invalidate` makes the shard's master
invalidate one (management command 3); a consumer reading from before it no longer gets it,
the audit has the reason, `chanq admin message` looks it up (command 4: state 0, its producer
and time, and which of 3 modules committed past it), and every bad input gets its exact status and text (the manager's JSON
API, the CLI's exit codes, the server's own HTTP route).

  CHANQD=build/src/main/chanqd CHANQ=build/tools/chanq tests/scripts/test_admin_invalidate.py

Processes are started on loopback with port 0 and --ready-file, and stopped by PID. Waits poll
with a 20 s safety stop. TAP output.
"""
import http.client
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cqproc  # noqa: E402
from test_admin_cli import Admin, until  # noqa: E402

results = []
procs = cqproc.Procs()


def tap(ok, what, detail=""):
    results.append(bool(ok))
    print(("ok" if ok else "not ok") + " %d - %s" % (len(results), what), flush=True)
    if not ok and detail:
        for line in str(detail).splitlines():
            print("#   " + line)
    return ok


def request(hostport, method, path, body=None, headers=None):
    """One HTTP request: (status, parsed JSON body or the text)."""
    host, port = hostport.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=20)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request(method, path, body=None if body is None else json.dumps(body), headers=h)
    r = c.getresponse()
    raw = r.read().decode()
    c.close()
    try:
        return r.status, json.loads(raw), r.getheader("Set-Cookie")
    except ValueError:
        return r.status, raw, r.getheader("Set-Cookie")


def main():
    chanqd, chanq = os.environ.get("CHANQD"), os.environ.get("CHANQ")
    if not chanqd or not chanq:
        print("1..0 # SKIP CHANQD and CHANQ must be set (meson test sets them)")
        return 0
    tmp = tempfile.mkdtemp(prefix="cq-invalidate.")
    with open(tmp + "/admin.token", "w") as f:
        f.write("adm1n-t0ken\n")
    with open(tmp + "/server.token", "w") as f:
        f.write("srv-t0ken\n")
    os.chmod(tmp + "/admin.token", 0o600)
    print("1..23", flush=True)
    try:
        mr = cqproc.start_mgr(procs, chanqd, tmp, [
            "--mgr-admin-token-file", tmp + "/admin.token", "--mgr-token-file",
            tmp + "/server.token", "--mgr-audit-log", tmp + "/audit.log"])
        sr = cqproc.start_server(procs, chanqd, tmp, "srv", [
            "--mgr-servers", mr["mgr"], "--mgr-token-file", tmp + "/server.token",
            "--mgr-report-ms", "200", "--group-id", "1", "--appid", "41",
            "--mq-http-addr", "127.0.0.1:0"])
        a = Admin(chanq, mr["mgrhttp"], tmp + "/admin.token")
        srv = sr["mqhttp"]
        auth = {"Authorization": "Bearer 1:x"}
        until(lambda: [s for s in a.json("servers") if s.get("appid") == 41], "server 41")

        st, body, _ = request(srv, "POST", "/v1/topics", {"topic": "ev"}, auth)
        tap(st == 200, "the server creates topic ev", body)
        st, body, _ = request(srv, "POST", "/v1/topics/ev/messages",
                              {"messages": [{"content": "release %d" % i, "producer_id": 77,
                                             "seq": i} for i in range(1, 6)]},
                              auth)
        offs = body.get("offsets", []) if isinstance(body, dict) else []
        tap(st == 200 and len(offs) == 5, "5 messages produced", body)
        bad = offs[2]

        rc, out, err = a.run("invalidate", "ev", "0", str(bad), "--reason", "bad release 3")
        tap(rc == 0 and out == "topic ev shard 0 offset %d: invalid (state 0)\n" % bad,
            "chanq admin invalidate: exit 0 once the master has done it", out + err)
        st, body, _ = request(srv, "GET", "/v1/topics/ev/messages?offset=%d" % offs[0], None, auth)
        got = [m["offset"] for m in body.get("messages", [])] if isinstance(body, dict) else []
        tap(st == 200 and got == [offs[1], offs[3], offs[4]],
            "a consumer reading from before it no longer gets it", body)
        st, body, _ = request(srv, "GET", "/v1/topics/ev/messages", None, auth)
        got = [m["content"] for m in body.get("messages", [])] if isinstance(body, dict) else []
        tap(got == ["release 1", "release 2", "release 4", "release 5"],
            "consume from 0: the other four, offsets unchanged", body)
        entries = a.json("audit", "--limit", "5")
        inv = [e for e in entries.get("entries", entries) if e.get("action") ==
               "message.invalidate"] if isinstance(entries, dict) else \
            [e for e in entries if e.get("action") == "message.invalidate"]
        tap(inv and inv[-1].get("target") == "ev/0/%d" % bad and inv[-1].get("result") == "ok"
            and inv[-1].get("reason") == "bad release 3" and inv[-1].get("auth") == "bearer",
            "the audit has it with the reason", entries)
        with open(tmp + "/audit.log") as f:
            log = f.read()
        tap('"action":"message.invalidate","target":"ev/0/%d"' % bad in log and
            '"reason":"bad release 3"' in log, "--mgr-audit-log has it too", log)

        # the lookup: state 0, its producer and time, and 3 modules on either side of it
        for cid, off in (("m1", offs[1]), ("m2", bad), ("m3", offs[4])):
            request(srv, "POST", "/v1/topics/ev/consumers/%s/offset" % cid, {"offset": off}, auth)
        want_c = [{"id": "m1", "offset": offs[1], "consumed": False},
                  {"id": "m2", "offset": bad, "consumed": True},
                  {"id": "m3", "offset": offs[4], "consumed": True}]

        def looked():
            d = a.json("message", "ev", "0", str(bad))
            got = sorted(d.get("consumers", []), key=lambda c: c["id"])
            return d if got == want_c else None
        doc = until(looked, "the consumers in the lookup") or a.json("message", "ev", "0",
                                                                     str(bad))
        msg = doc.get("message", {})
        tap(msg.get("state") == 0 and msg.get("producer_id") == 77 and msg.get("seq") == 3 and
            msg.get("content") == "release 3" and msg.get("size") == 9 and
            abs(msg.get("create_time", 0) - time.time() * 1000) < 600000 and
            doc.get("served_by") == 41 and doc.get("role") == "master",
            "message --json: state 0, producer 77 seq 3, its time and content", doc)
        tap(sorted(doc.get("consumers", []), key=lambda c: c["id"]) == want_c,
            "exactly m2 and m3 consumed past it, m1 not", doc)
        rc, out, err = a.run("message", "ev", "0", str(bad))
        tap(rc == 0 and "state        0 invalid\n" in out and "producer_id  77\n" in out and
            "m1\t%d\tno\n" % offs[1] in out and "m3\t%d\tyes\n" % offs[4] in out,
            "message: the table", out + err)
        d = a.json("message-key", "ev", "0", "77", "3")
        tap(d.get("offset") == bad and d.get("message", {}).get("state") == 0 and
            sorted(d.get("consumers", []), key=lambda c: c["id"]) == want_c,
            "message-key ev 0 77 3: the same message, found by its producer key", d)
        rc, out, err = a.run("message-key", "ev", "0", "77", "99")
        tap(rc == 1 and ": 404: shard 0: topic ev: no message of producer 77 seq 99" in err,
            "message-key of a key never stored: exit 1, 404", err)
        rc, out, err = a.run("message", "ev", "0", "99999")
        tap(rc == 1 and ": 404: shard 0: topic ev: no message at offset 99999" in err,
            "message of an offset with no message: exit 1, 404", err)

        # refusals through the CLI: the manager's status and text, exit 1; usage: exit 2
        rc, out, err = a.run("invalidate", "nosuch", "0", "1", "--reason", "r")
        tap(rc == 1 and ": 404: shard 0: topic nosuch: unknown on this server" in err,
            "an unknown topic: exit 1, 404 from the master", err)
        rc, out, err = a.run("invalidate", "ev", "0", "99999", "--reason", "r")
        tap(rc == 1 and ": 404: shard 0: topic ev: no message at offset 99999" in err,
            "an offset with no message: exit 1, 404 no message", err)
        rc, out, err = a.run("invalidate", "ev", "5", "1", "--reason", "r")
        tap(rc == 1 and ": 503: shard 5: no master reports to this manager now" in err,
            "a shard with no master: exit 1, 503", err)
        rc, out, err = a.run("invalidate", "ev", "0", "1")
        tap(rc == 2 and "--reason TEXT" in err, "no --reason: exit 2", err)

        # the JSON API's exact answers
        bearer = {"Authorization": "Bearer adm1n-t0ken"}
        path = "/api/topics/ev/messages/0/%d/invalidate" % offs[0]
        st, body, _ = request(mr["mgrhttp"], "POST", path, {}, bearer)
        tap(st == 400 and body == {"error": "reason: required, a string of 1 to 512 bytes"},
            "no reason: 400", body)
        st, body, _ = request(mr["mgrhttp"], "POST", path, {"reason": "r" * 513}, bearer)
        tap(st == 400 and body == {"error": "reason: required, a string of 1 to 512 bytes"},
            "a 513-byte reason: 400", body)
        st, body, _ = request(mr["mgrhttp"], "POST", "/api/topics/ev/messages/0/0/invalidate",
                              {"reason": "r"}, bearer)
        tap(st == 400 and body == {"error": "path: offset must be an integer in "
                                   "[1, 9007199254740991]"}, "offset 0: 400", body)
        st, body, cookie = request(mr["mgrhttp"], "POST", "/api/login",
                                   {"token": "adm1n-t0ken"})
        sid = cookie.split(";")[0] if cookie else ""
        st, body, _ = request(mr["mgrhttp"], "POST", path, {"reason": "r"}, {"Cookie": sid})
        tap(st == 403 and body == {"error": "X-CSRF-Token: missing or wrong"},
            "a console session without its CSRF header: 403", body)
        st, body, _ = request(srv, "POST", "/v1/topics/ev/messages/99999/invalidate", {}, auth)
        tap(st == 404 and body == {"err_code": 21,
                                   "err_msg": "topic ev: no message at offset 99999"},
            "the server's HTTP route: 404 err 21 no_message", body)
        st, body, _ = request(srv, "POST", "/v1/topics/ev/messages/%d/invalidate" % offs[4],
                              {}, auth)
        tap(st == 200 and body == {"topic": "ev", "offset": offs[4], "state": 0},
            "the server's HTTP route: 200 state 0", body)
    except Exception as e:  # noqa: BLE001 - reported as a failed test
        tap(False, "the run", repr(e))
    finally:
        procs.stop_all()
    ok = all(results) and len(results) == 23
    if ok:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print("# logs kept in " + tmp)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
