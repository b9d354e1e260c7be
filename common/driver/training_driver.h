// File: common/driver/training_driver.h
//
// The training driver: runs a training executable over a data set for a
// number of runs, keeps host copies of the training state, and survives
// recoverable device faults. `ipupod run --train` is this driver plus
// argument wiring and output; a server-side job runner reuses it through
// its own SessionExecutable (common/driver/session_executable.h).
//
//   driver::TrainingJob job{.runs = 24, .host_copy_every = 1, .recover = true};
//   driver::TrainingDriver trainer(executable, plan, job,
//                                  {.on_run = [](const driver::RunProgress& p) { ... }});
//   absl::Status trained = trainer.Run();
//
// The loop. Run r (0-based) takes data step (first_data_step + r) mod
// data.steps (StepInputs), so runs wrap around the data set; each run makes
// the executable's device_iterations weight updates. Before Run the caller
// has loaded the executable and, as it wishes, restored a checkpoint
// (WriteWeights) and set optimizer variables; ResumedDataStep gives the
// data position of a checkpoint.
//
// Host copies. With host_copy_every = K > 0 the driver reads the whole
// training state back (SessionExecutable::ReadCheckpoint) before the first
// run, after every K runs and after the last run, and hands each to
// on_host_copy ("a checkpoint is due": the CLI writes --checkpoint).
//
// Recovery policy. With `recover`, when a run or a host copy fails with a
// recoverable device fault (IsRecoverableFault: any recovery action,
// IPU_RESET to FULL_RESET) and a host copy exists, the driver calls
// on_recovery, SessionExecutable::Reset (which performs the action, or
// waits for it: a FULL_RESET needs an admin), loads the executable again,
// writes the last host copy back and repeats the runs since it; their
// outputs are dropped and taken again. A fault while recovering counts as
// another recovery. At most max_recoveries in one Run; then, and for
// unrecoverable faults, the error is returned. Without a host copy there is
// nothing to go back to, so a fault is returned as it is.
//
// Stopping. stop_requested is polled before every run and when a run
// returns; when it says so, Run ends CANCELLED ("stopped ...").
//
// Thread safety: one Run at a time; callbacks run on the calling thread.
// Errors: what the SessionExecutable or on_host_copy returns, prefixed
// "run R of N: " once runs have started (R is 1-based); CANCELLED when
// stopped.
#ifndef IPUPOD_DRIVER_TRAINING_DRIVER_H_
#define IPUPOD_DRIVER_TRAINING_DRIVER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/driver/session_executable.h"
#include "common/driver/steps.h"
#include "common/errors.h"
#include "common/tensor/tensor_files.h"

namespace ipupod::driver {

inline constexpr int kMaxRecoveriesDefault = 3;

struct TrainingJob {
  int64_t runs = 0;             // Run calls of the executable
  int64_t first_data_step = 0;  // the data step of run 0
  int64_t host_copy_every = 0;  // runs between host copies; 0: none
  bool recover = false;         // go on after recoverable faults
  int max_recoveries = kMaxRecoveriesDefault;
  bool keep_outputs = false;  // keep every run's outputs (outputs())
};

// The training state on the host and how many runs it includes.
struct HostCopy {
  tensor::NamedTensors checkpoint;
  int64_t runs_done = 0;
};

// A recovery about to start: run `run` (0-based) failed with `fault`; the
// driver goes on after run `resume_after_run` (the last host copy).
struct Recovery {
  int64_t run = 0;
  absl::Status fault;
  RecoveryAction action = RecoveryAction::kNone;
  int64_t resume_after_run = 0;
};

struct TrainingCallbacks {
  std::function<void(const RunProgress&)> on_run = nullptr;
  // A host copy was taken; an error ends Run with it.
  std::function<absl::Status(const HostCopy&)> on_host_copy = nullptr;
  std::function<void(const Recovery&)> on_recovery = nullptr;
  std::function<bool()> stop_requested = nullptr;
};

// The data step a checkpoint taken after U weight updates goes on at: run
// U / device_iterations, wrapping around `data_steps`. 0 when the
// checkpoint holds no "optimizer/step".
int64_t ResumedDataStep(const tensor::NamedTensors& checkpoint, int64_t device_iterations,
                        int64_t data_steps);

// The most runs one training may make: 2^40, twelve days at a microsecond a
// run, beyond any time limit. More is refused, never wrapped around.
inline constexpr int64_t kTrainingRunsMax = int64_t{1} << 40;

// The runs a training makes: `epochs` passes over `data_steps` steps, or
// `steps` weight updates of `device_iterations` each per run (exactly one of
// epochs and steps is positive; the caller checked). INVALID_ARGUMENT when
// steps is not a multiple of device_iterations, or when the runs would pass
// kTrainingRunsMax (a product of the counts overflowing int64 included).
// `flag` prefixes the names in messages: "--" for the CLI's flags, "" for a
// job's spec. REQUIRES: data_steps >= 1, device_iterations >= 1.
absl::StatusOr<int64_t> TrainingRuns(int64_t epochs, int64_t steps, int64_t data_steps,
                                     int64_t device_iterations, absl::string_view flag);

class TrainingDriver {
 public:
  // Borrows `executable` and `data` for the driver's lifetime.
  // REQUIRES: data.steps > 0.
  TrainingDriver(SessionExecutable& executable, const StepPlan& data, TrainingJob job,
                 TrainingCallbacks callbacks);
  TrainingDriver(const TrainingDriver&) = delete;
  TrainingDriver& operator=(const TrainingDriver&) = delete;

  absl::Status Run();

  // Per run, in order, when keep_outputs (the runs that counted).
  const std::vector<tensor::NamedTensors>& outputs() const { return outputs_; }
  int recoveries() const { return recoveries_; }
  // The last host copy taken, if any.
  const std::optional<HostCopy>& last_copy() const { return copy_; }

 private:
  bool Stopped() const;
  absl::Status TakeHostCopy(int64_t runs_done);
  // After a fault in run `run`: the run to go on from, or the error.
  absl::StatusOr<int64_t> Recover(const absl::Status& fault, int64_t run);
  absl::Status Restore(const absl::Status& fault);
  // Runs run `run` (and the host copy after it); returns the next run, or
  // sets *stopped when stopped meanwhile.
  absl::StatusOr<int64_t> Step(int64_t run, bool* stopped);

  SessionExecutable& executable_;
  const StepPlan& data_;
  const TrainingJob job_;
  const TrainingCallbacks callbacks_;
  std::vector<tensor::NamedTensors> outputs_;
  std::optional<HostCopy> copy_;
  int recoveries_ = 0;
};

}  // namespace ipupod::driver

#endif  // IPUPOD_DRIVER_TRAINING_DRIVER_H_
