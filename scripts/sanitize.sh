#!/usr/bin/env bash
# sanitize.sh: builds the whole project with clang and a sanitizer, in build-MODE, and runs
# the whole test suite under it (issue 12).
#
#   scripts/sanitize.sh address   # AddressSanitizer + UndefinedBehaviorSanitizer (build-address)
#   scripts/sanitize.sh thread    # ThreadSanitizer (build-thread)
#
# Extra arguments go to ctest (e.g. -R 'ring'). Without CUDA (the sanitizers do not see
# into device code, and there is no GPU here). The test command (scripts/test.sh, and so
# CI) runs the address pass after the plain one. A report fails the test that triggered
# it: each sanitizer halts at its first report (UBSan by halt_on_error: its checks stay
# recoverable so that the suppressions in scripts/sanitizers/ apply, which they do not to
# -fno-sanitize-recover checks); LeakSanitizer runs at each process's exit.
#
# The thread pass is not part of the test command (the ThreadSanitizer build and suite add
# about half an hour to CI's 2 cores); run it before landing anything that touches threads.
# It first builds CAF itself with TSan (scripts/tsan-caf.sh, once, into build-thread-caf):
# Debian's libcaf_core is not instrumented, so the lock-free mailbox that hands every message
# from one thread to another synchronises where TSan cannot see it, and every hand-off would
# be reported as a race.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
shift || true
# Both with clang (Debian's clang 14): TSan from g++ 12 crashes at startup here, and one
# compiler for both keeps the tests' C++ to what clang accepts.
compilers=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++)
case "$mode" in
  address) flags="-fsanitize=address,undefined -fno-omit-frame-pointer" ;;
  thread)
    flags="-fsanitize=thread"
    scripts/tsan-caf.sh
    caf=$PWD/build-thread-caf/prefix
    compilers+=(-DCAF_INCLUDE_DIR="$caf/include" -DCAF_CORE_LIBRARY="$caf/lib/libcaf_core.so"
      -DCAF_IO_LIBRARY="$caf/lib/libcaf_io.so" -DCAF_OPENSSL_LIBRARY="$caf/lib/libcaf_openssl.so")
    ;;
  *) echo "usage: scripts/sanitize.sh address|thread [ctest options]" >&2; exit 2 ;;
esac
jobs=${JOBS:-$(nproc)}
dir=build-$mode
# -O1 and line tables only (-g1): the sanitizers' advice, and a build about half as long as
# -O2 -g; asserts stay on.
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTROUPE_CUDA=OFF \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  "${compilers[@]}" \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" \
  -DCMAKE_MODULE_LINKER_FLAGS="$flags" -DTROUPE_PYTHON=OFF
cmake --build "$dir" -j "$jobs"
supp=$PWD/scripts/sanitizers
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_stack_use_after_return=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
printf '\n==== %s sanitizer: ctest ====\n' "$mode"
ctest --test-dir "$dir" --output-on-failure --timeout 900 "$@"
