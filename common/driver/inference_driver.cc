#include "common/driver/inference_driver.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace ipupod::driver {

absl::StatusOr<tensor::NamedTensors> RunInference(SessionExecutable& executable,
                                                  const StepPlan& data,
                                                  const InferenceCallbacks& callbacks,
                                                  int64_t first_step) {
  auto stopped = [&] { return callbacks.stop_requested && callbacks.stop_requested(); };
  if (stopped()) return absl::CancelledError("stopped on request");
  OutputAccumulator outputs;
  absl::Status own;  // an error of this loop's, as opposed to a step's
  int64_t next = first_step;
  absl::Time start = absl::Now();
  const absl::Status status = executable.RunSteps(
      data, first_step, data.steps, [&](int64_t step, StepResult result) -> absl::Status {
        next = step + 1;
        if (stopped()) return own = absl::CancelledError("stopped on request");
        const absl::Time now = absl::Now();
        if (callbacks.on_step) {
          callbacks.on_step({step, data.steps, &result.stats, absl::ToDoubleSeconds(now - start)});
        }
        start = now;
        own = callbacks.on_outputs ? callbacks.on_outputs(step, result.outputs)
                                   : outputs.Append(result.outputs);
        return own;
      });
  if (!own.ok()) return own;
  if (stopped()) return absl::CancelledError("stopped on request");
  if (!status.ok()) return WithContext(status, absl::StrCat("step ", next + 1, " of ", data.steps));
  if (callbacks.on_outputs || first_step == data.steps) return tensor::NamedTensors{};
  return outputs.Finish();
}

}  // namespace ipupod::driver
