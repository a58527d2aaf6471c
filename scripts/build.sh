#!/usr/bin/env bash
# build.sh: configures and builds troupe in ./build (Release, Ninja).
# Extra arguments go to CMake, e.g. scripts/build.sh -DTROUPE_CUDA=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${JOBS:-$(nproc)}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j "$jobs"
