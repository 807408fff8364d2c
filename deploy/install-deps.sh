#!/usr/bin/env bash
# Installs every Debian package det-cpp needs to build, test and run.
# Idempotent: installs only what is missing; safe to run many times.
#
#   deploy/install-deps.sh            everything (deploy/test.sh)
#   deploy/install-deps.sh --example  what building and running the daemons,
#                                     det-cli and the example trial needs: no
#                                     browser, clang, Node.js or PyTorch
#                                     (deploy/run-example.sh)
set -euo pipefail
example_only=0
if [ "${1:-}" = "--example" ]; then example_only=1; fi

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libtorch-dev libgloo-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libsqlite3-dev sqlite3 libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libyaml-cpp-dev libcli11-dev nlohmann-json3-dev
  libcpp-httplib-dev libssl-dev
  # /metrics exposition of the master and agent (prometheus-cpp's core).
  prometheus-cpp-dev
  # S3 checkpoint storage (common/s3): libcurl signs with AWS SigV4, expat
  # parses S3's XML replies.
  libcurl4-openssl-dev libexpat1-dev
  # det-master links jemalloc: its metric write path allocates per row, and
  # glibc malloc took about 15% of the master's CPU under load.
  libjemalloc-dev
  dataset-fashion-mnist
  curl procps
  # tests/distributed_test.cc makes two network namespaces ("two hosts").
  iproute2
  # bench/ddp_scaling compares with torch.distributed (DDP over Gloo).
  python3-torch
)
if [ "$example_only" = 1 ]; then
  # Tests, benchmarks and fuzzers are not built: drop what only they use.
  keep=()
  for p in "${PACKAGES[@]}"; do
    case "$p" in libgtest-dev|libgmock-dev|iproute2|python3-torch) ;; *) keep+=("$p") ;; esac
  done
  PACKAGES=("${keep[@]}")
else
# The dashboard's browser test (tests/browser): Debian's Chromium, and Node.js
# with npm unless a node is already installed (e.g. NodeSource's nodejs, which
# bundles npm and conflicts with Debian's npm package).
PACKAGES+=(chromium)
# The libFuzzer targets (fuzz/): clang with compiler-rt's libFuzzer and
# sanitizer runtimes; without them the fuzz tests are skipped.
PACKAGES+=(clang libclang-rt-dev)
# tests/slurm_test.cc runs a single-node Slurm (deploy/slurm-local.sh).
PACKAGES+=(slurm-wlm munge)
# tests/deploy_files_check.py: systemd-analyze (in Debian's systemd) and
# yamllint on the shipped units and YAML.
PACKAGES+=(systemd yamllint)
# tests/multi_host_test.cc: the operator cluster's CA and TLS certificate
# (openssl), its hosts on a bridge (iproute2, above).
PACKAGES+=(openssl)
# tests/prometheus_test.cc: a real Prometheus server and promtool.
PACKAGES+=(prometheus)
# tests/s3_*: an independent S3 client (boto3; botocore checks det-cpp's
# SigV4 signatures). The S3 server, npm's s3rver, comes from tests/s3/setup.sh.
PACKAGES+=(python3-boto3 python3-botocore)
# bench/search_peers (ctest search_peers_small): Optuna 3.1, the peer searchers.
PACKAGES+=(python3-optuna)
command -v node >/dev/null 2>&1 || PACKAGES+=(nodejs)
command -v npm >/dev/null 2>&1 || PACKAGES+=(npm)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
