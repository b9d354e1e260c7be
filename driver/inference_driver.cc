#include "driver/inference_driver.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace ipupod::driver {

absl::StatusOr<tensor::NamedTensors> RunInference(SessionExecutable& executable,
                                                  const StepPlan& data,
                                                  const InferenceCallbacks& callbacks,
                                                  int64_t first_step) {
  auto stopped = [&] { return callbacks.stop_requested && callbacks.stop_requested(); };
  OutputAccumulator outputs;
  for (int64_t step = first_step; step < data.steps; ++step) {
    if (stopped()) break;
    IPUPOD_ASSIGN_OR_RETURN(tensor::NamedTensors inputs, StepInputs(data, step));
    const absl::Time start = absl::Now();
    absl::StatusOr<StepResult> result = executable.RunStep(inputs);
    if (stopped()) break;
    if (!result.ok()) {
      return WithContext(result.status(), absl::StrCat("step ", step + 1, " of ", data.steps));
    }
    if (callbacks.on_step) {
      callbacks.on_step(
          {step, data.steps, &result->stats, absl::ToDoubleSeconds(absl::Now() - start)});
    }
    if (callbacks.on_outputs) {
      IPUPOD_RETURN_IF_ERROR(callbacks.on_outputs(step, result->outputs));
    } else {
      IPUPOD_RETURN_IF_ERROR(outputs.Append(result->outputs));
    }
  }
  if (stopped()) return absl::CancelledError("stopped on request");
  if (callbacks.on_outputs || first_step == data.steps) return tensor::NamedTensors{};
  return outputs.Finish();
}

}  // namespace ipupod::driver
