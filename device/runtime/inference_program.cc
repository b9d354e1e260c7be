// runtime::Program for inference executables: a graph::Interpreter over
// the folded model; weights are the model's float initializers it reads.
#include <algorithm>
#include <atomic>
#include <climits>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/graph/interpreter.h"
#include "device/graph/run_context.h"
#include "device/runtime/program_modes.h"
#include "device/runtime/step_layout.h"
#include "device/runtime/training_step.h"
#include "onnx/onnx_pb.h"

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
    if (t == nullptr || !tensor::IsFloat(t->dtype())) continue;
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
                   std::vector<TensorSpec> weights, std::unique_ptr<graph::Interpreter> interpreter,
                   std::vector<std::string> buffers)
      : Program(std::move(executable), report, std::move(weights), InferenceStepTime(report),
                interpreter->graph().module_state.aliases),
        interpreter_(std::move(interpreter)),
        buffers_(std::move(buffers)) {
    const Executable& e = this->executable();
    if (e.config.broadcast_buffers || e.replication_factor == 1 || buffers_.empty()) return;
    NamedBuffers values;
    for (const std::string& name : buffers_)
      values.emplace_back(name, *interpreter_->graph().FindInitializer(name));
    copies_.assign(static_cast<size_t>(e.replication_factor - 1), values);
  }

  int64_t max_set_weights_bytes() const override {
    return weight_bytes() + alias_bytes() + kWeightSlackBytes;
  }

  // A buffer written reaches every replica's copy.
  absl::Status SetWeights(tensor::NamedTensors weights) override {
    IPUPOD_RETURN_IF_ERROR(ResolveAliases(weights));
    IPUPOD_RETURN_IF_ERROR(CheckWeights(weights));
    std::map<std::string, tensor::Tensor> written;
    if (!copies_.empty()) {
      for (const auto& [name, t] : weights) {
        if (std::find(buffers_.begin(), buffers_.end(), name) != buffers_.end())
          written.emplace(name, t);
      }
    }
    IPUPOD_RETURN_IF_ERROR(interpreter_->ReplaceInitializers(weights));
    for (NamedBuffers& copy : copies_) {
      for (auto& [name, t] : copy) {
        auto it = written.find(name);
        if (it != written.end()) t = it->second;
      }
    }
    return absl::OkStatus();
  }

  bool is_training() const override { return false; }
  absl::StatusOr<tensor::NamedTensors> GetCheckpoint() const override {
    return NotTraining("checkpoints");
  }
  absl::StatusOr<OptimizerState> SetOptimizer(const std::map<std::string, double>&) override {
    return NotTraining("optimizers");
  }
  absl::StatusOr<OptimizerState> GetOptimizer() const override { return NotTraining("optimizers"); }

  // Without buffers, only the micro-batches whose outputs the mode returns:
  // nothing else carries state from one micro-batch to the next. With
  // buffers, every micro-batch in data order, each replacing them with its
  // update (one copy, as training's buffers); with each replica's own copy
  // (broadcast_buffers false), replica by replica, each replica's
  // micro-batches in data order on its own copy. A failed step leaves the
  // buffers as they were.
  absl::StatusOr<StepResult> Step(const std::vector<const tensor::Tensor*>& inputs) override {
    const Executable& e = executable();
    const uint64_t run = runs_.fetch_add(1, std::memory_order_relaxed);
    const std::vector<int64_t> returned = ReturnedMicroBatches(e);
    std::vector<bool> keep(static_cast<size_t>(e.batch_size_factor), false);
    for (int64_t j : returned) keep[static_cast<size_t>(j)] = true;
    NamedBuffers before;  // replica 0's old values
    // Replicas 1..R-1's, updated by the step. Only a program with buffers
    // has copies, and only its steps are serialised (a program without
    // buffers may run steps at once, so this touches copies_ only when set).
    std::vector<NamedBuffers> copies;
    if (!copies_.empty()) copies = copies_;
    std::map<int64_t, std::vector<tensor::Tensor>> by_index;
    const absl::Status status = RunMicroBatches(inputs, run, keep, before, copies, by_index);
    if (!status.ok()) {
      if (!before.empty()) interpreter_->ReplaceInitializers(before).IgnoreError();
      return status;
    }
    if (!copies.empty()) copies_ = std::move(copies);
    std::vector<std::vector<tensor::Tensor>> results;
    for (auto& [j, outputs] : by_index) results.push_back(std::move(outputs));
    results = ReduceForOutputMode(e, std::move(results));
    StepResult step;
    IPUPOD_ASSIGN_OR_RETURN(step.outputs, Concatenate(e, results));
    step.flops = interpreter_->total_flops() * e.batch_size_factor;
    return step;
  }

 private:
  using NamedBuffers = std::vector<std::pair<std::string, tensor::Tensor>>;

  const tensor::Tensor* FindWeight(const std::string& name) const override {
    return interpreter_->graph().FindInitializer(name);
  }

  // Replica r > 0's copy is swapped into the interpreter for its
  // micro-batches and out again after them, so the interpreter holds replica
  // 0's between groups (and between steps).
  absl::Status RunMicroBatches(const std::vector<const tensor::Tensor*>& inputs, uint64_t run,
                               const std::vector<bool>& keep, NamedBuffers& before,
                               std::vector<NamedBuffers>& copies,
                               std::map<int64_t, std::vector<tensor::Tensor>>& by_index) {
    const Executable& e = executable();
    const int64_t groups = copies.empty() ? 1 : e.replication_factor;
    for (int64_t r = 0; r < groups; ++r) {
      if (r > 0) IPUPOD_RETURN_IF_ERROR(interpreter_->ReplaceInitializers(copies[r - 1]));
      for (int64_t j = r; j < e.batch_size_factor; j += groups) {
        if (buffers_.empty() && !keep[static_cast<size_t>(j)]) continue;
        IPUPOD_ASSIGN_OR_RETURN(std::vector<tensor::Tensor> outputs, RunMicroBatch(inputs, run, j));
        if (!buffers_.empty()) {
          IPUPOD_ASSIGN_OR_RETURN(outputs, UpdateBuffers(std::move(outputs), before));
        }
        if (keep[static_cast<size_t>(j)]) by_index.emplace(j, std::move(outputs));
      }
      if (r > 0) IPUPOD_RETURN_IF_ERROR(interpreter_->ReplaceInitializers(copies[r - 1]));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<tensor::Tensor>> RunMicroBatch(
      const std::vector<const tensor::Tensor*>& inputs, uint64_t run, int64_t j) {
    const Executable& e = executable();
    IPUPOD_ASSIGN_OR_RETURN(std::vector<tensor::Tensor> slice, SliceInputs(e, inputs, j));
    const graph::RunContext context = graph::MicroBatchRunContext(
        run, static_cast<uint64_t>(j % e.replication_factor),
        static_cast<uint64_t>(j / e.replication_factor), /*training=*/false);
    graph::ScopedRunContext scope(&context);
    auto outputs = interpreter_->Run(slice);
    if (outputs.ok()) return outputs;
    return absl::Status(
        outputs.status().code(),
        absl::StrCat("micro-batch ", j, " (device iteration ", j / e.replication_factor,
                     ", replica ", j % e.replication_factor, "): ", outputs.status().message()));
  }

  // Swaps the buffers' updates (the outputs after the executable's own) in;
  // the first call leaves the old values in `before`.
  absl::StatusOr<std::vector<tensor::Tensor>> UpdateBuffers(
      std::vector<tensor::Tensor> outputs,
      std::vector<std::pair<std::string, tensor::Tensor>>& before) {
    const size_t own = executable().outputs.size();
    std::vector<std::pair<std::string, tensor::Tensor>> updates;
    for (size_t k = 0; k < buffers_.size(); ++k)
      updates.emplace_back(buffers_[k], std::move(outputs[own + k]));
    IPUPOD_RETURN_IF_ERROR(interpreter_->ReplaceInitializers(updates));
    if (before.empty()) before = std::move(updates);
    outputs.resize(own);
    return outputs;
  }

  const std::unique_ptr<graph::Interpreter> interpreter_;
  const std::vector<std::string> buffers_;  // executable().inference_buffers' keys, in order
  // broadcast_buffers false with R > 1 replicas: replicas 1..R-1's buffers
  // (buffers_ order); the interpreter holds replica 0's, which reads return.
  std::vector<NamedBuffers> copies_;
  // Steps run since the load: the random stream's step. Atomic: steps of a
  // model without buffers change nothing else and may overlap.
  std::atomic<uint64_t> runs_{0};
};

}  // namespace

