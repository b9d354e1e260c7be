// File: server/job_service.h
//
// JobServiceImpl: ipupod.v1.JobService (proto/ipupod/v1/jobs.proto) on
// gRPC's synchronous thread pool. Each handler authenticates, converts,
// calls the library that owns the rules - the blob store (jobs/blob_store.h)
// or the job manager (batch/job_manager.h) - and converts back
// (server/proto_convert_jobs.h).
//
// Bounds: calls are bounded server-wide and per user (server/call_limit.h;
// a `job logs --follow` holds one call while it follows); a blob upload is
// bounded by the blob store's limits, checked on its first message; a
// stream is watched for idle clients (server/stream_idle_watch.h); a
// WatchJob answer carries at most kEventsPerRead events at a time and a
// FetchResult chunk at most 1 MiB.
//
// Thread safety: handlers run concurrently. The ServiceEnv, the blob store
// and the job manager outlive the service.
#ifndef IPUPOD_SERVER_JOB_SERVICE_H_
#define IPUPOD_SERVER_JOB_SERVICE_H_

#include <grpcpp/server_context.h>
#include <grpcpp/support/sync_stream.h>

#include "batch/job_manager.h"
#include "ipupod/v1/jobs.grpc.pb.h"
#include "jobs/blob_store.h"
#include "server/call_limit.h"
#include "server/service_env.h"

namespace ipupod::server {

class JobServiceImpl final : public v1::JobService::Service {
 public:
  JobServiceImpl(const ServiceEnv& env, jobs::BlobStore* blobs, batch::JobManager* manager,
                 int max_calls, int max_calls_per_user)
      : env_(env), blobs_(blobs), manager_(manager), calls_(max_calls, max_calls_per_user) {}

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
  grpc::Status WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::JobEvent>* writer) override;
  grpc::Status FetchResult(grpc::ServerContext* context, const v1::FetchResultRequest* request,
                           grpc::ServerWriter<v1::ResultChunk>* writer) override;

  static constexpr size_t kEventsPerRead = 256;

 private:
  const ServiceEnv& env_;
  jobs::BlobStore* const blobs_;
  batch::JobManager* const manager_;
  CallLimit calls_;
};

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_JOB_SERVICE_H_
