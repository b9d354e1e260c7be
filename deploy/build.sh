#!/usr/bin/env bash
# Configures and builds one build directory.
#   deploy/build.sh [BUILD_DIR] [extra cmake args...]
# Default BUILD_DIR is ./build (RelWithDebInfo, gcc). Uses Ninja when present.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
gen=()
if command -v ninja >/dev/null 2>&1; then gen=(-G Ninja); fi
if [ -f "$dir/CMakeCache.txt" ]; then gen=(); fi
cmake -S . -B "$dir" "${gen[@]}" "$@" >/dev/null
cmake --build "$dir" --parallel "$(nproc)"
