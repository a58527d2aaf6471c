#!/usr/bin/env bash
# check-install.sh: proves that plugins build out of tree against an installed troupe.
#
# Installs ./build into a temporary prefix, builds examples/custom_layer against it with
# CMake (find_package) and runs the plugin's checks and example configs with the installed
# binary, then builds a plugin and a program with pkg-config alone. Needs a built ./build
# (scripts/build.sh); scripts/test.sh runs it after ctest. Everything it writes goes to
# temporary directories, removed at the end; the checkout is left as it was.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${JOBS:-$(nproc)}

step() { printf '\n==== check-install: %s ====\n' "$*"; }
prefix=$(mktemp -d -t troupe-prefix.XXXXXX)
work=$(mktemp -d -t troupe-example.XXXXXX)
on_exit() {
  local status=$?
  rm -rf "$prefix" "$work"
  [ "$status" -eq 0 ] || printf '\n==== check-install: FAILED (exit %s) ====\n' "$status" >&2
}
trap on_exit EXIT

step "install into $prefix"
cmake --install build --prefix "$prefix" > "$work/install.log"
for f in bin/troupe lib/libtroupe.so lib/cmake/troupe/troupeConfig.cmake \
         lib/cmake/troupe/troupeConfigVersion.cmake lib/cmake/troupe/FindCAF.cmake \
         lib/pkgconfig/troupe.pc include/troupe/layer.hpp include/troupe/kernel.hpp \
         include/troupe/actor_kind.hpp include/troupe/plugin.hpp; do
  [ -e "$prefix/$f" ] || { echo "missing after install: $f" >&2; exit 1; }
