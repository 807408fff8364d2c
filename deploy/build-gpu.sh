#!/usr/bin/env bash
# Builds det-cpp against a CUDA LibTorch instead of Debian's CPU one, into
# ./build-gpu (or $DET_BUILD_DIR). The LibTorch is found through
# $DET_TORCH_PREFIX, else the one bundled with an installed PyTorch
# (torch.utils.cmake_prefix_path). gRPC, Abseil, protobuf, SQLite, spdlog,
# yaml-cpp, CLI11, nlohmann-json, cpp-httplib, prometheus-cpp, libcurl, expat
# and jemalloc must be installed (Debian:
# deploy/install-deps.sh installs them with the CPU LibTorch, which this build
# does not use). Extra arguments go to cmake.
#
#   deploy/build-gpu.sh [-DCMAKE_CUDA_ARCHITECTURES=90]
#
# With a CUDA LibTorch the agent offers one slot per GPU (nvidia-smi: name,
# memory, UUID), pins each rank to its GPU with CUDA_VISIBLE_DEVICES, and
# det-trial's context.device() is that GPU.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${DET_BUILD_DIR:-$root/build-gpu}"
prefix="${DET_TORCH_PREFIX:-}"
if [ -z "$prefix" ]; then
  prefix="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)"
fi
if [ -z "$prefix" ] || [ ! -d "$prefix/Torch" ]; then
  echo "build-gpu: no CUDA LibTorch found; set DET_TORCH_PREFIX to the directory holding Torch/TorchConfig.cmake" >&2
  exit 1
fi
echo "build-gpu: LibTorch from $prefix"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$prefix" "$@"
fi
cmake --build "$build" -j "${DET_BUILD_JOBS:-$(nproc)}"
echo "build-gpu: done; GPUs seen by nvidia-smi:"
nvidia-smi --query-gpu=index,name,memory.total,uuid --format=csv,noheader || echo "(nvidia-smi not found)"
