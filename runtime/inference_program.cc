// runtime::Program for inference executables: a graph::Interpreter over
// the folded model; weights are the model's float initializers it reads.
#include <algorithm>
#include <climits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/interpreter.h"
#include "graph/run_context.h"
#include "onnx/onnx_pb.h"
#include "runtime/program_modes.h"
#include "runtime/step_layout.h"
#include "runtime/training_step.h"

namespace ipupod::runtime {
namespace {

using compiler::Executable;
using compiler::TensorSpec;

// Weights: the model's own float initializers the imported graph still reads.
absl::StatusOr<std::vector<TensorSpec>> FindWeights(const Executable& e, const graph::Graph& g) {
  onnx::ModelProto model;
  if (e.model_bytes.size() > static_cast<size_t>(INT_MAX) ||
      !model.ParseFromArray(e.model_bytes.data(), static_cast<int>(e.model_bytes.size()))) {
    return BadExecutable("its model is not an ONNX ModelProto");
  }
  std::vector<TensorSpec> weights;
  for (const onnx::TensorProto& p : model.graph().initializer()) {
    const tensor::Tensor* t = g.FindInitializer(p.name());
    if (t == nullptr || t->dtype() != tensor::DType::kFloat32) continue;
    weights.push_back({p.name(), t->dtype(), t->shape()});
  }
  std::sort(weights.begin(), weights.end(),
            [](const TensorSpec& a, const TensorSpec& b) { return a.name < b.name; });
  weights.erase(std::unique(weights.begin(), weights.end()), weights.end());
  return weights;
}

// device_iterations micro-batches per replica; pipelined, S - 1 more
// cycles fill and drain the pipeline. Equals the report's step_s.
SimulatedTime InferenceStepTime(const compiler::Report& r) {
  SimulatedTime t = MicroBatchesTime(r, static_cast<double>(r.device_iterations));
  t.pipeline_ramp_s = static_cast<double>(r.num_stages - 1) * PipelineCycleSeconds(r);
  return t;
}

class InferenceProgram final : public Program {
 public:
  InferenceProgram(std::shared_ptr<const Executable> executable, compiler::Report report,
                   std::vector<TensorSpec> weights, std::unique_ptr<graph::Interpreter> interpreter)
      : Program(std::move(executable), report, std::move(weights), InferenceStepTime(report)),
        interpreter_(std::move(interpreter)) {}

  int64_t max_set_weights_bytes() const override { return weight_bytes() + kWeightSlackBytes; }

  absl::Status SetWeights(tensor::NamedTensors weights) override {
    IPUPOD_RETURN_IF_ERROR(CheckWeights(weights));
    return interpreter_->ReplaceInitializers(weights);
  }

  bool is_training() const override { return false; }
  absl::StatusOr<tensor::NamedTensors> GetCheckpoint() const override {
    return NotTraining("checkpoints");
  }
  absl::StatusOr<OptimizerState> SetOptimizer(const std::map<std::string, double>&) override {
    return NotTraining("optimizers");
  }
  absl::StatusOr<OptimizerState> GetOptimizer() const override { return NotTraining("optimizers"); }

 private:
  const tensor::Tensor* FindWeight(const std::string& name) const override {
    return interpreter_->graph().FindInitializer(name);
  }

  // Only the micro-batches whose outputs the mode returns: inference keeps
  // no state between micro-batches, so the others cannot change the result.
  absl::StatusOr<StepResult> Step(const std::vector<const tensor::Tensor*>& inputs) override {
    const Executable& e = executable();
    std::vector<std::vector<tensor::Tensor>> results;
    const uint64_t run = runs_++;
    for (int64_t j : ReturnedMicroBatches(e)) {
      IPUPOD_ASSIGN_OR_RETURN(std::vector<tensor::Tensor> slice, SliceInputs(e, inputs, j));
      const graph::RunContext context = graph::MicroBatchRunContext(
          run, static_cast<uint64_t>(j % e.replication_factor),
          static_cast<uint64_t>(j / e.replication_factor), /*training=*/false);
      graph::ScopedRunContext scope(&context);
      auto outputs = interpreter_->Run(slice);
      if (!outputs.ok()) {
        return absl::Status(
            outputs.status().code(),
            absl::StrCat("micro-batch ", j, " (device iteration ", j / e.replication_factor,
                         ", replica ", j % e.replication_factor,
                         "): ", outputs.status().message()));
      }
      results.push_back(*std::move(outputs));
    }
    results = ReduceForOutputMode(e, std::move(results));
    StepResult step;
    IPUPOD_ASSIGN_OR_RETURN(step.outputs, Concatenate(e, results));
    step.flops = interpreter_->total_flops() * e.batch_size_factor;
    return step;
  }

  const std::unique_ptr<graph::Interpreter> interpreter_;
  uint64_t runs_ = 0;  // steps run since the load: the random stream's step
};

}  // namespace

absl::StatusOr<std::unique_ptr<Program>> CreateInferenceProgram(
    std::shared_ptr<const Executable> executable, const LoadOptions& options) {
  IPUPOD_ASSIGN_OR_RETURN(ImportedModel model,
                          ImportForProgram(*executable, options, /*keep_weights=*/false, 1, ""));
  IPUPOD_ASSIGN_OR_RETURN(std::vector<TensorSpec> weights, FindWeights(*executable, model.graph));
  auto interpreter = graph::Interpreter::Create(std::move(model.graph));
  if (!interpreter.ok()) return BadExecutable(interpreter.status().message());
  return std::make_unique<InferenceProgram>(std::move(executable), std::move(model.report),
                                            std::move(weights), *std::move(interpreter));
}

}  // namespace ipupod::runtime
