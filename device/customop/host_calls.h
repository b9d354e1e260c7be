// File: device/customop/host_calls.h
//
// HostCalls: inside `ipupod-custom-op-host` (device/customop/host.h), one request of the protocol
// (device/customop/protocol.h) turned into one guarded call of the library's shape, compute or
// gradient function, and its reply. What the library is given follows
// device/customop/custom_op_abi.h: inputs copied into aligned buffers, outputs (and gradients)
// zero-filled buffers with a guard band of kGuardBytes behind each. The reply is:
//   ok            the types or tensors, checked (a shape function's dtype, rank and dims);
//   kOpError      the function returned non-zero: the text it wrote into `error`;
//   kMisbehaved   it threw a C++ exception, returned a malformed shape, or wrote into a
//                 guard band (then `fatal` is set: the process's memory is suspect and
//                 it exits after replying);
//   kOutOfMemory  the host could not allocate the operands within its address space
//                 limit.
// A request that does not decode, or names an op the table lacks, is kMisbehaved with
// fatal set too (ipupodd's fault, but nothing more can be trusted on this socket).
//
// Thread safety: not thread-safe; the host serves one request at a time.
#ifndef IPUPOD_CUSTOMOP_HOST_CALLS_H_
#define IPUPOD_CUSTOMOP_HOST_CALLS_H_

#include <cstdint>
#include <functional>
#include <string>

#include "device/customop/custom_op_abi.h"
#include "device/customop/protocol.h"

namespace ipupod::customop {

inline constexpr int64_t kGuardBytes = 256;
inline constexpr size_t kErrorBytes = 1024;

class HostCalls {
 public:
  // `table` was checked (CheckLibraryTable); `before_call` runs before each call into the
  // library (the host re-arms its CPU limit there); may be empty.
  HostCalls(const IpupodCustomOpLibrary* table, std::function<void()> before_call)
      : table_(table), before_call_(std::move(before_call)) {}
  HostCalls(const HostCalls&) = delete;
  HostCalls& operator=(const HostCalls&) = delete;

  // The reply payload to `request`; `fatal` says the process must exit after sending it.
  std::string Handle(absl::string_view request, bool& fatal);

 private:
  std::string Infer(const InferRequest& request, bool& fatal);
  std::string Compute(const ComputeRequest& request, bool& fatal);
  std::string Gradient(const GradientRequest& request, bool& fatal);
  // The op a request names, or null.
  const IpupodCustomOp* Op(uint32_t index) const;

  const IpupodCustomOpLibrary* const table_;
  const std::function<void()> before_call_;
};

}  // namespace ipupod::customop

#endif  // IPUPOD_CUSTOMOP_HOST_CALLS_H_
