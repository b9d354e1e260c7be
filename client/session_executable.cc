#include "client/session_executable.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/errors.h"
#include "common/status_macros.h"

namespace ipupod::client {

driver::StepStats StepStatsOf(const v1::RunStats& stats) {
  driver::StepStats out;
  out.samples = static_cast<int64_t>(stats.samples());
  out.wall_seconds = stats.wall_seconds();
  out.simulated_seconds = stats.simulated_seconds();
  out.simulated_compute_seconds = stats.simulated_compute_seconds();
  out.simulated_pipeline_ramp_seconds = stats.simulated_pipeline_ramp_seconds();
  out.simulated_ipu_link_seconds = stats.simulated_ipu_link_seconds();
  out.simulated_host_seconds = stats.simulated_host_seconds();
  out.flops = stats.flops();
  out.losses.assign(stats.losses().begin(), stats.losses().end());
  out.weight_updates = static_cast<int64_t>(stats.step());
  out.loss_scales.assign(stats.loss_scales().begin(), stats.loss_scales().end());
  out.skipped_updates = static_cast<int64_t>(stats.skipped_updates());
  out.log.assign(stats.log().begin(), stats.log().end());
  return out;
}

RemoteSessionExecutable::RemoteSessionExecutable(Client& client, std::string session,
                                                 std::string sha256, RecoveryOptions options)
    : client_(client),
      session_(std::move(session)),
      sha256_(std::move(sha256)),
      options_(options) {}

absl::Status RemoteSessionExecutable::Load() {
  // The IPUs stay in reset for a while (UNAVAILABLE); load once they are back.
  const absl::Time deadline = absl::Now() + options_.reset_wait;
  absl::Status loaded = client_.Load(session_, sha256_).status();
  while (absl::IsUnavailable(loaded) && absl::Now() < deadline) {
    absl::SleepFor(options_.poll_interval);
    loaded = client_.Load(session_, sha256_).status();
  }
  return loaded;
}

absl::Status RemoteSessionExecutable::WriteWeights(const tensor::NamedTensors& weights) {
  return client_.WriteWeights(session_, weights).status();
}

absl::StatusOr<tensor::NamedTensors> RemoteSessionExecutable::ReadWeights() {
  return client_.ReadWeights(session_);
}

absl::StatusOr<tensor::NamedTensors> RemoteSessionExecutable::ReadCheckpoint() {
  return client_.ReadCheckpoint(session_);
}

absl::StatusOr<std::string> RemoteSessionExecutable::SetOptimizer(
    const std::map<std::string, double>& variables) {
  IPUPOD_ASSIGN_OR_RETURN(v1::OptimizerInfo info, client_.SetOptimizer(session_, variables));
  return info.name();
}

absl::StatusOr<driver::StepResult> RemoteSessionExecutable::RunStep(
    const tensor::NamedTensors& inputs) {
  IPUPOD_ASSIGN_OR_RETURN(RunResult result, client_.Run(session_, inputs));
  return driver::StepResult{std::move(result.outputs), StepStatsOf(result.stats)};
}

absl::Status RemoteSessionExecutable::RunSteps(
    const driver::StepPlan& plan, int64_t first, int64_t last,
    const std::function<absl::Status(int64_t step, driver::StepResult result)>& on_result) {
  // One step has nothing to overlap: Client::Run sends it as one RunInline
  // round trip when it is small, which a stream cannot beat.
  if (last - first <= 1) return driver::SessionExecutable::RunSteps(plan, first, last, on_result);
  // Rows [step x rows, +rows) of every input (driver::RowsPerStep): views
  // into the plan, which outlives the call.
  auto inputs = [&plan, first](int64_t k) {
    std::vector<TensorSlice> slices;
    for (size_t i = 0; i < plan.inputs.size(); ++i) {
      const auto& [name, t] = plan.inputs[i];
      TensorSlice slice{name, t.dtype(), t.shape(), {}};
      const size_t row_bytes =
          t.shape()[0] == 0 ? 0 : t.byte_size() / static_cast<size_t>(t.shape()[0]);
      slice.shape[0] = driver::RowsPerStep(plan, i);
      const size_t count = static_cast<size_t>(slice.shape[0]) * row_bytes;
      slice.bytes = t.bytes().substr(static_cast<size_t>(first + k) * count, count);
      slices.push_back(std::move(slice));
    }
    return slices;
  };
  return client_.RunSteps(session_, last - first, inputs, [&](int64_t k, RunResult result) {
    return on_result(first + k, {std::move(result.outputs), StepStatsOf(result.stats)});
  });
}

absl::Status RemoteSessionExecutable::Reset(const absl::Status& fault) {
  if (!driver::IsRecoverableFault(fault)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot reset session ", session_, " after: ", fault.message(),
                     "; the host copy of the training state is intact: attach again and resume "
                     "from it"));
  }
  if (driver::IsFullReset(fault)) return WaitForPodReset(fault);
  return client_.ResetSession(session_).status();
}

absl::Status RemoteSessionExecutable::WaitForPodReset(const absl::Status& fault) {
  return driver::WaitForPodReset(
      [this] { return client_.GetSession(session_).status(); }, fault,
      {.timeout = options_.full_reset_wait, .poll = options_.poll_interval});
}

}  // namespace ipupod::client
