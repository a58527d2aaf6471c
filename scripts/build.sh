#!/usr/bin/env bash
# build.sh: configures and builds troupe in ./build (Release, Ninja).
#
#   scripts/build.sh                       # everything: library, CLI, CUDA kernels (where
#                                          # /usr/local/cuda is), tests, benchmarks' binaries
#   scripts/build.sh --target troupe_cli   # only what that target needs (repeatable)
#
# Other arguments go to CMake, e.g. scripts/build.sh -DTROUPE_CUDA=OFF. JOBS=N sets the
# parallel jobs (default: the number of cores).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${JOBS:-$(nproc)}
targets=()
cmake_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --target)
      [[ $# -ge 2 ]] || { echo "build.sh: --target needs a target name" >&2; exit 2; }
      targets+=("$2")
      shift 2
      ;;
    *)
      cmake_args+=("$1")
      shift
      ;;
  esac
done
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${cmake_args[@]}"
if [[ ${#targets[@]} -gt 0 ]]; then
  cmake --build build -j "$jobs" --target "${targets[@]}"
else
  cmake --build build -j "$jobs"
fi
