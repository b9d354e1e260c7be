#!/usr/bin/env bash
# Configures and builds one build directory.
#   deploy/build.sh [BUILD_DIR] [extra cmake args...]
# Default BUILD_DIR is ./build (RelWithDebInfo, gcc). $IPUPOD_BUILD_TARGET, when
# set, builds only that target (tools/fuzz/run.sh: the fuzz targets). Uses Ninja when present,
# and ccache when present: a warm machine (a second CI run, a developer's
# rebuild in another checkout) recompiles only what changed. CCACHE_BASEDIR
# makes cache entries independent of where the checkout lives.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
gen=()
if command -v ninja >/dev/null 2>&1; then gen=(-G Ninja); fi
if [ -f "$dir/CMakeCache.txt" ]; then gen=(); fi
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
  export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
  # The tests' precompiled header (tests/CMakeLists.txt) is cacheable only with these.
  export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
fi
cmake -S . -B "$dir" "${gen[@]}" "${launcher[@]}" -DIPUPOD_WERROR=ON "$@" >/dev/null
cmake --build "$dir" --parallel "$(nproc)" ${IPUPOD_BUILD_TARGET:+--target "$IPUPOD_BUILD_TARGET"}
