#!/usr/bin/env bash
# Quick start, part 1: installs what is missing, builds, and runs ipupodd in
# the foreground on 127.0.0.1:50051 with the default pod (POD16), in open mode
# (loopback only, user names taken from the client). Extra arguments go to
# ipupodd, e.g. `deploy/run-server.sh --pod POD64` or `--config my.json`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
# Release, as deploy/test.sh builds the same directory: the test command that follows in the
# README's Quick start then compiles only the tests, not the server again.
bash deploy/build.sh build -DCMAKE_BUILD_TYPE=Release -DIPUPOD_BUILD_TESTS=OFF -DIPUPOD_BUILD_BENCH=OFF
exec ./build/server/ipupodd --listen 127.0.0.1:50051 --state-dir "${IPUPOD_STATE_DIR:-$PWD/ipupod-state}" "$@"
