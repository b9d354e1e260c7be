// File: server/jobs/job.h
//
// A batch job as the server keeps it: what to run (JobSpec), where it is in
// its life (JobState, with a reason), and its durable progress and results
// (JobRecord). Plain values; the rules that move a job from state to state
// live in server/batch/job_manager.h, and what survives a restart is exactly a
// JobRecord (server/jobs/job_store.h).
//
// States (Slurm's names):
//   PENDING    waiting; `reason` says why: "Resources" (in the pod's queue),
//              "Dependency" (its --after job has not completed), "Held";
//              after a requeue it also names what sent it back
//   RUNNING    on a session's IPUs
//   COMPLETED  every run done, results kept
//   FAILED     `reason` says why; error_kind / recovery_action as the
//              device error carried them (common/errors.h)
//   CANCELLED  by its owner or an admin, or its dependency did not complete
//   TIMEOUT    its time limit passed (a training job keeps its last
//              checkpoint among its results)
//
// Ids: a decimal job number ("17"); a sweep's jobs share one number and add
// their index ("17.0", "17.1", ...).
//
// Thread safety: plain values. Errors: the parsers return INVALID_ARGUMENT
// saying what was wrong and what is accepted.
#ifndef IPUPOD_JOBS_JOB_H_
#define IPUPOD_JOBS_JOB_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ipupod::jobs {

enum class JobState { kPending, kRunning, kCompleted, kFailed, kCancelled, kTimeout };
inline constexpr int kJobStateCount = 6;
static_assert(static_cast<int>(JobState::kTimeout) + 1 == kJobStateCount);

// "PENDING", "RUNNING", ...
absl::string_view JobStateName(JobState state);
// Case-insensitive; INVALID_ARGUMENT naming the states otherwise.
absl::StatusOr<JobState> ParseJobState(absl::string_view text);
// COMPLETED, FAILED, CANCELLED or TIMEOUT: nothing will change it again.
bool IsFinished(JobState state);

// Pending reasons (Slurm's words).
inline constexpr absl::string_view kReasonResources = "Resources";
inline constexpr absl::string_view kReasonDependency = "Dependency";
inline constexpr absl::string_view kReasonHeld = "Held";

// A tensor file in the blob store and how to read it.
struct BlobFile {
  std::string sha256;  // "" = none
  std::string format;  // "npz", "safetensors", "npy", "onnx"
};

struct JobSpec {
  std::string name;
  std::string executable_sha256;
  BlobFile inputs;
  BlobFile weights;                  // sha256 "" = the executable's own weights
  std::vector<std::string> outputs;  // inference: to keep; empty = all
  bool train = false;
  int64_t epochs = 0;
  int64_t steps = 0;  // weight updates
  std::map<std::string, double> optimizer;
  int64_t checkpoint_every = 0;  // runs between host copies; 0 = every run
  int num_ipus = 0;              // 0 = the executable's own count
  std::string partition;
  bool auto_round = false;
  int64_t time_limit_seconds = 0;
  std::string after;  // a job id; "" = none
  // What the job is charged to and ordered by (scheduler/sharing/policy.h): as asked
  // ("" = the submitter's default), then as resolved at submit. Records
  // written before jobs carried them read as "" (the defaults at attach).
  std::string account;
  std::string qos;
};

// A file a finished job keeps for its owner.
struct ResultFile {
  std::string name;
  uint64_t size_bytes = 0;
  std::string sha256;
};

struct JobRecord {
  std::string id;
  std::string user;
  JobSpec spec;
  JobState state = JobState::kPending;
  std::string reason;
  bool held = false;
  // Submitted by an admin: the job attaches with an admin's rights (QoS and
  // accounts checked at submit with them).
  bool admin = false;
  int64_t submitted_unix_ms = 0;
  int64_t started_unix_ms = 0;        // the last attempt's start
  int64_t first_started_unix_ms = 0;  // the first attempt's (its usage record's start)
  int64_t ended_unix_ms = 0;
  // Progress that survives a restart: runs completed and kept (training:
  // the runs in the last checkpoint; inference: the step files written).
  int64_t runs_done = 0;
  int64_t runs_total = 0;
  // The checkpoint file of a training job holding runs_done runs ("" = none).
  std::string checkpoint;
  std::string error_kind;
  std::string recovery_action;
  int requeues = 0;
  int recoveries = 0;
  double wall_seconds = 0;
  double simulated_seconds = 0;
  double ipu_seconds = 0;
  std::vector<ResultFile> results;
  bool results_purged = false;
  int64_t results_expire_unix_ms = 0;
};

// ---- Ids

// "17" or "17.3".
std::string JobId(int64_t number, int index = -1);
// INVALID_ARGUMENT unless `text` is a job id ("17", "17.3").
absl::Status CheckJobId(absl::string_view text);

// ---- Sweeps

struct Sweep {
  std::string variable;
  std::vector<double> values;
};

inline constexpr int kMaxSweepValues = 64;

// "NAME=V1,V2,..." (at least 1, at most kMaxSweepValues finite numbers; a
// NAME of letters, digits and '_'). "" is no sweep (variable "").
absl::StatusOr<Sweep> ParseSweep(absl::string_view text);

// ---- Time limits

inline constexpr absl::Duration kMaxTimeLimit = absl::Hours(24 * 30);

// ---- JSON (the store keeps records as JSON text: server/jobs/job_store.h)

std::string ToJson(const JobRecord& record);
// Strict (common/json_reader.h): unknown keys are errors.
absl::StatusOr<JobRecord> JobRecordFromJson(absl::string_view json);

}  // namespace ipupod::jobs

#endif  // IPUPOD_JOBS_JOB_H_
