#include "common/driver/training_driver.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace ipupod::driver {
int64_t ResumedDataStep(const tensor::NamedTensors& checkpoint, int64_t device_iterations,
                        int64_t data_steps) {
  for (const auto& [name, t] : checkpoint) {
    if (name == "optimizer/step" && t.dtype() == tensor::DType::kInt64 && t.num_elements() == 1) {
      return (t.data<int64_t>()[0] / std::max<int64_t>(device_iterations, 1)) %
             std::max<int64_t>(data_steps, 1);
    }
  }
  return 0;
}

absl::StatusOr<int64_t> TrainingRuns(int64_t epochs, int64_t steps, int64_t data_steps,
                                     int64_t device_iterations, absl::string_view flag) {
  const int64_t di = std::max<int64_t>(device_iterations, 1);
  int64_t runs = 0;
  if (epochs > 0) {
    int64_t updates = 0;  // the optimizer's step counter at the end
    if (__builtin_mul_overflow(epochs, std::max<int64_t>(data_steps, 1), &runs) ||
        runs > kTrainingRunsMax || __builtin_mul_overflow(runs, di, &updates)) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, "epochs ", epochs, " of ", data_steps, " runs each is more than the ",
                       kTrainingRunsMax, " runs one training may make; train for at most ",
                       kTrainingRunsMax / std::max<int64_t>(data_steps, 1), " epochs"));
    }
    return runs;
  }
  if (steps % di != 0) {
    const int64_t below = steps - steps % di;
    return absl::InvalidArgumentError(absl::StrCat(
        flag, "steps ", steps, " is not a multiple of device_iterations (", di, "): one run makes ",
        di, " weight updates; pass ", flag, "steps ",
        below <= std::numeric_limits<int64_t>::max() - di ? below + di : below, " or recompile"));
  }
  runs = steps / di;
  if (runs > kTrainingRunsMax) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, "steps ", steps, " is ", runs, " runs of ", di, " weight updates, more than the ",
        kTrainingRunsMax, " runs one training may make; pass fewer ", flag, "steps"));
  }
  return runs;
}

TrainingDriver::TrainingDriver(SessionExecutable& executable, const StepPlan& data, TrainingJob job,
                               TrainingCallbacks callbacks)
    : executable_(executable), data_(data), job_(job), callbacks_(std::move(callbacks)) {}

bool TrainingDriver::Stopped() const {
  return callbacks_.stop_requested && callbacks_.stop_requested();
}

absl::Status TrainingDriver::Run() {
  if (job_.host_copy_every > 0) IPUPOD_RETURN_IF_ERROR(TakeHostCopy(0));
  for (int64_t run = 0; run < job_.runs;) {
    bool stopped = Stopped();
    if (!stopped) {
      IPUPOD_ASSIGN_OR_RETURN(run, Step(run, &stopped));
    }
    if (stopped) {
      return absl::CancelledError(
          absl::StrCat("stopped at run ", run + 1, " of ", job_.runs, " on request"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> TrainingDriver::Step(int64_t run, bool* stopped) {
  IPUPOD_ASSIGN_OR_RETURN(tensor::NamedTensors inputs,
                          StepInputs(data_, (job_.first_data_step + run) % data_.steps));
  const absl::Time start = absl::Now();
  absl::StatusOr<StepResult> result = executable_.RunStep(inputs);
  if (Stopped()) {
    *stopped = true;
    return run;
  }
  if (!result.ok()) return Recover(result.status(), run);
  if (callbacks_.on_run) {
    callbacks_.on_run({run, job_.runs, &result->stats, absl::ToDoubleSeconds(absl::Now() - start)});
  }
  if (job_.keep_outputs) outputs_.push_back(std::move(result->outputs));
  ++run;
  const int64_t every = job_.host_copy_every;
  if (every > 0 && (run % every == 0 || run == job_.runs)) {
    // A fault while reading the state back loses the run just made too.
    if (absl::Status copied = TakeHostCopy(run); !copied.ok()) return Recover(copied, run - 1);
  }
  return run;
}

absl::Status TrainingDriver::TakeHostCopy(int64_t runs_done) {
  HostCopy copy;
  copy.runs_done = runs_done;
  IPUPOD_ASSIGN_OR_RETURN(copy.checkpoint, executable_.ReadCheckpoint());
  if (callbacks_.on_host_copy) IPUPOD_RETURN_IF_ERROR(callbacks_.on_host_copy(copy));
  copy_ = std::move(copy);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> TrainingDriver::Recover(const absl::Status& fault, int64_t run) {
  absl::Status error = fault;
  while (job_.recover && copy_ && IsRecoverableFault(error) && recoveries_ < job_.max_recoveries) {
    ++recoveries_;
    if (callbacks_.on_recovery) {
      callbacks_.on_recovery({run, error, GetRecoveryAction(error), copy_->runs_done});
    }
    error = Restore(error);
    if (error.ok()) {
      if (job_.keep_outputs) outputs_.resize(static_cast<size_t>(copy_->runs_done));
      return copy_->runs_done;
    }
  }
  return WithContext(error, absl::StrCat("run ", run + 1, " of ", job_.runs));
}

// The reset cleared the device: load again and put the host copy back.
absl::Status TrainingDriver::Restore(const absl::Status& fault) {
  IPUPOD_RETURN_IF_ERROR(executable_.Reset(fault));
  IPUPOD_RETURN_IF_ERROR(executable_.Load());
  return executable_.WriteWeights(copy_->checkpoint);
}

}  // namespace ipupod::driver
