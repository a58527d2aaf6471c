#!/usr/bin/env bash
# install-deps.sh: installs what troupe needs to build, test and train, from Debian's
# packages only. Idempotent: packages already installed are skipped quickly.
#
#   scripts/install-deps.sh          # build, tests (PyTorch as their reference), Fashion-MNIST
#   scripts/install-deps.sh --bench  # also hyperfine and valgrind, for bench/
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libcaf-dev                      # CAF 0.17.6: actors, messaging, network
  libcaf-openssl0.17              # CAF's openssl module: [cluster] tls (libcaf-dev pulls it in)
  libopenblas-dev                 # CPU GEMM
  libtomlplusplus-dev             # config
  libboost-program-options-dev libboost-iostreams-dev
  nlohmann-json3-dev
  libssl-dev                      # libcrypto: HMAC proofs of the cluster secret, SHA-256, nonces;
                                  # libssl: the check of [cluster] tls's files
  openssl                         # the command: the TLS tests make a throwaway CA with it
  libgloo-dev                     # [parallel] averaging = "gloo": gloo's all-reduce over TCP
  doctest-dev
  dataset-fashion-mnist           # the real data set (IDX .gz under /usr/share/datasets)
  fortunes                        # real text: config/char_lm*.toml's data (/usr/share/games/fortunes)
  python3-torch                   # the reference: tests load troupe's exports into PyTorch
  clang libclang-rt-14-dev        # the sanitizer pass of the tests (scripts/sanitize.sh) and
                                  # libFuzzer (scripts/fuzz.sh)
)
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(hyperfine valgrind)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then
  sudo="sudo"
fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
