// File: server/execution/remote_compile.h
//
// RemoteCompiler: the server's side of CompileService
// (proto/ipupod/v1/compile.proto). It runs the compiler `ipupod compile`
// runs (device/compiler/compile.h, with the request read by
// device/compiler/compile_request.h) on model bytes a user sent, and leaves the
// executable in the server's cache for that user (device/runtime/executable_cache.h),
// so ExecutionService.Load takes it by its hash.
//
// Bounds, each refused with what was asked, the bound and what to do:
//   - the model's size (RemoteCompileLimits::max_model_bytes,
//     RESOURCE_EXHAUSTED, checked before the model is read);
//   - host memory: a compile reserves kCompileMemoryFactor times the model
//     plus the fold budget in the same budget loaded programs use
//     (server/execution/memory_budget.h), for as long as it runs
//     (RESOURCE_EXHAUSTED);
//   - time: constant folding, the part that grows with what a model asks
//     for rather than what it holds, polls a deadline of
//     RemoteCompileLimits::time_limit (DEADLINE_EXCEEDED), the caller's
//     cancellation (CANCELLED) and Stop() (UNAVAILABLE) between nodes and
//     inside their kernels (device/kernels/interrupt.h), so each takes effect
//     within a fraction of a second even in one long node;
//   - per-node cost: every value's rank and dims are bounded
//     (tensor::kRankMax, kElementsMax; INVALID_ARGUMENT naming the node);
//   - how many compiles run at once is the caller's to bound (the service's
//     call limit, server/call_limit.h).
// An executable_cache_dir in the request's config is ignored with a warning:
// the server keeps executables in its own cache, never in a path a client
// names.
//
// Custom ops (PopTorch 4.9) compile through the server's resolver: their libraries' shape
// functions run in helper processes of their own for the compile's duration
// (device/customop/library_registry.h); PERMISSION_DENIED for a library outside the directories
// the server allows.
//
// Thread safety: Compile may be called concurrently; the cache, the
// budget and the resolver must outlive the RemoteCompiler.
// Errors: as compiler::Compile (INVALID_ARGUMENT: the model does not compile
// with this config, and what to change), plus the bounds above.
#ifndef IPUPOD_EXECUTION_REMOTE_COMPILE_H_
#define IPUPOD_EXECUTION_REMOTE_COMPILE_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "device/compiler/compile_request.h"
#include "device/compiler/report.h"
#include "device/graph/custom_ops.h"
#include "device/runtime/executable_cache.h"
#include "server/execution/memory_budget.h"
#include "server/execution/session_execution.h"

namespace ipupod::execution {

// What a compile holds besides its fold budget, in multiples of the model:
// the model, its parsed graph, the executable and its serialised bytes.
inline constexpr int64_t kCompileMemoryFactor = 4;

struct RemoteCompileLimits {
  int64_t max_model_bytes = int64_t{1} << 30;
  absl::Duration time_limit = absl::Minutes(10);
};

struct RemoteCompileRequest {
  std::string user;
  std::string model_name;  // for messages and logs: "model 3f2a...", a file name
  compiler::CompileInputs inputs;
  bool want_report = false;
  bool want_ipx = false;  // keep the .ipx bytes for the caller
};

struct RemoteCompileResult {
  runtime::CachedExecutable cached;  // in the cache for the user
  std::string ipx;                   // the .ipx file, with want_ipx
  std::string summary_json;          // compiler::ExecutableSummaryJson
  std::string report_json;           // with want_report
  std::vector<std::string> warnings;
  absl::Duration wall;
};

class RemoteCompiler {
 public:
  // `custom_ops` (may be null: custom ops are refused) runs the models' custom ops'
  // shape functions (device/graph/custom_ops.h).
  RemoteCompiler(RemoteCompileLimits limits, runtime::ExecutableCache* cache, MemoryBudget* memory,
                 const graph::CustomOpResolver* custom_ops = nullptr)
      : limits_(limits), cache_(cache), memory_(memory), custom_ops_(custom_ops) {}
  RemoteCompiler(const RemoteCompiler&) = delete;
  RemoteCompiler& operator=(const RemoteCompiler&) = delete;

  // RESOURCE_EXHAUSTED for a model larger than max_model_bytes.
  absl::Status CheckModelSize(uint64_t bytes) const;

  // Compiles `onnx` as `request` says. When the compile fails after
  // planning (out of IPU memory), `failure_report` (optional) holds the plan.
  absl::StatusOr<RemoteCompileResult> Compile(const RemoteCompileRequest& request,
                                              absl::string_view onnx, const Cancelled& cancelled,
                                              compiler::Report* failure_report = nullptr) const;

  const RemoteCompileLimits& limits() const { return limits_; }

  // Every compile in flight, and every later one, ends UNAVAILABLE "ipupodd
  // is shutting down" within a fraction of a second. Irreversible.
  void Stop() { stopping_.store(true); }

 private:
  // What an interrupt point of one compile checks (device/kernels/interrupt.h).
  absl::Status Poll(const RemoteCompileRequest& request, absl::Time deadline,
                    const Cancelled& cancelled) const;

  const RemoteCompileLimits limits_;
  runtime::ExecutableCache* const cache_;
  MemoryBudget* const memory_;
  const graph::CustomOpResolver* const custom_ops_;
  std::atomic<bool> stopping_{false};
};

}  // namespace ipupod::execution

#endif  // IPUPOD_EXECUTION_REMOTE_COMPILE_H_
