#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs the whole
# test suite (unit and end-to-end) with ctest, then deploy/test-report.py:
# the tests that skipped and why, `skipped: N (allowlisted: M)`, the 15
# slowest tests and the total time.
#
#   deploy/test.sh [ctest args...]    e.g. deploy/test.sh -R browser
#
# Exit status: ctest's when it failed; else 1 when a test skipped that
# tests/skip_allowlist.txt does not allow (a capability the suite needs is
# missing: root, network namespaces, cgroup v2, Slurm, Chromium, clang);
# else 0. DET_TEST_NO_CHROMIUM=1 hides Chromium from the browser tests (they
# skip, so the run fails): see CONTRIBUTING.md, "Tests".
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/deploy/install-deps.sh"
# Everything, whatever run-example.sh configured before.
"$root/deploy/build.sh" -DDET_BUILD_TESTS=ON -DDET_BUILD_BENCH=ON -DDET_BUILD_FUZZERS=ON
# The dashboard's browser test drives Debian's Chromium with playwright-core
# from the npm registry (pinned in tests/browser/package-lock.json).
if ! "$root/tests/browser/setup.sh"; then
  echo "error: tests/browser/setup.sh failed, so the dashboard browser tests cannot run;" \
       "it needs the npm registry once (then node_modules stays in tests/browser)" >&2
  exit 1
fi
# The checkpoint-storage tests start npm's s3rver (pinned in
# tests/s3/package-lock.json) as their S3 server.
if ! "$root/tests/s3/setup.sh"; then
  echo "error: tests/s3/setup.sh failed, so the S3 checkpoint-storage tests cannot run;" \
       "it needs the npm registry once (then node_modules stays in tests/s3)" >&2
  exit 1
fi
build="${DET_BUILD_DIR:-$root/build}"
cd "$build"
junit="$build/Testing/ctest-junit.xml"
rm -f "$junit"
start=$(date +%s)
set +e
ctest --output-on-failure -j "${DET_TEST_JOBS:-2}" --timeout 600 --output-junit "$junit" "$@"
status=$?
set -e
python3 "$root/deploy/test-report.py" --junit "$junit" --ctest-status "$status" \
  --wall-seconds "$(( $(date +%s) - start ))"
