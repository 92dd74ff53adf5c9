#!/usr/bin/env bash
# Docs check: every path of the tree that README.md, DEVELOPERS.md and doc/*.md name exists in
# it (a file or a directory git tracks, or a new one it does not ignore), so the docs cannot
# point at code that moved.
# What counts as a path:
#   - a word starting with a top-level directory of the tree (src/ tests/ scripts/ clients/
#     bench/ pkg/ config/ doc/ tools/ proto/ debian/ migrations/), bare or in backticks, read
#     from the repository root: `src/core/sub.c`, tests/scripts/test_readme.py,
#     `tests/unit/transport/{kcp,ws}` (braces expand), `tests/fuzz/corpus/*` (a glob matches
#     at least one file), `src/chandata/cq_fieldpath.[ch]` (so does a [class]);
#   - a relative markdown link, [text](target), read from the page's own directory;
#   - a word starting with build/ (or build-test/, build-asan/): a build output, which must be
#     one of $built below, since it is not in the tree.
# And README.md links every page of doc/ (its documentation index).
# Placeholders are skipped: a word with <...> (src/<dir>), NNNN or "...". Installed paths
# (/etc/chanq/..., /usr/share/...) start with / and are not read.
# Usage: scripts/check-docs.sh [FILE.md...]   (default: README.md DEVELOPERS.md doc/*.md)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(README.md DEVELOPERS.md doc/*.md)

top='src|tests|scripts|clients|bench|pkg|config|doc|tools|proto|debian|migrations|build(-test|-asan)?'
# Build outputs the docs may name: the binaries, descriptor sets and artefacts of a meson tree,
# and the JS client's generated and bundled files (gitignored).
built='^(build(-test|-asan)?(/(src/main/chanqd|tools/chanq|tools/world_bots|proto/(chat|world)\.fds|artifacts|meson-logs/testlog\.json))?|clients/js/(dist|gen|node_modules)(/.*)?|.*\.pb-c\.[ch])$'

bad=0 checked=0
declare -A seen

expand() { # PATH: prints it once per alternative of its first {a,b,...}, recursively
    if [[ $1 =~ ^([^{]*)\{([^}]*)\}(.*)$ ]]; then
        local pre=${BASH_REMATCH[1]} post=${BASH_REMATCH[3]} alt
        local -a alts
        IFS=, read -ra alts <<<"${BASH_REMATCH[2]}"
        for alt in "${alts[@]}"; do expand "$pre$alt$post"; done
    else
        printf '%s\n' "$1"
    fi
}

in_tree() { # PATH (a glob too): a file git tracks or would track, or a directory holding one
    [ -n "$(git ls-files -co --exclude-standard -- ":(glob)$1" ":(glob)$1/**" | head -n1)" ]
}

check() { # WHERE PATH: PATH (repository-relative) must be tracked, or a known build output
    local where=$1 path=$2 p
    path=${path%/}
    case $path in *'<'* | *NNNN* | *...* | '') return ;; esac
    while IFS= read -r p; do
        if [ -n "${seen[$p]:-}" ]; then
            [ "${seen[$p]}" = ok ] || { echo "$where: $p does not exist"; bad=1; }
            continue
        fi
        checked=$((checked + 1))
        if [[ $p =~ $built ]] || in_tree "$p"; then seen[$p]=ok
        else seen[$p]=missing; echo "$where: $p does not exist"; bad=1
        fi
    done < <(expand "$path")
}

for f in "${files[@]}"; do
    [ -f "$f" ] || { echo "docs: no file $f"; bad=1; continue; }
    dir=$(dirname "$f")
    # Relative links, from the page's directory (anchors dropped; URLs and in-page anchors skipped).
    while IFS=: read -r line target; do
        target=${target#](}
        target=${target%)}
        target=${target%%#*}
        case $target in '' | http:* | https:* | mailto:*) continue ;; esac
        check "$f:$line" "$(realpath -m --relative-to=. "$dir/$target")"
    done < <(grep -noE '\]\([^) ]+\)' "$f")
    # Paths in the text (link targets removed first: they were read above).
    while IFS=: read -r line path; do
        path=${path#[^[:alnum:]]}
        while [[ $path =~ [.,:\;]$ || ( $path =~ \]$ && $path != *'['* ) ]]; do
            path=${path%?}
        done
        check "$f:$line" "$path"
    done < <(sed -E 's/\]\([^) ]+\)/]/g' "$f" |
        grep -noE "(^|[^[:alnum:]_./-])($top)/[][[:alnum:]_./+*{},<>-]*")
done

# The README's documentation index lists every page of doc/.
for page in doc/*.md; do
    grep -qF "]($page)" README.md || { echo "README.md: no link to $page in its index"; bad=1; }
done

[ $bad -eq 0 ] && echo "docs: ok, $checked paths named in ${#files[@]} files exist"
exit $bad
