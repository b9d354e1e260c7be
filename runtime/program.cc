#include "runtime/program.h"

#include <algorithm>
#include <climits>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "compiler/report.h"
#include "device/hardware.h"
#include "graph/interpreter.h"
#include "graph/onnx_import.h"
#include "kernels/shape_util.h"
#include "onnx/onnx_pb.h"
#include "runtime/step_layout.h"
#include "runtime/training_step.h"
#include "training/trainer.h"

namespace ipupod::runtime {

struct Program::Impl {
  std::unique_ptr<graph::Interpreter> interpreter;  // inference
  std::unique_ptr<training::Trainer> trainer;       // training
  compiler::Report report;
  std::vector<compiler::TensorSpec> weights;  // sorted by name
  SimulatedTime step_time;
  int64_t micro_batches = 1;  // per step: device_iterations x replication
};

namespace {

using compiler::Executable;
using compiler::TensorSpec;

constexpr const device::IpuSpec& kIpu = device::kGc200;

std::string SpecString(const TensorSpec& spec) {
  return absl::StrCat(graph::DTypeName(spec.dtype), kernels::ShapeString(spec.shape));
}

absl::Status BadExecutable(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("the executable does not match its model: ", what,
                                                 "; recompile it with ipupod compile"));
}

// The executable's recorded inputs or outputs against the imported model's.
absl::Status CheckSpecs(const graph::Graph& g, const std::vector<graph::ValueInfo>& model,
                        const std::vector<TensorSpec>& recorded, absl::string_view kind) {
  if (model.size() != recorded.size()) {
    return BadExecutable(absl::StrCat("it records ", recorded.size(), " ", kind,
                                      "s but the model has ", model.size()));
  }
  for (size_t i = 0; i < model.size(); ++i) {
    const graph::TensorType* type = g.FindType(model[i].name);
    const TensorSpec actual{model[i].name, type ? type->dtype : graph::DType::kFloat32,
                            type ? type->shape : graph::Shape{}};
    if (type == nullptr || !(actual == recorded[i])) {
      return BadExecutable(absl::StrCat(kind, " ", i, " is recorded as '", recorded[i].name, "' ",
                                        SpecString(recorded[i]), " but the model has '",
                                        actual.name, "' ", SpecString(actual)));
    }
  }
  return absl::OkStatus();
}

// Weights: the model's own float initializers the imported graph still reads.
absl::StatusOr<std::vector<TensorSpec>> FindWeights(const Executable& e, const graph::Graph& g) {
  onnx::ModelProto model;
  if (e.model_bytes.size() > static_cast<size_t>(INT_MAX) ||
      !model.ParseFromArray(e.model_bytes.data(), static_cast<int>(e.model_bytes.size()))) {
    return BadExecutable("its model is not an ONNX ModelProto");
  }
  std::vector<TensorSpec> weights;
  for (const onnx::TensorProto& p : model.graph().initializer()) {
    const graph::Tensor* t = g.FindInitializer(p.name());
    if (t == nullptr || t->dtype() != graph::DType::kFloat32) continue;
    weights.push_back({p.name(), t->dtype(), t->shape()});
  }
  std::sort(weights.begin(), weights.end(),
            [](const TensorSpec& a, const TensorSpec& b) { return a.name < b.name; });
  weights.erase(std::unique(weights.begin(), weights.end()), weights.end());
  return weights;
}

// One step's device time from the report's per-IPU, per-micro-batch figures.
// Pipelines advance in lockstep (every IPU syncs each cycle), so a step of M
// micro-batches over S stages takes M + S - 1 cycles of the slowest IPU:
// M cycles of work plus S - 1 of fill and drain.
// Training (compiler/memory_plan.h): each of the device_iterations weight
// updates runs gradient_accumulation_steps micro-batches forward and
// backward, fills and drains the pipeline over 2S - 1 stages (the next
// forward needs the updated weights), then all-reduces gradients and moves
// off-chip optimizer state (the slowest IPU's update time). total_s()
// equals the report's step_s in both modes.
SimulatedTime StepTime(const compiler::Report& r, int64_t accumulation, bool training) {
  SimulatedTime t;
  if (r.ipus.empty()) return t;
  const double updates = static_cast<double>(r.device_iterations);
  const double m = static_cast<double>(r.device_iterations * accumulation);
  const bool pipelined = r.strategy == compiler::ExecutionStrategy::kPipelined && r.num_stages > 1;
  if (pipelined) {
    const compiler::IpuPlan& slowest = *std::max_element(
        r.ipus.begin(), r.ipus.end(), [](const compiler::IpuPlan& a, const compiler::IpuPlan& b) {
          return a.busy_s() < b.busy_s();
        });
    t.compute_s = m * slowest.compute_s;
    t.ipu_link_s = m * slowest.ipu_link_s;
    t.host_s = m * slowest.host_s;
    t.pipeline_ramp_s = training
                            ? updates * static_cast<double>(2 * r.num_stages - 2) * slowest.busy_s()
                            : static_cast<double>(r.num_stages - 1) * slowest.busy_s();
  } else {
    for (const compiler::IpuPlan& p : r.ipus) {  // one IPU works at a time
      t.compute_s += m * p.compute_s;
      t.ipu_link_s += m * p.ipu_link_s;
      t.host_s += m * p.host_s;
    }
  }
  if (training) {
    const compiler::IpuPlan& update = *std::max_element(
        r.ipus.begin(), r.ipus.end(), [](const compiler::IpuPlan& a, const compiler::IpuPlan& b) {
          return a.update_s() < b.update_s();
        });
    t.ipu_link_s += updates * update.update_ipu_link_s;
    t.host_s += updates * update.update_host_s;
  }
  return t;
}

int EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<int> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// " (did you mean 'a', 'b'?)" for the closest names within a few edits, or "".
std::string CloseMatches(absl::string_view name, const std::vector<TensorSpec>& specs) {
  int best = std::max<int>(2, static_cast<int>(name.size()) / 4);
  std::vector<std::string> close;
  for (const TensorSpec& s : specs) {
    const int d = EditDistance(name, s.name);
    if (d < best) close.clear();
    if (d <= best) {
      best = d;
      close.push_back(s.name);
    }
  }
  if (close.empty() || close.size() > 3) return "";
  return absl::StrCat(" (did you mean '", absl::StrJoin(close, "', '"), "'?)");
}

const TensorSpec* FindSpec(const std::vector<TensorSpec>& specs, absl::string_view name) {
  for (const TensorSpec& s : specs) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

// RunStep's pieces. Micro-batch j of a step is device iteration j / R on
// replica j % R (PopTorch's order: replicas vary fastest).

absl::Status BadInput(const Executable& e, const TensorSpec& spec, absl::string_view what) {
  const graph::Shape host = compiler::HostInputShape(e, spec);
  return absl::InvalidArgumentError(absl::StrCat(
      "input '", spec.name, "' ", what, "; a step takes ", graph::DTypeName(spec.dtype),
      kernels::ShapeString(host), ": ", e.batch_size_factor, " micro-batches (device_iterations ",
      e.device_iterations, " x replication ", e.replication_factor, ") of ", SpecString(spec),
      " concatenated along dim 0"));
}

// The step's inputs in the executable's order.
absl::StatusOr<std::vector<const graph::Tensor*>> ArrangeInputs(const Executable& e,
                                                                const NamedTensors& inputs) {
  std::vector<const graph::Tensor*> arranged(e.inputs.size(), nullptr);
  for (const NamedTensor& input : inputs) {
    const std::string& name = input.first;
    const graph::Tensor& t = input.second;
    auto it = std::find_if(e.inputs.begin(), e.inputs.end(),
                           [&](const TensorSpec& s) { return s.name == name; });
    if (it == e.inputs.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown input '", name, "'", CloseMatches(name, e.inputs),
                       "; `ipupod inspect FILE.ipx` lists the executable's inputs"));
    }
    const size_t i = static_cast<size_t>(it - e.inputs.begin());
    if (arranged[i] != nullptr) return BadInput(e, *it, "is given twice");
    if (t.dtype() != it->dtype || t.shape() != compiler::HostInputShape(e, *it)) {
      return BadInput(
          e, *it,
          absl::StrCat("is ", graph::DTypeName(t.dtype()), kernels::ShapeString(t.shape())));
    }
    arranged[i] = &t;
  }
  for (size_t i = 0; i < arranged.size(); ++i) {
    if (arranged[i] == nullptr) return BadInput(e, e.inputs[i], "is missing");
  }
  return arranged;
}

}  // namespace

