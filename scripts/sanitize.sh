#!/usr/bin/env bash
# sanitize.sh: builds the whole project with clang and a sanitizer, in build-MODE, and runs
# the whole test suite under it (issue 12).
#
#   scripts/sanitize.sh address   # AddressSanitizer + UndefinedBehaviorSanitizer (build-address)
#   scripts/sanitize.sh thread    # ThreadSanitizer (build-thread)
#
# Extra arguments go to ctest (e.g. -R 'ring'). Without CUDA (the sanitizers do not see
# into device code, and there is no GPU here). A full build takes about 40 minutes on the
# 2-core machine; no whole run has finished yet (issue 12 is still open), and it is not
# part of the test command until one passes. A report fails the test that triggered it:
# UBSan and ASan halt on the first error; LeakSanitizer runs at each process's exit.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
shift || true
# address: g++ (the project's compiler). thread: clang, since TSan from g++ 12 crashes at
# startup here; clang 14 does not yet build every test (lambdas capturing structured
# bindings, a C++20 rule it lacks).
case "$mode" in
  address) flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
           compilers=(-DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++) ;;
  thread) flags="-fsanitize=thread"
          compilers=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++) ;;
  *) echo "usage: scripts/sanitize.sh address|thread [ctest options]" >&2; exit 2 ;;
esac
jobs=${JOBS:-$(nproc)}
dir=build-$mode
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTROUPE_CUDA=OFF \
  "${compilers[@]}" \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" \
  -DCMAKE_MODULE_LINKER_FLAGS="$flags"
cmake --build "$dir" -j "$jobs"
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_stack_use_after_return=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
printf '\n==== %s sanitizer: ctest ====\n' "$mode"
ctest --test-dir "$dir" --output-on-failure --timeout 900 "$@"
