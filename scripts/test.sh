#!/usr/bin/env bash
# test.sh: installs the dependencies, builds, and runs every test with ctest, then checks
# the installed package by building the example plugin against it (check-install.sh), then
# runs the whole suite again under AddressSanitizer and UndefinedBehaviorSanitizer
# (sanitize.sh address, a clang build in build-address/). This is the README's test
# command and what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh "$@"
printf '\n==== test: ctest ====\n'
# One test at a time: the schedule and watchdog tests measure time on the devices.
ctest --test-dir build --output-on-failure --timeout 300
scripts/check-install.sh
scripts/sanitize.sh address
