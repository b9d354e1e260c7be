// File: server/compile_service.h
//
// CompileServiceImpl: ipupod.v1.CompileService (proto/ipupod/v1/compile.proto)
// on gRPC's synchronous thread pool. Compile takes the model from the blob
// store (server/jobs/blob_store.h, holding it while the compile runs), hands it to
// the RemoteCompiler (server/execution/remote_compile.h) and streams back the
// result and, if asked, the .ipx in chunks of at most 1 MiB. A compile that
// runs out of IPU memory first sends the plan that did not fit
// (CompileResponse.failure_report_json), then its INVALID_ARGUMENT.
//
// Bounds: compiles at once server-wide and one per user (server/call_limit.h,
// config compile_max_concurrent); the model's size, host memory and time
// (server/execution/remote_compile.h); a client that stops reading the .ipx is
// ended by the idle watch (server/stream_idle_watch.h); a client that goes
// away stops its compile.
//
// Thread safety: handlers run concurrently. The ServiceEnv, the blob store
// and the compiler outlive the service.
#ifndef IPUPOD_SERVER_COMPILE_SERVICE_H_
#define IPUPOD_SERVER_COMPILE_SERVICE_H_

#include <atomic>
#include <cstdint>

#include <grpcpp/server_context.h>
#include <grpcpp/support/sync_stream.h>

#include "ipupod/v1/compile.grpc.pb.h"
#include "server/call_limit.h"
#include "server/execution/remote_compile.h"
#include "server/jobs/blob_store.h"
#include "server/service_env.h"

namespace ipupod::server {

class CompileServiceImpl final : public v1::CompileService::Service {
 public:
  CompileServiceImpl(const ServiceEnv& env, jobs::BlobStore* blobs,
                     const execution::RemoteCompiler* compiler, int max_compiles);

  grpc::Status Compile(grpc::ServerContext* context, const v1::CompileRequest* request,
                       grpc::ServerWriter<v1::CompileResponse>* writer) override;

 private:
  const ServiceEnv& env_;
  jobs::BlobStore* const blobs_;
  const execution::RemoteCompiler* const compiler_;
  CallLimit calls_;                       // config compile_max_concurrent, one per user
  std::atomic<uint64_t> next_holder_{1};  // names each compile's hold on its model blob
};

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_COMPILE_SERVICE_H_
