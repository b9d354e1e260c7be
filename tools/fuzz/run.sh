#!/usr/bin/env bash
# Builds the libFuzzer targets and runs each for a fixed time.
#   tools/fuzz/run.sh SECONDS [TARGET...]     (default: every target, in turn)
# Build: build-fuzz/ (or $IPUPOD_FUZZ_BUILD_DIR), clang, -DIPUPOD_FUZZ=ON,
# only the `ipupod_fuzzers` target; a directory already configured with
# IPUPOD_FUZZ=ON (CI's build-asan/) is only brought up to date. Each target starts from its checked-in
# seeds (tools/fuzz/corpus/TARGET, read-only) plus what earlier runs found
# (BUILD/fuzz-corpus/TARGET); crashes, leaks, timeouts and over-limit
# allocations land in BUILD/fuzz-artifacts/TARGET/ and fail the script.
# Limits: one allocation over 256 MB or a process over 2 GB resident is a
# finding (-malloc_limit_mb, -rss_limit_mb); one input over 25 s is a timeout.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:?usage: tools/fuzz/run.sh SECONDS [TARGET...]}
shift
dir=${IPUPOD_FUZZ_BUILD_DIR:-build-fuzz}
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(fuzz_npz fuzz_npy fuzz_safetensors fuzz_tensor_stream fuzz_ipu_config
           fuzz_server_config fuzz_executable fuzz_onnx_compile fuzz_custom_op_protocol)
fi
if grep -q '^IPUPOD_FUZZ:BOOL=ON' "$dir/CMakeCache.txt" 2>/dev/null; then
  # Already configured for fuzzing (CI's ASan stage builds them with the tests).
  cmake --build "$dir" --parallel "$(nproc)" --target ipupod_fuzzers
else
  IPUPOD_BUILD_TARGET=ipupod_fuzzers bash deploy/build.sh "$dir" -DCMAKE_CXX_COMPILER=clang++ \
    -DIPUPOD_FUZZ=ON -DIPUPOD_BUILD_TESTS=OFF -DIPUPOD_BUILD_BENCH=OFF
fi
status=0
for t in "${targets[@]}"; do
  mkdir -p "$dir/fuzz-corpus/$t" "$dir/fuzz-artifacts/$t"
  echo "== $t: ${seconds} s"
  if ! "$dir/tools/fuzz/$t" -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=256 \
      -timeout=25 -print_final_stats=1 -artifact_prefix="$dir/fuzz-artifacts/$t/" \
      "$dir/fuzz-corpus/$t" "tools/fuzz/corpus/$t" 2>"$dir/fuzz-artifacts/$t/log.txt"; then
    echo "== $t: FAILED; see $dir/fuzz-artifacts/$t/ (log.txt and the input)"
    tail -40 "$dir/fuzz-artifacts/$t/log.txt"
    status=1
  fi
  grep -E "^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb)" \
    "$dir/fuzz-artifacts/$t/log.txt" || true
done
exit $status