absl::StatusOr<std::unique_ptr<Program>> CreateInferenceProgram(
    std::shared_ptr<const Executable> executable, const LoadOptions& options) {
  IPUPOD_ASSIGN_OR_RETURN(ImportedModel model,
                          ImportForProgram(*executable, options, /*keep_weights=*/true, 1, ""));
  IPUPOD_ASSIGN_OR_RETURN(std::vector<TensorSpec> weights, FindWeights(*executable, model.graph));
  // The buffers' new values come back as outputs after the executable's own.
  std::vector<std::string> buffers;
  for (const auto& [buffer, value] : executable->inference_buffers) {
    const graph::TensorType* type = model.graph.FindType(value);
    if (type == nullptr || model.graph.FindInitializer(buffer) == nullptr) {
      return BadExecutable(absl::StrCat("its buffer '", buffer, "' or its update '", value,
                                        "' is not in its model"));
    }
    model.graph.outputs.push_back({value, *type});
    buffers.push_back(buffer);
  }
  auto interpreter = graph::Interpreter::Create(std::move(model.graph));
  if (!interpreter.ok()) return BadExecutable(interpreter.status().message());
  return std::make_unique<InferenceProgram>(std::move(executable), std::move(model.report),
                                            std::move(weights), *std::move(interpreter),
                                            std::move(buffers));
}

}  // namespace ipupod::runtime
