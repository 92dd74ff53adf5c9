#!/usr/bin/env bash
# The browser demos in one command: installs what is missing (build packages, Node and npm),
# builds chanqd, the descriptor sets and the pages, then runs chanqd serving the page and the
# WebSocket on the same port.
#   scripts/demo.sh [chanqd args]        the chat-rooms demo (default): open
#                                        http://127.0.0.1:12112/ in two browser windows
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
ninja -C build src/main/chanqd proto/chat.fds proto/world.fds >/dev/null
(cd clients/js && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build)
if [ "$mode" = chat ]; then
  echo "chat-rooms demo: open http://127.0.0.1:12112/ (ws-addr) in two windows"
  exec build/src/main/chanqd --client-fsm config/client_authoratative_fsm.json \
    --channel-data-types build/proto/chat.fds --web-root clients/js/dist/demo "$@"
fi

# The world: chanqd in the background (its ports from the ready file), then the bots in the
# foreground; Ctrl-C stops both.
run=$(mktemp -d)
trap 'kill "$chanqd_pid" 2>/dev/null; wait "$chanqd_pid" 2>/dev/null; rm -rf "$run"' EXIT
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
