#!/usr/bin/env bash
# Layering check: the module graph, and each adapter library included by exactly one module.
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
check 'jansson\.h>' '^(src/spatial/|src/core/auth\.c|src/config/(cq_fsm|cq_settings|cq_json)\.[ch]|src/mq/|src/bridge/|src/mqsrv/(cq_mqperm|http)\.c|src/mgr/|tools/chanq_admin\.c|tests/)'
check 'mysql\.h>' '^(src/store/mysql(_[a-z]+)?\.[ch]|bench/)'
check 'sqlite3\.h>' '^(src/store/sqlite\.c|tests/)'
check 'wslay/' '^(src/transport/ws/|tests/)'
check 'openssl/' '^(src/transport/ws/|tests/)'
check 'zookeeper/' '^(src/coord/zk\.c|clients/c/chanq_cluster_sync\.c|tests/)'
check 'nats/' '^(src/relay/nats\.c|tests/)'
# The import graph: every #include "x.h" in src/ and pkg/ resolves to a module its row in
# doc/architecture.md's module map may depend on, the rows point downward only, and no include
# path or #include reaches a sibling's directory ('../x'). scripts/module-graph.py says how.
python3 scripts/module-graph.py || bad=1
# pkg/ must not depend on src/
if git grep -nE '#include "(cq_core|cq_io|cq_sendq|cq_wire|cq_framing)\.h"' -- 'pkg/*' >/dev/null; then
  echo "layering: pkg/ includes a src/ header"; bad=1
fi
# The core depends on src/config's loaders (config_load: cq_fsm.h, cq_settings.h), not on its
# option table, which shares their include directory.
hits=$(git grep -lE '#include "cq_config\.h"' -- 'src/core/*' || true)
if [ -n "$hits" ]; then echo "layering: src/core includes the option table: $hits"; bad=1; fi
# src/io moves bytes: it does not know the store (src/main wires the engine to the writer).
hits=$(git grep -lE '#include "(cq_store|cq_store_impl|cq_writer|mysql_int)\.h"' -- 'src/io/*' || true)
if [ -n "$hits" ]; then echo "layering: src/io includes a store header: $hits"; bad=1; fi
# No process globals in src/io: file-scope variables must be const (state lives in cq_io_t,
# cq_mqio_t and the workers; what other modules need is passed in or registered by src/main).
hits=$(git grep -nE '^(static )?[A-Za-z_][A-Za-z0-9_ *]*( =.*)?; *(/\*.*)?$' -- 'src/io/*.c' |
       grep -vE ':(static )?const |:typedef |:struct [a-z_]+;$' || true)
if [ -n "$hits" ]; then echo "layering: process globals in src/io: $hits"; bad=1; fi
# One HTTP request-head parser (pkg/http): nobody else looks for the end of a head.
head_end='(memmem|strstr)\(.*\\r\\n\\r\\n|== .\\r. &&'
hits=$(git grep -lE "$head_end" -- 'src/*.c' 'pkg/*.c' | grep -v '^pkg/http/' || true)
if [ -n "$hits" ]; then echo "layering: an HTTP head parser outside pkg/http: $hits"; bad=1; fi
# The coord state machine is sans-I/O: no ZooKeeper, loop, database, socket, thread or clock
# (its runtime in src/coord owns those and feeds it events and now).
hits=$(git grep -nE '#include <(zookeeper|uv\.h|mysql|sys/socket|pthread|time\.h)|clock_gettime|gettimeofday' \
       -- src/coord/cq_coord.c src/coord/text.c src/coord/cq_coord.h src/coord/coord_int.h || true)
if [ -n "$hits" ]; then echo "layering: I/O or a clock in the coord machine: $hits"; bad=1; fi
# The spatial engine is pure: no loop, socket, thread or clock (the core calls it with its state).
hits=$(git grep -nE '#include <(uv\.h|sys/socket|pthread|time\.h)|clock_gettime|gettimeofday' \
       -- 'src/spatial/*' || true)
if [ -n "$hits" ]; then echo "layering: I/O or a clock in the spatial engine: $hits"; bad=1; fi
# The management engine is sans-I/O like src/mqsrv: no loop, socket, thread or clock (src/io/
# mgr_io.c feeds it bytes and now; the stores' blocking calls, filestore.c and zkstore.c, run on
# the edge's store thread).
hits=$(git grep -nE '#include <(uv\.h|sys/socket|pthread|time\.h)|clock_gettime|gettimeofday' \
       -- src/mgr/mgr.c src/mgr/state.c src/mgr/registry.c src/mgr/proto.c src/mgr/view.c \
          src/mgr/metrics.c src/mgr/engine.h src/mgr/cq_mgr.h || true)
if [ -n "$hits" ]; then echo "layering: I/O or a clock in the management engine: $hits"; bad=1; fi
[ $bad -eq 0 ] && echo "layering: ok"
exit $bad