Program::Program(std::shared_ptr<const compiler::Executable> executable)
    : executable_(std::move(executable)), impl_(std::make_unique<Impl>()) {}
Program::~Program() = default;

absl::StatusOr<std::unique_ptr<Program>> Program::Create(
    std::shared_ptr<const compiler::Executable> executable) {
  if (executable == nullptr) return absl::InvalidArgumentError("no executable given");
  const Executable& e = *executable;
  const bool training = e.mode == compiler::ExecutableMode::kTraining;
  auto imported = graph::ImportOnnx(e.model_bytes, graph::FoldOptions{.keep_weights = training});
  if (!imported.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the executable's model does not import: ", imported.status().message()));
  }
  IPUPOD_RETURN_IF_ERROR(CheckSpecs(*imported, imported->inputs, e.inputs, "input"));
  IPUPOD_RETURN_IF_ERROR(CheckSpecs(*imported, imported->outputs, e.outputs, "output"));
  const int64_t accumulation = training ? e.training.gradient_accumulation_steps : 1;
  if (e.batch_size_factor != e.device_iterations * e.replication_factor * accumulation) {
    return BadExecutable(absl::StrCat("batch_size_factor ", e.batch_size_factor, " is not ",
                                      "device_iterations x replication_factor",
                                      training ? " x gradient_accumulation_steps" : ""));
  }
  auto report = compiler::ReportFromJson(e.report_json);
  if (!report.ok()) return BadExecutable(report.status().message());
  std::unique_ptr<Program> program(new Program(std::move(executable)));
  Impl& impl = *program->impl_;
  if (training) {
    auto trainer = CreateTrainer(e, *std::move(imported));
    if (!trainer.ok()) return BadExecutable(trainer.status().message());
    impl.trainer = *std::move(trainer);
    for (const training::TensorMap* state : {&impl.trainer->weights(), &impl.trainer->buffers()}) {
      for (const auto& [name, t] : *state) impl.weights.push_back({name, t.dtype(), t.shape()});
    }
    std::sort(impl.weights.begin(), impl.weights.end(),
              [](const TensorSpec& a, const TensorSpec& b) { return a.name < b.name; });
  } else {
    IPUPOD_ASSIGN_OR_RETURN(impl.weights, FindWeights(e, *imported));
    auto interpreter = graph::Interpreter::Create(*std::move(imported));
    if (!interpreter.ok()) return BadExecutable(interpreter.status().message());
    impl.interpreter = *std::move(interpreter);
  }
  impl.report = *std::move(report);
  impl.step_time = StepTime(impl.report, accumulation, training);
  impl.micro_batches = e.batch_size_factor;
  return program;
}

