#!/usr/bin/env bash
# tsan-caf.sh: builds CAF 0.17.6 (core, io, openssl) with ThreadSanitizer into
# build-thread-caf/prefix, for `scripts/sanitize.sh thread` (issue 12).
#
# Debian's libcaf_core is built without TSan, so TSan cannot see the atomics with which
# CAF's mailboxes and scheduler hand a message or an actor from one thread to another,
# and reports each hand-off as a race. With CAF instrumented too, what TSan reports is a
# real race. The sources are Debian's own (`apt-get source actor-framework`, the package
# libcaf-dev is built from), fetched through a private apt configuration that only adds
# deb-src to the system's Debian mirror; nothing is installed and nothing system-wide
# changes. The build takes about 8 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD/build-thread-caf
prefix=$root/prefix
if [[ -f $prefix/lib/libcaf_core.so && -f $prefix/.troupe-tsan-caf ]]; then
  echo "tsan-caf.sh: $prefix is already built"
  exit 0
fi
version=0.17.6
mkdir -p "$root/apt/lists/partial" "$root/src"
cat >"$root/apt/sources.list" <<'EOF'
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main
EOF
apt_opts=(-o "Dir::Etc::SourceList=$root/apt/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
  -o "Dir::State::Lists=$root/apt/lists" -o "Dir::Cache=$root/apt/cache" -o "APT::Sandbox::User=root")
orig=$root/src/actor-framework_$version.orig.tar.gz
if [[ ! -f $orig ]]; then
  apt-get "${apt_opts[@]}" -qq update
  # What is built is the upstream tarball, without Debian's patches: a mirror that lacks
  # the packaging tarball (the one here did) still gives it.
  (cd "$root/src" && apt-get "${apt_opts[@]}" source --download-only actor-framework) ||
    [[ -f $orig ]] || { echo "tsan-caf.sh: could not fetch Debian's actor-framework $version source" >&2; exit 1; }
fi
rm -rf "$root/src/actor-framework-$version" "$root/build"
tar -xzf "$orig" -C "$root/src"
# -include limits: receive_buffer.hpp uses std::numeric_limits without including it, and
# libstdc++ 12 no longer includes it on the way.
flags="-fsanitize=thread -O1 -g1 -include limits -Wno-deprecated-declarations"
# CAF's own CMake picks libc++ for clang unless told not to; troupe and Debian use libstdc++.
cmake -S "$root/src/actor-framework-$version" -B "$root/build" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS="-std=c++17 $flags" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" -DCMAKE_INSTALL_PREFIX="$prefix" \
  -DCAF_NO_AUTO_LIBCPP=yes -DCAF_NO_EXAMPLES=yes -DCAF_NO_UNIT_TESTS=yes -DCAF_NO_TOOLS=yes \
  -DCAF_NO_PYTHON=yes -DCAF_NO_OPENCL=yes -DCAF_NO_SUMMARY=yes -DCAF_NO_STATIC=yes
cmake --build "$root/build" -j "${JOBS:-$(nproc)}"
cmake --install "$root/build" >/dev/null
touch "$prefix/.troupe-tsan-caf"
echo "tsan-caf.sh: CAF $version with ThreadSanitizer in $prefix"
