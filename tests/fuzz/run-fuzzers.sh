#!/bin/sh
# run-fuzzers.sh [SECONDS] - build the clang libFuzzer tree and fuzz each target on its corpus.
#
# Builds build-fuzz/ (CC=clang-14, -Dfuzz=true, ASan+UBSan) if it does not exist, then runs
# each target for SECONDS (default 30). New inputs go to a scratch directory, never into the
# committed corpus; crashes are saved there as crash-*/leak-*/timeout-* artifacts, and the
# script exits non-zero if any target failed. To minimise the committed corpus afterwards:
#   build-fuzz/tests/fuzz/fuzz_x -merge=1 NEW_DIR tests/fuzz/corpus/fuzz_x SCRATCH/fuzz_x
# Environment: CC (default clang-14), BUILD (default build-fuzz), WORK (default a mktemp dir).
set -eu

secs=${1:-30}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-build-fuzz}
cd "$root"

if [ ! -f "$build/build.ninja" ]; then
    CC=${CC:-clang-14} meson setup "$build" -Dfuzz=true -Db_sanitize=address,undefined \
        -Db_lundef=false
fi
ninja -C "$build" tests/fuzz/fuzz_framing tests/fuzz/fuzz_wire_packet tests/fuzz/fuzz_snappy \
    tests/fuzz/fuzz_merge tests/fuzz/fuzz_mq tests/fuzz/ws/fuzz_wsup tests/fuzz/ws/fuzz_ws \
    tests/fuzz/kcp/fuzz_kcp tests/fuzz/config/fuzz_config \
    tests/fuzz/fuzz_core \
    tests/fuzz/fuzz_sched tests/fuzz/fuzz_link tests/fuzz/fuzz_xwire \
    tests/fuzz/http/fuzz_http \
    tests/fuzz/kcp/fuzz_kcp_listener \
    tests/fuzz/fuzz_mqsrv tests/fuzz/fuzz_coord tests/fuzz/fuzz_spatial tests/fuzz/fuzz_mgr \
    tests/fuzz/fuzz_bridge

work=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/chanq-fuzz.XXXXXX")}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
failed=0
for t in fuzz_framing fuzz_wire_packet fuzz_snappy fuzz_merge fuzz_mq fuzz_wsup fuzz_ws fuzz_kcp \
    fuzz_sched fuzz_link fuzz_xwire \
    fuzz_config fuzz_core fuzz_http fuzz_kcp_listener fuzz_mqsrv fuzz_coord fuzz_spatial fuzz_mgr \
    fuzz_bridge; do
    mkdir -p "$work/$t"
    dict=""
    case $t in
    fuzz_framing | fuzz_wire_packet) dict="-dict=$here/fuzz_framing.dict" ;;
    fuzz_wsup | fuzz_http) dict="-dict=$here/ws/fuzz_wsup.dict" ;;
    fuzz_config) dict="-dict=$here/config/fuzz_config.dict" ;;
    esac
    echo "== $t: $secs s, scratch corpus $work/$t"
    exe="$build/tests/fuzz/$t"
    [ -e "$exe" ] || exe=$(echo "$build"/tests/fuzz/*/"$t") # targets built in a subdir
    # shellcheck disable=SC2086 # $dict is empty or one word
    if ! "$exe" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 $dict \
        -artifact_prefix="$work/$t/" "$work/$t" "$here/corpus/$t" >"$work/$t.log" 2>&1; then
        failed=1
        echo "!! $t FAILED; see $work/$t.log and $work/$t/crash-*" >&2
    fi
    grep -E '^(stat::number_of_executed_units|stat::new_units_added|Done )' "$work/$t.log" || true
done
echo "logs and new inputs: $work"
exit $failed
