#include "common/driver/session_executable.h"

#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/errors.h"

namespace ipupod::driver {

absl::Status SessionExecutable::RunSteps(
    const StepPlan& plan, int64_t first, int64_t last,
    const std::function<absl::Status(int64_t step, StepResult result)>& on_result) {
  for (int64_t step = first; step < last; ++step) {
    absl::StatusOr<tensor::NamedTensors> inputs = StepInputs(plan, step);
    if (!inputs.ok()) return inputs.status();
    absl::StatusOr<StepResult> result = RunStep(*inputs);
    if (!result.ok()) return result.status();
    if (absl::Status s = on_result(step, *std::move(result)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

bool IsRecoverableFault(const absl::Status& error) {
  return !error.ok() && GetErrorKind(error) == ErrorKind::kRecoverable &&
         GetRecoveryAction(error) != RecoveryAction::kNone;
}

absl::Status WithContext(const absl::Status& status, absl::string_view context) {
  absl::Status out(status.code(), absl::StrCat(context, ": ", status.message()));
  status.ForEachPayload(
      [&out](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

bool IsFullReset(const absl::Status& status) {
  return IsRecoverableFault(status) && GetRecoveryAction(status) == RecoveryAction::kFullReset;
}

absl::Status WaitForPodReset(const std::function<absl::Status()>& health, const absl::Status& fault,
                             const PodResetWait& wait) {
  const absl::Time deadline = absl::Now() + wait.timeout;
  for (;;) {
    absl::Status now = health();
    if (!IsFullReset(now)) {
      const bool usable = now.ok() || absl::IsUnavailable(now) || IsRecoverableFault(now);
      return usable ? absl::OkStatus() : now;
    }
    if (wait.stop && wait.stop()) return absl::CancelledError("stopped waiting for a pod reset");
    if (absl::Now() >= deadline) {
      return WithContext(fault, absl::StrCat("waited ", absl::FormatDuration(wait.timeout),
                                             " for an admin to run `ipupod pod reset`"));
    }
    absl::SleepFor(wait.poll);
  }
}

}  // namespace ipupod::driver
