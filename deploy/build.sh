#!/usr/bin/env bash
# Configures and builds det-cpp into ./build (or $DET_BUILD_DIR) with Ninja and
# ccache. Usage: deploy/build.sh [cmake -D args...]
#   With args, (re)configures with them first; without, configures only a
#   build directory that has none yet.
#   DET_BUILD_TARGETS="a b"   builds only these targets (default: all)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${DET_BUILD_DIR:-$root/build}"
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
# Relative paths in the cache key: another checkout of the tree hits the cache.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
jobs="${DET_BUILD_JOBS:-$(nproc)}"
if [ ! -f "$build/build.ninja" ] || [ $# -gt 0 ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
fi
targets=()
for t in ${DET_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j "$jobs" "${targets[@]}"