int64_t Program::samples_per_step() const {
  return executable_->micro_batch_size * impl_->micro_batches;
}

std::vector<compiler::TensorSpec> Program::host_inputs() const {
  std::vector<TensorSpec> out;
  for (const TensorSpec& s : executable_->inputs) {
    out.push_back({s.name, s.dtype, compiler::HostInputShape(*executable_, s)});
  }
  return out;
}

std::vector<compiler::TensorSpec> Program::host_outputs() const {
  std::vector<TensorSpec> out;
  for (const TensorSpec& s : executable_->outputs) {
    out.push_back({s.name, s.dtype, compiler::HostOutputShape(*executable_, s)});
  }
  return out;
}

std::vector<compiler::TensorSpec> Program::weight_specs() const { return impl_->weights; }

int64_t Program::weight_bytes() const {
  int64_t bytes = 0;
  for (const TensorSpec& s : impl_->weights) {
    bytes += static_cast<int64_t>(graph::DTypeSize(s.dtype)) *
             graph::CheckedNumElements(s.dtype, s.shape).value_or(0);
  }
  return bytes;
}

std::vector<int64_t> Program::memory_bytes_per_ipu() const {
  std::vector<int64_t> out;
  for (const compiler::IpuPlan& p : impl_->report.ipus) out.push_back(p.total_bytes);
  return out;
}

double Program::SimulatedHostToDeviceSeconds(int64_t bytes) const {
  return static_cast<double>(bytes) * static_cast<double>(executable_->replication_factor) /
         kIpu.host_link_bytes_per_s;
}

double Program::SimulatedLoadSeconds() const {
  int64_t bytes = 0;
  for (const compiler::IpuPlan& p : impl_->report.ipus) bytes += p.code_bytes + p.weight_bytes;
  return SimulatedHostToDeviceSeconds(bytes);
}

