// File: server/batch/job_runner.h
//
// RunJob: one attempt of a batch job on the session the scheduler granted
// it, through the same engine and drivers as an interactive `ipupod run`:
// the executable is loaded with execution::SessionExecution
// (server/batch/in_process_executable.h), training runs driver::TrainingDriver
// (host copies, recovery), inference runs driver::RunInference.
//
// Where an attempt starts: a training job from the checkpoint its record
// names (the runs in it are done; the data position follows from its
// optimizer step, exactly as `ipupod run --resume`); an inference job after
// the step files already written. So a job stopped at any moment - a
// restart, kill -9, a requeue - loses no completed update and repeats none.
//
// Results (server/jobs/job.h ResultFile), written only once every run is done:
//   inference  outputs.npz (the steps' outputs joined, the kept names)
//   training   weights.npz, model.onnx (the ONNX model with the trained
//              weights), checkpoint.npz (weights, optimizer state, step)
//   both       report.json (runs, per-run losses, wall and simulated time,
//              recoveries, IPUs)
//
// Thread safety: RunJob blocks its thread for the attempt; the callbacks
// run on it.
// Errors: the attempt's error, device-error payloads kept (the manager
// decides: requeue, FAILED); CANCELLED when `stop` said so.
#ifndef IPUPOD_BATCH_JOB_RUNNER_H_
#define IPUPOD_BATCH_JOB_RUNNER_H_

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/driver/session_executable.h"
#include "common/driver/training_driver.h"
#include "server/batch/in_process_executable.h"
#include "server/batch/job_files.h"
#include "server/execution/session_execution.h"
#include "server/jobs/job.h"

namespace ipupod::batch {

struct JobAttempt {
  jobs::JobRecord record;  // as it stands when the attempt starts
  std::string session;
  int session_ipus = 0;
  std::filesystem::path executable;  // the blob files
  std::filesystem::path inputs;
  std::filesystem::path weights;  // "" = none
  int max_recoveries = driver::kMaxRecoveriesDefault;
  InProcessOptions in_process;
};

struct JobRunCallbacks {
  // A run finished: the runs done so far (of the whole job) and its stats.
  std::function<void(int64_t runs_done, const driver::StepStats& stats, double wall_seconds)>
      on_run;
  // A training host copy is on disk as `checkpoint` (in the job's
  // directory) holding runs_done runs; an error (it could not be made
  // durable) ends the attempt.
  std::function<absl::Status(int64_t runs_done, const std::string& checkpoint)> on_checkpoint;
  // Inference: step outputs up to runs_done are on disk.
  std::function<void(int64_t runs_done)> on_steps_written;
  std::function<void(const std::string& text)> on_recovery;
  std::function<bool()> stop;
};

struct JobAttemptResult {
  std::vector<jobs::ResultFile> results;
  int recoveries = 0;
};

// Runs the attempt; `files` is the job's directory.
absl::StatusOr<JobAttemptResult> RunJob(execution::SessionExecution& execution,
                                        const JobAttempt& attempt, JobFiles& files,
                                        const JobRunCallbacks& callbacks);

// The number of runs a job makes (training: from epochs or steps; inference:
// the steps of its inputs), or INVALID_ARGUMENT saying why it cannot run.
absl::StatusOr<int64_t> RunsOf(const jobs::JobSpec& spec, const compiler::Executable& executable,
                               int64_t data_steps);

// Reads a tensor blob in its format ("npz", "safetensors", "onnx").
absl::StatusOr<tensor::NamedTensors> ReadTensorBlob(const std::filesystem::path& path,
                                                    absl::string_view format,
                                                    absl::string_view what);

}  // namespace ipupod::batch

#endif  // IPUPOD_BATCH_JOB_RUNNER_H_
