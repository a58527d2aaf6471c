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
# Everything includes the tests unless the arguments say otherwise (scripts/train.sh turns
# them off; a build directory remembers that, so say it again here).
tests_option=(-DTROUPE_BUILD_TESTS=ON)
for a in "${cmake_args[@]}"; do
  [[ "$a" == -DTROUPE_BUILD_TESTS=* ]] && tests_option=()
done
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${tests_option[@]}" "${cmake_args[@]}"
if [[ ${#targets[@]} -gt 0 ]]; then
  cmake --build build -j "$jobs" --target "${targets[@]}"
else
  cmake --build build -j "$jobs"
fi
