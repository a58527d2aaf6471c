#!/usr/bin/env bash
# test.sh: installs the dependencies, builds, and runs every test with ctest.
# This is the README's test command and what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh "$@"
# One test at a time: the schedule and watchdog tests measure time on the devices.
ctest --test-dir build --output-on-failure --timeout 300
