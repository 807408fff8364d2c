#!/usr/bin/env bash
# The main command: installs what is missing, builds, starts a master and an
# agent (deploy/cluster.sh, embedded SQLite), runs the Fashion-MNIST example
# (examples/fashion_mnist/const.yaml, one epoch) through them to COMPLETED,
# prints its best validation accuracy and stops the cluster.
#
#   deploy/run-example.sh [CONFIG]     (default examples/fashion_mnist/const.yaml)
#   DET_GRPC_PORT / DET_HTTP_PORT      master ports (default 8090 / 8080)
#   DET_KEEP_CLUSTER=1                 leave the master and agent running
#   DET_LOCAL=1                        train in local mode instead (no master)
#
# It builds only what it runs (the daemons, det-trial, det-cli and the
# example's trial.so; no tests, benchmarks or fuzzers: deploy/test.sh builds
# those) and ends by printing how long each phase took.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${DET_BUILD_DIR:-$root/build}"
phases=()
phase_start=$SECONDS
# Ends the current phase: "NAME M:SS".
phase_done() {
  local s=$((SECONDS - phase_start))
  phases+=("$(printf '%s %d:%02d' "$1" $((s / 60)) $((s % 60)))")
  phase_start=$SECONDS
}
print_phases() {
  local s=$SECONDS line="run-example:" p
  for p in "${phases[@]}"; do line+=" $p,"; done
  echo "$line total $(printf '%d:%02d' $((s / 60)) $((s % 60)))"
}

"$root/deploy/install-deps.sh" --example
phase_done install
lean=()
# A build directory that deploy/test.sh configured keeps its configuration.
[ -f "$build/build.ninja" ] || lean=(-DDET_BUILD_TESTS=OFF -DDET_BUILD_BENCH=OFF -DDET_BUILD_FUZZERS=OFF)
DET_BUILD_TARGETS="det-master det-agent det-trial det-cli fashion_mnist_trial" \
  "$root/deploy/build.sh" "${lean[@]}"
phase_done build
config="${1:-$root/examples/fashion_mnist/const.yaml}"
trial="$build/trials/fashion_mnist_trial.so"

if [ "${DET_LOCAL:-0}" = "1" ]; then
  out="${DET_OUTPUT_DIR:-$root/det-output/fashion-mnist}"
  rm -rf "$out"; mkdir -p "$(dirname "$out")"
  "$build/bin/det-cli" experiment create --local "$config" "$trial" --output-dir "$out"
  phase_done training
  print_phases
  exit 0
fi

export DET_CLUSTER_DIR="${DET_CLUSTER_DIR:-$root/det-cluster}"
grpc_port="${DET_GRPC_PORT:-8090}"
http_port="${DET_HTTP_PORT:-8080}"
"$root/deploy/cluster.sh" stop >/dev/null 2>&1 || true
"$root/deploy/cluster.sh" start --agents 1 --slots 1 --grpc-port "$grpc_port" --http-port "$http_port"
if [ "${DET_KEEP_CLUSTER:-0}" != "1" ]; then
  trap '"$root/deploy/cluster.sh" stop >/dev/null' EXIT
fi
export DET_MASTER="127.0.0.1:$grpc_port"
cli="$build/bin/det-cli"

"$cli" agent list
phase_done "cluster start"
log="$DET_CLUSTER_DIR/logs/example.log"
"$cli" experiment create "$config" "$trial" --follow | tee "$log"
id=$(sed -n 's/^Created experiment \([0-9]*\).*/\1/p' "$log" | head -1)
phase_done training
"$cli" experiment describe "$id"
best=$("$cli" experiment describe "$id" --json | tr -d '\n ' |
       sed -n 's/.*"best_validation_metric":\([0-9.eE+-]*\).*/\1/p')
state=$("$cli" experiment describe "$id" --json | tr -d '\n ' | sed -n 's/.*"state":"\([A-Z_]*\)".*/\1/p' | head -1)
echo "experiment $id: ${state:-?}"
if [ -n "$best" ]; then best=$(printf '%.4f' "$best"); fi
echo "best validation accuracy: ${best:-none}"
print_phases
[ "$state" = "STATE_COMPLETED" ] || [ "$state" = "COMPLETED" ]
