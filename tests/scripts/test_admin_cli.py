#!/usr/bin/env python3
"""test_admin_cli.py - `chanq admin` against a real manager (`chanqd --role mgr`, file state)
with one chanqd (sqlite store) reporting to it: every command, its exact output or JSON, the
exit codes (0 ok, 1 refused or unreachable, 2 usage) and the audit trail they leave; the
bindings a server applies once they are set (its config_version follows).

  CHANQD=build/src/main/chanqd CHANQ=build/tools/chanq tests/scripts/test_admin_cli.py

Processes are started on loopback with port 0 and --ready-file, and stopped by PID. Waits poll
with a 20 s safety stop. TAP output.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cqproc  # noqa: E402

results = []
procs = cqproc.Procs()


def tap(ok, what, detail=""):
    results.append(bool(ok))
    print(("ok" if ok else "not ok") + " %d - %s" % (len(results), what), flush=True)
    if not ok and detail:
        for line in str(detail).splitlines():
            print("#   " + line)
    return ok


class Admin:
    def __init__(self, chanq, mgr_http, token_file):
        self.base = [chanq, "admin", "--mgr-http", mgr_http, "--admin-token-file", token_file]

    def run(self, *args, base=None):
        r = subprocess.run((base or self.base) + list(args), capture_output=True, timeout=30)
        return r.returncode, r.stdout.decode(), r.stderr.decode()

    def json(self, *args):
        rc, out, err = self.run("--json", *args)
        if rc != 0:
            raise RuntimeError("chanq admin --json %s: %d %s" % (" ".join(args), rc, err))
        return json.loads(out)


def until(fn, what):
    end = time.time() + 20
    v = None
    while time.time() < end:
        v = fn()
        if v:
            return v
        time.sleep(0.1)
    return v


def main():
    chanqd, chanq = os.environ.get("CHANQD"), os.environ.get("CHANQ")
    if not chanqd or not chanq:
        print("1..0 # SKIP CHANQD and CHANQ must be set (meson test sets them)")
        return 0
    tmp = tempfile.mkdtemp(prefix="cq-admincli.")
    with open(tmp + "/admin.token", "w") as f:
        f.write("adm1n-t0ken\n")
    with open(tmp + "/server.token", "w") as f:
        f.write("srv-t0ken\n")
    with open(tmp + "/m7.token", "w") as f:
        f.write("m7-secret\n")
    with open(tmp + "/wrong.token", "w") as f:
        f.write("nope\n")
    os.chmod(tmp + "/admin.token", 0o600)
    print("1..38", flush=True)
    try:
        mr = cqproc.start_mgr(procs, chanqd, tmp, [
            "--mgr-admin-token-file", tmp + "/admin.token", "--mgr-token-file",
            tmp + "/server.token", "--mgr-audit-log", tmp + "/audit.log"])
        cqproc.start_server(procs, chanqd, tmp, "srv", [
            "--mgr-servers", mr["mgr"], "--mgr-token-file", tmp + "/server.token",
            "--mgr-report-ms", "200", "--group-id", "1", "--appid", "41"])
        a = Admin(chanq, mr["mgrhttp"], tmp + "/admin.token")

        # usage (2) and refusals (1)
        rc, out, err = a.run(base=[chanq, "admin"])
        tap(rc == 2, "no command: exit 2", err)
        rc, out, err = a.run("offline", "abc")
        tap(rc == 2 and "APPID" in err, "offline abc: exit 2", err)
        rc, out, err = a.run("servers", base=[chanq, "admin", "--mgr-http", mr["mgrhttp"]])
        tap(rc == 2 and "--admin-token-file is required" in err, "no token file: exit 2", err)
        rc, out, err = a.run("servers", base=[chanq, "admin", "--mgr-http", mr["mgrhttp"],
                                              "--admin-token-file", tmp + "/wrong.token"])
        tap(rc == 1 and ": 401: " in err, "a wrong admin token: exit 1 with the 401", err)
        rc, out, err = a.run("servers", base=[chanq, "admin", "--mgr-http", "127.0.0.1:1",
                                              "--admin-token-file", tmp + "/admin.token"])
        tap(rc == 1 and "127.0.0.1:1" in err, "an unreachable manager: exit 1", err)

        # the server registers (its reports reach the manager)
        st = until(lambda: [s for s in a.json("servers") if s.get("appid") == 41], "server 41")
        tap(st and st[0]["group_id"] == 1 and st[0]["master"] is True and
            st[0]["stale"] is False, "servers --json: appid 41, group 1, master, live", st)
        rc, out, err = a.run("servers")
        lines = out.splitlines()
        tap(rc == 0 and lines[0].split()[:6] == ["APPID", "GROUP", "ADDR", "SHARD", "ROLE",
                                                  "STATE"] and len(lines) == 2 and
            lines[1].split()[:2] == ["41", "1"] and lines[1].split()[4:6] == ["master", "live"],
            "servers: the table", out + err)
        rc, out, err = a.run("shards")
        lines = out.splitlines()
        tap(rc == 0 and lines[0].split() == ["SHARD", "MASTER", "STANDBYS", "IO", "SQL",
                                             "LAG_SECONDS", "BEHIND_MS", "ALERT"] and
            lines[1].split()[:3] == ["0", "41", "(none)"] and lines[1].split()[-1] == "ok",
            "shards: shard 0, master 41, no standby, no alert", out + err)

        # modules
        rc, out, err = a.run("module", "set", "7", "--produce", "orders,audit", "--consume", "*",
                             "--token-file", tmp + "/m7.token")
        tap(rc == 0 and out.startswith("version "), "module set 7: exit 0, version", out + err)
        ver_m7 = int(out.split()[1]) if rc == 0 else -1
        m = a.json("modules")
        m7 = m.get("7", {})
        tap(m7.get("produce") == ["orders", "audit"] and m7.get("consume") == ["*"] and
            m7.get("admin") is False and "token" not in m7,
            "modules --json: 7 as set, no token returned", json.dumps(m))
        rc, out, err = a.run("module", "set", "8", "--produce", "a", "--consume", "a")
        tap(rc == 1 and ": 400: " in err and "token" in err,
            "module set 8 without a token (new module): exit 1, 400 naming token", err)
        rc, out, err = a.run("module", "set", "7", "--produce", "", "--consume", "orders",
                             "--admin", "--groups", "1")
        tap(rc == 0 and out == "version %d\n" % (ver_m7 + 1),
            "module set 7 again keeps its token: version +1", out + err)
        rc, out, err = a.run("modules")
        lines = out.splitlines()
        tap(rc == 0 and lines[0].split() == ["MODULE", "PRODUCE", "CONSUME", "ADMIN", "GROUPS"]
            and ["7", "(none)", "orders", "yes", "1"] in [ln.split() for ln in lines[1:]],
            "modules: the table", out + err)

        # topics
        rc, out, err = a.run("topic-offline", "orders")
        tap(rc == 0 and out == "version %d\n" % (ver_m7 + 2), "topic-offline orders", out + err)
        rc, out, err = a.run("topics")
        rows = [ln.split() for ln in out.splitlines()]
        tap(rc == 0 and rows[0][:3] == ["TOPIC", "STATE", "RETENTION"] and
            any(r[:2] == ["orders", "offline"] for r in rows[1:]),
            "topics: orders offline", out + err)
        rc, out, err = a.run("topic-online", "orders")
        tap(rc == 0 and out == "version %d\n" % (ver_m7 + 3), "topic-online orders", out + err)
        rc, out, err = a.run("topic-retention", "orders", "7")
        rows = [ln.split() for ln in a.run("topics")[1].splitlines()]
        tap(rc == 0 and out == "version %d\n" % (ver_m7 + 4) and
            any(r[:3] == ["orders", "online", "7d"] for r in rows[1:]),
            "topic-retention orders 7: 7 days in the topics table", out + err + str(rows))
        rc, out, err = a.run("topic-retention", "orders", "seven")
        tap(rc == 2 and "topic-retention TOPIC DAYS: DAYS an integer from 0" in err,
            "topic-retention with bad days: usage, exit 2", err)

        # a server out of service and back
        rc, out, err = a.run("offline", "41")
        tap(rc == 0 and out == "version %d\n" % (ver_m7 + 5), "offline 41", out + err)
        st = until(lambda: [s for s in a.json("servers")
                            if s.get("appid") == 41 and s.get("offline")], "41 offline")
        tap(st, "servers: 41 offline", st)
        rc, out, err = a.run("online", "41")
        tap(rc == 0 and out == "version %d\n" % (ver_m7 + 6), "online 41", out + err)

        last = ("module 7: the last module cannot be deleted (the servers would go back to "
                "their own permissions); add another module first")
        rc, out, err = a.run("module", "delete", "7")
        tap(rc == 1 and ": 409: " in err and last in err and "7" in a.json("modules"),
            "module delete 7, the last one: exit 1, 409, kept", out + err)
        rc, out, err = a.run("module", "set", "9", "--produce", "a", "--consume", "a",
                             "--token-file", tmp + "/m7.token")
        tap(rc == 0 and out == "version %d\n" % (ver_m7 + 7), "module set 9", out + err)
        rc, out, err = a.run("module", "delete", "7")
        tap(rc == 0 and out == "version %d\n" % (ver_m7 + 8) and "7" not in a.json("modules"),
            "module delete 7", out + err)
        au = a.json("audit", "--limit", "10")
        actions = [(e.get("action"), e.get("target"), e.get("result"), e.get("auth"))
                   for e in au.get("entries", [])]
        want = [("module.put", "8", "token: required for a new module", "bearer"),
                ("module.put", "7", "ok", "bearer"),
                ("topic.offline", "orders", "ok", "bearer"),
                ("topic.online", "orders", "ok", "bearer"),
                ("topic.retention", "orders", "ok", "bearer"),
                ("server.offline", "41", "ok", "bearer"),
                ("server.online", "41", "ok", "bearer"),
                ("module.delete", "7", last, "bearer"),
                ("module.put", "9", "ok", "bearer"),
                ("module.delete", "7", "ok", "bearer")]
        tap(actions == want, "audit --json --limit 10: every change (a refused one too), in order, as bearer",
            json.dumps(actions))

        # bindings: none saved; refused ones (the bridge parser's exact messages); set; applied
        rc, out, err = a.run("bindings")
        tap(rc == 0 and out == "TOPIC  TARGET  MSG_TYPE\n" and a.json("bindings") == {"bindings": []},
            "bindings: none saved, an empty table and document", out + err)
        with open(tmp + "/bad.json", "w") as f:
            f.write('{"bindings": [\n  {"topic": "vip", "route": "user_id", "msg_type": 99}\n]}\n')
        with open(tmp + "/broken.json", "w") as f:
            f.write('{"bindings": [\n  {"topic": "vip",}\n]}\n')
        rc, out, err = a.run("bindings", "set", tmp + "/bad.json")
        tap(rc == 1 and out == "" and err == 'chanq admin: PUT /api/bindings: 400: binding 0: '
            '"msg_type" must be an integer from 100 to 65535\n',
            "bindings set, a bad msg_type: exit 1, the parser's message", out + err)
        rc, out, err = a.run("bindings", "set", tmp + "/broken.json")
        tap(rc == 1 and err == "chanq admin: PUT /api/bindings: 400: bindings: invalid JSON at "
            "line 2, column 19: string or '}' expected near '}'\n",
            "bindings set, bad JSON: exit 1, its line and column in the file", out + err)
        rc, out, err = a.run("bindings", "set", tmp + "/missing.json")
        rc2, out2, err2 = a.run("bindings", "set")
        tap(rc == 2 and "missing.json" in err and rc2 == 2 and "bindings set FILE" in err2,
            "bindings set without a readable FILE: exit 2", err + err2)
        doc = {"bindings": [{"topic": "vip", "route": "user_id", "msg_type": 201},
                            {"topic": "release", "broadcast": "global", "msg_type": 200}]}
        with open(tmp + "/good.json", "w") as f:
            json.dump(doc, f, indent=2)
        rc, out, err = a.run("bindings", "set", tmp + "/good.json")
        tap(rc == 0 and out == "version %d\n" % (ver_m7 + 9), "bindings set: version +1", out + err)
        rc, out, err = a.run("bindings")
        tap(rc == 0 and out.splitlines() == ["TOPIC    TARGET            MSG_TYPE",
                                             "vip      route user_id     201",
                                             "release  broadcast global  200"],
            "bindings: the table", out + err)
        tap(a.json("bindings") == doc, "bindings --json: the document as set", a.run("--json", "bindings"))
        st = until(lambda: [s for s in a.json("servers")
                            if s.get("appid") == 41 and s.get("config_version") == ver_m7 + 9],
                   "41 applied")
        tap(st, "server 41 applied the bindings (config_version %d)" % (ver_m7 + 9),
            json.dumps(a.json("servers")))
        au = a.json("audit", "--limit", "3")
        actions = [(e.get("action"), e.get("target"), e.get("version"), e.get("result"))
                   for e in au.get("entries", [])]
        tap(actions == [("bindings.put", "", 0, 'binding 0: "msg_type" must be an integer from '
                         "100 to 65535"),
                        ("bindings.put", "", 0, "bindings: invalid JSON at line 2, column 19: "
                         "string or '}' expected near '}'"),
                        ("bindings.put", "", ver_m7 + 9, "ok")],
            "audit: the bindings changes, refused ones too", json.dumps(actions))

        # a topic created from the manager: server 41 (its shard's master) makes it
        rc, out, err = a.run("topic-create", "refunds", "3")
        tap(rc == 0 and out == "version %d\n" % (ver_m7 + 10), "topic-create refunds 3", out + err)
        rows = until(lambda: [r for r in (ln.split() for ln in a.run("topics")[1].splitlines())
                              if r[:3] == ["refunds", "online", "3d"]], "refunds created")
        tap(rows, "topics: refunds, made by server 41, online, 3 days", a.run("topics")[1])
        rc, out, err = a.run("topic-create", "refunds")
        tap(rc == 1 and err == "chanq admin: POST /api/topics: 409: topic refunds: exists "
            "already (set its retention or flag instead)\n", "topic-create refunds again: 409",
            out + err)
        rc, out, err = a.run("topic-create", "bad-name")
        tap(rc == 2 and "topic-create TOPIC [DAYS]: TOPIC of [A-Za-z0-9_]" in err,
            "topic-create with a bad name: usage, exit 2", err)
    except Exception as e:
        print("# error: %r" % e, flush=True)
    finally:
        procs.stop_all()
        while len(results) < 38:
            tap(False, "not reached")
        if all(results):
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            for name in ("mgr", "srv"):
                try:
                    tail = open("%s/%s.log" % (tmp, name), errors="replace").read()[-2500:]
                    print("# --- %s.log (tail) ---" % name)
                    for line in tail.splitlines():
                        print("# " + line)
                except OSError:
                    pass
            print("# files kept in %s" % tmp)
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
