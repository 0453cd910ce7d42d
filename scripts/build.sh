#!/usr/bin/env bash
# Configures and builds kvstash into build/ (Release, Ninja). Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache: paths relative to the checkout, so clones and worktrees elsewhere share cached objects.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR=1
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" > build-configure.log 2>&1 || { cat build-configure.log; exit 1; }
ninja -C build -j"$(nproc)"
