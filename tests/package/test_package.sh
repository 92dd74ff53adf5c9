#!/usr/bin/env bash
# tests/package/test_package.sh SRCDIR - issue 13's package test (suite `package`, run once by
# scripts/test.sh, never under the sanitizers). TAP output.
#
#   1. copies the tree (no build dirs) to a temp dir and builds the Debian packages there with
#      dpkg-buildpackage (debhelper, no tests in the package build);
#   2. installs them on this machine with apt (dependencies resolved, maintainer scripts run:
#      the chanq account, the generated secrets), refusing to replace a chanqd installed by
#      someone else; the alerting rules in /etc/prometheus/rules are the tree's (and pass
#      promtool check rules when promtool is installed);
#   3. `systemd-analyze verify` on both installed units, and their sandbox exposure;
#   4. starts the INSTALLED /usr/bin/chanqd as the chanq user under the unit's LimitNOFILE with
#      the installed /etc/chanq/chanqd.conf, only its addresses (port 0) and paths (a temp dir)
#      substituted, and the secrets the package generated;
#   5. a produce/consume round trip with the installed `chanq` CLI (exact offsets and content);
#   6. compiles a client against the installed libchanq-dev (headers + pkg-config --static)
#      and runs it against that server;
#   7. the unit's ExecReload (SIGHUP) applies a changed module token;
#   8. chanq-mgr.service's command with the example manager config (adapted the same way), and
#      the installed chanqd reporting to it with the package's shared secret;
#   9. purges both packages: binaries and generated secrets are gone.
# Skips (TAP "1..0 # SKIP") only when debhelper is missing or packages cannot be installed
# (not root and no password-less sudo). PKG_TEST_DEBS=DIR reuses .debs built before (by hand).
set -uo pipefail

SRC=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
skip() {
    echo "1..0 # SKIP $*"
    exit 0
}
command -v dpkg-buildpackage >/dev/null && command -v dh >/dev/null ||
    skip "debhelper is not installed (scripts/deps.sh test installs it)"
SUDO=
if [ "$(id -u)" -ne 0 ]; then
    sudo -n true 2>/dev/null || skip "installing packages needs root or password-less sudo"
    SUDO="sudo -n"
fi
if dpkg-query -W -f='${Status}' chanqd 2>/dev/null | grep -q "ok installed"; then
    skip "a chanqd package is already installed on this machine; not replacing it"
fi

T=$(mktemp -d "${TMPDIR:-/tmp}/cqpkg.XXXXXX")
PID=
MGRPID=
INSTALLED=0
# shellcheck source=tests/support/tap.sh
. "$(dirname "$0")/../support/tap.sh" # ok, same
APT=(env DEBIAN_FRONTEND=noninteractive apt-get -y -q -o DPkg::Lock::Timeout=300)

