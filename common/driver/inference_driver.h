// File: common/driver/inference_driver.h
//
// The inference driver: runs an inference executable over every step of a
// data set in order and concatenates the outputs along dim 0 (`ipupod run`
// without --train; a server-side job runner reuses it through its own
// SessionExecutable, common/driver/session_executable.h).
//
//   absl::StatusOr<tensor::NamedTensors> outputs =
//       driver::RunInference(executable, plan, {.on_step = ...});
//
// There is no recovery: an inference step changes no state, so after a
// device fault the caller resets and simply runs again.
//
// Thread safety: callbacks run on the calling thread.
// Steps go through SessionExecutable::RunSteps, so an executable that
// overlaps them (the client's, one Run stream) sends the next step's inputs
// while the current one computes.
//
// Errors: a step's error prefixed "step S of N: " (device-error payloads
// kept), INTERNAL when steps disagree on their outputs, CANCELLED when
// stop_requested said so (polled before the first step and whenever one
// returns; steps already sent ahead still run, their outputs dropped).
#ifndef IPUPOD_DRIVER_INFERENCE_DRIVER_H_
#define IPUPOD_DRIVER_INFERENCE_DRIVER_H_

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "common/driver/session_executable.h"
#include "common/driver/steps.h"
#include "common/tensor/tensor_files.h"

namespace ipupod::driver {

struct InferenceCallbacks {
  std::function<void(const RunProgress&)> on_step = nullptr;
  std::function<bool()> stop_requested = nullptr;
  // When set, each step's outputs go here as they come (a batch job writes
  // them to disk, so a restart goes on after the last one) instead of being
  // concatenated: RunInference then returns no tensors. An error ends the
  // run with it.
  std::function<absl::Status(int64_t step, const tensor::NamedTensors& outputs)> on_outputs =
      nullptr;
};

// Runs steps first_step .. data.steps - 1. REQUIRES: data.steps > 0,
// 0 <= first_step <= data.steps.
absl::StatusOr<tensor::NamedTensors> RunInference(SessionExecutable& executable,
                                                  const StepPlan& data,
                                                  const InferenceCallbacks& callbacks,
                                                  int64_t first_step = 0);

}  // namespace ipupod::driver

#endif  // IPUPOD_DRIVER_INFERENCE_DRIVER_H_
