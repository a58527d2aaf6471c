#!/usr/bin/env bash
# train.sh: installs what training needs, builds the troupe command (and nothing else: no
# tests, and the CUDA kernels only where a GPU is present), and trains the default config
# on Fashion-MNIST. This is the README's first command. Extra arguments go to `troupe run`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --train
targets=(--target troupe_cli)
# The CUDA kernels are a library libtroupe loads when a cuda:N device is used: built here
# only where there is a GPU to use them (scripts/test.sh builds them wherever CUDA is).
if [[ -e /dev/nvidia0 ]] || nvidia-smi -L >/dev/null 2>&1; then
  targets+=(--target troupe_cuda)
fi
scripts/build.sh -DTROUPE_BUILD_TESTS=OFF "${targets[@]}"
./build/troupe run config/fashion_mlp.toml "$@"
