#include "tests/common/driver/fake_executable.h"

#include "absl/strings/str_cat.h"
#include "common/errors.h"

namespace ipupod::driver::testing {

absl::Status Fault(RecoveryAction action) {
  return RecoverableError(action, {0}, absl::StrCat("IPU 0 has a ", RecoveryActionName(action)));
}

FakeExecutable::FakeExecutable() = default;

absl::Status FakeExecutable::Health() const {
  if (error_) return *error_;
  if (!loaded_) return absl::FailedPreconditionError("nothing loaded: load it again");
  return absl::OkStatus();
}

absl::Status FakeExecutable::Load() {
  if (auto it = load_faults.find(++load_calls_); it != load_faults.end()) {
    if (driver::IsRecoverableFault(it->second)) error_ = it->second;
    return it->second;
  }
  if (error_) return *error_;
  ++loads_;
  loaded_ = true;
  w_ = 0;  // the executable's own weights
  step_ = 0;
  return absl::OkStatus();
}

absl::Status FakeExecutable::WriteWeights(const tensor::NamedTensors& weights) {
  if (absl::Status health = Health(); !health.ok()) return health;
  for (const auto& [name, t] : weights) {
    if (name == "w") w_ = t.data<float>()[0];
    if (name == "optimizer/step") step_ = t.data<int64_t>()[0];
  }
  return absl::OkStatus();
}

absl::StatusOr<tensor::NamedTensors> FakeExecutable::ReadWeights() {
  if (absl::Status health = Health(); !health.ok()) return health;
  return tensor::NamedTensors{{"w", *tensor::Tensor::FromValues<float>({1}, {w_})}};
}

absl::StatusOr<tensor::NamedTensors> FakeExecutable::ReadCheckpoint() {
  if (auto it = checkpoint_faults.find(++checkpoint_calls_); it != checkpoint_faults.end()) {
    if (driver::IsRecoverableFault(it->second)) error_ = it->second;
    return it->second;
  }
  if (absl::Status health = Health(); !health.ok()) return health;
  return tensor::NamedTensors{
      {"w", *tensor::Tensor::FromValues<float>({1}, {w_})},
      {"optimizer/step", *tensor::Tensor::FromValues<int64_t>({1}, {step_})}};
}

absl::StatusOr<std::string> FakeExecutable::SetOptimizer(const std::map<std::string, double>&) {
  if (absl::Status health = Health(); !health.ok()) return health;
  return std::string("sgd");
}

absl::StatusOr<StepResult> FakeExecutable::RunStep(const tensor::NamedTensors& inputs) {
  if (auto it = run_faults.find(++run_calls_); it != run_faults.end()) {
    if (driver::IsRecoverableFault(it->second)) error_ = it->second;
    return it->second;
  }
  if (absl::Status health = Health(); !health.ok()) return health;
  const float x = inputs.at(0).second.data<float>()[0];
  data_seen_.push_back(x);
  w_ += x + 1;
  ++step_;
  StepResult result;
  result.outputs = {{"y", *tensor::Tensor::FromValues<float>({1}, {x})}};
  result.stats.samples = 1;
  result.stats.losses = {w_};
  result.stats.weight_updates = step_;
  return result;
}

absl::Status FakeExecutable::Reset(const absl::Status& fault) {
  resets_.push_back(fault);
  error_.reset();
  loaded_ = false;
  return absl::OkStatus();
}

}  // namespace ipupod::driver::testing
