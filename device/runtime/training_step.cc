#include "device/runtime/training_step.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "device/runtime/step_layout.h"

namespace ipupod::runtime {
namespace {

using compiler::Executable;

constexpr absl::string_view kOptimizerPrefix = "optimizer/";
constexpr absl::string_view kAttributePrefix = "optimizer_attr/";

// The micro-batches of update i, in Trainer::Step's order (replica-major).
absl::StatusOr<std::vector<std::vector<tensor::Tensor>>> UpdateInputs(
    const Executable& e, const std::vector<const tensor::Tensor*>& inputs, int64_t i) {
  const int64_t r = e.replication_factor, a = AccumulationSteps(e);
  std::vector<std::vector<tensor::Tensor>> out;
  for (int64_t replica = 0; replica < r; ++replica) {
    for (int64_t m = 0; m < a; ++m) {
      IPUPOD_ASSIGN_OR_RETURN(std::vector<tensor::Tensor> slice,
                              SliceInputs(e, inputs, (i * a + m) * r + replica));
      out.push_back(std::move(slice));
    }
  }
  return out;
}

float MeanLoss(const std::vector<float>& losses) {
  double sum = 0;
  for (float l : losses) sum += l;
  return losses.empty() ? 0.0f : static_cast<float>(sum / static_cast<double>(losses.size()));
}

absl::StatusOr<tensor::Tensor> Scalar(float value) {
  IPUPOD_ASSIGN_OR_RETURN(tensor::Tensor t, tensor::Tensor::Create(tensor::DType::kFloat32, {}));
  t.mutable_data<float>()[0] = value;
  return t;
}

}  // namespace

absl::Status NotTraining(absl::string_view what) {
  return absl::FailedPreconditionError(
      absl::StrCat(what,
                   " belong to training executables; this one was compiled for inference "
                   "(compile with ipupod compile --train)"));
}

absl::StatusOr<training::OptimizerSpec> OptimizerSpecOf(const compiler::TrainingSpec& spec) {
  IPUPOD_ASSIGN_OR_RETURN(training::OptimizerKind kind,
                          training::ParseOptimizerKind(spec.optimizer));
  std::map<std::string, double> all = spec.variables;
  all.insert(spec.constants.begin(), spec.constants.end());
  std::vector<training::ParamGroupOptions> groups;
  for (const compiler::ParamGroup& g : spec.param_groups)
    groups.push_back({g.weights, g.variables});
  IPUPOD_ASSIGN_OR_RETURN(training::OptimizerSpec out,
                          training::OptimizerSpec::Create(kind, all, groups));
  for (const auto& [name, value] : spec.constants) {
    if (out.attributes().at(name).is_variable) IPUPOD_RETURN_IF_ERROR(out.MarkAsConstant(name));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<training::Trainer>> CreateTrainer(const Executable& e,
                                                                 graph::Graph graph) {
  training::TrainerOptions options;
  options.loss = e.training.loss;
  options.weights = e.training.weights;
  options.gradient_accumulation_steps = e.training.gradient_accumulation_steps;
  options.replicas = e.replication_factor;
  options.buffers = e.training.buffers;
  options.replica_buffers = !e.config.broadcast_buffers;
  options.auto_loss_scaling = e.config.auto_loss_scaling;
  IPUPOD_ASSIGN_OR_RETURN(options.optimizer, OptimizerSpecOf(e.training));
  return training::Trainer::Create(std::move(graph), std::move(options));
}

absl::StatusOr<StepResult> TrainStep(const Executable& e, training::Trainer& trainer,
                                     const std::vector<const tensor::Tensor*>& inputs) {
  const int64_t r = e.replication_factor, a = AccumulationSteps(e);
  // outputs[j]: micro-batch j's outputs (host order), kept only if returned.
  std::vector<int64_t> returned = ReturnedMicroBatches(e);
  std::vector<bool> keep(static_cast<size_t>(e.batch_size_factor), false);
  for (int64_t j : returned) keep[static_cast<size_t>(j)] = true;
  std::vector<std::vector<tensor::Tensor>> by_index(keep.size());
  StepResult step;
  for (int64_t i = 0; i < e.device_iterations; ++i) {
    IPUPOD_ASSIGN_OR_RETURN(auto micro_batches, UpdateInputs(e, inputs, i));
    auto update = trainer.Step(micro_batches);
    if (!update.ok()) {
      return absl::Status(update.status().code(),
                          absl::StrCat("device iteration ", i, ": ", update.status().message()));
    }
    for (int64_t replica = 0; replica < r; ++replica) {
      for (int64_t m = 0; m < a; ++m) {
        const size_t j = static_cast<size_t>((i * a + m) * r + replica);
        if (keep[j]) by_index[j] = std::move(update->outputs[replica * a + m]);
      }
    }
    step.losses.push_back(MeanLoss(update->losses));
    step.loss_scales.push_back(static_cast<float>(update->loss_scale));
    step.skipped_updates += update->skipped ? 1 : 0;
    step.flops += update->forward_flops + update->backward_flops;
    step.step = update->step;
  }
  std::vector<std::vector<tensor::Tensor>> results;
  for (int64_t j : returned) results.push_back(std::move(by_index[static_cast<size_t>(j)]));
  IPUPOD_ASSIGN_OR_RETURN(step.outputs, Concatenate(e, ReduceForOutputMode(e, std::move(results))));
  return step;
}

bool IsCheckpoint(const tensor::NamedTensors& tensors) {
  for (const auto& [name, t] : tensors) {
    if (absl::StartsWith(name, kOptimizerPrefix) || absl::StartsWith(name, kAttributePrefix)) {
      return true;
    }
  }
  return false;
}

tensor::NamedTensors ExportCheckpoint(const training::Trainer& trainer) {
  tensor::NamedTensors out;
  for (auto& [name, t] : trainer.ExportState()) out.emplace_back(name, std::move(t));
  for (const auto& [name, attr] : trainer.optimizer().spec().QualifiedAttributes()) {
    absl::StatusOr<tensor::Tensor> value = Scalar(static_cast<float>(attr.value));
    if (value.ok()) out.emplace_back(absl::StrCat(kAttributePrefix, name), *std::move(value));
  }
  return out;
}

absl::Status ImportCheckpoint(training::Trainer& trainer, const tensor::NamedTensors& checkpoint) {
  training::TensorMap state;
  std::map<std::string, double> variables;
  const auto attrs = trainer.optimizer().spec().QualifiedAttributes();
  for (const auto& [name, t] : checkpoint) {
    if (!absl::StartsWith(name, kAttributePrefix)) {
      if (!state.emplace(name, t).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint tensor '", name, "' is given twice"));
      }
      continue;
    }
    const std::string attr = name.substr(kAttributePrefix.size());
    auto it = attrs.find(attr);
    if (it == attrs.end() || t.dtype() != tensor::DType::kFloat32 || t.num_elements() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint tensor '", name, "' is not a float32 scalar attribute of this ",
          training::OptimizerKindName(trainer.optimizer().spec().kind()), " optimizer"));
    }
    const double value = t.data<float>()[0];
    if (it->second.is_variable) {
      // Attributes travel as float32: keep the exact value a float32 copy came from.
      if (static_cast<float>(it->second.value) != static_cast<float>(value)) {
        variables[attr] = value;
      }
    } else if (static_cast<float>(it->second.value) != static_cast<float>(value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the checkpoint has ", attr, "=", value, " but this executable fixed ", attr, "=",
          it->second.value, " at compile time; compile with the checkpoint's optimizer settings"));
    }
  }
  std::map<std::string, double> previous;
  for (const auto& [name, value] : variables) previous[name] = attrs.at(name).value;
  IPUPOD_RETURN_IF_ERROR(SetOptimizerVariables(trainer.optimizer(), variables));
  if (absl::Status imported = trainer.ImportState(state); !imported.ok()) {
    // The values it held a moment ago: setting them back is a programmer error if it fails.
    IPUPOD_CHECK_OK(SetOptimizerVariables(trainer.optimizer(), previous))
        << "restoring the optimizer's variables after a failed import";
    return imported;
  }
  return absl::OkStatus();
}

absl::Status SetOptimizerVariables(training::Optimizer& optimizer,
                                   const std::map<std::string, double>& values) {
  std::map<std::string, double> done;  // previous values of what was changed
  const auto attrs = optimizer.spec().QualifiedAttributes();
  for (const auto& [name, value] : values) {
    auto it = attrs.find(name);
    const double previous = it == attrs.end() ? 0 : it->second.value;
    if (absl::Status set = optimizer.SetVariable(name, value); !set.ok()) {
      for (const auto& [undo, old] : done) (void)optimizer.SetVariable(undo, old);
      return set;
    }
    done[name] = previous;
  }
  return absl::OkStatus();
}

OptimizerState DescribeOptimizer(const training::Trainer& trainer) {
  const training::Optimizer& optimizer = trainer.optimizer();
  OptimizerState out;
  out.optimizer = std::string(training::OptimizerKindName(optimizer.spec().kind()));
  for (const auto& [name, attr] : optimizer.spec().QualifiedAttributes()) {
    (attr.is_variable ? out.variables : out.constants)[name] = attr.value;
  }
  out.step = optimizer.step();
  return out;
}

}  // namespace ipupod::runtime
