#!/usr/bin/env bash
# Installs the Debian 12 packages chanq needs that are missing (root or sudo).
# Usage: scripts/deps.sh [build|test|bench]   (each level includes the previous ones)
set -euo pipefail
level=${1:-build}
pkgs=(gcc make meson ninja-build pkg-config python3 libuv1-dev libprotobuf-c-dev
      protobuf-c-compiler libsnappy-dev libjansson-dev libsqlite3-dev libmariadb-dev
      libwslay-dev libssl-dev libzookeeper-mt-dev liburing-dev libnats-dev)
if [ "$level" = test ] || [ "$level" = bench ]; then
  pkgs+=(libcmocka-dev clang-14 libclang-rt-14-dev clang-format protobuf-compiler
        mariadb-server mariadb-client python3-websockets golang-go golang-github-xtaci-kcp-dev
        chromium openssl prometheus prometheus-alertmanager
        debhelper dpkg-dev)  # the package test (tests/package): dpkg-buildpackage
  command -v node >/dev/null && command -v npm >/dev/null || pkgs+=(nodejs npm)
  # the cluster tests and scripts/cluster.sh: a 3-node ZooKeeper ensemble (Java)
  pkgs+=(zookeeper)
  command -v java >/dev/null || pkgs+=(default-jre-headless)
  # the relay cluster tests (tests/support/nats.sh)
  pkgs+=(nats-server)
fi
if [ "$level" = bench ]; then
  pkgs+=(redis-server linux-perf)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}" >&2
SUDO=; [ "$(id -u)" -ne 0 ] && SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
