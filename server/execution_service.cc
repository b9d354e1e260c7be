// ExecutionService handlers. Each is authenticate -> body -> log -> convert
// (server/sync_handlers.h Handle); session operations go through SessionOp, which takes the
// session's slot and the scheduler's operation and gives both back on every
// path.
#include "server/execution_service.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "common/wire/inline_tensors.h"
#include "common/wire/tensor_stream.h"
#include "device/compiler/checks.h"
#include "device/compiler/report.h"
#include "server/proto_convert_execution.h"
#include "server/stream_idle_watch.h"
#include "server/sync_handlers.h"

namespace ipupod::server {
namespace {

using scheduler::Caller;
using wire::StreamTensors;
using wire::TensorAssembler;

constexpr size_t kExecutableChunkBytes = wire::kTensorChunkBytesMax;  // 1 MiB

using Operation = execution::SessionExecution::Operation;

// Begins one operation on the session a request names.
absl::StatusOr<std::unique_ptr<Operation>> BeginOperation(execution::SessionExecution& execution,
                                                          const Caller& caller,
                                                          absl::string_view session) {
  if (session.empty()) {
    return absl::InvalidArgumentError(
        "name the session (the id `ipupod attach` printed, also in IPUPOD_SESSION)");
  }
  IPUPOD_RETURN_IF_ERROR(
      wire::CheckNameLength("session", session, "name the session `ipupod attach` printed"));
  return execution.Begin(caller, session);
}

// ---------------------------------------------------------------- upload

absl::StatusOr<std::string> ParseSha256(absl::string_view text) {
  std::string hex = absl::AsciiStrToLower(text);
  bool ok = hex.size() == 64;
  for (char c : hex) ok = ok && absl::ascii_isxdigit(static_cast<unsigned char>(c));
  if (ok) return hex;
  return absl::InvalidArgumentError(absl::StrFormat(
      "sha256 \"%s\" is not 64 hex digits; send the content hash from the .ipx header",
      text.substr(0, 80)));
}

// The first chunk's declaration: a hash and a size an executable can have
// (the cache checks the rest when the upload starts).
absl::Status CheckDeclaration(const v1::ExecutableChunk& first) {
  IPUPOD_RETURN_IF_ERROR(ParseSha256(first.sha256()).status());
  if (first.total_bytes() < compiler::kExecutableHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "total_bytes %d is too small for an executable (at least %d); send the .ipx file's size "
        "in the first chunk",
        first.total_bytes(), compiler::kExecutableHeaderBytes));
  }
  return absl::OkStatus();
}

absl::Status AppendChunk(const v1::ExecutableChunk& chunk, const v1::ExecutableChunk& first,
                         runtime::ExecutableCache::Upload& upload) {
  if (chunk.data().size() > kExecutableChunkBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "an executable chunk of %d bytes is over the 1 MiB limit; send chunks of at most %d "
        "bytes",
        chunk.data().size(), kExecutableChunkBytes));
  }
  if ((!chunk.sha256().empty() && chunk.sha256() != first.sha256()) ||
      (chunk.total_bytes() != 0 && chunk.total_bytes() != first.total_bytes())) {
    return absl::InvalidArgumentError(
        "a later chunk declares another sha256 or total_bytes; declare them in the first chunk "
        "only");
  }
  if (chunk.data().size() > first.total_bytes() - upload.bytes().size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the upload sent more than the declared total_bytes (%d); declare the file's real size",
        first.total_bytes()));
  }
  return upload.Append(chunk.data());
}

// Reads every chunk into an upload the cache counts against its bound
// (growing as the bytes arrive); sets *sha256.
template <typename Reader>
absl::StatusOr<std::unique_ptr<runtime::ExecutableCache::Upload>> ReceiveExecutable(
    Reader* reader, runtime::ExecutableCache& cache, std::string* sha256) {
  v1::ExecutableChunk first;
  if (!reader->Read(&first)) {
    return absl::InvalidArgumentError("the upload sent no chunks; send the .ipx file");
  }
  IPUPOD_RETURN_IF_ERROR(CheckDeclaration(first));
  *sha256 = absl::AsciiStrToLower(first.sha256());
  const uint64_t declared = first.total_bytes();
  IPUPOD_ASSIGN_OR_RETURN(
      std::unique_ptr<runtime::ExecutableCache::Upload> upload,
      cache.StartUpload(static_cast<int64_t>(std::min<uint64_t>(declared, INT64_MAX))));
  IPUPOD_RETURN_IF_ERROR(AppendChunk(first, first, *upload));
  v1::ExecutableChunk chunk;
  while (reader->Read(&chunk)) IPUPOD_RETURN_IF_ERROR(AppendChunk(chunk, first, *upload));
  if (upload->bytes().size() != declared) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the upload ended after %d of the declared %d bytes; upload the whole file again",
        upload->bytes().size(), declared));
  }
  return upload;
}

