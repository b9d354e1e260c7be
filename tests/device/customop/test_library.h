// File: tests/device/customop/test_library.h
//
// What the custom op tests share: where the tests' C library (test_ops.c) and the helper
// binary are (compile definitions from tests/device/customop/CMakeLists.txt), limits small enough
// for a test, a node for an op, and whether this build is sanitized (a sanitized host
// cannot run under an address space limit, and reports a crash as its own exit).
//
// Thread safety: pure functions.
#ifndef IPUPOD_TESTS_CUSTOMOP_TEST_LIBRARY_H_
#define IPUPOD_TESTS_CUSTOMOP_TEST_LIBRARY_H_

#include <filesystem>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "device/customop/host_process.h"
#include "device/graph/custom_ops.h"
#include "device/graph/graph.h"

namespace ipupod::customop::testing {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

inline std::string TestOpsLibrary() { return IPUPOD_TEST_CUSTOM_OPS; }
inline std::string TestOpsDir() {
  return std::filesystem::path(TestOpsLibrary()).parent_path().string();
}
inline std::string HostBinary() { return IPUPOD_TEST_CUSTOM_OP_HOST; }

inline HostLimits TestLimits(absl::Duration call_timeout = absl::Seconds(30)) {
  HostLimits limits;
  limits.host_binary = HostBinary();
  limits.address_space_bytes = int64_t{1} << 30;
  limits.call_timeout = call_timeout;
  limits.start_timeout = absl::Seconds(30);
  return limits;
}

// A node of `op` ("domain::Name") with inputs x0.. and outputs y0...
inline graph::Node NodeFor(const std::string& op, int inputs, int outputs) {
  graph::Node node;
  node.name = "/" + op;
  node.op_type = op;
  for (int i = 0; i < inputs; ++i) node.inputs.push_back("x" + std::to_string(i));
  for (int i = 0; i < outputs; ++i) node.outputs.push_back("y" + std::to_string(i));
  return node;
}

}  // namespace ipupod::customop::testing

#endif  // IPUPOD_TESTS_CUSTOMOP_TEST_LIBRARY_H_
