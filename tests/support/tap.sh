# tests/support/tap.sh - TAP helpers of the shell tests, sourced: `ok` and `same` number the
# lines in n and record a failure in failed (the test ends with `exit $failed`).
n=0
failed=0

ok() { # ok DESCRIPTION EXIT-CODE
    n=$((n + 1))
    if [ "$2" = 0 ]; then echo "ok $n - $1"; else
        echo "not ok $n - $1"
        failed=1
    fi
}

# same DESCRIPTION EXPECTED ACTUAL: exact comparison, both shown on failure
same() {
    if [ "$2" = "$3" ]; then ok "$1" 0; else
        ok "$1" 1
        printf '# expected: %q\n# actual:   %q\n' "$2" "$3"
    fi
}
