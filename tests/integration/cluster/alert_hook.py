#!/usr/bin/env python3
"""alert_hook.py - the webhook receiver of tests/integration/alerts.sh, and its reader.

  alert_hook.py serve OUT PORTFILE
      an HTTP server on 127.0.0.1 (a free port, written to PORTFILE once it listens) that
      appends every POST body (Alertmanager's webhook JSON) to OUT as one line, with the
      receive time added as "_received_ms" (unix ms), and answers 200. Runs until killed.
  alert_hook.py find OUT ALERTNAME STATUS SINCE_MS
      prints, for the first alert named ALERTNAME with that status ("firing" or "resolved") in
      a POST received at or after SINCE_MS: "RECEIVED_MS STARTS_MS LABELS" (LABELS: its label
      set as sorted JSON, STARTS_MS: its startsAt in unix ms); exit 1 when there is none.
  alert_hook.py names OUT
      prints each "ALERTNAME STATUS LABELS" received, one per line (diagnostics).
"""
import datetime
import http.server
import json
import os
import sys
import time


class Hook(http.server.BaseHTTPRequestHandler):
    out = None

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        doc = json.loads(self.rfile.read(n) or b"{}")
        doc["_received_ms"] = int(time.time() * 1000)
        with open(Hook.out, "a") as f:
            f.write(json.dumps(doc) + "\n")
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def serve(out, portfile):
    Hook.out = out
    srv = http.server.HTTPServer(("127.0.0.1", 0), Hook)
    with open(portfile + ".tmp", "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.rename(portfile + ".tmp", portfile)
    srv.serve_forever()


def unix_ms(rfc3339):
    """Alertmanager's startsAt (nanoseconds, Z or an offset) as unix ms."""
    s = rfc3339.replace("Z", "+00:00")
    head, _, rest = s.partition(".")
    if rest:
        i = 0
        while i < len(rest) and rest[i].isdigit():
            i += 1
        s = head + "." + rest[:i][:6].ljust(6, "0") + rest[i:]
    return int(datetime.datetime.fromisoformat(s).timestamp() * 1000)


def posts(out):
    try:
        with open(out) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def find(out, name, status, since):
    for doc in posts(out):
        if doc["_received_ms"] < since:
            continue
        for a in doc.get("alerts", []):
            if a["labels"].get("alertname") == name and a["status"] == status:
                print(doc["_received_ms"], unix_ms(a["startsAt"]),
                      json.dumps(a["labels"], sort_keys=True))
                return 0
    return 1


def names(out):
    for doc in posts(out):
        for a in doc.get("alerts", []):
            print(a["labels"].get("alertname"), a["status"],
                  json.dumps(a["labels"], sort_keys=True))
    return 0


def main(argv):
    if len(argv) == 4 and argv[1] == "serve":
        return serve(argv[2], argv[3])
    if len(argv) == 6 and argv[1] == "find":
        return find(argv[2], argv[3], argv[4], int(argv[5]))
    if len(argv) == 3 and argv[1] == "names":
        return names(argv[2])
    print(__doc__, file=sys.stderr)
    return 64


if __name__ == "__main__":
    sys.exit(main(sys.argv))
