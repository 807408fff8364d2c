#!/usr/bin/env bash
# Regenerates this directory's fixture from the tag v0.1.0: det.db written by
# det-cpp 0.1.0 holding experiment 1 PAUSED after its first checkpoint, and
# that trial's checkpoint files. Documented, not run in CI (it needs a build
# of v0.1.0, and minutes); tests/upgrade_test.cc uses what it leaves here.
#
# Usage (as the user who will commit the result; root is fine):
#   git worktree add /tmp/v010 v0.1.0
#   cmake -S /tmp/v010 -B /tmp/v010/build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
#   cmake --build /tmp/v010/build --target det-master det-agent det-cli det-trial synthetic_trial
#   tests/data/upgrade-v0.1.0/make_fixture.sh /tmp/v010
#   git worktree remove --force /tmp/v010
#
# The trial is the synthetic example as tagged (trial/synthetic_trial.cc must
# equal the tag's examples/synthetic/synthetic_trial.cc; the build's
# synthetic_trial.so is that file built against the 0.1.0 SDK). Its trial.so
# is deliberately left out of the fixture: after an upgrade an operator
# attaches one rebuilt from the same source (docs/operations/upgrade.md).
#
# Checkpoints go to FIXED_ROOT (config.yaml's checkpoint_storage.host_path),
# a fixed path because det.db records each checkpoint's absolute path; the
# test puts the checkpoint files back there.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="${1:?usage: make_fixture.sh V0.1.0_WORKTREE (built in its build/)}"
bin="$src/build/bin"
readonly FIXED_ROOT=/tmp/det-upgrade-v0.1.0
for b in det-master det-agent det-cli det-trial; do
  [ -x "$bin/$b" ] || { echo "make_fixture.sh: $bin/$b missing: build v0.1.0 first (see the usage above)" >&2; exit 1; }
done
[ "$(git -C "$src" describe --tags --exact-match 2>/dev/null)" = v0.1.0 ] ||
  { echo "make_fixture.sh: $src is not a checkout of the tag v0.1.0" >&2; exit 1; }
cmp "$src/examples/synthetic/synthetic_trial.cc" "$here/trial/synthetic_trial.cc" ||
  { echo "make_fixture.sh: trial/synthetic_trial.cc differs from the tag's example" >&2; exit 1; }
trial_so="$src/build/trials/synthetic_trial.so"
[ -f "$trial_so" ] || { echo "make_fixture.sh: $trial_so missing (target synthetic_trial)" >&2; exit 1; }

work="$(mktemp -d /tmp/det-make-fixture.XXXXXX)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
rm -rf "$FIXED_ROOT"
mkdir -p "$FIXED_ROOT/checkpoints"
export DET_AUTH_FILE="$work/det-auth.json"

"$bin/det-master" --data-dir "$work/master" --grpc-port 0 --http-port 0 --ports-file "$work/ports.json" \
  --checkpoint-storage-root "$FIXED_ROOT" >"$work/master.log" 2>&1 &
pids+=($!)
for _ in $(seq 300); do [ -s "$work/ports.json" ] && break; sleep 0.1; done
grpc="127.0.0.1:$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["grpc"])' "$work/ports.json")"
"$bin/det-agent" --master "$grpc" --id a --slots 1 --work-dir "$work/agent" >"$work/agent.log" 2>&1 &
pids+=($!)
cli() { "$bin/det-cli" -m "$grpc" "$@"; }
trial_field() { cli trial describe 1 --json | python3 -c "import json,sys; print(json.load(sys.stdin)['trial'].get('$1', ''))"; }

agents() { cli agent list --json | python3 -c "import json,sys; print(len(json.load(sys.stdin).get('agents', [])))"; }
for _ in $(seq 300); do [ "$(agents 2>/dev/null)" = 1 ] && break; sleep 0.1; done
cli experiment create "$here/config.yaml" "$trial_so"
# Pause after the first checkpoint (batch 20), well before the end (100).
for _ in $(seq 600); do
  ck="$(trial_field latest_checkpoint_uuid 2>/dev/null || true)"
  [ -n "$ck" ] && break
  sleep 0.05
done
[ -n "$ck" ] || { echo "make_fixture.sh: no checkpoint in 30 s; see $work/*.log" >&2; cat "$work"/*.log >&2; exit 1; }
cli experiment pause 1
for _ in $(seq 600); do
  [ "$(trial_field state)" = STATE_PAUSED ] && [ -z "$(trial_field allocation_id)" ] && break
  sleep 0.1
done
[ "$(trial_field state)" = STATE_PAUSED ] || { echo "make_fixture.sh: trial 1 not PAUSED" >&2; exit 1; }
cli trial describe 1
kill "${pids[1]}" && wait "${pids[1]}" || true
kill "${pids[0]}" && wait "${pids[0]}" || true
pids=()

# One self-contained, small file: the WAL checkpointed into it, rollback
# journal mode, vacuumed.
sqlite3 "$work/master/det.db" "PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE; VACUUM;" >/dev/null
rm -rf "$here/det.db" "$here/checkpoints"
cp "$work/master/det.db" "$here/det.db"
chmod 0644 "$here/det.db"
mkdir -p "$here/checkpoints"
cp -r "$FIXED_ROOT/checkpoints/." "$here/checkpoints/"
echo "fixture written: schema version $(sqlite3 "$here/det.db" 'SELECT MAX(version) FROM schema_migrations');" \
  "checkpoints: $(ls "$here/checkpoints" | tr '\n' ' ')"
du -sh "$here"
rm -rf "$FIXED_ROOT"
