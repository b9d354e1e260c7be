#!/usr/bin/env bash
# Builds the Debian packages: build/ipupod_<version>_amd64.deb (ipupodd, ipupod, the systemd
# unit, the default config, the docs) and build/python3-ipupod_<version>_all.deb (the Python
# client). Install them with `sudo apt install ./build/ipupod_*.deb ./build/python3-ipupod_*.deb`
# (docs/operations.md, "Installing as a service").
#   deploy/package.sh [BUILD_DIR]      default ./build (Release)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
bash deploy/install-deps.sh
bash deploy/build.sh "$dir" -DCMAKE_BUILD_TYPE=Release -DIPUPOD_BUILD_TESTS=OFF -DIPUPOD_BUILD_BENCH=OFF
(cd "$dir" && cpack -G DEB)
ls -l "$dir"/*.deb
