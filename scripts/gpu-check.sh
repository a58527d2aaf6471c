#!/usr/bin/env bash
# gpu-check.sh: the one script to run on a machine with an NVIDIA GPU (CUDA under
# /usr/local/cuda): uses the bundle of scripts/gpu-bundle.sh when .gpu/ is there (a machine
# with CUDA and nothing of ours), else installs missing Debian packages if it can and builds
# troupe with the CUDA kernels; runs the CUDA tests (every CUDA kernel against the CPU
# kernel; 20 training steps on cuda:0 against cpu:0; data parallel over two GPUs against
# one where there are two),
# then benchmarks the large MLP's step (bench/gpu_mlp_bench.cpp: FP32 and TF32 against its
# GEMMs timed alone; bench/gpu_mlp_torch.py: PyTorch's step, if PyTorch is there) and ends
# with a short table.
#
# It does not touch the GPU's settings and does not build the CPU-only configuration. Each
# step has a timeout, short enough that a normal run fits a 15-minute device loan (apt
# without network fails fast); a failed required step makes the later ones "skipped".
# Exit status: 0 only if the CUDA tests ran on a real device and passed.
#
#   scripts/gpu-check.sh            # from anywhere; builds in <repo>/build
#   JOBS=8 scripts/gpu-check.sh
#   (here: scripts/build.sh && scripts/gpu-bundle.sh; there, with .gpu carried: the same)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

jobs=${JOBS:-16}
export DEBIAN_FRONTEND=noninteractive  # apt must never wait for an answer
logs=$(mktemp -d "${TMPDIR:-/tmp}/troupe-gpu-check.XXXXXX")
rows=()      # "step|result|seconds"
failed=0     # a required step failed: the rest is skipped

record() { rows+=("$1|$2|$3"); }

# run_step NAME SECONDS required|optional COMMAND...: runs COMMAND under a timeout,
# shows and logs its output, records the result.
run_step() {
  local name=$1 limit=$2 kind=$3
  shift 3
  if [[ $failed -ne 0 ]]; then
    record "$name" "skipped" 0
    return 0
  fi
  echo "=== $name: $*"
  local start=$SECONDS rc=0
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$logs/$name.log" || rc=$?
  local took=$((SECONDS - start))
  if [[ $rc -eq 0 ]]; then
    record "$name" "ok" "$took"
  else
    local why="failed (exit $rc)"
    [[ $rc -eq 124 || $rc -eq 137 ]] && why="timed out after ${limit}s"
    if [[ $kind == optional ]]; then
      record "$name" "$why, ignored" "$took"
    else
      record "$name" "$why" "$took"
      failed=1
    fi
  fi
}

# The Debian packages the build needs (DESIGN.md "Dependencies") that are not installed.
missing_packages() {
  command -v dpkg-query >/dev/null || return 0
  local package
  for package in cmake ninja-build g++ libcaf-dev libopenblas-dev libtomlplusplus-dev \
    libboost-program-options-dev libboost-iostreams-dev nlohmann-json3-dev doctest-dev; do
    dpkg-query -W -f='${Status}\n' "$package" 2>/dev/null | grep -q "install ok installed" ||
      echo -n "$package "
  done
}

# ---- 1. the machine ----
run_step gpu 60 optional nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv

# ---- 2-3. a bundle built elsewhere (scripts/gpu-bundle.sh), or packages and a build ----
# The lent machine may have CUDA and nothing of ours (no CAF, OpenBLAS, Boost, and no
# package registry to fetch them from): then carry .gpu/, made here by gpu-bundle.sh.
bundle=${TROUPE_GPU_BUNDLE:-.gpu}
if [[ -x $bundle/bin/troupe_cuda_tests && -x $bundle/bin/troupe_gpu_bench ]]; then
  record deps "bundle $bundle (built elsewhere)" 0
  # cuBLAS is the machine's: its CUDA toolkit's, or the one PyTorch's wheels bring.
  cuda_dirs=$PWD/$bundle/lib
  for dir in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
    $(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null || true); do
    [[ -e $dir/libcublas.so.13 ]] && cuda_dirs+=":$dir"
  done
  export LD_LIBRARY_PATH=$cuda_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  tests=$bundle/bin/troupe_cuda_tests
  bench=$bundle/bin/troupe_gpu_bench
else
  # ---- 2. packages (apt may have no network here: a failure is noted, not fatal) ----
  missing=$(missing_packages)
  if [[ -n $missing ]]; then
    echo "missing packages: $missing"
    if [[ -f scripts/install-deps.sh ]]; then
      run_step deps 240 optional bash scripts/install-deps.sh
    else
      sudo=""
      if [[ $(id -u) -ne 0 ]] && command -v sudo >/dev/null; then sudo="sudo"; fi
      run_step deps 240 optional bash -c \
        "$sudo apt-get update && $sudo apt-get install -y --no-install-recommends $missing"
    fi
  else
    record deps "all present" 0
  fi

  # configure and build
  # A build folder configured elsewhere (another path) would make cmake refuse.
  if [[ -f build/CMakeCache.txt ]] &&
    ! grep -q "^CMAKE_HOME_DIRECTORY:INTERNAL=$(pwd)\$" build/CMakeCache.txt; then
    rm -rf build
  fi
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  run_step configure 120 required cmake -S . -B build "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DTROUPE_CUDA=ON
  run_step build 420 required cmake --build build -j "$jobs" --target troupe_cuda_tests \
    troupe_gpu_bench
  tests=./build/troupe_cuda_tests
  bench=./build/troupe_gpu_bench
fi

# ---- 4. the CUDA tests ----
run_step test 180 required "$tests"
if [[ -f $logs/test.log ]] && grep -q "skipped: no CUDA device (0 present" "$logs/test.log"; then
  # Passing by skipping proves nothing on the machine that was lent for this.
  record "device" "NOT USED: $(grep -m1 -o "skipped: no CUDA device (0 present.*" "$logs/test.log")" 0
  failed=1
fi
summary=$(grep -h "test cases:" "$logs/test.log" 2>/dev/null | tail -n 1 || true)
# What the training tests measured (largest parameter differences, cudaMalloc calls).
measured=$(grep -h -E "against cpu:0|against cuda:0|caching allocator" "$logs/test.log" 2>/dev/null |
  sed 's/.*MESSAGE: //' || true)

# ---- 5. benchmarks (optional: a slow or failed one does not fail the check) ----
run_step bench 240 optional "$bench"
if command -v python3 >/dev/null; then
  run_step torch 120 optional python3 bench/gpu_mlp_torch.py
else
  record torch "skipped: no python3" 0
fi

# ---- the table ----
echo
echo "=== gpu-check summary (logs in $logs)"
printf '%-10s %-60s %8s\n' step result seconds
for row in "${rows[@]}"; do
  IFS='|' read -r step result took <<<"$row"
  printf '%-10s %-60s %8s\n' "$step" "$result" "$took"
done
[[ -n $summary ]] && echo "${summary#\[doctest\] }"
[[ -n $measured ]] && echo "$measured"
for log in bench torch; do
  [[ -f $logs/$log.log ]] && grep -E "^(math|fp32|tf32|skipped)" "$logs/$log.log" || true
done
exit "$failed"
