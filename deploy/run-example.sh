#!/usr/bin/env bash
# The main command: installs what is missing, builds, and trains the
# Fashion-MNIST example (examples/fashion_mnist/const.yaml, one epoch).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/deploy/install-deps.sh"
"$root/deploy/build.sh"
build="${DET_BUILD_DIR:-$root/build}"
out="${DET_OUTPUT_DIR:-$root/det-output/fashion-mnist}"
rm -rf "$out"; mkdir -p "$(dirname "$out")"
"$build/bin/det-cli" experiment create --local "$root/examples/fashion_mnist/const.yaml" \
  "$build/trials/fashion_mnist_trial.so" --output-dir "$out" | tee "$out.log"
best=$(awk -F, '$1=="validation" && $4=="accuracy" {if ($5>b) b=$5} END {printf "%.4f", b}' "$out/metrics.csv")
echo "best validation accuracy: $best"