// A call that changed a session's device state and finished after shutdown
// began changed a session that has ended with the server (device memory does
// not outlive it): it answers UNAVAILABLE, so the client does not go on as if
// its change were there.
absl::Status EndedWithTheServer(const ServiceEnv& env, absl::string_view what,
                                absl::string_view session) {
  if (!env.ShuttingDown()) return absl::OkStatus();
  return ShuttingDownError(absl::StrCat(what, " went with session ", session));
}

// ---------------------------------------------------------------- tensors

template <typename Reader, typename Request>
absl::StatusOr<std::string> ReadSession(Reader* reader, Request* first) {
  if (!reader->Read(first)) {
    return absl::InvalidArgumentError("the stream ended before naming the session");
  }
  if (first->part_case() != Request::kSession) {
    return absl::InvalidArgumentError("the first message must name the session");
  }
  return first->session();
}

// Reads headers and chunks until the client closes its side.
template <typename Request, typename Reader>
absl::StatusOr<tensor::NamedTensors> ReadTensors(Reader* reader, TensorAssembler& assembler) {
  Request message;
  while (reader->Read(&message)) {
    switch (message.part_case()) {
      case Request::kHeader:
        IPUPOD_RETURN_IF_ERROR(assembler.AddHeader(message.header()));
        break;
      case Request::kData:
        IPUPOD_RETURN_IF_ERROR(assembler.AddData(message.data().data()));
        break;
      default:
        return absl::InvalidArgumentError(
            "only the first message names the session; then send tensor headers and data");
    }
  }
  return assembler.Finish();
}

// One step's inputs on a Run stream: `first` (already read; null when the
// client closed at once), then headers and chunks up to the step's end_step
// (*more = true: another step may follow) or the client's close (*more = false).
template <typename Reader>
absl::StatusOr<tensor::NamedTensors> ReadStepInputs(Reader* reader, v1::RunRequest* first,
                                                    TensorAssembler& assembler, bool* more) {
  *more = false;
  v1::RunRequest read;
  for (v1::RunRequest* message = first; message != nullptr;
       message = reader->Read(&read) ? &read : nullptr) {
    switch (message->part_case()) {
      case v1::RunRequest::kHeader:
        IPUPOD_RETURN_IF_ERROR(assembler.AddHeader(message->header()));
        break;
      case v1::RunRequest::kData:
        IPUPOD_RETURN_IF_ERROR(assembler.AddData(message->data().data()));
        break;
      case v1::RunRequest::kEndStep:
        *more = true;
        return assembler.Finish();
      default:
        return absl::InvalidArgumentError(
            "only the first message names the session; then send each step's tensor headers "
            "and data (end_step between steps)");
    }
  }
  return assembler.Finish();
}

// Names ReadWeights asks for: each at most once, so no more than the
// program has (checked first: a request naming one weight 100,000 times
// costs a comparison, not 100,000 copies).
absl::Status CheckWeightNames(const google::protobuf::RepeatedPtrField<std::string>& names,
                              size_t weights) {
  if (static_cast<size_t>(names.size()) > weights) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the request asks for %d weights but the program has %d; ask for each at most once, or "
        "for none to get every weight",
        names.size(), weights));
  }
  absl::flat_hash_set<absl::string_view> seen;
  for (const std::string& name : names) {
    IPUPOD_RETURN_IF_ERROR(
        wire::CheckNameLength("weight", name, "ask for the program's own weight names"));
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("weight %s is asked for twice; ask for each once", name));
    }
  }
  return absl::OkStatus();
}

int64_t HostBytes(const std::vector<compiler::TensorSpec>& specs) {
  int64_t bytes = 0;
  for (const auto& spec : specs) {
    absl::StatusOr<int64_t> n = tensor::CheckedNumElements(spec.dtype, spec.shape);
    if (n.ok()) bytes += *n * static_cast<int64_t>(tensor::DTypeSize(spec.dtype));
  }
  return bytes;
}

void CountWeightsRead(execution::SessionExecution& execution, int64_t bytes) {
  execution::ExecutionCounters::Add(execution.counters().weight_bytes_read, bytes);
}