done
# The installed headers are the facade and nothing else: exactly include/troupe/*.hpp and
# the internals its templates need, include/troupe/detail/*.hpp.
installed=$(cd "$prefix" && find include -type f | sort)
facade=$(ls include/troupe/*.hpp include/troupe/detail/*.hpp | sort)
if [ "$installed" != "$facade" ]; then
  echo "the installed headers are not the facade include/troupe/*.hpp and detail/*.hpp:" >&2
  diff <(echo "$facade") <(echo "$installed") >&2 || true
  exit 1
fi
echo "installed headers: the facade only ($(echo "$installed" | wc -l) files under include/troupe/)"
# A build with CUDA installs its kernels' library beside libtroupe, which loads it from there
# (Note [CUDA kernels loaded on demand] in kernels/dispatch.cpp); all it links must resolve.
if compgen -G "build/libtroupe_cuda.so.*" > /dev/null; then
  # The name libtroupe opens: its own SONAME's, for troupe_cuda (libtroupe_cuda.so.N).
  soname=$(objdump -p "$prefix/lib/libtroupe.so" | awk '/SONAME/ {print $2}')
  cuda_lib=${soname/libtroupe/libtroupe_cuda}
  [ -e "$prefix/lib/$cuda_lib" ] || { echo "missing after install: lib/$cuda_lib" >&2; exit 1; }
  if ldd "$prefix/lib/$cuda_lib" | grep -q "not found"; then
    echo "the installed $cuda_lib does not resolve:" >&2
    ldd "$prefix/lib/$cuda_lib" | grep "not found" >&2
    exit 1
  fi
  ldd "$prefix/lib/libtroupe.so" | grep -q cublas &&
    { echo "the installed libtroupe.so links cuBLAS; it should load libtroupe_cuda.so instead" >&2; exit 1; }
  echo "installed $cuda_lib beside libtroupe.so; its libraries resolve"
fi
"$prefix/bin/troupe" --help > /dev/null  # finds its libtroupe.so through its RPATH

# The Python package, where it was built: Debian's python3 imports it from the prefix's
# dist-packages (the default prefix /usr/local is on its path; here PYTHONPATH says where),
# its extension finding the installed libtroupe.so through its RPATH, and trains.
python_dir=$(cd "$prefix" && find lib -maxdepth 3 -type d -path "lib/python3*/dist-packages/troupe" | head -1)
if [ -e build/python/troupe/__init__.py ]; then
  [ -n "$python_dir" ] || { echo "the troupe Python package was built but not installed" >&2; exit 1; }
  step "import troupe from $python_dir (a run on the installed module)"
  (cd "$work" && PYTHONPATH="$prefix/$(dirname "$python_dir")" /usr/bin/python3 -c '
import numpy as np, troupe, sys
assert troupe.__file__.startswith(sys.argv[1]), troupe.__file__
x = np.random.default_rng(0).normal(size=(256, 8)).astype(np.float32)
y = (x[:, 0] > 0).astype(np.int64)
cfg = troupe.Config.from_dict({"run": {"steps": 40, "evaluate": False}, "data": {"batch_size": 32},
    "model": {"layers": [{"type": "linear", "out": 2}]}, "optimizer": {"type": "adam", "lr": 0.05}})
run = troupe.run(cfg, data=troupe.data.arrays(x, y))
print("installed troupe:", run.wait()["event"], sorted(run.parameters()))
' "$prefix")
fi

step "build examples/custom_layer with CMake (find_package(troupe))"
# The configs find the plugin at build/libcustom_layers.so next to them, so they are
# copied next to the build directory rather than built into the checkout.
cp examples/custom_layer/*.toml "$work/"
cmake -S examples/custom_layer -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DCUSTOM_LAYERS_BUILD_TESTS=ON > "$work/configure.log"
cmake --build "$work/build" -j "$jobs"
plugin="$work/build/libcustom_layers.so"

step "clipper_test (the grad_clipper actor with real messages)"
"$work/build/clipper_test"

step "focal_test (the plugin's loss against its reference and finite differences)"
"$work/build/focal_test"

step "troupe check-layer swish (learnable, then fixed beta)"
"$prefix/bin/troupe" check-layer swish --plugin "$plugin" --input 9 --batch 4
"$prefix/bin/troupe" check-layer swish --plugin "$plugin" --set learnable=false --set beta=1.7

step "troupe run swish_mlp.toml --steps 20 ([run] plugins)"
"$prefix/bin/troupe" run "$work/swish_mlp.toml" --steps 20

step "troupe run focal_mlp.toml --steps 20 ([model] loss from the plugin)"
"$prefix/bin/troupe" layers --plugin "$plugin" | grep -q "^  focal " \
  || { echo "troupe layers does not list the focal loss" >&2; exit 1; }
"$prefix/bin/troupe" run "$work/focal_mlp.toml" --steps 20

step "troupe plan + run clipped_explicit.toml --steps 20 (a grad_clipper on a grads wire)"
"$prefix/bin/troupe" plan "$work/clipped_explicit.toml" | grep -q "clip_2" \
  || { echo "troupe plan does not list clip_2" >&2; exit 1; }
"$prefix/bin/troupe" run "$work/clipped_explicit.toml" --steps 20

step "pkg-config: a plugin and a program built with \`pkg-config --cflags --libs troupe\`"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
flags=$(pkg-config --cflags --libs troupe)
echo "pkg-config --cflags --libs troupe: $flags"
# A second plugin from the same sources, minus the clipper.
# shellcheck disable=SC2086
g++ -O1 -shared -fPIC -o "$work/libswish_only.so" examples/custom_layer/swish.cpp \
  examples/custom_layer/plugin.cpp $flags
# A layer plugin compiles none of CAF: the layer and kernel headers do not include it.
# shellcheck disable=SC2086
if g++ -std=c++17 -M examples/custom_layer/swish.cpp $flags | grep -q '/caf/'; then
  echo "swish.cpp (a layer) pulls in CAF headers through the facade" >&2
  exit 1
fi
echo "swish.cpp (a layer plugin) includes no CAF header"
cat > "$work/consumer.cpp" <<'CPP'
// A program linked against libtroupe: loads a plugin and finds its layer in the registry.
#include <cstdio>
#include <string>

#include "troupe/layer.hpp"
#include "troupe/plugin.hpp"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  troupe::load_plugin(argv[1]);
  bool swish = false, linear = false;
  for (const auto& [name, description] : troupe::registered_layers()) {
    swish |= name == "swish";
    linear |= name == "linear";
  }
  std::printf("layers: linear %s, swish %s\n", linear ? "found" : "MISSING",
              swish ? "found" : "MISSING");
  return swish && linear ? 0 : 1;
}
CPP
# shellcheck disable=SC2086
g++ -O1 -o "$work/consumer" "$work/consumer.cpp" $flags -Wl,-rpath,"$prefix/lib"
"$work/consumer" "$work/libswish_only.so"

step "all passed"
