#!/usr/bin/env bash
# shipped_configs.sh: trains every shipped config (5 epochs on Fashion-MNIST) and prints
# its final test accuracy and speed. Run from the repository root after scripts/build.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
printf '%-28s %10s %12s %s\n' config accuracy samples/s utilisation
for config in config/fashion_mlp*.toml; do
  # A config over several nodes runs as that many local processes.
  nodes=$(sed -n 's/^nodes *= *\([0-9]*\).*/\1/p' "$config")
  if [[ -n "$nodes" ]]; then
    out=$(./build/troupe launch -n "$nodes" "$config" --quiet --metrics /tmp/troupe-shipped.jsonl)
  else
    out=$(./build/troupe run "$config" --quiet --metrics /tmp/troupe-shipped.jsonl)
  fi
  accuracy=$(sed -n 's/.*test accuracy \([0-9.]*%\).*/\1/p' <<<"$out")
  rate=$(sed -n 's/.*(\([0-9]*\) samples\/s).*/\1/p' <<<"$out")
  use=$(sed -n 's/^device utilisation: //p' <<<"$out")
  printf '%-28s %10s %12s %s\n' "$(basename "$config" .toml)" "$accuracy" "$rate" "$use"
done
