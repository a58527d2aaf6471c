#!/usr/bin/env bash
# test.sh: installs the dependencies, builds, and runs every test with ctest, then checks
# the installed package by building the example plugin against it (check-install.sh), then
# runs the whole suite again under AddressSanitizer and UndefinedBehaviorSanitizer
# (sanitize.sh address, a clang build in build-address/). This is the README's test
# command and what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
# OpenBLAS picks its kernels by CPU, and kernels of another width sum in another order. The
# tests against PyTorch's Adam trajectory
# (tests/actors/session/pytorch_trajectory_test.cpp) hold to
# 1e-4 with the Haswell kernels their reference was checked with; Adam turns a last-bit
# difference in a near-zero gradient into a whole step, and with the SkylakeX kernels an
# AVX-512 CPU gets by default the trajectory drifts by 1e-2 in 20 steps. So the tests run
# with the Haswell kernels on x86-64 unless OPENBLAS_CORETYPE says otherwise already.
if [[ -z "${OPENBLAS_CORETYPE:-}" && "$(uname -m)" == "x86_64" ]]; then
  export OPENBLAS_CORETYPE=Haswell
fi
scripts/install-deps.sh
started=$SECONDS
scripts/build.sh -DTROUPE_BUILD_TESTS=ON "$@"
built=$SECONDS
printf '\n==== test: ctest ====\n'
# One test at a time: the schedule and watchdog tests measure time on the devices.
ctest --test-dir build --output-on-failure --timeout 300
tested=$SECONDS
scripts/check-install.sh
scripts/sanitize.sh address
printf '\n==== test: done in %d min %d s (build %d s, ctest %d s, install check and sanitizers %d s) ====\n' \
  $(((SECONDS - started) / 60)) $(((SECONDS - started) % 60)) $((built - started)) \
  $((tested - built)) $((SECONDS - tested))
