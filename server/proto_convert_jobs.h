// File: server/proto_convert_jobs.h
//
// JobService's conversions between ipupod.v1 messages and the batch jobs'
// own types (server/jobs/job.h, server/batch/job_manager.h). Pure functions; FromProto
// only copies (the manager checks every value).
#ifndef IPUPOD_SERVER_PROTO_CONVERT_JOBS_H_
#define IPUPOD_SERVER_PROTO_CONVERT_JOBS_H_

#include "absl/status/statusor.h"
#include "ipupod/v1/jobs.pb.h"
#include "server/batch/job_files.h"
#include "server/batch/job_manager.h"
#include "server/jobs/job.h"

namespace ipupod::server {

jobs::JobSpec FromProto(const v1::JobSpec& spec);
// INVALID_ARGUMENT for JOB_STATE_UNSPECIFIED or an unknown value.
absl::StatusOr<jobs::JobState> FromProto(v1::JobState state);
absl::StatusOr<batch::JobFilter> FromProto(const v1::ListJobsRequest& request);

v1::JobState ToProto(jobs::JobState state);
void ToProto(const jobs::JobSpec& spec, v1::JobSpec* out);
void ToProto(const batch::JobView& view, v1::Job* out);
void ToProto(const batch::JobEvent& event, v1::JobEvent* out);

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_PROTO_CONVERT_JOBS_H_