absl::Status Program::SetWeights(NamedTensors weights) {
  if (impl_->trainer != nullptr && IsCheckpoint(weights)) {
    return ImportCheckpoint(*impl_->trainer, weights);
  }
  std::set<std::string> seen;
  for (const auto& [name, t] : weights) {
    const TensorSpec* spec = FindSpec(impl_->weights, name);
    if (spec == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown weight '", name, "'", CloseMatches(name, impl_->weights),
                       "; the model's weights are listed by GetWeights and weight_specs"));
    }
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat("weight '", name, "' is given twice"));
    }
    if (t.dtype() != spec->dtype || t.shape() != spec->shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("weight '", name, "' is ", SpecString(*spec), " but the new value is ",
                       graph::DTypeName(t.dtype()), kernels::ShapeString(t.shape()),
                       "; pass a tensor of the weight's dtype and shape"));
    }
  }
  if (impl_->trainer != nullptr) {
    training::TensorMap map;
    for (auto& [name, t] : weights) map.emplace(name, std::move(t));
    return impl_->trainer->SetWeights(map);
  }
  return impl_->interpreter->ReplaceInitializers(weights);
}

absl::StatusOr<std::vector<TensorRef>> Program::ViewWeights(
    absl::Span<const std::string> names) const {
  std::vector<std::string> wanted(names.begin(), names.end());
  if (wanted.empty()) {
    for (const TensorSpec& s : impl_->weights) wanted.push_back(s.name);
  }
  std::vector<TensorRef> out;
  for (const std::string& name : wanted) {
    if (FindSpec(impl_->weights, name) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown weight '", name, "'",
                                                     CloseMatches(name, impl_->weights),
                                                     "; ask for no names to get every weight"));
    }
    out.emplace_back(name, impl_->trainer != nullptr
                               ? impl_->trainer->FindState(name)
                               : impl_->interpreter->graph().FindInitializer(name));
  }
  return out;
}

absl::StatusOr<NamedTensors> Program::GetWeights(absl::Span<const std::string> names) const {
  IPUPOD_ASSIGN_OR_RETURN(std::vector<TensorRef> views, ViewWeights(names));
  NamedTensors out;
  out.reserve(views.size());
  for (const auto& [name, tensor] : views) out.emplace_back(name, *tensor);
  return out;
}

absl::StatusOr<StepResult> Program::RunStep(const NamedTensors& inputs) {
  const absl::Time start = absl::Now();
  const Executable& e = *executable_;
  IPUPOD_ASSIGN_OR_RETURN(std::vector<const graph::Tensor*> arranged, ArrangeInputs(e, inputs));
  if (impl_->trainer != nullptr) {
    IPUPOD_ASSIGN_OR_RETURN(StepResult step, TrainStep(e, *impl_->trainer, arranged));
    step.simulated = impl_->step_time;
    step.samples = samples_per_step();
    step.wall_s = absl::ToDoubleSeconds(absl::Now() - start);
    return step;
  }
  std::vector<std::vector<graph::Tensor>> results;
  for (int64_t j : ReturnedMicroBatches(e)) {
    IPUPOD_ASSIGN_OR_RETURN(std::vector<graph::Tensor> slice, SliceInputs(e, arranged, j));
    auto outputs = impl_->interpreter->Run(slice);
    if (!outputs.ok()) {
      return absl::Status(
          outputs.status().code(),
          absl::StrCat("micro-batch ", j, " (device iteration ", j / e.replication_factor,
                       ", replica ", j % e.replication_factor, "): ", outputs.status().message()));
    }
    results.push_back(*std::move(outputs));
  }
  results = ReduceForOutputMode(e, std::move(results));
  StepResult step;
  IPUPOD_ASSIGN_OR_RETURN(step.outputs, Concatenate(e, results));
  step.simulated = impl_->step_time;
  step.samples = samples_per_step();
  step.flops = impl_->interpreter->total_flops() * impl_->micro_batches;
  step.wall_s = absl::ToDoubleSeconds(absl::Now() - start);
  return step;
}

bool Program::is_training() const { return impl_->trainer != nullptr; }

absl::StatusOr<NamedTensors> Program::GetCheckpoint() const {
  if (impl_->trainer == nullptr) return NotTraining("checkpoints");
  return ExportCheckpoint(*impl_->trainer);
}

absl::StatusOr<OptimizerState> Program::SetOptimizer(const std::map<std::string, double>& values) {
  if (impl_->trainer == nullptr) return NotTraining("optimizers");
  IPUPOD_RETURN_IF_ERROR(SetOptimizerVariables(impl_->trainer->optimizer(), values));
  return GetOptimizer();
}

absl::StatusOr<OptimizerState> Program::GetOptimizer() const {
  if (impl_->trainer == nullptr) return NotTraining("optimizers");
  return DescribeOptimizer(*impl_->trainer);
}

}  // namespace ipupod::runtime
