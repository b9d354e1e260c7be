#include "server/execution/remote_compile.h"

#include <algorithm>
#include <memory>
#include <utility>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/format.h"
#include "common/status_macros.h"
#include "device/compiler/compile.h"
#include "device/compiler/executable.h"
#include "device/graph/shape_inference.h"
#include "device/kernels/interrupt.h"

namespace ipupod::execution {
namespace {

int64_t CompileMemoryBytes(int64_t model_bytes) {
  return kCompileMemoryFactor * model_bytes + std::max(graph::kFoldFloorBytes, model_bytes);
}

// The request's config and options, with a cache directory the client named
// dropped (the server keeps its own).
absl::StatusOr<compiler::PreparedCompile> Prepare(const RemoteCompileRequest& request) {
  IPUPOD_ASSIGN_OR_RETURN(compiler::PreparedCompile prepared,
                          compiler::PrepareCompile(request.inputs));
  std::string& dir = prepared.config.executable_cache_dir;
  if (!dir.empty() && dir != "disabled") {
    prepared.warnings.push_back(absl::StrCat(
        "executable_cache_dir '", dir,
        "' is not used by a compile on the server: the executable stays in the server's cache "
        "(Load it by its hash) and comes back to you if you ask for it"));
  }
  dir.clear();
  return prepared;
}

}  // namespace

absl::Status RemoteCompiler::CheckModelSize(uint64_t bytes) const {
  if (bytes <= static_cast<uint64_t>(limits_.max_model_bytes)) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "the model is ", FormatBytesTrimmed(bytes), " and this server compiles models of at most ",
      FormatBytesTrimmed(limits_.max_model_bytes),
      " (ipupodd config compile_max_model_mb); compile it on your machine (ipupod compile) and "
      "upload the executable, or ask the admin to raise the bound"));
}

absl::Status RemoteCompiler::Poll(const RemoteCompileRequest& request, absl::Time deadline,
                                  const Cancelled& cancelled) const {
  if (stopping_.load()) {
    return absl::UnavailableError(absl::StrCat("ipupodd is shutting down; the compile of ",
                                               request.model_name,
                                               " was stopped, compile again when it is back"));
  }
  if (absl::Now() > deadline) {
    return absl::DeadlineExceededError(absl::StrFormat(
        "the compile of %s ran past this server's limit of %s (ipupodd config "
        "compile_time_limit_seconds) while folding constants; a model that computes large "
        "constants compiles faster on your machine (ipupod compile)",
        request.model_name, absl::FormatDuration(limits_.time_limit)));
  }
  if (cancelled != nullptr && cancelled()) {
    return absl::CancelledError(
        absl::StrCat("the client cancelled the compile of ", request.model_name));
  }
  return absl::OkStatus();
}

absl::StatusOr<RemoteCompileResult> RemoteCompiler::Compile(
    const RemoteCompileRequest& request, absl::string_view onnx, const Cancelled& cancelled,
    compiler::Report* failure_report) const {
  const absl::Time start = absl::Now();
  IPUPOD_RETURN_IF_ERROR(CheckModelSize(onnx.size()));
  IPUPOD_ASSIGN_OR_RETURN(compiler::PreparedCompile prepared, Prepare(request));
  IPUPOD_ASSIGN_OR_RETURN(
      std::shared_ptr<const MemoryBudget::Charge> charge,
      memory_->Reserve(CompileMemoryBytes(static_cast<int64_t>(onnx.size())),
                       absl::StrCat("compiling ", request.model_name, " for ", request.user)));
  const absl::Time deadline = start + limits_.time_limit;
  prepared.options.custom_ops = custom_ops_;
  spdlog::info("compiling {} for user={}", request.model_name, request.user);
  // Checked between nodes and inside every kernel that folds a constant
  // (device/kernels/interrupt.h), so the limit, a cancel and shutdown stop even a
  // compile that spends minutes in one node within a fraction of a second.
  kernels::ScopedInterrupt interrupt([&] { return Poll(request, deadline, cancelled); });
  prepared.options.cancelled = [] { return !kernels::CheckInterrupt().ok(); };
  compiler::Report report;
  absl::StatusOr<compiler::Executable> compiled =
      compiler::Compile(onnx, prepared.config, prepared.options, &report);
  IPUPOD_RETURN_IF_ERROR(interrupt.status());
  if (!compiled.ok()) {
    if (failure_report != nullptr) *failure_report = std::move(report);
    return compiled.status();
  }
  RemoteCompileResult out;
  IPUPOD_ASSIGN_OR_RETURN(std::string ipx, compiler::WriteExecutable(*compiled));
  IPUPOD_ASSIGN_OR_RETURN(out.cached, cache_->Put(ipx, request.user));
  out.summary_json = compiler::ExecutableSummaryJson(*compiled);
  if (request.want_report) out.report_json = report.Json();
  if (request.want_ipx) out.ipx = std::move(ipx);
  out.warnings = std::move(prepared.warnings);
  out.warnings.insert(out.warnings.end(), compiled->warnings.begin(), compiled->warnings.end());
  out.wall = absl::Now() - start;
  spdlog::info("compiled {} for user={}: executable {} ({}), {:.3f} s", request.model_name,
               request.user, compiled->content_hash.substr(0, 16),
               std::string(compiler::ExecutableModeName(compiled->mode)),
               absl::ToDoubleSeconds(out.wall));
  return out;
}

}  // namespace ipupod::execution
