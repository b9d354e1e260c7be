// File: common/driver/session_executable.h
//
// SessionExecutable: one executable on one session's IPUs, as the drivers
// (common/driver/training_driver.h, common/driver/inference_driver.h) see it. It is the
// seam that keeps the drivers free of any transport: the client library
// implements it over gRPC (client/session_executable.h), and a server-side
// job runner can implement it in-process over the scheduler and the loaded
// program, so both run the same loop, host copies and recovery.
//
// The executable has been uploaded and loaded once before a driver gets it
// (with the caller's initial weights written, if any); the driver only ever
// loads it *again*, after a reset has cleared the IPUs.
//
// Every method may fail with a device error of common/errors.h: ABORTED
// with kind "recoverable" and a recovery action, or DATA_LOSS
// ("unrecoverable"); then the session's next operation keeps failing until
// the action is done. Reset performs that action; IsRecoverableFault tells
// which errors it can act on.
//
// Thread safety: one call at a time (a session runs one operation at a
// time); implementations need not be thread-safe.
// Ownership: the caller owns the implementation; drivers only borrow it.
#ifndef IPUPOD_DRIVER_SESSION_EXECUTABLE_H_
#define IPUPOD_DRIVER_SESSION_EXECUTABLE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/driver/steps.h"
#include "common/tensor/tensor_files.h"

namespace ipupod::driver {

// What the executor measured for one step (execution.proto RunStats).
struct StepStats {
  int64_t samples = 0;
  double wall_seconds = 0;  // where the step ran (the server), this step
  double simulated_seconds = 0;
  double simulated_compute_seconds = 0;
  double simulated_pipeline_ramp_seconds = 0;
  double simulated_ipu_link_seconds = 0;
  double simulated_host_seconds = 0;
  uint64_t flops = 0;
  std::vector<float> losses;       // training: one per weight update, in order
  int64_t weight_updates = 0;      // training: so far, these included
  std::vector<float> loss_scales;  // training: each update's loss scale
  int64_t skipped_updates = 0;     // training: updates auto_loss_scaling skipped
  std::vector<std::string> log;    // what the model's IpuPrint ops printed, in run order
};

struct StepResult {
  tensor::NamedTensors outputs;  // in the executable's order
  StepStats stats;
};

// What a driver reports after step (run) `run` (0-based) of `runs` succeeded.
struct RunProgress {
  int64_t run = 0;
  int64_t runs = 0;
  const StepStats* stats = nullptr;
  // Measured by the driver: since the previous step's result (the first
  // step's: since the steps began).
  double wall_seconds = 0;
};

class SessionExecutable {
 public:
  virtual ~SessionExecutable() = default;

  // The session's id, for messages.
  virtual std::string session() const = 0;
  // Loads the executable again (after a reset). The weights are the
  // executable's own until WriteWeights.
  virtual absl::Status Load() = 0;
  // By name; all-or-nothing. Also restores a ReadCheckpoint result exactly.
  virtual absl::Status WriteWeights(const tensor::NamedTensors& weights) = 0;
  virtual absl::StatusOr<tensor::NamedTensors> ReadWeights() = 0;
  // Training: weights, buffers, optimizer state and attributes, step.
  virtual absl::StatusOr<tensor::NamedTensors> ReadCheckpoint() = 0;
  // Training: sets optimizer variables (e.g. {"lr", 1e-3}) for later
  // steps; returns the optimizer's name.
  virtual absl::StatusOr<std::string> SetOptimizer(
      const std::map<std::string, double>& variables) = 0;
  // One step: samples_per_step rows of every input.
  virtual absl::StatusOr<StepResult> RunStep(const tensor::NamedTensors& inputs) = 0;
  // Steps [first, last) of `plan`, in order: each result goes to `on_result`
  // (on the calling thread) as it completes; the first error - a step's, or
  // one on_result returns - stops the steps and is returned. An
  // implementation may send later steps' inputs before earlier results are
  // back (RemoteSessionExecutable overlaps them on one stream, a bounded
  // number ahead); this default runs RunStep on StepInputs step by step.
  // REQUIRES: 0 <= first <= last <= plan.steps.
  virtual absl::Status RunSteps(
      const StepPlan& plan, int64_t first, int64_t last,
      const std::function<absl::Status(int64_t step, StepResult result)>& on_result);
  // Performs the recovery action `fault` names on the session's IPUs and
  // returns once they can be loaded again (device memory is then empty).
  // REQUIRES: IsRecoverableFault(fault).
  virtual absl::Status Reset(const absl::Status& fault) = 0;
};

// True for a recoverable device fault (any recovery action: IPU_RESET,
// LINK_RESET, PARTITION_RESET, FULL_RESET).
bool IsRecoverableFault(const absl::Status& error);

// `status` with its message prefixed "context: ", payloads (device-error
// kind, action, IPUs) kept.
absl::Status WithContext(const absl::Status& status, absl::string_view context);

// A recoverable fault whose action is FULL_RESET (only an admin's pod reset
// clears it).
bool IsFullReset(const absl::Status& status);

// How long a SessionExecutable waits on the way back from a fault.
struct ResetWaits {
  // How long Load retries while the IPUs come back from a reset.
  absl::Duration reset_wait = absl::Seconds(30);
  // How long Reset waits for an admin's pod reset after a FULL_RESET fault.
  absl::Duration full_reset_wait = absl::Minutes(10);
  absl::Duration poll_interval = absl::Milliseconds(50);
};

struct PodResetWait {
  absl::Duration timeout = absl::Minutes(30);
  absl::Duration poll = absl::Milliseconds(50);
  std::function<bool()> stop = nullptr;  // polled; true ends the wait CANCELLED
};

// After a FULL_RESET `fault`: polls `health` (the session's state as
// GetSession reports it) until its IPUs no longer wait for an admin. OK
// once they are usable (back, resetting, or with another recoverable fault
// the next load surfaces); health's error when it is something else; the
// fault, saying how long it waited, after wait.timeout. Both SessionExecutable
// implementations perform FULL_RESET's "action" this way.
absl::Status WaitForPodReset(const std::function<absl::Status()>& health, const absl::Status& fault,
                             const PodResetWait& wait);

}  // namespace ipupod::driver

#endif  // IPUPOD_DRIVER_SESSION_EXECUTABLE_H_
