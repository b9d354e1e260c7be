// File: server/jobs/job_store.h
//
// What survives a restart of the server's batch jobs: every job record and
// the job-number counter. The job manager (server/batch/job_manager.h) writes
// through this interface *before* it acknowledges or acts on a change, so
// a failed write changes nothing and `kill -9` at any moment leaves records
// it can go on from. Implementations: store/SqliteJobStore (durable, in the
// pod's state database) and tests' in-memory fakes.
//
// Thread safety: implementations must be safe to call concurrently.
// Errors: the store's (server/store/sqlite_state_store.h lists them); a record
// that no longer parses is DATA_LOSS naming the job.
#ifndef IPUPOD_JOBS_JOB_STORE_H_
#define IPUPOD_JOBS_JOB_STORE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "server/jobs/job.h"

namespace ipupod::jobs {

class JobStore {
 public:
  virtual ~JobStore() = default;

  // Every stored job, in submission order.
  virtual absl::StatusOr<std::vector<JobRecord>> LoadJobs() = 0;
  // Increments and returns the durable job-number counter (1 first).
  virtual absl::StatusOr<int64_t> NextJobNumber() = 0;
  // Inserts or replaces these records, all or none (a sweep is one write).
  virtual absl::Status PutJobs(absl::Span<const JobRecord> jobs) = 0;
  // Deleting an absent job is OK (idempotent).
  virtual absl::Status DeleteJob(absl::string_view id) = 0;
};

}  // namespace ipupod::jobs

#endif  // IPUPOD_JOBS_JOB_STORE_H_
