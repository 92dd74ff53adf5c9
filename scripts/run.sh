#!/usr/bin/env bash
# One command: install what is missing, build, and run chanqd on its embedded defaults
# (clients on 127.0.0.1:12108, servers on 127.0.0.1:11288, /metrics on 127.0.0.1:8080).
# Extra arguments go to chanqd, e.g. scripts/run.sh --workers 2 --log-level debug
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh build
[ -f build/build.ninja ] || meson setup build -Dtests=disabled >/dev/null
ninja -C build src/main/chanqd >/dev/null
exec build/src/main/chanqd "$@"
