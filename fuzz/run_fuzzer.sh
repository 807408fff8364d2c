#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time, as a ctest test.
#
#   fuzz/run_fuzzer.sh FUZZER SEED_CORPUS_DIR SECONDS [libFuzzer flags...]
#
# New inputs go to a temporary corpus (the seeds in the repository are only
# read); a crash, leak, timeout or sanitizer report is copied to
# $DET_FUZZ_ARTIFACTS (default: the fuzzer's directory/artifacts) and fails
# the test. DET_FUZZ_SECONDS overrides SECONDS.
#
# Memory is bounded so that a blow-up is a finding, not a slow machine: the
# process may not grow past DET_FUZZ_RSS_LIMIT_MB (default 512) resident, nor
# make one allocation larger than DET_FUZZ_MALLOC_LIMIT_MB (default: the RSS
# limit). The alias bomb (fuzz/corpus/experiment_config/alias_bomb.yaml) grew
# the config parser to 2.3 GB before the YAML limits. An out-of-memory input
# is saved as oom-* and fails the test.
#
# Exit status: 0 no crash,
# 77 (skip) when FUZZER was not built (no clang with libFuzzer), else the
# fuzzer's.
set -uo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 FUZZER SEED_CORPUS_DIR SECONDS [libFuzzer flags...]" >&2
  exit 2
fi
fuzzer="$1"; seeds="$2"; seconds="${DET_FUZZ_SECONDS:-$3}"; shift 3
if [ ! -x "$fuzzer" ]; then
  echo "SKIP: $fuzzer was not built (the fuzzers need clang++ with libFuzzer; see CONTRIBUTING.md, 'Fuzzing')"
  exit 77
fi
artifacts="${DET_FUZZ_ARTIFACTS:-$(dirname "$fuzzer")/artifacts}"
mkdir -p "$artifacts"
work="$(mktemp -d "${TMPDIR:-/tmp}/det-fuzz-XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus"
rss_mb="${DET_FUZZ_RSS_LIMIT_MB:-512}"
# AddressSanitizer keeps 256 MB of freed memory in quarantine by default,
# which counts as resident: 64 MB leaves the RSS limit to the code under test.
export ASAN_OPTIONS="${ASAN_OPTIONS:-quarantine_size_mb=64}"
malloc_mb="${DET_FUZZ_MALLOC_LIMIT_MB:-$rss_mb}"
# Fixed seed: the same mutations every run (up to timing).
"$fuzzer" -seed=1 -error_exitcode=1 -timeout_exitcode=1 -max_total_time="$seconds" -timeout=25 \
  -rss_limit_mb="$rss_mb" -malloc_limit_mb="$malloc_mb" -max_len=8192 \
  -print_final_stats=1 -artifact_prefix="$work/" "$@" "$work/corpus" "$seeds"
rc=$?
found=0
for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
  [ -e "$f" ] || continue
  found=1
  cp "$f" "$artifacts/"
  echo "fuzz: failing input saved as $artifacts/$(basename "$f"); reproduce with: $fuzzer $artifacts/$(basename "$f")"
  echo "fuzz: input (base64):"; base64 "$f" | head -c 4000; echo
done
if [ $rc -ne 0 ] || [ $found -ne 0 ]; then
  echo "fuzz: $(basename "$fuzzer") FAILED (exit $rc)"
  exit 1  # never 77, which ctest would take for "skipped"
fi
echo "fuzz: $(basename "$fuzzer") ran ${seconds}s without a crash"
