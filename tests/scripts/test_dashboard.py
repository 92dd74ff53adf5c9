#!/usr/bin/env python3
"""test_dashboard.py - the Grafana dashboard (doc/grafana/chanq-dashboard.json) and the metrics
page (doc/metrics.md) cannot rot: every metric name a panel or a variable uses is emitted by
chanqd's or the manager's /metrics, and every name those emit is listed in doc/metrics.md.

  CHANQD=build/src/main/chanqd tests/scripts/test_dashboard.py SOURCE_ROOT

Starts chanqd (sqlite store, port 0 everywhere) with one topic, one produce and one committed
consume (so the per-topic and per-consumer families have samples), and `chanqd --role mgr`
(file state), reads both /metrics, then stops both by PID. TAP output.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cqproc  # noqa: E402

# PromQL functions, aggregations and keywords: identifiers of an expression that are no metric.
PROMQL = set("""
sum min max avg group stddev stdvar count count_values bottomk topk quantile by without on
ignoring group_left group_right bool and or unless offset rate irate increase delta idelta deriv
histogram_quantile abs absent absent_over_time ceil floor round clamp clamp_max clamp_min
label_replace label_join label_values sort sort_desc time timestamp vector scalar
avg_over_time min_over_time max_over_time sum_over_time count_over_time last_over_time
quantile_over_time changes resets predict_linear holt_winters ln log2 log10 exp sqrt
""".split())

results = []


def tap(ok, what, detail=""):
    results.append(ok)
    print(("ok" if ok else "not ok") + " %d - %s" % (len(results), what), flush=True)
    if not ok and detail:
        for line in str(detail).splitlines():
            print("#   " + line)
    return ok


def names_in_expr(expr):
    """The metric names an expression reads."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    e = re.sub(r"\{[^}]*\}", "", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)  # ranges
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    e = re.sub(r"\$\{?\w+\}?", "", e)  # dashboard variables
    out = set()
    for tok in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", e):
        if tok not in PROMQL and not re.fullmatch(r"[0-9eE.]+", tok):
            out.add(tok)
    return out


def dashboard_names(dash):
    used = {}  # name -> where
    exprs = []
    for p in dash.get("panels", []):
        for sub in [p] + p.get("panels", []):
            for t in sub.get("targets", []):
                exprs.append((sub.get("title", "?"), t.get("expr", "")))
    for v in dash.get("templating", {}).get("list", []):
        q = v.get("query")
        if isinstance(q, dict):
            q = q.get("query", "")
        if v.get("type") == "query" and q:
            m = re.match(r"\s*label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)", q)
            if m:
                used.setdefault(m.group(1), "variable " + v["name"])
            else:
                exprs.append(("variable " + v["name"], q))
    for where, e in exprs:
        for n in names_in_expr(e):
            used.setdefault(n, where)
    return used, exprs


def emitted(text):
    """Family names (TYPE lines; histograms add _bucket/_sum/_count) and sample names."""
    fam, samples = set(), set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            parts = line.split()
            fam.add(parts[2])
            if parts[3] in ("histogram", "summary"):
                samples.update(parts[2] + s for s in ("_bucket", "_sum", "_count"))
        elif line and not line.startswith("#"):
            samples.add(re.match(r"[A-Za-z_:][A-Za-z0-9_:]*", line).group(0))
    return fam, samples | fam


def helpless(text):
    """Families with a TYPE line and no HELP line."""
    typed = set(re.findall(r"^# TYPE (\S+)", text, re.M))
    helped = set(re.findall(r"^# HELP (\S+) \S", text, re.M))
    return sorted(typed - helped)


def doc_rows(doc):
    """doc/metrics.md's table rows: family name -> the whole row (a row may name several)."""
    rows = {}
    for line in doc.splitlines():
        if line.startswith("| `"):
            cells = line.split("|")
            for n in re.findall(r"`([a-z_:][a-z0-9_:]*)`", cells[1]):
                rows.setdefault(n, line)
    return rows


def label_mismatches(text, rows):
    """Every label a sample carries is named in its family's row; every value of a `reason`
    or `outcome` label is spelled there too."""
    bad = set()
    for m in re.finditer(r"^([a-z_:][a-z0-9_:]*)\{([^}]*)\}", text, re.M):
        name, labels = m.group(1), m.group(2)
        row = rows.get(name)
        if row is None:
            continue  # the undocumented check reports it
        for k, v in re.findall(r'([a-zA-Z_]+)="([^"]*)"', labels):
            if k not in row:
                bad.add("%s: label %s not in its row" % (name, k))
            elif k in ("reason", "outcome") and v not in row:
                bad.add("%s: %s=%s not in its row" % (name, k, v))
    return sorted(bad)


