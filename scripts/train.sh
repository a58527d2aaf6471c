#!/usr/bin/env bash
# train.sh: installs the dependencies, builds, and trains the default config on
# Fashion-MNIST. This is the README's main command. Extra arguments go to `troupe run`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
./build/troupe run config/fashion_mlp.toml "$@"
