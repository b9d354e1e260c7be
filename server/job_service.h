// File: server/job_service.h
//
// JobServiceImpl: ipupod.v1.JobService (proto/ipupod/v1/jobs.proto). Every
// call but WatchJob runs on gRPC's synchronous thread pool; WatchJob, which
// may wait for hours, runs on the callback API (server/job_watch.h) and holds
// no thread. Each handler authenticates, converts,
// calls the library that owns the rules - the blob store (server/jobs/blob_store.h)
// or the job manager (server/batch/job_manager.h) - and converts back
// (server/proto_convert_jobs.h).
//
// Bounds: calls are bounded server-wide and per user (server/call_limit.h;
// config jobs_max_calls, jobs_max_calls_per_user); watches have bounds of
// their own (jobs_max_watchers, jobs_max_watchers_per_user) and end after
// jobs_watch_max_seconds, so waits never take the slots of submits, listings
// and `job show`, whoever waits and however many do; a blob upload is
// bounded by the blob store's limits, checked on its first message; a
// stream is watched for idle clients (server/stream_idle_watch.h); a
// FetchResult chunk carries at most 1 MiB.
//
// Thread safety: handlers run concurrently. The ServiceEnv, the blob store
// and the job manager outlive the service.
#ifndef IPUPOD_SERVER_JOB_SERVICE_H_
#define IPUPOD_SERVER_JOB_SERVICE_H_

#include <grpcpp/server_context.h>
#include <grpcpp/support/server_callback.h>
#include <grpcpp/support/sync_stream.h>

#include "ipupod/v1/jobs.grpc.pb.h"
#include "server/batch/job_manager.h"
#include "server/call_limit.h"
#include "server/job_watch.h"
#include "server/jobs/blob_store.h"
#include "server/service_env.h"
#include "server/stream_ticker.h"

namespace ipupod::server {

// The service's bounds (server/config.h: the jobs_* keys).
struct JobServiceLimits {
  int max_calls = 16;  // every call but WatchJob
  int max_calls_per_user = 4;
  int max_watchers = 256;  // WatchJob
  int max_watchers_per_user = 32;
  absl::Duration watch_max = absl::Minutes(10);
  // How often a follower looks for new events.
  absl::Duration watch_poll = absl::Milliseconds(200);
};

class JobServiceImpl final
    : public v1::JobService::WithCallbackMethod_WatchJob<v1::JobService::Service> {
 public:
  // REQUIRES: 1 <= max_calls_per_user <= max_calls, 1 <= max_watchers_per_user <= max_watchers.
  JobServiceImpl(const ServiceEnv& env, jobs::BlobStore* blobs, batch::JobManager* manager,
                 const JobServiceLimits& limits);
  ~JobServiceImpl() override;

  grpc::Status StatBlob(grpc::ServerContext* context, const v1::StatBlobRequest* request,
                        v1::BlobRef* response) override;
  grpc::Status PutBlob(grpc::ServerContext* context, grpc::ServerReader<v1::BlobChunk>* reader,
                       v1::BlobRef* response) override;
  grpc::Status SubmitJob(grpc::ServerContext* context, const v1::SubmitJobRequest* request,
                         v1::SubmitJobResponse* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* context, const v1::JobRequest* request,
                      v1::Job* response) override;
  grpc::Status CancelJob(grpc::ServerContext* context, const v1::JobRequest* request,
                         v1::Job* response) override;
  grpc::Status HoldJob(grpc::ServerContext* context, const v1::JobRequest* request,
                       v1::Job* response) override;
  grpc::Status ReleaseJob(grpc::ServerContext* context, const v1::JobRequest* request,
                          v1::Job* response) override;
  grpc::Status DeleteJob(grpc::ServerContext* context, const v1::JobRequest* request,
                         v1::DeleteJobResponse* response) override;
  grpc::ServerWriteReactor<v1::JobEvent>* WatchJob(grpc::CallbackServerContext* context,
                                                   const v1::WatchJobRequest* request) override;
  grpc::Status FetchResult(grpc::ServerContext* context, const v1::FetchResultRequest* request,
                           grpc::ServerWriter<v1::ResultChunk>* writer) override;

  const CallLimit& calls() const { return calls_; }
  const CallLimit& watchers() const { return watchers_; }

 private:
  const ServiceEnv& env_;
  jobs::BlobStore* const blobs_;
  batch::JobManager* const manager_;
  CallLimit calls_;
  CallLimit watchers_;
  StreamTicker watch_ticker_;  // one thread for every watch (server/job_watch.h)
  JobWatchEnv watch_env_;
};

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_JOB_SERVICE_H_
