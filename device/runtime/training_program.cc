// runtime::Program for training executables: a training::Trainer
// (device/runtime/training_step.h); weights are the trainable ones plus the
// buffers, and SetWeights also takes a whole checkpoint.
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "device/runtime/program_modes.h"
#include "device/runtime/training_step.h"
#include "device/training/trainer.h"

namespace ipupod::runtime {
namespace {

using compiler::Executable;
using compiler::TensorSpec;

// device/compiler/memory_plan.h: each of the device_iterations weight updates
// runs gradient_accumulation_steps micro-batches forward and backward,
// fills and drains the pipeline over 2S - 1 stages (the next forward needs
// the updated weights), then all-reduces gradients and moves off-chip
// optimizer state (the slowest IPU's update time). Equals the report's
// step_s.
SimulatedTime TrainingStepTime(const compiler::Report& r, int64_t accumulation) {
  if (r.ipus.empty()) return SimulatedTime{};
  const double updates = static_cast<double>(r.device_iterations);
  SimulatedTime t = MicroBatchesTime(r, static_cast<double>(r.device_iterations * accumulation));
  t.pipeline_ramp_s = updates * static_cast<double>(2 * r.num_stages - 2) * PipelineCycleSeconds(r);
  const compiler::IpuPlan& update = *std::max_element(
      r.ipus.begin(), r.ipus.end(), [](const compiler::IpuPlan& a, const compiler::IpuPlan& b) {
        return a.update_s() < b.update_s();
      });
  t.ipu_link_s += updates * update.update_ipu_link_s;
  t.host_s += updates * update.update_host_s;
  return t;
}

// The trainer's weights and buffers, sorted by name.
std::vector<TensorSpec> StateSpecs(const training::Trainer& trainer) {
  std::vector<TensorSpec> specs;
  for (const training::TensorMap* state : {&trainer.weights(), &trainer.buffers()}) {
    for (const auto& [name, t] : *state) specs.push_back({name, t.dtype(), t.shape()});
  }
  std::sort(specs.begin(), specs.end(),
            [](const TensorSpec& a, const TensorSpec& b) { return a.name < b.name; });
  return specs;
}

class TrainingProgram final : public Program {
 public:
  TrainingProgram(std::shared_ptr<const Executable> executable, compiler::Report report,
                  std::unique_ptr<training::Trainer> trainer,
                  const std::map<std::string, std::string>& aliases)
      : Program(executable, report, StateSpecs(*trainer),
                TrainingStepTime(report, executable->training.gradient_accumulation_steps),
                aliases),
        trainer_(std::move(trainer)) {}

  int64_t max_set_weights_bytes() const override {
    return weight_bytes() * kCheckpointWeightMultiple + alias_bytes() + kWeightSlackBytes;
  }

  absl::Status SetWeights(tensor::NamedTensors weights) override {
    if (IsCheckpoint(weights)) return ImportCheckpoint(*trainer_, weights);
    IPUPOD_RETURN_IF_ERROR(ResolveAliases(weights));
    IPUPOD_RETURN_IF_ERROR(CheckWeights(weights));
    training::TensorMap map;
    for (auto& [name, t] : weights) map.emplace(name, std::move(t));
    return trainer_->SetWeights(map);
  }

  bool is_training() const override { return true; }
  absl::StatusOr<tensor::NamedTensors> GetCheckpoint() const override {
    return ExportCheckpoint(*trainer_);
  }
  absl::StatusOr<OptimizerState> SetOptimizer(
      const std::map<std::string, double>& values) override {
    IPUPOD_RETURN_IF_ERROR(SetOptimizerVariables(trainer_->optimizer(), values));
    return GetOptimizer();
  }
  absl::StatusOr<OptimizerState> GetOptimizer() const override {
    return DescribeOptimizer(*trainer_);
  }

 private:
  const tensor::Tensor* FindWeight(const std::string& name) const override {
    return trainer_->FindState(name);
  }
  absl::StatusOr<StepResult> Step(const std::vector<const tensor::Tensor*>& inputs) override {
    return TrainStep(executable(), *trainer_, inputs);
  }

  const std::unique_ptr<training::Trainer> trainer_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Program>> CreateTrainingProgram(
    std::shared_ptr<const Executable> executable, const LoadOptions& options) {
  const Executable& e = *executable;
  IPUPOD_ASSIGN_OR_RETURN(
      ImportedModel model,
      ImportForProgram(e, options, /*keep_weights=*/true, e.training.gradient_accumulation_steps,
                       "gradient_accumulation_steps"));
  const std::map<std::string, std::string> aliases = model.graph.module_state.aliases;
  auto trainer = CreateTrainer(e, std::move(model.graph));
  if (!trainer.ok()) return BadExecutable(trainer.status().message());
  return std::make_unique<TrainingProgram>(std::move(executable), std::move(model.report),
                                           *std::move(trainer), aliases);
}

}  // namespace ipupod::runtime