cleanup() {
    local p
    for p in $PID $MGRPID; do
        kill -TERM "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    [ "$INSTALLED" = 1 ] && $SUDO "${APT[@]}" purge chanqd libchanq-dev >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT

# start_as_chanq DIR LOG COMMAND...: as the units run a service: user chanq, the open-file limit
# $NOFILE, no capabilities, no new privileges, in DIR (its state directory). setpriv execs, so
# PID is the service itself, as $MAINPID is; waits for DIR/ready (or the process's end).
start_as_chanq() {
    local dir=$1 log=$2
    shift 2
    (cd "$dir" && exec prlimit --nofile="$NOFILE:$NOFILE" setpriv --reuid=chanq --regid=chanq \
        --init-groups --no-new-privs --inh-caps=-all --bounding-set=-all "$@") >"$log" 2>&1 &
    PID=$!
    for _ in $(seq 1 400); do
        [ -s "$dir/ready" ] || ! kill -0 "$PID" 2>/dev/null && break
        sleep 0.05
    done
}
diag() { sed 's/^/# /' "$@" | tail -40; }
bail() { # a step the rest depends on failed
    echo "Bail out! $*"
    exit 1
}

# ---- 1. build --------------------------------------------------------------------------------
echo "1..31"
meson_ver=$(sed -n "s/^  version: '\([^']*\)',$/\1/p" "$SRC/meson.build")
deb_ver=$(sed -n '1s/^chanq (\([^)]*\)).*/\1/p' "$SRC/debian/changelog")
same "debian/changelog version is meson.build's project version" "$meson_ver" "$deb_ver"

if [ -n "${PKG_TEST_DEBS:-}" ]; then
    cp "$PKG_TEST_DEBS"/*.deb "$T/"
    ok "packages taken from PKG_TEST_DEBS=$PKG_TEST_DEBS" 0
else
    mkdir "$T/src"
    tar -C "$SRC" --exclude='./build*' --exclude='./obj-*' --exclude=node_modules \
        --exclude=./.git --exclude='./debian/.debhelper' --exclude='./debian/tmp' \
        --exclude='./debian/chanqd' --exclude='./debian/libchanq-dev' -cf - . |
        tar -C "$T/src" -xf -
    (cd "$T/src" && DEB_BUILD_OPTIONS="parallel=2 nocheck" \
        dpkg-buildpackage -us -uc -b >"$T/build.log" 2>&1)
    rc=$?
    ok "dpkg-buildpackage -us -uc -b builds the tree" $rc
    [ $rc = 0 ] || { diag "$T/build.log"; bail "no packages"; }
fi
DEB_D=$(ls "$T"/chanqd_"$deb_ver"_*.deb 2>/dev/null)
DEB_L=$(ls "$T"/libchanq-dev_"$deb_ver"_*.deb 2>/dev/null)
[ -f "$DEB_D" ] && [ -f "$DEB_L" ]
ok "chanqd and libchanq-dev .debs of version $deb_ver" $?
same "chanqd ships the server, the CLI, the units, the configs, the alerting rules and the sysusers file" \
    "/etc/chanq/chanqd.conf /etc/prometheus/rules/chanq-alerts.yml /lib/systemd/system/chanq-mgr.service /lib/systemd/system/chanqd.service /usr/bin/chanq /usr/bin/chanqd /usr/lib/sysusers.d/chanqd.conf /usr/share/doc/chanqd/examples/chanq-mgr.conf" \
    "$(dpkg-deb -c "$DEB_D" | awk '{print substr($6, 2)}' |
        grep -E '^/(etc/chanq/|etc/prometheus/rules/|usr/bin/|lib/systemd/system/|usr/lib/sysusers.d/|usr/share/doc/chanqd/examples/).' |
        sort | xargs)"
same "libchanq-dev ships the static library, the pkg-config file and no other library" \
    "/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)/libchanq.a /usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)/pkgconfig/libchanq.pc" \
    "$(dpkg-deb -c "$DEB_L" | awk '{print substr($6, 2)}' | grep -E '^/usr/lib/.*[^/]$' | sort | xargs)"

# ---- 2. install ------------------------------------------------------------------------------
$SUDO "${APT[@]}" install --no-install-recommends "$DEB_D" "$DEB_L" >"$T/install.log" 2>&1
rc=$?
ok "apt-get installs both packages (dependencies resolved, maintainer scripts run)" $rc
[ $rc = 0 ] || { diag "$T/install.log"; bail "not installed"; }
INSTALLED=1
getent passwd chanq >/dev/null
ok "postinst created the chanq system user" $?
same "postinst generated the secrets 0640 root:chanq" \
    "640 root chanq 640 root chanq 640 root chanq" \
    "$(stat -c '%a %U %G' /etc/chanq/tokens.json /etc/chanq/mq-permissions.json \
        /etc/chanq/mgr-token | xargs)"
# the shipped alerting rules, where Debian's Prometheus is pointed at them (doc/metrics.md
# "Alerts"): the installed file is the tree's and promtool accepts it (when installed)
if command -v promtool >/dev/null 2>&1; then
    cmp -s /etc/prometheus/rules/chanq-alerts.yml "$SRC/doc/prometheus/chanq-alerts.yml" &&
        promtool check rules /etc/prometheus/rules/chanq-alerts.yml >"$T/promtool.log" 2>&1
    ok "/etc/prometheus/rules/chanq-alerts.yml is the tree's and promtool check rules passes" $?
else
    cmp -s /etc/prometheus/rules/chanq-alerts.yml "$SRC/doc/prometheus/chanq-alerts.yml"
    ok "/etc/prometheus/rules/chanq-alerts.yml is the tree's (promtool not installed)" $?
fi
TOKEN=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["1"]["token"])' \
    /etc/chanq/mq-permissions.json 2>/dev/null)
[[ "$TOKEN" =~ ^[0-9a-f]{32}$ ]]
ok "module 1's generated token is 128 random bits in hex" $?

# ---- 3. the units ----------------------------------------------------------------------------
for u in chanqd chanq-mgr; do
    systemd-analyze verify "/lib/systemd/system/$u.service" >"$T/verify-$u.log" 2>&1
    rc=$?
    ok "systemd-analyze verify accepts the installed $u.service" $rc
    [ $rc = 0 ] || diag "$T/verify-$u.log"
done
# exposure 2.0 at most ("OK"); the lines the brief requires are checked one by one below
systemd-analyze security --offline=true --threshold=20 /lib/systemd/system/chanqd.service \
    >"$T/security.log" 2>&1
rc=$?
ok "chanqd.service's sandbox exposure is at most 2.0 ($(grep -o 'level for.*' "$T/security.log"))" \
    $rc
[ $rc = 0 ] || diag "$T/security.log"
unit=/lib/systemd/system/chanqd.service
want=("ExecStart=/usr/bin/chanqd --config /etc/chanq/chanqd.conf"
    'ExecReload=/bin/kill -HUP $MAINPID' "User=chanq" "LimitNOFILE=1048576"
    "StateDirectory=chanq" "ConfigurationDirectory=chanq" "ProtectSystem=strict"
    "ProtectHome=yes" "PrivateTmp=yes" "NoNewPrivileges=yes" "CapabilityBoundingSet="
    "Restart=on-failure")
missing=$(for l in "${want[@]}"; do grep -qFx -- "$l" "$unit" || printf '%s|' "$l"; done)
same "chanqd.service: the config, the user, SIGHUP reload, LimitNOFILE and the sandbox" "" \
    "$missing"

/usr/bin/chanqd --config /usr/share/doc/chanqd/examples/chanq-mgr.conf --dump-config \
    >"$T/mgr-dump.conf" 2>&1
rc=$?
same "the installed chanqd reads the example manager config" "0 role = \"mgr\"" \
    "$rc $(grep '^role = ' "$T/mgr-dump.conf")"

# ---- 4. the installed chanqd with the example config -----------------------------------------
chmod 0755 "$T"
mkdir -p "$T/etc" "$T/var"
chown chanq:chanq "$T/var"
chmod 0750 "$T/var"
cp -p /etc/chanq/tokens.json /etc/chanq/mq-permissions.json "$T/etc/"
sed -e 's/127\.0\.0\.1:[0-9][0-9]*/127.0.0.1:0/g' -e "s#/etc/chanq/#$T/etc/#g" \
    -e "s#/var/lib/chanq#$T/var#g" /etc/chanq/chanqd.conf >"$T/etc/chanqd.conf"
# what changed: only addresses and paths
same "the adapted config differs from the installed one only in addresses and paths" \
    "admin-addr auth-token-file client-addr kcp-addr mq-addr mq-http-addr mq-permissions-file server-addr store-dir ws-addr" \
    "$(diff /etc/chanq/chanqd.conf "$T/etc/chanqd.conf" | sed -n 's/^> \([a-z-]*\) = .*/\1/p' |
        sort | xargs)"
