// File: tools/fuzz/fuzzer.h
//
// What every libFuzzer target of tools/fuzz/ shares: the entry point's declaration
// (so -Wmissing-declarations accepts its definition) and the bounds a
// target passes to the code under test. A crash, a sanitizer report, a leak,
// a single allocation over -malloc_limit_mb or a process over -rss_limit_mb
// (tools/fuzz/run.sh sets both) is a finding.
//
// Thread safety: libFuzzer calls a target from one thread.
// Errors: a target never fails on bad input; it traps (FUZZ_CHECK) only when
// a property the code promises does not hold.
#ifndef IPUPOD_FUZZ_FUZZER_H_
#define IPUPOD_FUZZ_FUZZER_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "absl/strings/string_view.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace ipupod::fuzz {

// What a target lets a tensor file or stream decode to: far below
// -malloc_limit_mb, so any allocation near that limit is a bug.
inline constexpr int64_t kFuzzTensorBytesMax = int64_t{64} << 20;

inline absl::string_view AsText(const uint8_t* data, size_t size) {
  return absl::string_view(reinterpret_cast<const char*>(data), size);
}

}  // namespace ipupod::fuzz

// A broken promise: report it and trap so libFuzzer saves the input.
#define FUZZ_CHECK(cond)                                                                 \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      __builtin_trap();                                                                  \
    }                                                                                    \
  } while (0)

#endif  // IPUPOD_FUZZ_FUZZER_H_
