#!/usr/bin/env bash
# Layering check: each adapter library is included by exactly one module.
set -uo pipefail
cd "$(dirname "$0")/.."
bad=0
check() { # header-regex allowed-path-regex
  local hits
  hits=$(git grep -lE "#include <$1" -- '*.c' '*.h' | grep -vE "$2" || true)
  if [ -n "$hits" ]; then echo "layering: <$1> included outside $2: $hits"; bad=1; fi
}
check 'uv\.h>' '^(src/io/|clients/c/chanq_uv|bench/|tests/)'
check 'snappy-c\.h>' '^pkg/codec/'
check 'jansson\.h>' '^(src/core/(auth\.c|cq_fsm\.c|cq_settings\.c|cq_json\.[ch])|src/config/|src/mq/|src/mqsrv/(cq_mqperm|http)\.c|tests/)'
check 'mysql\.h>' '^(src/store/mysql(_[a-z]+)?\.[ch]|bench/)'
check 'sqlite3\.h>' '^(src/store/sqlite\.c|tests/unit/store/)'
check 'wslay/' '^(src/transport/ws/|tests/)'
check 'openssl/' '^(src/transport/ws/|tests/)'
# pkg/ must not depend on src/
if git grep -nE '#include "(cq_core|cq_io|cq_sendq|cq_wire|cq_framing)\.h"' -- 'pkg/*' >/dev/null; then
  echo "layering: pkg/ includes a src/ header"; bad=1
fi
[ $bad -eq 0 ] && echo "layering: ok"
exit $bad