# as the unit runs it, with LimitNOFILE=1048576; a container whose hard limit is lower (and
# that may not raise it) gets its hard limit.
NOFILE=$(ulimit -Hn)
[ "$NOFILE" = unlimited ] || [ "$NOFILE" -gt 1048576 ] && NOFILE=1048576
# the caps beside --max-connections with the example config: mq 1024 + mq-http 256 + admin 16
# + fd-reserve 256
AUTO=$((NOFILE - 1552 > 100000 ? 100000 : NOFILE - 1552))
start_as_chanq "$T/var" "$T/chanqd.log" /usr/bin/chanqd --config "$T/etc/chanqd.conf" \
    --ready-file "$T/var/ready"
MQ=$(tr ' ' '\n' <"$T/var/ready" 2>/dev/null | sed -n 's/^mq=//p')
[ -n "$MQ" ]
ok "the installed chanqd starts as chanq with the example config (mq=$MQ)" $?
[ -n "$MQ" ] || { diag "$T/chanqd.log"; bail "chanqd did not start"; }
grep -q "open-file limit $NOFILE: --max-connections $AUTO" "$T/chanqd.log"
ok "max-connections 0 takes what the open-file limit $NOFILE leaves: $AUTO" $?

# ---- 5. the installed CLI --------------------------------------------------------------------
CLI=(/usr/bin/chanq --addr "$MQ" --module 1 --token "$TOKEN")
"${CLI[@]}" add-topic pkg_orders >"$T/cli.out" 2>&1 &&
    printf 'first order\nsecond order\n' | "${CLI[@]}" produce pkg_orders --batch 2 >>"$T/cli.out" 2>&1
