#!/usr/bin/env bash
# Browser test of the chat-rooms demo: installs the JS client's npm packages (into the
# gitignored clients/js/node_modules), builds the bundle and the demo, and runs
# tests/browser/chat.test.mjs, announcements.test.mjs (the chat demo's panel fed by the bridge),
# world.test.mjs, console.test.mjs (the manager's admin console, with a one-shard cluster
# from scripts/cluster.sh) and bindings.test.mjs (the console's Bindings view, a manager and one
# server) against chanqd with Debian's chromium.
# TESTS="chat announcements" runs only those (default: all five).
# Usage: CHANQD=build/src/main/chanqd [CHANQ_ARTIFACTS=dir] tests/browser/run.sh
# Exits 77 (skipped) when node, npm or chromium is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
js="$repo/clients/js"

skip() {
  echo "SKIP: $*" >&2
  exit 77
}

command -v node >/dev/null || skip "node is not installed (apt-get install nodejs npm)"
command -v npm >/dev/null || skip "npm is not installed (apt-get install npm)"
chromium=${CHROMIUM:-/usr/bin/chromium}
[ -x "$chromium" ] || skip "chromium is not installed at $chromium (apt-get install chromium)"
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 18 ] || skip "node $major is too old (need 18 or later)"
: "${CHANQD:?set CHANQD to the chanqd binary, e.g. CHANQD=build/src/main/chanqd}"
CHANQD=$(cd "$(dirname "$CHANQD")" && pwd)/$(basename "$CHANQD")
[ -x "$CHANQD" ] || { echo "CHANQD=$CHANQD is not executable" >&2; exit 1; }
command -v protoc-c >/dev/null || { echo "protoc-c is missing (apt-get install protobuf-c-compiler)" >&2; exit 1; }
command -v openssl >/dev/null || { echo "openssl is missing (apt-get install openssl)" >&2; exit 1; }

cd "$js"
if [ -f package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
else
  npm install --no-audit --no-fund --loglevel=error
fi
npm run --silent build
export CHANQD CHROMIUM="$chromium"
files=()
for t in ${TESTS:-chat announcements world console bindings}; do files+=("$here/$t.test.mjs"); done
exec node --test "${files[@]}"
