// JobService handlers: authenticate -> body -> log -> convert
// (server/sync_handlers.h). The rules are the blob store's and the job
// manager's; this file only moves messages.
#include "server/job_service.h"

#include <algorithm>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/wire/tensor_stream.h"
#include "scheduler/audit/audit_log.h"
#include "server/audit_trail.h"
#include "server/proto_convert_jobs.h"
#include "server/stream_idle_watch.h"
#include "server/sync_handlers.h"

namespace ipupod::server {
namespace {

using scheduler::Caller;

constexpr size_t kChunkBytes = wire::kTensorChunkBytesMax;  // 1 MiB

CallLimitWording CallWording() {
  return {.calls = "job calls",
          .examples = "submits, listings, job show, uploads, fetches; ",
          .bound = "ipupodd config jobs_max_calls",
          .per_user_bound = "ipupodd config jobs_max_calls_per_user",
          .per_user_hint = "a silent upload or fetch ends after execution_stream_idle_seconds"};
}

CallLimitWording WatchWording() {
  return {.calls = "job watches",
          .examples = "ipupod job wait, job logs, Python wait_job; ",
          .bound = "ipupodd config jobs_max_watchers",
          .per_user_bound = "ipupodd config jobs_max_watchers_per_user",
          .per_user_hint = "a watch ends after jobs_watch_max_seconds and is opened again"};
}

template <typename Reader>
absl::Status ReceiveBlob(const Caller& caller, jobs::BlobStore& blobs, Reader& reader,
                         v1::BlobRef* response) {
  v1::BlobChunk chunk;
  if (!reader.Read(&chunk)) {
    return absl::InvalidArgumentError("PutBlob got no message: send the sha256 and size first");
  }
  const std::string sha256 = chunk.sha256();
  const uint64_t size = chunk.total_bytes();
  IPUPOD_ASSIGN_OR_RETURN(std::unique_ptr<jobs::BlobStore::Upload> upload,
                          blobs.BeginUpload(caller.user, sha256, size));
  response->set_sha256(sha256);
  response->set_size_bytes(size);
  response->set_already_stored(upload->already_stored());
  if (upload->already_stored()) return absl::OkStatus();  // what was sent is not needed
  do {
    if (chunk.data().size() > kChunkBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a PutBlob message carries ", chunk.data().size(), " bytes; at most ", kChunkBytes));
    }
    if (!chunk.sha256().empty() && chunk.sha256() != sha256) {
      return absl::InvalidArgumentError("a later PutBlob message names another sha256");
    }
    IPUPOD_RETURN_IF_ERROR(upload->Append(chunk.data()));
  } while (reader.Read(&chunk));
  return upload->Commit().status();
}

template <typename Writer>
absl::Status SendResult(const std::filesystem::path& path, const jobs::ResultFile& file,
                        uint64_t offset, Writer& writer) {
  if (offset > file.size_bytes) {
    return absl::OutOfRangeError(absl::StrCat("offset ", offset, " is past the end of ", file.name,
                                              " (", file.size_bytes, " bytes)"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::DataLossError(absl::StrCat("result ", file.name, " is gone from disk"));
  in.seekg(static_cast<std::streamoff>(offset));
  std::string buffer(kChunkBytes, '\0');
  uint64_t at = offset;
  while (at < file.size_bytes) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunkBytes, file.size_bytes - at));
    if (!in.read(buffer.data(), static_cast<std::streamsize>(n))) {
      return absl::DataLossError(absl::StrCat("result ", file.name, " is shorter than recorded"));
    }
    v1::ResultChunk chunk;
    chunk.set_offset(at);
    chunk.set_data(buffer.data(), n);
    if (!writer.Write(chunk)) return absl::CancelledError("the client stopped reading");
    at += n;
  }
  return absl::OkStatus();
}

}  // namespace

JobServiceImpl::JobServiceImpl(const ServiceEnv& env, jobs::BlobStore* blobs,
                               batch::JobManager* manager, const JobServiceLimits& limits)
    : env_(env),
      blobs_(blobs),
      manager_(manager),
      calls_(limits.max_calls, limits.max_calls_per_user, CallWording()),
      watchers_(limits.max_watchers, limits.max_watchers_per_user, WatchWording()),
      watch_ticker_(limits.watch_poll),
      watch_env_{.manager = manager,
                 .watchers = &watchers_,
                 .ticker = &watch_ticker_,
                 .max_watch = limits.watch_max,
                 .idle = env.stream_idle} {}

// The gRPC server has finished every call by now (PodServer destroys it
// first); the ticker's thread is joined before the limits it reaches go.
JobServiceImpl::~JobServiceImpl() { watch_ticker_.Stop(); }

grpc::Status JobServiceImpl::StatBlob(grpc::ServerContext* context,
                                      const v1::StatBlobRequest* request, v1::BlobRef* response) {
  return Handle(context, env_, calls_, "StatBlob", [&](const Caller& caller) -> absl::Status {
    // Another user's blob is answered as one nobody stored (server/jobs/blob_store.h).
    const std::optional<uint64_t> size = blobs_->Stat(caller.user, request->sha256());
    if (!size) {
      return absl::NotFoundError(
          absl::StrCat("blob ", request->sha256().substr(0, 64), " is not stored; PutBlob it"));
    }
    response->set_sha256(request->sha256());
    response->set_size_bytes(*size);
    response->set_already_stored(true);
    return absl::OkStatus();
  });
}

grpc::Status JobServiceImpl::PutBlob(grpc::ServerContext* context,
                                     grpc::ServerReader<v1::BlobChunk>* reader,
                                     v1::BlobRef* response) {
  return HandleStream(context, env_, calls_, "PutBlob", reader,
                      [&](const Caller& caller, auto& watched) -> absl::Status {
                        return ReceiveBlob(caller, *blobs_, watched, response);
                      });
}

grpc::Status JobServiceImpl::SubmitJob(grpc::ServerContext* context,
                                       const v1::SubmitJobRequest* request,
                                       v1::SubmitJobResponse* response) {
  return Handle(context, env_, calls_, "SubmitJob", [&](const Caller& caller) -> absl::Status {
    IPUPOD_ASSIGN_OR_RETURN(const std::vector<batch::JobView> jobs,
                            manager_->Submit(caller, FromProto(request->spec()), request->sweep()));
    for (const batch::JobView& job : jobs) ToProto(job, response->add_jobs());
    return absl::OkStatus();
  });
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext* context,
                                      const v1::ListJobsRequest* request,
                                      v1::ListJobsResponse* response) {
  return Handle(context, env_, calls_, "ListJobs", [&](const Caller& caller) -> absl::Status {
    IPUPOD_ASSIGN_OR_RETURN(const batch::JobFilter filter, FromProto(*request));
    int total = 0;
    const std::vector<batch::JobView> jobs = manager_->List(caller, filter, &total);
    response->mutable_jobs()->Reserve(static_cast<int>(jobs.size()));
    for (const batch::JobView& job : jobs) ToProto(job, response->add_jobs());
    response->set_total(static_cast<uint32_t>(total));
    return absl::OkStatus();
  });
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext* context, const v1::JobRequest* request,
                                    v1::Job* response) {
  return Handle(context, env_, calls_, "GetJob", [&](const Caller& caller) -> absl::Status {
    IPUPOD_ASSIGN_OR_RETURN(const batch::JobView job, manager_->Get(caller, request->id()));
    ToProto(job, response);
    return absl::OkStatus();
  });
}

grpc::Status JobServiceImpl::CancelJob(grpc::ServerContext* context, const v1::JobRequest* request,
                                       v1::Job* response) {
  return Handle(context, env_, calls_, "CancelJob", [&](const Caller& caller) -> absl::Status {
    // Whose job it is (its queue line, which everyone sees): a cancel by
    // anyone else is audited, allowed or not.
    const absl::StatusOr<batch::JobView> line = manager_->Get(caller, request->id());
    const absl::StatusOr<batch::JobView> job = manager_->Cancel(caller, request->id());
    if (job.ok()) ToProto(*job, response);
    if (line.ok() && line->record.user != caller.user) {
      AuditAction(env_, *context, caller, audit::kJobCancelOther, NamedTarget("job", request->id()),
                  absl::StrCat("owner=", line->record.user,
                               " state=", jobs::JobStateName(line->record.state)),
                  job.status());
    }
    return job.status();
  });
}

grpc::Status JobServiceImpl::HoldJob(grpc::ServerContext* context, const v1::JobRequest* request,
                                     v1::Job* response) {
  return Handle(context, env_, calls_, "HoldJob", [&](const Caller& caller) -> absl::Status {
    IPUPOD_ASSIGN_OR_RETURN(const batch::JobView job, manager_->Hold(caller, request->id()));
    ToProto(job, response);
    return absl::OkStatus();
  });
}

grpc::Status JobServiceImpl::ReleaseJob(grpc::ServerContext* context, const v1::JobRequest* request,
                                        v1::Job* response) {
  return Handle(context, env_, calls_, "ReleaseJob", [&](const Caller& caller) -> absl::Status {
    IPUPOD_ASSIGN_OR_RETURN(const batch::JobView job, manager_->Release(caller, request->id()));
    ToProto(job, response);
    return absl::OkStatus();
  });
}

grpc::Status JobServiceImpl::DeleteJob(grpc::ServerContext* context, const v1::JobRequest* request,
                                       v1::DeleteJobResponse* response) {
  return Handle(context, env_, calls_, "DeleteJob", [&](const Caller& caller) -> absl::Status {
    IPUPOD_ASSIGN_OR_RETURN(const uint64_t freed, manager_->Delete(caller, request->id()));
    response->set_freed_bytes(freed);
    return absl::OkStatus();
  });
}

grpc::ServerWriteReactor<v1::JobEvent>* JobServiceImpl::WatchJob(
    grpc::CallbackServerContext* context, const v1::WatchJobRequest* request) {
  return JobWatch::Start(context, *request, env_, watch_env_);
}

grpc::Status JobServiceImpl::FetchResult(grpc::ServerContext* context,
                                         const v1::FetchResultRequest* request,
                                         grpc::ServerWriter<v1::ResultChunk>* writer) {
  return HandleStream(context, env_, calls_, "FetchResult", writer,
                      [&](const Caller& caller, auto& watched) -> absl::Status {
                        IPUPOD_ASSIGN_OR_RETURN(
                            const auto found,
                            manager_->Result(caller, request->id(), request->name()));
                        return SendResult(found.first, found.second, request->offset(), watched);
                      });
}

}  // namespace ipupod::server
