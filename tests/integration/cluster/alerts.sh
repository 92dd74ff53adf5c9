#!/usr/bin/env bash
# tests/integration/cluster/alerts.sh CHANQD - issue 25's alerts, end to end with real
# components: the shipped rules (doc/prometheus/chanq-alerts.yml) reach a person.
#
# The run, all on loopback, each process in a temp dir and stopped by its PID:
#   - a manager (`chanqd --role mgr`, file state) on free ports;
#   - scripts/cluster.sh: 3 ZooKeeper nodes, shards 1 and 2 of 2 MariaDB + 2 chanqd, every
#     chanqd reporting to the manager every 500 ms (RELAY_NODES=0: no NATS, no relay);
#   - Debian's Alertmanager (prometheus-alertmanager) routing every alert, resolved ones too,
#     to a webhook receiver this test runs (alert_hook.py: each POST appended to a file);
#   - Debian's Prometheus loading the shipped rules unchanged, scraping the four chanqd (job
#     chanqd) and the manager (job chanq-mgr) every SCRAPE_S (1) s, evaluating every 1 s.
# Then, on shard 1:
#   1. STOP SLAVE SQL_THREAD on the standby's MariaDB and one write on the master's: the
#      webhook gets ChanqReplicationLag firing with exactly the labels {alertname, severity
#      critical, shard 1}; printed: the time from the stop to delivery, and from the moment the
#      rule's condition first held in the scraped data (its expression over the run, queried
#      from Prometheus) to delivery, against the rule's `for` + 2 scrape intervals;
#   2. START SLAVE SQL_THREAD: the webhook gets it resolved (same labels);
#   3. the standby's mysqld SIGKILLed (by its PID, tests/support/mariadb-pair.sh kill-standby),
#      then one write on the master (its commit times out on the standby's ack): the webhook
#      gets ChanqSemiSyncOff firing with exactly {alertname, severity critical, shard 1,
#      instance (shard 1 node 1's admin address), job chanqd}, timing printed as in 1.
# And over the whole run: no ChanqReplicationLag for shard 2, no ChanqShardNoMaster.
# Timing is printed; bounded only generously (WAIT_S, 180 s, per wait; for + 60 s from the
# condition to delivery).
#
# Exit: 0 pass, 1 fail (the services' logs' tails printed), 77 skip (java / ZooKeeper /
# MariaDB / prometheus / prometheus-alertmanager missing). KEEP=1 keeps the files.
set -euo pipefail

[ $# -eq 1 ] || {
    echo "usage: $0 CHANQD" >&2
    exit 64
}
export CHANQD=$1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
export RELAY_NODES=0 SHARDS=2
RULES="$ROOT/doc/prometheus/chanq-alerts.yml"
HOOK="$ROOT/tests/integration/cluster/alert_hook.py"
PAIR="$ROOT/tests/support/mariadb-pair.sh"
SCRAPE_S=1
WAIT_S=180

# shellcheck source=tests/integration/cluster/lib.sh
. "$ROOT/tests/integration/cluster/lib.sh"
cluster_settings 0
PROM=$(command -v prometheus) ||
    skip "prometheus is not installed (apt-get install prometheus; scripts/deps.sh test)"
AM=$(command -v prometheus-alertmanager || command -v alertmanager) ||
    skip "prometheus-alertmanager is not installed (apt-get install prometheus-alertmanager;" \
        "scripts/deps.sh test)"
[ -f "$RULES" ] || {
    say "FAIL: $RULES is missing"
    exit 1
}

BASE=$(mktemp -d "${TMPDIR:-/tmp}/cqalerts.XXXXXX")
DIR=$BASE/cluster
MGRD=$BASE/mgr
HOOKOUT=$BASE/hook.jsonl
MGRPID='' HOOKPID='' AMPID='' PROMPID=''

cleanup() {
    local rc=$? f
    set +e
    stop_pid "$PROMPID"
    stop_pid "$AMPID"
    stop_pid "$HOOKPID"
    if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then
        say "---- alerts the webhook received"
        python3 "$HOOK" names "$HOOKOUT" 2>/dev/null | sed 's/^/#   /'
        for f in "$BASE/prometheus.log" "$BASE/alertmanager.log" "$MGRD/log" \
            "$DIR"/shard*/node*/log; do
            [ -f "$f" ] || continue
            say "---- $f (last 15 lines)"
            tail -n 15 "$f"
        done
    fi
    "$CLUSTER" stop "$DIR" >/dev/null 2>&1 || true
    stop_pid "$MGRPID"
    if [ "${KEEP:-0}" = 1 ]; then say "kept $BASE"; else rm -rf "$BASE"; fi
    exit "$rc"
}
trap cleanup EXIT