template <typename Response, typename Writer, typename Tensors>
absl::Status WriteTensors(const Tensors& tensors, Writer* writer) {
  return StreamTensors(
      tensors,
      [writer](const v1::TensorHeader& header) {
        Response response;
        *response.mutable_header() = header;
        return writer->Write(response);
      },
      [writer](absl::string_view chunk) {
        Response response;
        response.mutable_data()->set_data(chunk.data(), chunk.size());
        return writer->Write(response);
      });
}

}  // namespace

// ---------------------------------------------------------------- handlers

grpc::Status ExecutionServiceImpl::StatExecutable(grpc::ServerContext* context,
                                                  const v1::StatExecutableRequest* request,
                                                  v1::ExecutableRef* response) {
  return Handle(context, env_, calls_, "StatExecutable", [&](const Caller& caller) -> absl::Status {
    IPUPOD_ASSIGN_OR_RETURN(const std::string sha256, ParseSha256(request->sha256()));
    IPUPOD_ASSIGN_OR_RETURN(runtime::CachedExecutable cached,
                            execution_->cache().Get(sha256, caller.user));
    ToProto(*cached.executable, cached.size_bytes, true, response);
    return absl::OkStatus();
  });
}

grpc::Status ExecutionServiceImpl::UploadExecutable(grpc::ServerContext* context,
                                                    grpc::ServerReader<v1::ExecutableChunk>* reader,
                                                    v1::ExecutableRef* response) {
  return HandleStream(
      context, env_, calls_, "UploadExecutable", reader,
      [&](const Caller& caller, auto& watched) -> absl::Status {
        std::string sha256;
        IPUPOD_ASSIGN_OR_RETURN(std::unique_ptr<runtime::ExecutableCache::Upload> upload,
                                ReceiveExecutable(&watched, execution_->cache(), &sha256));
        IPUPOD_RETURN_IF_ERROR(compiler::CheckDeclaredHash(upload->bytes(), sha256));
        IPUPOD_ASSIGN_OR_RETURN(
            runtime::CachedExecutable cached,
            execution_->cache().Put(upload->bytes(), caller.user, upload.get()));
        ToProto(*cached.executable, cached.size_bytes, cached.cache_hit, response);
        return absl::OkStatus();
      });
}

grpc::Status ExecutionServiceImpl::Load(grpc::ServerContext* context,
                                        const v1::LoadRequest* request,
                                        v1::LoadedProgram* response) {
  return Handle(context, env_, calls_, "Load", [&](const Caller& caller) -> absl::Status {
    IPUPOD_ASSIGN_OR_RETURN(std::unique_ptr<Operation> op,
                            BeginOperation(*execution_, caller, request->session()));
    IPUPOD_ASSIGN_OR_RETURN(const std::string sha256, ParseSha256(request->sha256()));
    IPUPOD_ASSIGN_OR_RETURN(
        const execution::LoadedState state,
        execution_->Load(*op, caller, sha256, [context] { return context->IsCancelled(); }));
    IPUPOD_RETURN_IF_ERROR(EndedWithTheServer(env_, "the loaded program", request->session()));
    ToProto(op->session(), state, env_.scheduler->GetPod(), response);
    return absl::OkStatus();
  });
}

grpc::Status ExecutionServiceImpl::GetLoaded(grpc::ServerContext* context,
                                             const v1::GetLoadedRequest* request,
                                             v1::LoadedProgram* response) {
  return Handle(context, env_, calls_, "GetLoaded", [&](const Caller& caller) -> absl::Status {
    IPUPOD_ASSIGN_OR_RETURN(std::unique_ptr<Operation> op,
                            BeginOperation(*execution_, caller, request->session()));
    IPUPOD_ASSIGN_OR_RETURN(const execution::LoadedState state, op->Loaded());
    ToProto(op->session(), state, env_.scheduler->GetPod(), response);
    return absl::OkStatus();
  });
}

