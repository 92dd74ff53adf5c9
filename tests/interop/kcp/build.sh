#!/bin/sh
# build.sh OUTDIR - builds kcppeer (kcp-go test peer) into OUTDIR/kcppeer.
#
# GOPATH mode against Debian's packaged kcp-go, nothing downloaded:
#   apt-get install golang-go golang-github-xtaci-kcp-dev   (scripts/deps.sh test)
# The build cache goes to OUTDIR/gocache unless GOCACHE is set; nothing is written into the
# source tree. Exits 77 (meson's "skipped") when go or kcp-go is missing.
set -eu
if [ $# -ne 1 ]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
gopath=/usr/share/gocode
if ! command -v go >/dev/null 2>&1; then
    echo "SKIP: go not found (apt-get install golang-go golang-github-xtaci-kcp-dev)" >&2
    exit 77
fi
if [ ! -d "$gopath/src/github.com/xtaci/kcp-go" ]; then
    echo "SKIP: kcp-go not found in $gopath (apt-get install golang-github-xtaci-kcp-dev)" >&2
    exit 77
fi
export GOPATH="$gopath" GO111MODULE=off GOFLAGS= GOTOOLCHAIN=local
export GOCACHE="${GOCACHE:-$out/gocache}"
cd "$here/kcppeer"
go build -o "$out/kcppeer" .
