#!/usr/bin/env bash
# tests/prometheus/check_rules.sh check|test SRCDIR - the shipped alerting rules
# (doc/prometheus/chanq-alerts.yml, issue 25) through Prometheus' own tool:
#   check  `promtool check rules`: the file parses, every expression and template is valid;
#   test   `promtool test rules tests/prometheus/chanq-alerts.test.yml`: each rule fires on its
#          synthetic series with exact labels and annotations, and does not fire where it must
#          not.
# Exit 77 (skip) when promtool is not installed (Debian's `prometheus` package ships it).
set -euo pipefail
[ $# -eq 2 ] || {
    echo "usage: $0 check|test SRCDIR" >&2
    exit 64
}
command -v promtool >/dev/null 2>&1 || {
    echo "SKIP: promtool is not installed (apt-get install prometheus; scripts/deps.sh test)"
    exit 77
}
cd "$2"
case $1 in
check) exec promtool check rules doc/prometheus/chanq-alerts.yml ;;
test) exec promtool test rules tests/prometheus/chanq-alerts.test.yml ;;
*)
    echo "$0: check or test, not $1" >&2
    exit 64
    ;;
esac
