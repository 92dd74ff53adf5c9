#!/usr/bin/env python3
"""test_readme.py - the README's "Try it", run (meson test `readme-try-it`, issue 22).

  tests/scripts/test_readme.py SOURCE_ROOT BUILD_DIR

The commands are read from README.md: every line of the ```sh blocks of its "## Try it" section,
never copied here. They run as written against the services scripts/run.sh starts, and the
chat demo's line (scripts/demo.sh) is run and its page fetched. Exact outcomes: the produce's
acknowledged offset; the consumed offset and bytes; what each "# prints X" comment promises
(<TAB> is a tab); the admin token's form and mode; the console at the README's URL logging in
with that token and refusing another; the Servers view listing this chanqd; the "What is
running" table naming exactly the addresses run.sh's processes bound, each TCP one accepting;
run.sh stopping on Ctrl-C with nothing left behind; the chat page and its script served, and
the durable topic of its Announcements panel created.

How, and why:
- run.sh and demo.sh cd to their checkout and use build/ there. They run from a temp dir T
  holding a copy of scripts/, a symlink T/build to BUILD_DIR (their ninja call finds it built)
  and symlinks to the source tree's other top-level entries; chanq-data/ and chanq-mgr/ land
  in T.
- run.sh binds fixed ports (chanqd's defaults, the manager's) and the README's commands use the
  CLI's defaults, so that half runs in a private network namespace (`unshare -rn`: a user
  namespace where we are root, and a network namespace whose loopback this script brings up).
  Those ports are free there whatever else runs on the machine, a developer's chanqd or other
  tests, and the commands run unchanged. Without user namespaces that half is skipped, said so.
- run.sh runs in a session of its own and is stopped as Ctrl-C stops it: SIGINT to that process
  group (chanqd and the manager); SIGKILL to the group if it is still there after 30 s.
- demo.sh runs `npm ci`, which needs the network, so it runs in the host's namespace with
  listener options appended (demo.sh passes its arguments to chanqd: port 0 everywhere, durable
  topics included, which the demo's bindings need, and a ready file); its page is fetched on the
  port chanqd bound. It is stopped by its group too.
Waits poll a condition (a ready file, a metric) with a safety stop; nothing is timed. TAP output.
"""
import fcntl
import http.client
import json
import os
import re
import shlex
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time

# Safety stops (the test waits for conditions; these only bound a hang). Together they stay
# under meson's timeout for the test, so the finally blocks stop what was started.
START_S = 120.0  # run.sh: dpkg-query and a ninja with nothing to do, then two processes start
CMD_S = 30.0  # one README command
STOP_S = 30.0
INSIDE_S = 2 * START_S + 10 * CMD_S + STOP_S
DEMO_S = 300.0  # demo.sh: npm ci downloads on a machine that never ran it

results = []


def tap(ok, what, detail=""):
    results.append((bool(ok), what, str(detail) if not ok else ""))
    return ok


def skip(what, why):
    results.append((True, "%s # SKIP %s" % (what, why), ""))


def diag(text):
    for line in str(text).splitlines():
        print("# " + line, flush=True)


# ---- the README ----------------------------------------------------------------------------

def section(text, title):
    """The lines of the '## title' section, up to the next '## ' heading."""
    m = re.search(r"^## %s[ \t]*\n(.*?)(?=^## |\Z)" % re.escape(title), text, re.M | re.S)
    return m.group(1) if m else None


def sh_lines(sec):
    """The commands of a section's ```sh blocks: (line, text), comment-only and blank lines
    dropped, backslash continuations joined."""
    out, inblock, cont = [], False, ""
    for line in sec.splitlines():
        if re.match(r"^```sh\s*$", line):
            inblock = True
            continue
        if line.startswith("```"):
            inblock = False
            continue
        if not inblock or not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.endswith("\\"):
            cont += line[:-1] + " "
            continue
        out.append(cont + line.strip())
        cont = ""
    return out