same "chanq produce through the installed CLI acks offsets 1 and 2" "1 2" "$(xargs <"$T/cli.out")"
same "chanq consume returns both messages with their offsets" \
    "$(printf '1\tfirst order\n2\tsecond order')" "$("${CLI[@]}" consume pkg_orders 2>&1)"

# ---- 6. libchanq-dev -------------------------------------------------------------------------
cflags=$(pkg-config --cflags libchanq) && libs=$(pkg-config --static --libs libchanq) &&
    cc -std=c11 -Wall -Werror -o "$T/hello" "$SRC/tests/package/hello_libchanq.c" $cflags $libs \
        >"$T/cc.log" 2>&1
rc=$?
ok "a client compiles against the installed headers and pkg-config --static libchanq ($cflags)" \
    $rc
[ $rc = 0 ] && ! grep -q -- "-I$SRC" <<<"$cflags"
ok "it uses the installed headers, not the tree's" $?
[ $rc = 0 ] || diag "$T/cc.log"
same "the libchanq client reads both messages and produces the third" \
    "$(printf '1\tfirst order\n2\tsecond order\nproduced 3')" \
    "$("$T/hello" "$MQ" 1 "$TOKEN" pkg_orders 2>&1)"

# ---- 7. reload -------------------------------------------------------------------------------
NEW=0123456789abcdef0123456789abcdef
python3 - "$T/etc/mq-permissions.json" "$NEW" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
p["1"]["token"] = sys.argv[2]
open(sys.argv[1], "w").write(json.dumps(p))
EOF
reload=$(sed -n 's/^ExecReload=//p' "$unit")
MAINPID=$PID
eval "$reload" # /bin/kill -HUP $MAINPID, as systemctl reload runs it
for _ in $(seq 1 200); do
    grep -q "SIGHUP: MQ permissions reloaded" "$T/chanqd.log" && break
    sleep 0.05
done
same "after ExecReload the old token is refused" \
    "chanq: connect to $MQ: connect: unknown module_id or wrong token (CQ_EAUTH)" \
    "$("${CLI[@]}" offset pkg_orders 2>&1)"
same "and the new one is accepted" "$(printf -- '-\t3')" \
    "$(/usr/bin/chanq --addr "$MQ" --module 1 --token "$NEW" offset pkg_orders 2>&1)"
kill -TERM "$PID"
wait "$PID"
ok "chanqd exits 0 on SIGTERM" $?
PID=

