#!/usr/bin/env bash
# Quick start, part 2: installs what is missing, builds, and runs the whole
# test suite:
#   1. build/       gcc, RelWithDebInfo: every test (unit, concurrency,
#                   integration, parity with PyTorch)
#   2. build-asan/  gcc, AddressSanitizer + UBSan: every test but parity
#   3. build-tsan/  clang (-Wthread-safety -Werror), ThreadSanitizer: the
#                   tests labelled `concurrency` and `integration`
# IPUPOD_TEST_QUICK=1 runs only step 1 (for local iteration).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh

jobs=$(nproc)
run_ctest() {  # run_ctest DIR [ctest args...]
  local dir=$1; shift
  (cd "$dir" && ctest --output-on-failure --parallel "$jobs" "$@")
}

echo "== 1/3: build (gcc) and run every test"
bash deploy/build.sh build
run_ctest build

if [ "${IPUPOD_TEST_QUICK:-0}" = "1" ]; then exit 0; fi

echo "== 2/3: AddressSanitizer + UBSan"
bash deploy/build.sh build-asan -DIPUPOD_SANITIZE=address -DIPUPOD_BUILD_BENCH=OFF \
  "-DIPUPOD_TEST_LABELS=unit;concurrency;integration"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  run_ctest build-asan -LE parity

echo "== 3/3: ThreadSanitizer (clang, -Wthread-safety)"
bash deploy/build.sh build-tsan -DCMAKE_CXX_COMPILER=clang++ -DIPUPOD_SANITIZE=thread \
  -DIPUPOD_BUILD_BENCH=OFF "-DIPUPOD_TEST_LABELS=concurrency;integration"
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp" \
  run_ctest build-tsan -L "concurrency|integration"