fail() {
    say "FAIL: $*"
    exit 1
}
sql() { # sql PORT STATEMENT: root over TCP on that MariaDB
    mariadb --no-defaults -uroot -h127.0.0.1 -P"$1" -N -B -e "$2"
}
# wait_file FILE PID WHAT: until FILE is not empty (30 s; fails when PID exits).
wait_file() {
    local end=$((SECONDS + 30))
    until [ -s "$1" ]; do
        kill -0 "$2" 2>/dev/null || fail "$3 exited"
        [ $SECONDS -lt $end ] || fail "$3 did not start in 30 s"
        sleep 0.1
    done
}
http_ok() { curl -sf --max-time 2 -o /dev/null "$1"; }

# ---- the manager -------------------------------------------------------------------------------
mkdir -p "$MGRD"
head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$MGRD/server.token"
head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$MGRD/admin.token"
chmod 600 "$MGRD/server.token" "$MGRD/admin.token"
"$CHANQD" --role mgr --mgr-addr 127.0.0.1:0 --mgr-http-addr '' --admin-addr 127.0.0.1:0 \
    --mgr-state-file "$MGRD/state.json" --mgr-audit-log "$MGRD/audit.log" \
    --mgr-admin-token-file "$MGRD/admin.token" --mgr-token-file "$MGRD/server.token" \
    --ready-file "$MGRD/ready" >"$MGRD/log" 2>&1 &
MGRPID=$!
wait_file "$MGRD/ready" "$MGRPID" "the manager"
MGR=$(sed -n 's/.*\bmgr=\([^ ]*\).*/\1/p' "$MGRD/ready")
MGR_ADMIN=$(sed -n 's/.*\badmin=\([^ ]*\).*/\1/p' "$MGRD/ready")
say "manager mgr=$MGR admin=$MGR_ADMIN"

# ---- the cluster, reporting to it ----------------------------------------------------------------
export CHANQD_ARGS="--mgr-servers $MGR --mgr-token-file $MGRD/server.token --mgr-report-ms 500"
cluster_up
read -r DB1_PRIMARY DB1_STANDBY <"$DIR/shard1/db.ports"
S1N1_ADMIN=$(field 1 1 admin)
say "shard 1: MariaDB primary $DB1_PRIMARY, standby $DB1_STANDBY; node 1 admin $S1N1_ADMIN"

# ---- the webhook receiver and Alertmanager -----------------------------------------------------
python3 "$HOOK" serve "$HOOKOUT" "$BASE/hook.port" >"$BASE/hook.log" 2>&1 &
HOOKPID=$!
wait_file "$BASE/hook.port" "$HOOKPID" "the webhook receiver"
read -r AM_PORT PROM_PORT <<<"$(python3 "$ROOT/tests/support/free-ports.py" 30000 32767 2)"
cat >"$BASE/alertmanager.yml" <<EOF
route:
  receiver: hook
  group_by: [alertname, shard, instance]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: http://127.0.0.1:$(cat "$BASE/hook.port")/
        send_resolved: true
EOF
"$AM" --config.file "$BASE/alertmanager.yml" --storage.path "$BASE/am-data" \
    --web.listen-address "127.0.0.1:$AM_PORT" --cluster.listen-address '' \
    >"$BASE/alertmanager.log" 2>&1 &
AMPID=$!
am_ready() {
    kill -0 "$AMPID" 2>/dev/null || fail "alertmanager exited"
    http_ok "http://127.0.0.1:$AM_PORT/-/ready"
}
wait_for 30 "alertmanager ready" am_ready || fail "alertmanager is not ready"

# ---- Prometheus, with the shipped rules ----------------------------------------------------------
targets=
for s in 1 2; do
    for n in 1 2; do targets="$targets${targets:+, }'$(field "$s" "$n" admin)'"; done
done
cat >"$BASE/prometheus.yml" <<EOF
global:
  scrape_interval: ${SCRAPE_S}s
  evaluation_interval: 1s
rule_files: ['$RULES']
alerting:
  alertmanagers:
    - static_configs: [{targets: ['127.0.0.1:$AM_PORT']}]
