// File: server/execution_service.h
//
// ExecutionServiceImpl: ipupod.v1.ExecutionService (execution.proto) on
// gRPC's synchronous API. Its calls move megabytes and run models on the
// host's CPUs, so each holds one thread of the server's sync pool. At most
// `max_calls` run at once (ipupodd --max-execution-threads, CallLimit in
// server/call_limit.h), at most `max_calls_per_user` of them from one user
// (--max-execution-threads-per-user); one more is answered
// RESOURCE_EXHAUSTED naming the bound (retry), and logged. A stream whose
// client stalls for longer than ServiceEnv::stream_idle - sends nothing
// (upload, weights written, run inputs) or reads nothing (weights read, run
// outputs) while the server waits on it - is ended DEADLINE_EXCEEDED
// (server/stream_idle_watch.h). The callback services (pod, partitions,
// sessions) do not use that pool.
//
// Every call authenticates like the other services (server/auth.h), logs
// one line (server/request_log.h) and converts its absl::Status at the end
// (server/status_convert.h, with device-error trailers).
//
// Session operations (Load, GetLoaded, WriteWeights, ReadWeights, Run,
// SetOptimizer) go through execution::SessionExecution
// (server/execution/session_execution.h): the session's slot, the scheduler's
// operation (ownership, fault draw, health), what is loaded, the work; the
// server's batch jobs run through the same object.

// Executables are scoped to the users who uploaded them
// (device/runtime/executable_cache.h): StatExecutable and Load of another user's
// hash are NOT_FOUND.
//
// Bounds: executable chunks and tensor chunks at most 1 MiB
// (INVALID_ARGUMENT); an upload's declared size at most what an executable
// can be, the cache's size, and what uploads in progress leave of it, its
// bytes counted against the cache as they arrive (RESOURCE_EXHAUSTED);
// weights written at most
// runtime::Program::max_set_weights_bytes (the weights, or a training
// checkpoint, plus slack), inputs at most the step's input bytes
// (INVALID_ARGUMENT). A failed call changes nothing.
//
// Thread safety: handlers run concurrently on gRPC's sync threads. The
// ServiceEnv and the SessionExecution must outlive the service.
#ifndef IPUPOD_SERVER_EXECUTION_SERVICE_H_
#define IPUPOD_SERVER_EXECUTION_SERVICE_H_

#include <grpcpp/server_context.h>
#include <grpcpp/support/sync_stream.h>

#include "ipupod/v1/execution.grpc.pb.h"
#include "server/call_limit.h"
#include "server/execution/session_execution.h"
#include "server/service_env.h"

namespace ipupod::server {

class ExecutionServiceImpl final : public v1::ExecutionService::Service {
 public:
  ExecutionServiceImpl(const ServiceEnv& env, execution::SessionExecution* execution, int max_calls,
                       int max_calls_per_user)
      : env_(env), execution_(execution), calls_(max_calls, max_calls_per_user) {}

  grpc::Status StatExecutable(grpc::ServerContext* context,
                              const v1::StatExecutableRequest* request,
                              v1::ExecutableRef* response) override;
  grpc::Status UploadExecutable(grpc::ServerContext* context,
                                grpc::ServerReader<v1::ExecutableChunk>* reader,
                                v1::ExecutableRef* response) override;
  grpc::Status Load(grpc::ServerContext* context, const v1::LoadRequest* request,
                    v1::LoadedProgram* response) override;
  grpc::Status GetLoaded(grpc::ServerContext* context, const v1::GetLoadedRequest* request,
                         v1::LoadedProgram* response) override;
  grpc::Status WriteWeights(grpc::ServerContext* context,
                            grpc::ServerReader<v1::WriteWeightsRequest>* reader,
                            v1::WriteWeightsResponse* response) override;
  grpc::Status ReadWeights(grpc::ServerContext* context, const v1::ReadWeightsRequest* request,
                           grpc::ServerWriter<v1::ReadWeightsResponse>* writer) override;
  grpc::Status Run(grpc::ServerContext* context,
                   grpc::ServerReaderWriter<v1::RunResponse, v1::RunRequest>* stream) override;
  grpc::Status SetOptimizer(grpc::ServerContext* context, const v1::SetOptimizerRequest* request,
                            v1::OptimizerInfo* response) override;
  // One small step in one round trip (common/wire/inline_tensors.h): Run's
  // operation, checks, step and stats; inputs or the program's outputs over
  // wire::kInlineStepBytesMax are OUT_OF_RANGE before anything runs.
  grpc::Status RunInline(grpc::ServerContext* context, const v1::RunInlineRequest* request,
                         v1::RunInlineResponse* response) override;

 private:
  // One step of a Run stream (execution.proto): its inputs from `first` on,
  // run as one operation on the session, its outputs and stats written.
  // True when the client ended the inputs with end_step (more may follow).
  template <typename Stream>
  absl::StatusOr<bool> RunStreamStep(const scheduler::Caller& caller, const std::string& session,
                                     Stream& watched, v1::RunRequest* first,
                                     const execution::Cancelled& cancelled);

  const ServiceEnv& env_;
  execution::SessionExecution* const execution_;
  CallLimit calls_;  // --max-execution-threads, --max-execution-threads-per-user
};

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_EXECUTION_SERVICE_H_