grpc::Status ExecutionServiceImpl::WriteWeights(grpc::ServerContext* context,
                                                grpc::ServerReader<v1::WriteWeightsRequest>* reader,
                                                v1::WriteWeightsResponse* response) {
  return HandleStream(
      context, env_, calls_, "WriteWeights", reader,
      [&](const Caller& caller, auto& watched) -> absl::Status {
        v1::WriteWeightsRequest first;
        IPUPOD_ASSIGN_OR_RETURN(const std::string session, ReadSession(&watched, &first));
        IPUPOD_ASSIGN_OR_RETURN(std::unique_ptr<Operation> op,
                                BeginOperation(*execution_, caller, session));
        IPUPOD_ASSIGN_OR_RETURN(const execution::LoadedState state, op->Loaded());
        TensorAssembler assembler("weights", state.program->max_set_weights_bytes());
        IPUPOD_ASSIGN_OR_RETURN(tensor::NamedTensors weights,
                                ReadTensors<v1::WriteWeightsRequest>(&watched, assembler));
        const int64_t bytes = execution::TensorBytes(weights);
        std::vector<std::string> names;
        for (const auto& [name, tensor] : weights) names.push_back(name);
        IPUPOD_RETURN_IF_ERROR(state.program->SetWeights(std::move(weights)));
        execution::ExecutionCounters::Add(execution_->counters().weight_bytes_written, bytes);
        IPUPOD_RETURN_IF_ERROR(EndedWithTheServer(env_, "the weights written", session));
        for (std::string& name : names) response->add_written(std::move(name));
        response->set_simulated_seconds(state.program->SimulatedHostToDeviceSeconds(bytes));
        return absl::OkStatus();
      });
}

grpc::Status ExecutionServiceImpl::ReadWeights(
    grpc::ServerContext* context, const v1::ReadWeightsRequest* request,
    grpc::ServerWriter<v1::ReadWeightsResponse>* writer) {
  return HandleStream(
      context, env_, calls_, "ReadWeights", writer,
      [&](const Caller& caller, auto& watched) -> absl::Status {
        IPUPOD_ASSIGN_OR_RETURN(std::unique_ptr<Operation> op,
                                BeginOperation(*execution_, caller, request->session()));
        IPUPOD_ASSIGN_OR_RETURN(const execution::LoadedState state, op->Loaded());
        IPUPOD_RETURN_IF_ERROR(
            CheckWeightNames(request->names(), state.program->weight_specs().size()));
        const std::vector<std::string> names(request->names().begin(), request->names().end());
        if (request->checkpoint()) {
          if (!names.empty()) {
            return absl::InvalidArgumentError(
                "a checkpoint is every weight and the optimizer state; ask for no names with it");
          }
          IPUPOD_ASSIGN_OR_RETURN(const tensor::NamedTensors checkpoint,
                                  state.program->GetCheckpoint());
          CountWeightsRead(*execution_, execution::TensorBytes(checkpoint));
          return WriteTensors<v1::ReadWeightsResponse>(checkpoint, &watched);
        }
        // Streamed from the program itself: the operation holds the session,
        // so no SetWeights can overlap, and a gigabyte is never copied first.
        IPUPOD_ASSIGN_OR_RETURN(const std::vector<tensor::TensorRef> weights,
                                state.program->ViewWeights(names));
        CountWeightsRead(*execution_, execution::TensorBytes(weights));
        return WriteTensors<v1::ReadWeightsResponse>(weights, &watched);
      });
}

grpc::Status ExecutionServiceImpl::Run(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::RunResponse, v1::RunRequest>* stream) {
  return HandleStream(
      context, env_, calls_, "Run", stream,
      [&](const Caller& caller, auto& watched) -> absl::Status {
        v1::RunRequest message;
        IPUPOD_ASSIGN_OR_RETURN(const std::string session, ReadSession(&watched, &message));
        // Steps follow one another on the stream (execution.proto): each is
        // read, run as its own operation and answered before the next is read.
        bool have_message = watched.Read(&message);
        while (true) {
          IPUPOD_ASSIGN_OR_RETURN(
              const bool more,
              RunStreamStep(caller, session, watched, have_message ? &message : nullptr,
                            [context] { return context->IsCancelled(); }));
          if (!more || !watched.Read(&message)) return absl::OkStatus();
          have_message = true;
        }
      });
}

