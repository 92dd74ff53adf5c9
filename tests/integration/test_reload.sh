#!/usr/bin/env bash
# tests/integration/test_reload.sh CHANQD CHANQ - SIGHUP (`systemctl reload`) against a chanqd
# run as the systemd unit runs it: everything from one --config file, nothing on the command
# line but --ready-file. TAP output.
#   - --log-level in the file is applied (INFO lines appear once it says info);
#   - options only a restart applies are named in one warning, in the table's order;
#   - the MQ permissions file is re-read: a module's produce right is revoked on the seed port;
#   - a config file that no longer parses is reported and changes nothing (the server serves).
set -uo pipefail

CHANQD=$1
CHANQ=$2
T=$(mktemp -d "${TMPDIR:-/tmp}/cqreload.XXXXXX")
PID=
# shellcheck source=tests/support/tap.sh
. "$(dirname "$0")/../support/tap.sh" # ok, same

cleanup() {
    if [ -n "$PID" ]; then
        kill -KILL "$PID" 2>/dev/null
        wait "$PID" 2>/dev/null
    fi
    rm -rf "$T"
}
trap cleanup EXIT

# waits (safety stop 20 s) until the log has a line matching the pattern
log_wait() {
    for _ in $(seq 1 400); do
        grep -q -- "$1" "$T/log" && return 0
        sleep 0.05
    done
    return 1
}
# sends SIGHUP and waits until the handler ran to its end (the MQ permissions are its last step)
hup() {
    local before
    before=$(grep -c "SIGHUP: MQ permissions\|SIGHUP: keeping the current MQ" "$T/log")
    kill -HUP "$PID"
    for _ in $(seq 1 400); do
        [ "$(grep -c "SIGHUP: MQ permissions\|SIGHUP: keeping the current MQ" "$T/log")" -gt \
            "$before" ] && return 0
        sleep 0.05
    done
    return 1
}
conf() { # conf LOG-LEVEL EXTRA-LINE
    cat >"$T/chanqd.conf" <<EOF
# as /etc/chanq/chanqd.conf, on free ports in a temp dir
client-addr = 127.0.0.1:0
kcp-addr = 127.0.0.1:0
ws-addr = 127.0.0.1:0
server-addr = 127.0.0.1:0
admin-addr = 127.0.0.1:0
auth-provider = file
auth-token-file = $T/tokens.json
mq-addr = 127.0.0.1:0
mq-http-addr = 127.0.0.1:0
mq-permissions-file = $T/perms.json
store-dir = $T/store
workers = 2
log-level = $1
$2
EOF
}
perms() { # perms PRODUCE-LIST-OF-MODULE-2
    printf '{"1": {"token": "t1", "admin": true, "produce": ["*"], "consume": ["*"]},
 "2": {"token": "t2", "produce": [%s], "consume": ["*"]}}\n' "$1" >"$T/perms.json"
}

echo "1..10"
echo '{"alice": "secret"}' >"$T/tokens.json"
perms '"orders"'
conf error ""
"$CHANQD" --config "$T/chanqd.conf" --ready-file "$T/ready" >"$T/log" 2>&1 &
PID=$!
for _ in $(seq 1 400); do
    [ -s "$T/ready" ] || ! kill -0 "$PID" 2>/dev/null && break
    sleep 0.05
done
MQ=$(tr ' ' '\n' <"$T/ready" 2>/dev/null | sed -n 's/^mq=//p')
[ -n "$MQ" ] || {
    sed 's/^/# /' "$T/log"
    echo "Bail out! chanqd did not start"
    exit 1
}
same "log-level error from the file: no INFO line at start" 0 "$(grep -c ' INFO ' "$T/log")"

"$CHANQ" --addr "$MQ" --module 1 --token t1 add-topic orders >/dev/null 2>&1
same "module 2 may produce to orders" 1 \
    "$(echo one | "$CHANQ" --addr "$MQ" --module 2 --token t2 produce orders 2>&1)"

# the file now says info, revokes module 2's produce right, and changes two restart-only options
conf info "max-channels = 777"
sed -i 's/^ws-addr = .*/ws-addr = ""/' "$T/chanqd.conf"
perms ''
hup
ok "SIGHUP is handled" $?
grep -q "INFO  main     SIGHUP: log level info" "$T/log"
ok "the new log level is applied and logged" $?
grep -q "INFO  main     SIGHUP: MQ permissions reloaded from $T/perms.json" "$T/log"
ok "INFO lines of the same reload appear: the level applied first" $?
same "one warning names the options only a restart applies, in the table's order" \
    "SIGHUP: changed options apply at the next restart: ws-addr, max-channels" \
    "$(grep -o 'SIGHUP: changed options.*' "$T/log")"
same "module 2's produce is refused on the seed port after the reload" \
    "chanq: produce: err_code 7 (no_permission): produce: module 2 may not produce to topic \"orders\"" \
    "$(echo two | "$CHANQ" --addr "$MQ" --module 2 --token t2 produce orders 2>&1)"

# a file that no longer parses: reported, nothing changes
echo "no-such-option = 1" >>"$T/chanqd.conf"
hup
same "a config file that does not parse is reported" 1 \
    "$(grep -c "ERROR main     SIGHUP: configuration not reloaded: $T/chanqd.conf:.*no-such-option" \
        "$T/log")"
same "and the server still serves (module 1 produces offset 2)" 2 \
    "$(echo three | "$CHANQ" --addr "$MQ" --module 1 --token t1 produce orders 2>&1)"
# the exit path frees what the reloads made (under ASan a leak fails here)
kill -TERM "$PID"
wait "$PID"
rc=$?
PID=
same "chanqd exits 0 on SIGTERM, without a sanitizer report" "0 0" \
    "$rc $(grep -c 'Sanitizer' "$T/log")"
exit $failed
