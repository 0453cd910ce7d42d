#!/usr/bin/env bash
# Configures and builds kvstash into build/ (Release, Ninja). Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache: paths relative to the checkout, so clones and worktrees elsewhere share cached objects.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR=1
# Four builds (release, ASan, TSan, fuzz) with debug info outgrow ccache's default 5 GB: an evicted
# object is a recompile in the next CI run.
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-30G}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" > build-configure.log 2>&1 || { cat build-configure.log; exit 1; }
ninja -C build -j"$(nproc)"
