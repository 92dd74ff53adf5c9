#!/usr/bin/env bash
# clang-format check of chanq's own C sources (generated protobuf-c code is in build dirs only).
set -uo pipefail
cd "$(dirname "$0")/.."
files=$(git ls-files '*.c' '*.h')
[ -z "$files" ] && exit 0
out=$(echo "$files" | xargs clang-format --dry-run -Werror 2>&1)
if [ -n "$out" ]; then
  echo "$out" | grep -E '^[^ ].*(warning|error)' | cut -d: -f1 | sort -u | sed 's/^/needs clang-format: /'
  exit 1
fi
echo "clang-format: $(echo "$files" | wc -l) files clean"
