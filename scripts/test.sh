#!/usr/bin/env bash
# One command: install what is missing and run every test:
#   1. gcc build (-Werror): unit, proto, fuzz-regress and integration suites
#   2. ASan+UBSan build of the whole suite
#   3. the JS client's node tests and the browser demo test (chromium via playwright-core)
#   4. libFuzzer smoke run of every fuzz target (clang-14), FUZZ_SECONDS each (default 12)
#   5. clang-format, layering and docs checks (scripts/check-*.sh)
# Ends with "N passed, N failed[, N skipped]" (test cases counted from TAP output where there is
# some). A suite whose setup or build fails counts as one failure, a node test cancelled by a
# failed hook counts as failed, and every skip (a skipped test, the browser test's exit 77, a
# missing clang-14) reaches the skipped count.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test || { echo "dependency install failed"; echo "0 passed, 1 failed"; exit 1; }
FUZZ_SECONDS=${FUZZ_SECONDS:-12}
jobs=$(nproc)
fail=0
logs=()
extra_fail=0 extra_skip=0

. scripts/lib-test.sh

step "gcc build, all suites"
MESON_TEST_ARGS=()
run_suite build-test --werror -Dbuildtype=debugoptimized

step "ASan+UBSan build, all suites"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# the package test builds and installs the .debs: once, in the gcc pass
MESON_TEST_ARGS=(--timeout-multiplier 3 --no-suite package)
run_suite build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug
unset ASAN_OPTIONS UBSAN_OPTIONS

step "JS client (node --test) and the chat-rooms demo in chromium (playwright-core)"
node_logs=()
export CHANQD="$PWD/build-test/src/main/chanqd"
if (cd clients/js && npm ci --no-audit --no-fund --loglevel=error && npm test) >build-js.log 2>&1
then node_logs+=(--node build-js.log)
else tail -40 build-js.log; fail=1; node_logs+=(--node-failed build-js.log); fi
mkdir -p build-test/artifacts
CHANQ_ARTIFACTS="$PWD/build-test/artifacts" tests/browser/run.sh >build-browser.log 2>&1
rc=$?
if [ $rc -eq 77 ]; then grep SKIP build-browser.log; extra_skip=$((extra_skip + 1))
elif [ $rc -eq 0 ]; then grep -i "screenshot" build-browser.log; node_logs+=(--node build-browser.log)
else tail -40 build-browser.log; fail=1; node_logs+=(--node-failed build-browser.log); fi
unset CHANQD

step "libFuzzer smoke run (${FUZZ_SECONDS}s per target)"
fuzz_pass=0 fuzz_fail=0
if command -v clang-14 >/dev/null; then
  if tests/fuzz/run-fuzzers.sh "$FUZZ_SECONDS" >build-fuzz.log 2>&1; then fuzz_pass=1
  else tail -40 build-fuzz.log; fuzz_fail=1; fail=1; fi
else
  echo "SKIP: clang-14 is not installed, no libFuzzer run"; extra_skip=$((extra_skip + 1))
fi

step "clang-format, layering and docs checks"
fmt_pass=0 fmt_fail=0
for check in scripts/check-format.sh scripts/check-layering.sh scripts/check-docs.sh; do
  if $check; then fmt_pass=$((fmt_pass + 1)); else fmt_fail=$((fmt_fail + 1)); fail=1; fi
done

step "summary"
python3 scripts/count-tests.py "${logs[@]}" "${node_logs[@]}" \
  --extra-pass $((fuzz_pass + fmt_pass)) --extra-fail $((fuzz_fail + fmt_fail + extra_fail)) \
  --extra-skip "$extra_skip"
exit $fail