def read_readme(root):
    with open(os.path.join(root, "README.md")) as f:
        text = f.read()
    tryit, running = section(text, "Try it"), section(text, "What is running")
    if tryit is None or running is None:
        return None
    cmds = sh_lines(tryit)
    demo = [c for c in cmds if c.startswith("scripts/demo.sh")]
    return {
        "cmds": [c for c in cmds if not c.startswith("scripts/demo.sh")],
        "demo": demo,
        "urls": re.findall(r"http://[0-9.]+:[0-9]+/", tryit),
        "demo_urls": re.findall(r"http://[0-9.]+:[0-9]+/", " ".join(demo)),
        "addrs": sorted(set(re.findall(r"127\.0\.0\.1:([0-9]+)", running))),
        "running": running,
    }


def printed(cmd):
    """What a '# prints X' comment promises the command prints (X up to a blank or a comma)."""
    m = re.search(r"#\s*prints\s+([^\s,]+)", cmd)
    return m.group(1).replace("<TAB>", "\t") + "\n" if m else None


# ---- processes, files, HTTP ----------------------------------------------------------------

def ready_dict(path):
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    if not text.strip():
        return None
    return dict(kv.split("=", 1) for kv in text.split() if "=" in kv)


def wait_for(fn, seconds, proc=None):
    end = time.time() + seconds
    while time.time() < end:
        v = fn()
        if v:
            return v
        if proc is not None and proc.poll() is not None:
            return fn()
        time.sleep(0.1)
    return fn()


def group_gone(pgid):
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    # Zombies of the group count as gone once their parent reaped them; check by /proc.
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return False
    return True


def stop_group(p, sig):
    """Signals the process group p leads; waits STOP_S for p, then SIGKILLs the group.
    Returns p's exit code (None when it had to be killed)."""
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass
    try:
        return p.wait(timeout=STOP_S)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
        return None


def fetch(method, addr, path, body=None, headers=None):
    host, port = addr.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=CMD_S)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return {"status": r.status, "type": r.getheader("Content-Type") or "",
                "cookie": r.getheader("Set-Cookie") or "",
                "body": r.read().decode("utf-8", "replace")}
    except OSError as e:
        return {"status": 0, "type": "", "cookie": "", "body": str(e)}
    finally:
        c.close()


def connects(port):
    try:
        socket.create_connection(("127.0.0.1", int(port)), timeout=10).close()
        return True
    except OSError:
        return False


def checkout(root, build):
    """T: scripts/ copied, build -> BUILD_DIR, every other top-level entry a symlink."""
    t = tempfile.mkdtemp(prefix="cq-readme.")
    shutil.copytree(os.path.join(root, "scripts"), os.path.join(t, "scripts"))
    os.symlink(os.path.abspath(build), os.path.join(t, "build"))
    for name in os.listdir(root):
        if name in ("scripts", "chanq-data", "chanq-mgr", ".git") or name.startswith("build"):
            continue
        os.symlink(os.path.join(root, name), os.path.join(t, name))
    return t


# ---- inside the network namespace: run.sh and the README's commands ------------------------

def loopback_up():
    s = socket.socket()
    try:
        ifr = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(s, 0x8913, ifr))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(s, 0x8914, struct.pack("16sh", b"lo", flags | 1))  # SIOCSIFFLAGS, IFF_UP
    finally:
        s.close()


