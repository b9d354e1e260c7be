#include "server/batch/in_process_executable.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/errors.h"
#include "common/status_macros.h"
#include "common/sync.h"

namespace ipupod::batch {
namespace {

using execution::LoadedState;
using Operation = execution::SessionExecution::Operation;

driver::StepStats StatsOf(const runtime::StepResult& step) {
  driver::StepStats out;
  out.samples = step.samples;
  out.wall_seconds = step.wall_s;
  out.simulated_seconds = step.simulated.total_s();
  out.simulated_compute_seconds = step.simulated.compute_s;
  out.simulated_pipeline_ramp_seconds = step.simulated.pipeline_ramp_s;
  out.simulated_ipu_link_seconds = step.simulated.ipu_link_s;
  out.simulated_host_seconds = step.simulated.host_s;
  out.flops = static_cast<uint64_t>(step.flops);
  out.losses = step.losses;
  out.weight_updates = step.step;
  out.loss_scales = step.loss_scales;
  out.skipped_updates = step.skipped_updates;
  out.log = step.log;
  return out;
}

}  // namespace

InProcessSessionExecutable::InProcessSessionExecutable(execution::SessionExecution& execution,
                                                       scheduler::Caller caller,
                                                       std::string session, std::string sha256,
                                                       execution::Cancelled cancelled,
                                                       InProcessOptions options)
    : execution_(execution),
      caller_(std::move(caller)),
      session_(std::move(session)),
      sha256_(std::move(sha256)),
      cancelled_(std::move(cancelled)),
      options_(options) {}

absl::Status InProcessSessionExecutable::LoadOnce() {
  IPUPOD_ASSIGN_OR_RETURN(std::unique_ptr<Operation> op, execution_.Begin(caller_, session_));
  return execution_.Load(*op, caller_, sha256_, cancelled_).status();
}

absl::Status InProcessSessionExecutable::Load() {
  // The IPUs stay in reset for a while (UNAVAILABLE); load once they are back.
  const absl::Time deadline = absl::Now() + options_.reset_wait;
  absl::Status loaded = LoadOnce();
  while (absl::IsUnavailable(loaded) && absl::Now() < deadline) {
    if (cancelled_ && cancelled_()) return absl::CancelledError("stopped while loading");
    absl::SleepFor(options_.poll_interval);
    loaded = LoadOnce();
  }
  return loaded;
}

absl::Status InProcessSessionExecutable::WriteWeights(const tensor::NamedTensors& weights) {
  IPUPOD_ASSIGN_OR_RETURN(std::unique_ptr<Operation> op, execution_.Begin(caller_, session_));
  IPUPOD_ASSIGN_OR_RETURN(const LoadedState state, op->Loaded());
  IPUPOD_RETURN_IF_ERROR(state.program->SetWeights(weights));
  execution::ExecutionCounters::Add(execution_.counters().weight_bytes_written,
                                    execution::TensorBytes(weights));
  return absl::OkStatus();
}

absl::StatusOr<tensor::NamedTensors> InProcessSessionExecutable::ReadWeights() {
  IPUPOD_ASSIGN_OR_RETURN(std::unique_ptr<Operation> op, execution_.Begin(caller_, session_));
  IPUPOD_ASSIGN_OR_RETURN(const LoadedState state, op->Loaded());
  return CountedRead(state.program->GetWeights({}));
}

absl::StatusOr<tensor::NamedTensors> InProcessSessionExecutable::ReadCheckpoint() {
  IPUPOD_ASSIGN_OR_RETURN(std::unique_ptr<Operation> op, execution_.Begin(caller_, session_));
  IPUPOD_ASSIGN_OR_RETURN(const LoadedState state, op->Loaded());
  return CountedRead(state.program->GetCheckpoint());
}

absl::StatusOr<tensor::NamedTensors> InProcessSessionExecutable::CountedRead(
    absl::StatusOr<tensor::NamedTensors> weights) {
  if (weights.ok()) {
    execution::ExecutionCounters::Add(execution_.counters().weight_bytes_read,
                                      execution::TensorBytes(*weights));
  }
  return weights;
}

absl::StatusOr<std::string> InProcessSessionExecutable::SetOptimizer(
    const std::map<std::string, double>& variables) {
  IPUPOD_ASSIGN_OR_RETURN(std::unique_ptr<Operation> op, execution_.Begin(caller_, session_));
  IPUPOD_ASSIGN_OR_RETURN(const LoadedState state, op->Loaded());
  IPUPOD_ASSIGN_OR_RETURN(const runtime::OptimizerState optimizer,
                          state.program->SetOptimizer(variables));
  return optimizer.optimizer;
}

absl::StatusOr<std::vector<std::string>> InProcessSessionExecutable::WeightNames() {
  IPUPOD_ASSIGN_OR_RETURN(std::unique_ptr<Operation> op, execution_.Begin(caller_, session_));
  IPUPOD_ASSIGN_OR_RETURN(const LoadedState state, op->Loaded());
  std::vector<std::string> names;
  for (const compiler::TensorSpec& spec : state.program->weight_specs()) names.push_back(spec.name);
  return names;
}

absl::StatusOr<driver::StepResult> InProcessSessionExecutable::RunStep(
    const tensor::NamedTensors& inputs) {
  IPUPOD_ASSIGN_OR_RETURN(std::unique_ptr<Operation> op, execution_.Begin(caller_, session_));
  IPUPOD_ASSIGN_OR_RETURN(const LoadedState state, op->Loaded());
  IPUPOD_ASSIGN_OR_RETURN(runtime::StepResult step,
                          execution_.RunStep(*state.program, inputs, cancelled_));
  op->slot().CountRun();
  driver::StepStats stats = StatsOf(step);
  return driver::StepResult{std::move(step.outputs), std::move(stats)};
}

absl::Status InProcessSessionExecutable::ResetSession() {
  auto done = std::make_shared<absl::Notification>();
  auto result = std::make_shared<absl::Status>();
  execution_.scheduler().ResetSession(caller_, session_,
                                      [done, result](absl::StatusOr<scheduler::ResetResult> r) {
                                        *result = r.status();
                                        sync::Notify(done.get());
                                      });
  if (!sync::WaitForNotificationWithTimeout(done.get(), options_.reset_wait)) {
    return absl::DeadlineExceededError(absl::StrCat("the reset of session ", session_,
                                                    " did not finish in ",
                                                    absl::FormatDuration(options_.reset_wait)));
  }
  return *result;
}

absl::Status InProcessSessionExecutable::Reset(const absl::Status& fault) {
  if (!driver::IsRecoverableFault(fault)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot reset session ", session_, " after: ", fault.message()));
  }
  if (driver::IsFullReset(fault)) return WaitForPodReset(fault);
  return ResetSession();
}

absl::Status InProcessSessionExecutable::WaitForPodReset(const absl::Status& fault) {
  return driver::WaitForPodReset(
      [this] { return execution_.scheduler().GetSession(caller_, session_).status(); }, fault,
      {.timeout = options_.full_reset_wait, .poll = options_.poll_interval, .stop = cancelled_});
}

}  // namespace ipupod::batch
