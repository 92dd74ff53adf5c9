#!/usr/bin/env bash
# The chat-rooms demo in one command: installs what is missing (build packages, Node and npm),
# builds chanqd, the chat descriptor set and the demo page, then runs chanqd serving the page
# and the WebSocket on the same port. Open http://127.0.0.1:12112/ in two browser windows.
# Extra arguments go to chanqd (e.g. --dev --ws-addr 0.0.0.0:12112: the demo's dev auth provider
# needs --dev off loopback; or --wss-addr with --tls-cert and --tls-key for https/wss).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh build
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  SUDO=; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
[ -f build/build.ninja ] || meson setup build -Dtests=disabled >/dev/null
ninja -C build src/main/chanqd proto/chat.fds >/dev/null
(cd clients/js && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build)
echo "chat-rooms demo: open http://127.0.0.1:12112/ (ws-addr) in two windows"
exec build/src/main/chanqd --client-fsm config/client_authoratative_fsm.json \
  --channel-data-types build/proto/chat.fds --web-root clients/js/dist/demo "$@"
