#!/usr/bin/env bash
# install-deps.sh: installs what troupe needs to build, test and train, from Debian's
# packages only. Idempotent: packages already installed are skipped quickly.
#
#   scripts/install-deps.sh --train  # what training needs: build tools, libraries, Fashion-MNIST
#   scripts/install-deps.sh          # and the tests' (doctest, PyTorch as their reference, clang)
#   scripts/install-deps.sh --bench  # and hyperfine and valgrind, for bench/
set -euo pipefail

# What training needs (scripts/train.sh): a compiler, CMake, the libraries troupe links,
# and the real data set.
train_packages=(
  build-essential cmake ninja-build pkg-config
  libcaf-dev                      # CAF 0.17.6: actors, messaging, network
  libcaf-openssl0.17              # CAF's openssl module: [cluster] tls (libcaf-dev pulls it in)
  libopenblas-dev                 # CPU GEMM
  libdnnl-dev                     # oneDNN: the CPU GEMM on AVX-512 CPUs, bf16 products
  libtomlplusplus-dev             # config
  libboost-program-options-dev libboost-iostreams-dev
  nlohmann-json3-dev
  libssl-dev                      # libcrypto: HMAC proofs of the cluster secret, SHA-256, nonces;
                                  # libssl: the check of [cluster] tls's files
  libgloo-dev                     # [parallel] averaging = "gloo": gloo's all-reduce over TCP
  libpng-dev libjpeg62-turbo-dev  # [data] source = "images": PNG and JPEG decoding
  dataset-fashion-mnist           # the real data set (IDX .gz under /usr/share/datasets)
)
# What the tests need besides (scripts/test.sh).
test_packages=(
  openssl                         # the command: the TLS tests make a throwaway CA with it
  doctest-dev
  fortunes                        # real text: config/char_lm*.toml's data (/usr/share/games/fortunes)
  python3-torch                   # the reference: tests load troupe's exports into PyTorch
                                  # (and python3 for tests/function_sizes.py)
  clang libclang-rt-14-dev        # the sanitizer pass of the tests (scripts/sanitize.sh) and
                                  # libFuzzer (scripts/fuzz.sh)
  python3-numpy python3-sklearn   # examples/own_data: scikit-learn's bundled data sets
  python3-pil                     # examples/own_data: writes the digits as a PNG folder
  python3-dev pybind11-dev        # the Python module (python/: import troupe) against Debian's
  python3-pybind11                # Python 3 and NumPy
  python3-pytest                  # its tests (tests/python/, run by ctest)
  python3-matplotlib              # examples/python: plots a run's loss and accuracy
)
case "${1:-}" in
  --train) packages=("${train_packages[@]}") ;;
  "") packages=("${train_packages[@]}" "${test_packages[@]}") ;;
  --bench) packages=("${train_packages[@]}" "${test_packages[@]}" hyperfine valgrind
                    python3-torchvision) ;;  # the peer's ImageFolder (bench/image_loader.py)
  *)
    echo "install-deps.sh: unknown option '$1' (expected --train, --bench or nothing)" >&2
    exit 2
    ;;
esac

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
