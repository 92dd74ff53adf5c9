# lib-test.sh - the step helpers of scripts/test.sh, sourced (tests/scripts tests them).
# Callers set: fail=0 logs=() extra_fail=0 jobs=N MESON_TEST_ARGS=().

step() { echo; echo "=== $*"; }

# run_suite DIR SETUP_ARGS...: sets up, builds and tests one meson tree. A failed setup or
# build is one failure (extra_fail) so the summary line can't read "0 failed" without tests.
run_suite() { # dir, setup args...
  local dir=$1; shift
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$@" >"$dir.setup.log" 2>&1 ||
      { cat "$dir.setup.log"; fail=1; extra_fail=$((extra_fail + 1)); return; }
  fi
  ninja -C "$dir" >"$dir.build.log" 2>&1 ||
    { tail -50 "$dir.build.log"; fail=1; extra_fail=$((extra_fail + 1)); return; }
  meson test -C "$dir" --num-processes "$jobs" --print-errorlogs "${MESON_TEST_ARGS[@]}" || fail=1
  logs+=("$dir/meson-logs/testlog.json")
}