# ---- 8. the manager: chanq-mgr.service's command with the example manager config ----------
mkdir -p "$T/log" "$T/mgr"
chown chanq:chanq "$T/log" "$T/mgr"
chmod 0750 "$T/log" "$T/mgr"
cp -p /etc/chanq/mgr-token "$T/etc/"
sed -e 's/127\.0\.0\.1:[0-9][0-9]*/127.0.0.1:0/g' -e "s#/etc/chanq/#$T/etc/#g" \
    -e "s#/var/lib/chanq#$T/mgr#g" -e "s#/var/log/chanq#$T/log#g" \
    /usr/share/doc/chanqd/examples/chanq-mgr.conf >"$T/etc/chanq-mgr.conf"
mgr_exec=$(sed -n 's/^ExecStart=//p' /lib/systemd/system/chanq-mgr.service)
mgr_exec=${mgr_exec//\/etc\/chanq\//$T/etc/}
# the unit's command line, split on blanks as systemd splits it (no quotes in it)
# shellcheck disable=SC2086
start_as_chanq "$T/mgr" "$T/mgr.log" $mgr_exec --ready-file "$T/mgr/ready"
MGRPID=$PID
PID=
MGR=$(tr ' ' '\n' <"$T/mgr/ready" 2>/dev/null | sed -n 's/^mgr=//p')
MGRHTTP=$(tr ' ' '\n' <"$T/mgr/ready" 2>/dev/null | sed -n 's/^mgrhttp=//p')
[ -n "$MGR" ] && [ -n "$MGRHTTP" ]
ok "the installed manager starts as chanq with the example config (mgr=$MGR)" $?
[ -n "$MGR" ] || diag "$T/mgr.log"
same "it generated the console admin token next to its state, 0600 chanq" "600 chanq" \
    "$(stat -c '%a %U' "$T/mgr/chanq-mgr-admin-token" 2>&1)"
# the server again, reporting to it with the package's shared secret
rm -f "$T/var/ready"
start_as_chanq "$T/var" "$T/chanqd2.log" /usr/bin/chanqd --config "$T/etc/chanqd.conf" \
    --ready-file "$T/var/ready" --mgr-servers "$MGR" --mgr-token-file "$T/etc/mgr-token"
MQ=$(tr ' ' '\n' <"$T/var/ready" 2>/dev/null | sed -n 's/^mq=//p')
cat >"$T/state.py" <<'PY'
import json, sys, urllib.request
tok = open(sys.argv[2]).read().strip()
req = urllib.request.Request("http://%s/api/state" % sys.argv[1],
                             headers={"Authorization": "Bearer " + tok, "Host": "127.0.0.1"})
s = json.load(urllib.request.urlopen(req, timeout=5))
print(" ".join("%s,connected=%s,stale=%s" % (x["addr"], x["connected"], x["stale"])
               for x in s["servers"]))
PY
state=
for _ in $(seq 1 200); do
    state=$(python3 "$T/state.py" "$MGRHTTP" "$T/mgr/chanq-mgr-admin-token" 2>&1)
    [ -n "$state" ] && break
    sleep 0.1
done
same "chanqd reports to the manager (GET /api/state with the admin token)" \
    "$MQ,connected=True,stale=False" "$state"
kill -TERM "$PID" "$MGRPID"
wait "$PID"
rc1=$?
wait "$MGRPID"
same "both exit 0 on SIGTERM" "0 0" "$rc1 $?"
PID=
MGRPID=

# ---- 9. purge --------------------------------------------------------------------------------
$SUDO "${APT[@]}" purge chanqd libchanq-dev >"$T/purge.log" 2>&1
rc=$?
INSTALLED=0
[ $rc = 0 ] && [ ! -e /usr/bin/chanqd ] && [ ! -e /usr/include/chanq/chanq.h ] &&
    [ ! -e /etc/chanq/mq-permissions.json ] && [ ! -e /etc/chanq/mgr-token ] &&
    [ ! -e /etc/chanq/chanqd.conf ] && [ ! -e /etc/prometheus/rules/chanq-alerts.yml ]
ok "purge removes the binaries, the headers, the configs, the alerting rules and the generated secrets" $?
[ $rc = 0 ] || diag "$T/purge.log"
exit $failed
