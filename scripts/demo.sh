#!/usr/bin/env bash
# The browser demos in one command: installs what is missing (build packages, Node and npm),
# builds chanqd, the descriptor sets and the pages, then runs chanqd serving the page and the
# WebSocket on the same port.
#   scripts/demo.sh [chanqd args]        the chat-rooms demo (default): open
#                                        http://127.0.0.1:12112/ in two browser windows; its
#                                        Announcements panel shows the durable topic
#                                        "announcements" (config/demo_bridge.json), which
#                                        demo.sh creates once chanqd is up
#   scripts/demo.sh world [chanqd args]  the spatial world: chanqd --dev with the 4x1 layout and
#                                        its Handover section (config/spatial_world_4x1.json),
#                                        plus the world bots (clients/js/world/bots.mjs: 2
#                                        spatial servers, 8 wandering entities, one player);
#                                        open http://127.0.0.1:12112/
# Extra arguments go to chanqd (e.g. --dev --ws-addr 0.0.0.0:12112: the demo's dev auth provider
# needs --dev off loopback; or --wss-addr with --tls-cert and --tls-key for https/wss).
# WORLD_BOTS_ARGS adds options to the bots (e.g. "--entities 20 --speed 400").
set -euo pipefail
cd "$(dirname "$0")/.."
mode=chat
if [ "${1:-}" = world ]; then mode=world; shift; fi
scripts/deps.sh build
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  SUDO=; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
[ -f build/build.ninja ] || meson setup build -Dtests=disabled >/dev/null
ninja -C build src/main/chanqd tools/chanq proto/chat.fds proto/world.fds >/dev/null
(cd clients/js && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build)
# On exit (a SIGTERM and Ctrl-C included) chanqd is stopped, and this script ends only once it
# has. Why the explicit traps and the poll: a signal that arrives while a foreground command
# runs (the start-up's add-topic) kills bash with its EXIT trap's `wait` returning at once, which
# left chanqd shutting down after the script had gone (caught by tests/scripts/test_readme.py).
# (|| true: errexit holds in the trap too, and chanqd may be gone already.)
stop_chanqd() {
  [ -z "$chanqd_pid" ] || kill "$chanqd_pid" 2>/dev/null || true
  while [ -n "$chanqd_pid" ] && kill -0 "$chanqd_pid" 2>/dev/null; do sleep 0.1; done
  rm -rf "$run"
}
if [ "$mode" = chat ]; then
  # chanqd in the background; Ctrl-C (or a SIGTERM) stops it. The bridge (--bridge-file)
  # delivers the durable topic "announcements" to GLOBAL as user message 200, which the page
  # shows in its Announcements panel. The topic must exist for anything to be produced to it,
  # so once chanqd is ready (its ready file: the caller's --ready-file if it gave one) this
  # script creates it on chanqd's MQ port; one that exists is left as it is.
  run=$(mktemp -d)
  chanqd_pid='' ready='' prev='' own=(--ready-file "$run/ready")
  trap stop_chanqd EXIT
  trap 'exit 143' TERM
  trap 'exit 130' INT
  for a in "$@"; do
    case $a in --ready-file=*) ready=${a#--ready-file=} ;; esac
    [ "$prev" = --ready-file ] && ready=$a
    prev=$a
  done
  if [ -n "$ready" ]; then own=(); rm -f "$ready"; else ready=$run/ready; fi
  build/src/main/chanqd --client-fsm config/client_authoratative_fsm.json \
    --channel-data-types build/proto/chat.fds --web-root clients/js/dist/demo \
    --bridge-file config/demo_bridge.json "${own[@]}" "$@" &
  chanqd_pid=$!
  for _ in $(seq 100); do [ -s "$ready" ] && break; kill -0 "$chanqd_pid" || exit 1; sleep 0.1; done
  [ -s "$ready" ] || { echo "demo.sh: chanqd wrote no ready file in 10 s" >&2; exit 1; }
  mq=$(tr ' ' '\n' <"$ready" | sed -n 's/^mq=//p')
  ws=$(tr ' ' '\n' <"$ready" | sed -n 's/^ws=//p')
  if ! build/tools/chanq --addr "$mq" add-topic announcements >/dev/null; then
    echo "demo.sh: could not create the topic announcements: the panel stays empty" >&2
  fi
  echo "chat-rooms demo: open http://$ws/ in two windows"
  echo "an announcement: echo 'hello all' | build/tools/chanq --addr $mq produce announcements"
  wait "$chanqd_pid"
  exit
fi

# The world: chanqd in the background (its ports from the ready file), then the bots in the
# foreground; Ctrl-C stops both.
run=$(mktemp -d)
chanqd_pid=''
trap stop_chanqd EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
build/src/main/chanqd --dev --client-fsm config/client_authoratative_fsm.json \
  --spatial-settings config/spatial_world_4x1.json --channel-data-types build/proto/world.fds \
  --web-root clients/js/dist/world --ready-file "$run/ready" "$@" &
chanqd_pid=$!
for _ in $(seq 100); do [ -s "$run/ready" ] && break; kill -0 "$chanqd_pid" || exit 1; sleep 0.1; done
ready=$(cat "$run/ready")
server=$(sed -n 's/.*server=\([^ ]*\).*/\1/p' <<<"$ready")
ws=$(sed -n 's/.*ws=\([^ ]*\).*/\1/p' <<<"$ready")
echo "spatial world: open http://$ws/ (chanqd log above; the bots connect to $server)"
# shellcheck disable=SC2086
node clients/js/world/bots.mjs --url "tcp://$server" ${WORLD_BOTS_ARGS:-}