scrape_configs:
  - job_name: chanqd
    static_configs: [{targets: [$targets]}]
  - job_name: chanq-mgr
    static_configs: [{targets: ['$MGR_ADMIN']}]
EOF
"$PROM" --config.file "$BASE/prometheus.yml" --storage.tsdb.path "$BASE/tsdb" \
    --web.listen-address "127.0.0.1:$PROM_PORT" >"$BASE/prometheus.log" 2>&1 &
PROMPID=$!
PQ="http://127.0.0.1:$PROM_PORT/api/v1"
# prom_count QUERY: the number of series of the instant query
prom_count() {
    curl -sf --max-time 2 "$PQ/query" --data-urlencode "query=$1" |
        python3 -c 'import json,sys; print(len(json.load(sys.stdin)["data"]["result"]))'
}
prom_ready() {
    kill -0 "$PROMPID" 2>/dev/null || fail "prometheus exited"
    http_ok "http://127.0.0.1:$PROM_PORT/-/ready"
}
wait_for 30 "prometheus ready" prom_ready || fail "prometheus is not ready"
rules_loaded() { # the shipped rules, every one of them, in Prometheus' rule API
    local want got
    want=$(grep -c '^ *- alert: ' "$RULES")
    got=$(curl -sf --max-time 2 "$PQ/rules?type=alert" | python3 -c \
        'import json,sys; print(sum(len(g["rules"]) for g in json.load(sys.stdin)["data"]["groups"]))')
    [ "$got" = "$want" ]
}
wait_for 30 "the rules loaded" rules_loaded || fail "prometheus did not load $RULES"
say "prometheus 127.0.0.1:$PROM_PORT loaded $(grep -c '^ *- alert: ' "$RULES") alerting rules"
all_up() { [ "$(prom_count 'up == 1')" = 5 ]; }
wait_for 60 "all 5 targets up" all_up || fail "prometheus does not scrape all 5 targets"
# the standby of shard 1 reports its replication (the lag series exists, at 0)
lag_series() { [ "$(prom_count 'chanq_mgr_repl_behind_seconds{shard="1"} == 0')" = 1 ]; }
wait_for 60 "shard 1's replication in the manager's metrics" lag_series ||
    fail "no chanq_mgr_repl_behind_seconds{shard=\"1\"} 0"

# hook_wait NAME STATUS SINCE_MS: until the webhook got it; sets GOT ("RECEIVED STARTS LABELS")
hook_got() { GOT=$(python3 "$HOOK" find "$HOOKOUT" "$1" "$2" "$3"); }
hook_wait() {
    wait_for "$WAIT_S" "$1 $2 at the webhook" hook_got "$@" || fail "the webhook got no $1 $2"
}
# same WHAT WANT GOT
same() {
    [ "$2" = "$3" ] || fail "$1: want $2, got $3"
    say "ok: $1"
}
# held_ms NAME FROM_MS TO_MS [K=V,...]: the first moment (unix ms, 0.5 s steps) in [FROM, TO] at
# which the expression of rule NAME (as Prometheus loaded it, from its rules API) had a series
# with those labels: when its condition first held in the scraped data; empty when never.
held_ms() {
    python3 - "$PQ" "$@" <<'PY'
import json, sys, urllib.parse, urllib.request
pq, name, lo, hi = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
match = sys.argv[5] if len(sys.argv) > 5 else ""
get = lambda u: json.load(urllib.request.urlopen(u, timeout=10))["data"]
expr = [r["query"] for g in get(pq + "/rules?type=alert")["groups"] for r in g["rules"]
        if r["name"] == name][0]
q = urllib.parse.urlencode({"query": expr, "start": lo / 1000.0, "end": hi / 1000.0,
                            "step": "0.5"})
first = None
for s in get(pq + "/query_range?" + q)["result"]:
    if all(s["metric"].get(k) == v for k, v in (p.split("=", 1) for p in match.split(",") if p)):
        t = int(float(s["values"][0][0]) * 1000)
        first = t if first is None or t < first else first
print("" if first is None else first)
PY
}
secs() { echo "$(($1 / 1000)).$(($1 % 1000 / 100))"; } # secs MS: "S.d"
rule_for_s() { # the `for:` of rule NAME in the shipped file, in seconds (Ns or Nm)
    sed -n "/- alert: $1\$/,/for:/s/^ *for: *\([0-9]*\)\([sm]\)$/\1 \2/p" "$RULES" |
        awk '{ print $2 == "m" ? $1 * 60 : $1 }'
}

