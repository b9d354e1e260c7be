// File: server/batch/job_files.h
//
// JobFiles: one job's directory under the server's state directory,
// <state_dir>/jobs/<id>/, and everything the job keeps there:
//   checkpoint-<R>.npz   training: the host copy after R runs; the job
//                        record names the one that counts (written first,
//                        then named durably, then the older ones removed)
//   steps/<S>.npz        inference: the outputs of step S, written as they
//                        come, so a restarted job goes on after the last one
//   events.jsonl         the job's log (state changes, runs, recoveries),
//                        one JSON object per line
//   outputs.npz, weights.npz, model.onnx, checkpoint.npz, report.json
//                        the results its owner fetches
// Every tensor or result file is written atomically (a temporary file,
// fsync, rename, directory fsync), so `kill -9` leaves either the old file
// or the whole new one.
//
// Thread safety: a JobFiles is used by one thread at a time, except
// AppendEvent/ReadEvents, which are safe to call concurrently.
// Errors: FAILED_PRECONDITION / RESOURCE_EXHAUSTED (disk full) naming the
// file; DATA_LOSS when a file the job wrote no longer parses.
#ifndef IPUPOD_BATCH_JOB_FILES_H_
#define IPUPOD_BATCH_JOB_FILES_H_

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/tensor/tensor_files.h"
#include "server/jobs/job.h"

namespace ipupod::batch {

// A line of a job's log.
struct JobEvent {
  uint64_t seq = 0;  // 0-based, in order
  int64_t unix_ms = 0;
  // "state", "run", "recovery", "requeue", "checkpoint", "note", "print" (a
  // line of the model's ipu_print_tensor)
  std::string kind;
  std::string text;
  int64_t run = 0;  // "run", "print": 1-based
  std::vector<float> losses;
  std::string state;  // "state": the new state's name
};

// An event of `kind` saying `text`; seq and time are set when it is logged.
JobEvent MakeEvent(absl::string_view kind, std::string text);

// A job's log keeps every event up to this many; past it only state changes
// (so how the job ended is always there). Bounds the log's file and the
// offsets the server keeps of it (8 bytes an event).
inline constexpr uint64_t kMaxEventsPerJob = 20000;
inline constexpr uint64_t kMaxStateEventsPastTheCap = 1000;

class JobFiles {
 public:
  // Creates the directory if needed.
  static absl::StatusOr<JobFiles> Open(const std::filesystem::path& jobs_dir, absl::string_view id);

  const std::filesystem::path& dir() const { return dir_; }

  // Training host copies.
  absl::StatusOr<std::string> WriteCheckpoint(int64_t runs, const tensor::NamedTensors& state);
  absl::StatusOr<tensor::NamedTensors> ReadCheckpoint(absl::string_view name) const;
  // A stopped training job keeps its last host copy: checkpoint `name`
  // becomes the result checkpoint.npz.
  absl::StatusOr<jobs::ResultFile> KeepCheckpoint(absl::string_view name);
  // Removes every checkpoint-*.npz but `keep`.
  void RemoveCheckpointsBut(absl::string_view keep) const;

  // Inference step outputs.
  absl::Status WriteStepOutputs(int64_t step, const tensor::NamedTensors& outputs);
  // The number of consecutive step files from step 0.
  int64_t CountSteps() const;
  // Concatenates steps 0 .. steps-1 (keeping `names`, all if empty) into
  // outputs.npz and removes the step files.
  absl::StatusOr<jobs::ResultFile> AssembleOutputs(int64_t steps,
                                                   const std::vector<std::string>& names);

  // A result file, written atomically; returns its name, size and hash.
  absl::StatusOr<jobs::ResultFile> WriteResult(absl::string_view name, absl::string_view bytes);
  std::filesystem::path ResultPath(absl::string_view name) const;
  // Removes the result files; returns the bytes freed.
  uint64_t RemoveResults(const std::vector<jobs::ResultFile>& results) const;
  // Removes the whole directory; returns the bytes freed.
  uint64_t RemoveAll() const;

 private:
  explicit JobFiles(std::filesystem::path dir) : dir_(std::move(dir)) {}
  std::filesystem::path StepPath(int64_t step) const;

  std::filesystem::path dir_;
};

// The job's log, events.jsonl in its directory: appended as events happen,
// read back from any event on (after a restart too).
class JobLog {
 public:
  explicit JobLog(std::filesystem::path path);
  JobLog(const JobLog&) = delete;
  JobLog& operator=(const JobLog&) = delete;

  // Sets seq and appends; past kMaxEventsPerJob, drops all but state events
  // (up to kMaxStateEventsPastTheCap more).
  void Append(JobEvent event);
  // Events seq >= from, at most `max` of them.
  std::vector<JobEvent> Read(uint64_t from, size_t max) const;
  uint64_t size() const;

 private:
  void LoadLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::filesystem::path path_;
  mutable absl::Mutex mu_;
  // Byte offset of each event's line, read lazily from the file.
  mutable std::vector<uint64_t> offsets_ ABSL_GUARDED_BY(mu_);
  mutable bool loaded_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ipupod::batch

#endif  // IPUPOD_BATCH_JOB_FILES_H_
