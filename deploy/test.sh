#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs the whole
# test suite (unit and end-to-end) with ctest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/deploy/install-deps.sh"
# Everything, whatever run-example.sh configured before.
"$root/deploy/build.sh" -DDET_BUILD_TESTS=ON -DDET_BUILD_BENCH=ON -DDET_BUILD_FUZZERS=ON
# The dashboard's browser test drives Debian's Chromium with playwright-core
# from the npm registry (pinned in tests/browser/package-lock.json).
"$root/tests/browser/setup.sh" || echo "warning: tests/browser/setup.sh failed; the dashboard browser test will be skipped" >&2
build="${DET_BUILD_DIR:-$root/build}"
cd "$build"
ctest --output-on-failure -j "${DET_TEST_JOBS:-2}" --timeout 600
