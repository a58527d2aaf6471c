#!/usr/bin/env bash
# test.sh: installs the dependencies, builds, and runs every test with ctest.
# This is the README's test command and what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh "$@"
ctest --test-dir build --output-on-failure -j "${JOBS:-$(nproc)}" --timeout 300
