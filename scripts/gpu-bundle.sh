#!/usr/bin/env bash
# gpu-bundle.sh: packs what scripts/gpu-check.sh needs on a lent GPU machine that has CUDA
# and nothing else of ours (no CAF, OpenBLAS, Boost, gloo; no package registry to fetch
# them from): the troupe command and the CUDA test and benchmark binaries built here
# (scripts/build.sh, CUDA on), libtroupe and libtroupe_cuda side by side, and the libraries
# they need that such a machine lacks, into .gpu/ (bin/, lib/), which .git/info/exclude
# keeps out of git. cuBLAS (hundreds of MiB) and the C and C++ runtimes are the machine's
# own. gpu-check.sh uses the bundle when it is there.
#
#   scripts/build.sh && scripts/gpu-bundle.sh     # then carry .gpu to the machine
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
for f in troupe troupe_cuda_tests troupe_gpu_bench libtroupe_cuda.so; do
  [[ -e $build/$f ]] || { echo "gpu-bundle.sh: $build/$f is missing: build with CUDA first" >&2; exit 1; }
done
rm -rf .gpu
mkdir -p .gpu/bin .gpu/lib
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
cp "$build/troupe" "$build/troupe_cuda_tests" "$build/troupe_gpu_bench" .gpu/bin/
# By their sonames, as the loader asks for them (libtroupe finds libtroupe_cuda beside it).
for lib in libtroupe libtroupe_cuda; do
  soname=$(readelf -d "$build/$lib.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  cp -L "$build/$lib.so" ".gpu/lib/$soname"
done
# What a CUDA image without Debian's packages lacks (what ldd resolves from here).
wanted='libcaf_|libopenblas|libgfortran|libquadmath|libboost_|libgloo|libhiredis|libibverbs|libnl-|libcudart'
for f in .gpu/bin/* .gpu/lib/*; do
  ldd "$f" | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if [[ $name =~ $wanted && ! -e .gpu/lib/$name ]]; then
    cp -L "$path" ".gpu/lib/$name"
  fi
done
du -sh .gpu
ls .gpu/lib
