#!/usr/bin/env bash
# Configures and builds det-cpp into ./build (or $DET_BUILD_DIR) with Ninja and
# ccache. Usage: deploy/build.sh [extra cmake args...]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${DET_BUILD_DIR:-$root/build}"
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
# Relative paths in the cache key: another checkout of the tree hits the cache.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
jobs="${DET_BUILD_JOBS:-$(nproc)}"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
fi
cmake --build "$build" -j "$jobs"