def inside(t):
    with open(t + "/readme.json") as f:
        rd = json.load(f)
    res = {"started": False}
    loopback_up()
    with open(t + "/run.log", "wb") as log:
        p = subprocess.Popen(["scripts/run.sh", "--ready-file", t + "/chanqd.ready"], cwd=t,
                             stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        srv = wait_for(lambda: ready_dict(t + "/chanqd.ready"), START_S, p)
        mgr = ready_dict(t + "/chanq-mgr/ready")
        res.update(chanqd=srv, mgr=mgr)
        if not srv or not mgr:
            return res
        res["started"] = True
        # The Servers view lists chanqd once the manager has its first report.
        live = 'chanq_mgr_servers{state="live"} 1\n'
        wait_for(lambda: live in fetch("GET", mgr["admin"], "/metrics")["body"], START_S)
        res["cmds"] = []
        for cmd in rd["cmds"]:
            try:
                r = subprocess.run(["bash", "-c", cmd], cwd=t, capture_output=True,
                                   stdin=subprocess.DEVNULL, timeout=CMD_S)
                rc, out, err = r.returncode, r.stdout.decode(), r.stderr.decode()
            except subprocess.TimeoutExpired:
                rc, out, err = -1, "", "timed out after %ss" % CMD_S
            res["cmds"].append({"cmd": cmd, "rc": rc, "out": out, "err": err})
        res["urls"] = {u: fetch("GET", u[7:-1], "/") for u in rd["urls"]
                       if u not in rd["demo_urls"]}
        try:
            with open(t + "/chanq-mgr/admin.token") as f:
                token = f.read().strip()
        except OSError:
            token = ""
        js = {"Content-Type": "application/json"}
        res["login"] = fetch("POST", mgr["http"], "/api/login",
                            json.dumps({"token": token}), js)
        res["login_wrong"] = fetch("POST", mgr["http"], "/api/login",
                                  json.dumps({"token": "0" * 64}), js)
        res["listening"] = {port: connects(port) for port in rd["addrs"]}
    finally:
        res["rc"] = stop_group(p, signal.SIGINT)
        res["gone"] = group_gone(p.pid)
        with open(t + "/inside.json", "w") as f:
            json.dump(res, f)
    return res


# ---- the checks ----------------------------------------------------------------------------

def find(cmds, pattern):
    for c in cmds:
        m = re.search(pattern, c["cmd"])
        if m:
            return c, m
    return None, None


def check_runsh(rd, t, res):
    if not tap(res.get("started"), "scripts/run.sh starts chanqd and the manager (ready files)",
               "chanqd: %s, manager: %s" % (res.get("chanqd"), res.get("mgr"))):
        return
    srv, mgr = res["chanqd"], res["mgr"]
    bound = sorted({a.rsplit(":", 1)[1] for a in list(srv.values()) + list(mgr.values())
                    if a != "-"})
    tap(bound == rd["addrs"], "'What is running' names every address run.sh's services bound",
        "README: %s, bound: %s (%s; %s)" % (rd["addrs"], bound, srv, mgr))
    tcp = {a.rsplit(":", 1)[1] for k, a in list(srv.items()) + list(mgr.items())
           if a != "-" and k != "kcp"}
    for port in rd["addrs"]:
        if port in tcp:
            tap(res["listening"].get(port), "127.0.0.1:%s accepts a TCP connection" % port)
    for d in ("chanq-data/", "chanq-mgr/"):
        tap(d in rd["running"] and os.path.isdir(os.path.join(t, d)),
            "%s is named in 'What is running' and run.sh made it" % d)

    cmds = res["cmds"]
    for c in cmds:
        tap(c["rc"] == 0, "README command exits 0: %s" % c["cmd"],
            "exit %s\nstdout: %r\nstderr: %s" % (c["rc"], c["out"], c["err"]))
        want = printed(c["cmd"])
        if want is not None:
            tap(c["out"] == want, "it prints what its comment says: %r" % want,
                "printed %r" % c["out"])
    add, madd = find(cmds, r"chanq\s+add-topic\s+(\S+)")
    prod, mprod = find(cmds, r"echo\s+(\S+)\s*\|\s*\S*chanq\s+produce\s+(\S+)")
    cons, mcons = find(cmds, r"chanq\s+consume\s+(\S+)")
    if tap(add and prod and cons, "Try it adds a topic, produces to it and consumes it",
           [c["cmd"] for c in cmds]):
        topic = madd.group(1)
        tap(mprod.group(2) == topic and mcons.group(1) == topic,
            "the three use one topic (%s)" % topic)
        tap(re.fullmatch(r"[0-9]+\n", prod["out"]) and int(prod["out"]) == 1,
            "produce prints the acked offset of the new topic's first message: 1",
            "printed %r" % prod["out"])
        tap(cons["out"] == "%s\t%s\n" % (prod["out"].strip(), mprod.group(1)),
            "consume prints that offset and the produced bytes", "printed %r" % cons["out"])

    cat, mcat = find(cmds, r"\bcat\s+(\S*admin\.token)\b")
    if tap(cat, "Try it shows the admin token's file"):
        path = os.path.join(t, mcat.group(1))
        tap(re.fullmatch(r"[0-9a-f]{64}", cat["out"]), "it prints a 64-hex-digit token",
            "printed %r" % cat["out"])
        mode = stat.S_IMODE(os.stat(path).st_mode) if os.path.exists(path) else None
        tap(mode == 0o600, "the token file is mode 0600", "mode %s" % oct(mode or 0))
    console = "http://%s/" % mgr["http"]
    if tap(console in rd["urls"], "Try it names the console's address %s" % console, rd["urls"]):
        page = res["urls"][console]
        tap(page["status"] == 200 and "<title>chanq console</title>" in page["body"],
            "the console page is served there", page)
    for u, r in res["urls"].items():
        tap(r["status"] == 200, "%s answers 200" % u, r)
    ok = res["login"]
    tap(ok["status"] == 200 and re.fullmatch(r'\{"csrf":\s*"[0-9a-f]{32}"\}', ok["body"]) and
        re.match(r"chanq_session=[0-9a-f]{64}; HttpOnly", ok["cookie"]),
        "the console logs in with the admin token (a session and a CSRF token)", ok)
    tap(res["login_wrong"]["status"] == 401, "the console refuses another token (401)",
        res["login_wrong"])
    srvs, _ = find(cmds, r"chanq\s+admin\b.*\bservers\b")
    if tap(srvs, "Try it lists the servers with chanq admin"):
        mq = srv["mq"]
        row = [line.split() for line in srvs["out"].splitlines()[1:]]
        want = [mq.rsplit(":", 1)[1], "0", mq, "0", "master", "live"]
        tap(len(row) == 1 and row[0][:6] == want,
            "the Servers view lists this chanqd: appid, group, address, shard, master, live",
            "want %s, printed:\n%s" % (want, srvs["out"]))
    tap(res["rc"] == 0 and res["gone"],
        "Ctrl-C (SIGINT to run.sh's group) stops run.sh (exit 0), chanqd and the manager",
        "exit %s, group gone: %s" % (res["rc"], res["gone"]))


def run_demo(rd, t, ws_default):
    if not tap(len(rd["demo"]) == 1 and len(rd["demo_urls"]) == 1,
               "Try it runs the chat demo (scripts/demo.sh) and names its URL", rd["demo"]):
        return
    url = rd["demo_urls"][0]
    if ws_default is not None:
        tap(url == "http://%s/" % ws_default, "the demo's URL is chanqd's WebSocket default",
            "README: %s, ws default: %s" % (url, ws_default))
    ready = t + "/demo.ready"
    argv = shlex.split(rd["demo"][0], comments=True) + [
        "--client-addr", "127.0.0.1:0", "--server-addr", "127.0.0.1:0", "--ws-addr",
        "127.0.0.1:0", "--kcp-addr", "", "--admin-addr", "", "--mq-addr", "127.0.0.1:0",
        "--mq-http-addr", "127.0.0.1:0", "--store-dir", t + "/demo-data", "--ready-file", ready]
    with open(t + "/demo.log", "wb") as log:
        p = subprocess.Popen(argv, cwd=t, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        r = wait_for(lambda: ready_dict(ready), DEMO_S, p)
        if not tap(r and r.get("ws", "-") != "-", "scripts/demo.sh starts chanqd",
                   open(t + "/demo.log", errors="replace").read()[-3000:]):
            return
        page = fetch("GET", r["ws"], "/")
        tap(page["status"] == 200 and page["type"].startswith("text/html") and
            "<title>chanq chat rooms</title>" in page["body"] and
            '<script type="module" src="app.js">' in page["body"],
            "the chat page is served at the demo's URL", page)
        js = fetch("GET", r["ws"], "/app.js")
        tap(js["status"] == 200 and js["type"].startswith("text/javascript") and
            len(js["body"]) > 1000, "its script (the built bundle) is served",
            {k: (v if k != "body" else len(v)) for k, v in js.items()})

        def announcements():
            got = fetch("GET", r["mqhttp"], "/v1/topics")
            try:
                names = [x["topic"] for x in json.loads(got["body"])["topics"]]
            except (ValueError, KeyError, TypeError):
                return None
            return names if "announcements" in names else None
        tap(wait_for(announcements, CMD_S, p) == ["announcements"],
            "demo.sh creates the topic of the Announcements panel, and no other",
            fetch("GET", r["mqhttp"], "/v1/topics"))
    finally:
        rc = stop_group(p, signal.SIGTERM)
        tap(rc is not None and group_gone(p.pid), "the demo stops on SIGTERM", "exit %s" % rc)


def terminated(signum, frame):
    raise SystemExit(1)  # the finally blocks stop what this process started


def main():
    signal.signal(signal.SIGTERM, terminated)
    if len(sys.argv) == 3 and sys.argv[1] == "--inside":
        inside(sys.argv[2])
        return 0
    if len(sys.argv) != 3:
        print("usage: test_readme.py SOURCE_ROOT BUILD_DIR", file=sys.stderr)
        return 2
    root, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    rd = read_readme(root)
    if not rd:
        print("1..1\nnot ok 1 - README.md has a '## What is running' and a '## Try it' section")
        return 1
    t = checkout(root, build)
    diag("README's Try it: %s" % (rd["cmds"] + rd["demo"]))
    diag("running in %s" % t)
    with open(t + "/readme.json", "w") as f:
        json.dump(rd, f)
    ws_default = None
    try:
        ns = subprocess.run(["unshare", "-rn", "true"], capture_output=True)
        why = ns.stderr.decode().strip() if ns.returncode else ""
    except OSError as e:
        why = str(e)
    if why:
        skip("scripts/run.sh and the README's commands",
             "no private network namespace here (unshare -rn: %s)" % why)
    else:
        p = subprocess.Popen(["unshare", "-rn", sys.executable, os.path.abspath(__file__),
                              "--inside", t])
        try:
            p.wait(timeout=INSIDE_S)
        except subprocess.TimeoutExpired:
            pass
        finally:  # SIGTERM: the inside stops run.sh's group in its finally block
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=STOP_S + 10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        try:
            with open(t + "/inside.json") as f:
                res = json.load(f)
        except (OSError, ValueError) as e:
            res = {"started": False, "error": str(e)}
        check_runsh(rd, t, res)
        if res.get("chanqd"):
            ws_default = res["chanqd"].get("ws")
    if shutil.which("node") and shutil.which("npm"):
        run_demo(rd, t, ws_default)
    else:
        skip("scripts/demo.sh", "no node and npm here (scripts/deps.sh test installs them)")

    print("1..%d" % len(results))
    for i, (ok, what, detail) in enumerate(results, 1):
        print("%s %d - %s" % ("ok" if ok else "not ok", i, what))
        if not ok:
            diag(detail)
    failed = [r for r in results if not r[0]]
    if failed:
        for log in ("run.log", "chanq-mgr/mgr.log", "demo.log"):
            if os.path.exists(os.path.join(t, log)):
                diag("--- %s (tail)" % log)
                diag(open(os.path.join(t, log), errors="replace").read()[-2000:])
        diag("kept %s" % t)
    else:
        shutil.rmtree(t, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