def get(addr, path="/metrics"):
    with urllib.request.urlopen("http://%s%s" % (addr, path), timeout=5) as r:
        return r.read().decode()


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    chanqd = os.environ.get("CHANQD")
    chanq = os.environ.get("CHANQ")
    if not chanqd or not chanq:
        print("1..0 # SKIP CHANQD and CHANQ must be set (meson test sets them)")
        return 0
    print("1..8", flush=True)
    with open(os.path.join(root, "doc/grafana/chanq-dashboard.json")) as f:
        dash = json.load(f)
    with open(os.path.join(root, "doc/metrics.md")) as f:
        doc = f.read()
    documented = set(re.findall(r"`([a-z_:][a-z0-9_:]*)`", doc))

    ids = [p["id"] for p in dash["panels"]]
    targets = [t for p in dash["panels"] for t in p.get("targets", [])]
    tap(len(ids) == len(set(ids)) and targets and all(t.get("expr") for t in targets),
        "the dashboard parses, panel ids are unique, every target has an expression")
    used, exprs = dashboard_names(dash)
    tap(len(used) >= 20 and "chanq_mq_topic_produced_total" in used and
        "chanq_mgr_repl_lag_alert" in used and "connection_num" in used,
        "the dashboard reads %d metric names (relay, durable, manager)" % len(used),
        sorted(used))

    tmp = tempfile.mkdtemp(prefix="cq-dash.")
    procs = cqproc.Procs()
    try:
        mr = cqproc.start_mgr(procs, chanqd, tmp, ["--dev"])
        # a bridge with a route binding and a followed shard (its server down: the families
        # are there all the same)
        bindings = os.path.join(tmp, "bindings.json")
        with open(bindings, "w") as f:
            f.write('{"bindings":[{"topic":"t","broadcast":"global","msg_type":200},'
                    '{"topic":"t","route":"user_id","msg_type":201}]}')
        sr = cqproc.start_server(procs, chanqd, tmp, "srv", ["--mq-http-addr", "127.0.0.1:0",
                                                             "--ws-addr", "127.0.0.1:0",
                                                             "--kcp-addr", "127.0.0.1:0",
                                                             "--bridge-file", bindings,
                                                             "--bridge-follow", "9/127.0.0.1:9"])
        mq = sr["mq"]
        subprocess.run([chanq, "--addr", mq, "add-topic", "t"], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([chanq, "--addr", mq, "produce", "t"], input=b"x\n", check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([chanq, "--addr", mq, "consume", "t", "--commit"], check=True,
                       stdout=subprocess.DEVNULL)
        time.sleep(0.3)  # the MQ loop renders its metrics every 250 ms
        s_text, m_text = get(sr["admin"]), get(mr["admin"])
        s_fam, s_all = emitted(s_text)
        m_fam, m_all = emitted(m_text)
    finally:
        procs.stop_all()
        shutil.rmtree(tmp, ignore_errors=True)

    tap("chanq_mq_topic_produced_total" in s_all and "connection_num" in s_all,
        "chanqd's /metrics read (%d families)" % len(s_fam))
    missing = sorted(n for n in used if n not in s_all | m_all)
    tap(not missing, "every name the dashboard uses is emitted", "\n".join(
        "%s (in %s)" % (n, used[n]) for n in missing))
    tap("chanq_mgr_servers" in m_fam and "chanq_mgr_repl_lag_alert" in m_fam,
        "the manager's /metrics read (%d families)" % len(m_fam))
    undocumented = sorted((s_fam | m_fam) - documented)
    tap(not undocumented, "every family chanqd and the manager emit is in doc/metrics.md",
        "\n".join(undocumented))
    nohelp = helpless(s_text) + helpless(m_text)
    tap(not nohelp, "every family has HELP text", "\n".join(nohelp))
    rows = doc_rows(doc)
    labels = label_mismatches(s_text, rows) + label_mismatches(m_text, rows)
    tap(not labels, "doc/metrics.md names every label and every reason and outcome emitted",
        "\n".join(labels))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
