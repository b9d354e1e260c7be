#include "server/compile_service.h"

#include <string>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/wire/tensor_stream.h"
#include "server/sync_handlers.h"

namespace ipupod::server {
namespace {

using scheduler::Caller;

CallLimitWording CompileWording() {
  return {.calls = "compiles",
          .examples = "",
          .bound = "ipupodd config compile_max_concurrent",
          .per_user_bound = "one per user; ipupodd config compile_max_concurrent",
          .per_user_hint = "a compile stops after compile_time_limit_seconds"};
}

execution::RemoteCompileRequest FromProto(const v1::CompileRequest& r, const Caller& caller) {
  execution::RemoteCompileRequest out;
  out.user = caller.user;
  out.model_name = absl::StrCat("model ", r.model_sha256().substr(0, 16));
  compiler::CompileInputs& in = out.inputs;
  in.ipu_config_json = r.ipu_config_json();
  in.sets.assign(r.set().begin(), r.set().end());
  in.module_map_json = r.module_map_json();
  in.train = r.train();
  in.training.loss = r.loss();
  in.training.optimizer = r.optimizer();
  in.training.optimizer_attrs.insert(r.optimizer_attrs().begin(), r.optimizer_attrs().end());
  in.training.frozen.assign(r.frozen().begin(), r.frozen().end());
  in.training.buffers.insert(r.buffers().begin(), r.buffers().end());
  for (const v1::ParamGroup& g : r.param_groups()) {
    compiler::ParamGroup& group = in.training.param_groups.emplace_back();
    group.weights.assign(g.weights().begin(), g.weights().end());
    group.variables.insert(g.attrs().begin(), g.attrs().end());
  }
  out.want_report = r.report();
  out.want_ipx = r.return_executable();
  return out;
}

void ToProto(const execution::RemoteCompileResult& result, v1::CompileResult* out) {
  const compiler::Executable& e = *result.cached.executable;
  v1::ExecutableRef* ref = out->mutable_executable();
  ref->set_sha256(e.content_hash);
  ref->set_size_bytes(static_cast<uint64_t>(result.cached.size_bytes));
  ref->set_cache_hit(result.cached.cache_hit);
  ref->set_mode(std::string(compiler::ExecutableModeName(e.mode)));
  ref->set_ipus_needed(static_cast<uint32_t>(e.ipus.needed));
  ref->set_ipus_reserved(static_cast<uint32_t>(e.ipus.reserved));
  out->set_summary_json(result.summary_json);
  out->set_report_json(result.report_json);
  for (const std::string& w : result.warnings) out->add_warnings(w);
  out->set_compile_seconds(absl::ToDoubleSeconds(result.wall));
}

// The model's bytes, held in the blob store (so not swept) until the
// returned cleanup runs.
absl::StatusOr<std::string> ReadModel(jobs::BlobStore& blobs, const execution::RemoteCompiler& c,
                                      absl::string_view holder, const Caller& caller,
                                      absl::string_view sha256) {
  IPUPOD_RETURN_IF_ERROR(jobs::CheckSha256Hex(sha256, "model_sha256"));
  const std::optional<uint64_t> size = blobs.Stat(caller.user, sha256);
  if (!size.has_value()) {
    return absl::NotFoundError(absl::StrCat(
        "the model ", sha256,
        " is not on the server; upload it first (JobService.PutBlob - the clients do this for "
        "you), then compile"));
  }
  IPUPOD_RETURN_IF_ERROR(c.CheckModelSize(*size));
  IPUPOD_RETURN_IF_ERROR(blobs.Reference(holder, caller.user, {std::string(sha256)}));
  return jobs::ReadBlobFile(blobs.PathOf(sha256));
}

template <typename Writer>
absl::Status SendResult(const execution::RemoteCompileResult& result, Writer& writer) {
  v1::CompileResponse response;
  ToProto(result, response.mutable_result());
  if (!writer.Write(response)) return absl::CancelledError("the client stopped reading");
  const bool sent = wire::ForEachChunk(result.ipx, [&](absl::string_view chunk) {
    v1::CompileResponse data;
    data.set_executable_data(chunk.data(), chunk.size());
    return writer.Write(data);
  });
  return sent ? absl::OkStatus() : absl::CancelledError("the client stopped reading");
}

template <typename Writer>
void SendFailureReport(const absl::Status& status, const compiler::Report& report, Writer& writer) {
  if (report.ipus.empty() || !absl::StrContains(status.message(), "out of memory")) return;
  v1::CompileResponse response;
  response.set_failure_report_json(report.Json());
  writer.Write(response);  // the status that follows says what went wrong either way
}

}  // namespace

CompileServiceImpl::CompileServiceImpl(const ServiceEnv& env, jobs::BlobStore* blobs,
                                       const execution::RemoteCompiler* compiler, int max_compiles)
    : env_(env), blobs_(blobs), compiler_(compiler), calls_(max_compiles, 1, CompileWording()) {}

grpc::Status CompileServiceImpl::Compile(grpc::ServerContext* context,
                                         const v1::CompileRequest* request,
                                         grpc::ServerWriter<v1::CompileResponse>* writer) {
  return HandleStream(
      context, env_, calls_, "Compile", writer,
      [&](const Caller& caller, auto& watched) -> absl::Status {
        const std::string holder = absl::StrCat("compile-", next_holder_.fetch_add(1));
        absl::Cleanup release = [&] { blobs_->Release(holder); };
        IPUPOD_ASSIGN_OR_RETURN(
            const std::string model,
            ReadModel(*blobs_, *compiler_, holder, caller, request->model_sha256()));
        compiler::Report failure;
        absl::StatusOr<execution::RemoteCompileResult> result = compiler_->Compile(
            FromProto(*request, caller), model, [context] { return context->IsCancelled(); },
            &failure);
        if (!result.ok()) {
          SendFailureReport(result.status(), failure, watched);
          return result.status();
        }
        return SendResult(*result, watched);
      });
}

}  // namespace ipupod::server