# report_timing NAME T0_MS RECEIVED_MS FOR_S WHAT [K=V,...]: prints when the alert reached the
# webhook after the fault (at T0) and after its condition first held in the scraped data, against
# the rule's `for` + 2 scrape intervals; fails only past a generous bound (for + 60 s).
report_timing() {
    local name=$1 t0=$2 recv=$3 for_s=$4 what=$5 held
    held=$(held_ms "$name" "$t0" "$recv" "${6:-}")
    [ -n "$held" ] || fail "$name: Prometheus never saw its condition hold before delivery"
    say "$name: delivered $(secs $((recv - t0))) s after $what; its condition held from" \
        "$(secs $((held - t0))) s; delivered $(secs $((recv - held))) s after that (the rule's" \
        "for ${for_s} s + 2 scrape intervals = $((for_s + 2 * SCRAPE_S)) s; Alertmanager's" \
        "group_wait 1 s)"
    [ $((recv - held)) -le $(((for_s + 60) * 1000)) ] ||
        fail "$name: delivered over for + 60 s after its condition held"
}

# ---- 1. the lag alert ----------------------------------------------------------------------------
LAG_FOR=$(rule_for_s ChanqReplicationLag)
T0=$(ms)
sql "$DB1_STANDBY" "STOP SLAVE SQL_THREAD"
sql "$DB1_PRIMARY" "CREATE DATABASE IF NOT EXISTS alerts_t;
    CREATE TABLE IF NOT EXISTS alerts_t.w (id INT PRIMARY KEY, at BIGINT);
    REPLACE INTO alerts_t.w VALUES (1, UNIX_TIMESTAMP())"
say "STOP SLAVE SQL_THREAD on shard 1's standby, one write on its master"
hook_wait ChanqReplicationLag firing "$T0"
read -r RECV _ LABELS <<<"$GOT"
same "ChanqReplicationLag firing, labels" \
    '{"alertname": "ChanqReplicationLag", "severity": "critical", "shard": "1"}' "$LABELS"
report_timing ChanqReplicationLag "$T0" "$RECV" "$LAG_FOR" "STOP SLAVE SQL_THREAD" shard=1

# ---- 2. resolved ---------------------------------------------------------------------------------
T1=$(ms)
sql "$DB1_STANDBY" "START SLAVE SQL_THREAD"
hook_wait ChanqReplicationLag resolved "$T1"
read -r RECV _ LABELS <<<"$GOT"
same "ChanqReplicationLag resolved, labels" \
    '{"alertname": "ChanqReplicationLag", "severity": "critical", "shard": "1"}' "$LABELS"
say "ChanqReplicationLag: resolved delivered $(secs $((RECV - T1))) s after START SLAVE SQL_THREAD"

# ---- 3. the standby's database killed: semi-sync -------------------------------------------------
SEMI_FOR=$(rule_for_s ChanqSemiSyncOff)
T2=$(ms)
"$PAIR" kill-standby "$DIR/shard1/db"
# a write on the master: its commit waits SEMI_TIMEOUT_MS for the dead standby's ack, and the
# master drops the standby's connection (without a write it notices at its next heartbeat)
sql "$DB1_PRIMARY" "REPLACE INTO alerts_t.w VALUES (2, UNIX_TIMESTAMP())"
say "shard 1's standby mysqld SIGKILLed, one write on its master"
hook_wait ChanqSemiSyncOff firing "$T2"
read -r RECV _ LABELS <<<"$GOT"
same "ChanqSemiSyncOff firing, labels" \
    "{\"alertname\": \"ChanqSemiSyncOff\", \"instance\": \"$S1N1_ADMIN\", \"job\": \"chanqd\", \"severity\": \"critical\", \"shard\": \"1\"}" \
    "$LABELS"
report_timing ChanqSemiSyncOff "$T2" "$RECV" "$SEMI_FOR" "the kill" shard=1

# ---- nothing else that must not fire -------------------------------------------------------------
if python3 "$HOOK" names "$HOOKOUT" | grep -E '^ChanqReplicationLag .*"shard": "2"|^ChanqShardNoMaster '; then
    fail "an alert that must not fire did"
fi
say "ok: no ChanqReplicationLag for shard 2, no ChanqShardNoMaster"
say "alerts received: $(python3 "$HOOK" names "$HOOKOUT" | awk '{ print $1 "/" $2 }' | sort -u | xargs)"
say "PASS"