template <typename Stream>
absl::StatusOr<bool> ExecutionServiceImpl::RunStreamStep(const Caller& caller,
                                                         const std::string& session,
                                                         Stream& watched, v1::RunRequest* first,
                                                         const execution::Cancelled& cancelled) {
  runtime::StepResult step;
  bool more = false;
  uint64_t run_index = 0;
  {
    IPUPOD_ASSIGN_OR_RETURN(std::unique_ptr<Operation> op,
                            BeginOperation(*execution_, caller, session));
    IPUPOD_ASSIGN_OR_RETURN(const execution::LoadedState state, op->Loaded());
    TensorAssembler assembler("inputs", HostBytes(state.program->host_inputs()));
    IPUPOD_ASSIGN_OR_RETURN(tensor::NamedTensors inputs,
                            ReadStepInputs(&watched, first, assembler, &more));
    IPUPOD_ASSIGN_OR_RETURN(step, execution_->RunStep(*state.program, inputs, cancelled));
    if (env_.ShuttingDown()) {
      return ShuttingDownError(absl::StrCat("the step's outputs went with session ", session));
    }
    run_index = op->slot().CountRun();
  }  // the session's operation ends before the outputs stream back
  // The model's poptorch.ipu_print_tensor lines, in the server's log too.
  for (const std::string& line : step.log) {
    spdlog::info("print user={} session={} run={}: {}", caller.user, session, run_index, line);
  }
  IPUPOD_RETURN_IF_ERROR(WriteTensors<v1::RunResponse>(step.outputs, &watched));
  v1::RunResponse last;
  ToProto(step, run_index, last.mutable_stats());
  if (!watched.Write(last)) return absl::CancelledError("the client stopped reading");
  return more;
}

grpc::Status ExecutionServiceImpl::SetOptimizer(grpc::ServerContext* context,
                                                const v1::SetOptimizerRequest* request,
                                                v1::OptimizerInfo* response) {
  return Handle(context, env_, calls_, "SetOptimizer", [&](const Caller& caller) -> absl::Status {
    IPUPOD_ASSIGN_OR_RETURN(std::unique_ptr<Operation> op,
                            BeginOperation(*execution_, caller, request->session()));
    IPUPOD_ASSIGN_OR_RETURN(const execution::LoadedState state, op->Loaded());
    const std::map<std::string, double> values(request->variables().begin(),
                                               request->variables().end());
    IPUPOD_ASSIGN_OR_RETURN(const runtime::OptimizerState optimizer,
                            state.program->SetOptimizer(values));
    IPUPOD_RETURN_IF_ERROR(EndedWithTheServer(env_, "the optimizer set", request->session()));
    ToProto(optimizer, response);
    return absl::OkStatus();
  });
}

// ---------------------------------------------------------------- RunInline

namespace {

// RunInline's bound, checked before anything runs or changes.
absl::Status CheckInlineBytes(absl::string_view what, uint64_t bytes) {
  if (bytes <= wire::kInlineStepBytesMax) return absl::OkStatus();
  return absl::OutOfRangeError(absl::StrFormat(
      "RunInline carries at most %d bytes of %s and this step's are %d bytes; send it through "
      "Run (the stream), which takes any step",
      wire::kInlineStepBytesMax, what, bytes));
}

}  // namespace

grpc::Status ExecutionServiceImpl::RunInline(grpc::ServerContext* context,
                                             const v1::RunInlineRequest* request,
                                             v1::RunInlineResponse* response) {
  return Handle(context, env_, calls_, "RunInline", [&](const Caller& caller) -> absl::Status {
    IPUPOD_RETURN_IF_ERROR(CheckInlineBytes("inputs", wire::InlineDataBytes(request->inputs())));
    // From here on exactly Run's operation: the session's slot, the
    // scheduler's bracket (ownership, fault draw, health), what is loaded.
    IPUPOD_ASSIGN_OR_RETURN(std::unique_ptr<Operation> op,
                            BeginOperation(*execution_, caller, request->session()));
    IPUPOD_ASSIGN_OR_RETURN(const execution::LoadedState state, op->Loaded());
    IPUPOD_RETURN_IF_ERROR(CheckInlineBytes(
        "outputs", static_cast<uint64_t>(HostBytes(state.program->host_outputs()))));
    TensorAssembler assembler("inputs", HostBytes(state.program->host_inputs()));
    IPUPOD_ASSIGN_OR_RETURN(const tensor::NamedTensors inputs,
                            wire::AssembleInline(request->inputs(), assembler));
    IPUPOD_ASSIGN_OR_RETURN(
        const runtime::StepResult step,
        execution_->RunStep(*state.program, inputs, [context] { return context->IsCancelled(); }));
    if (env_.ShuttingDown()) {
      return ShuttingDownError(
          absl::StrCat("the step's outputs went with session ", request->session()));
    }
    const uint64_t run_index = op->slot().CountRun();
    for (const std::string& line : step.log) {
      spdlog::info("print user={} session={} run={}: {}", caller.user, request->session(),
                   run_index, line);
    }
    wire::AddInline(step.outputs, response->mutable_outputs());
    ToProto(step, run_index, response->mutable_stats());
    return absl::OkStatus();
  });
}

}  // namespace ipupod::server
