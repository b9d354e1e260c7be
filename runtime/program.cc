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

namespace ipupod::runtime {

struct Program::Impl {
  std::unique_ptr<graph::Interpreter> interpreter;
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
SimulatedTime StepTime(const compiler::Report& r) {
  SimulatedTime t;
  if (r.ipus.empty()) return t;
  const double m = static_cast<double>(r.device_iterations);
  if (r.strategy == compiler::ExecutionStrategy::kPipelined && r.num_stages > 1) {
    const compiler::IpuPlan& slowest = *std::max_element(
        r.ipus.begin(), r.ipus.end(), [](const compiler::IpuPlan& a, const compiler::IpuPlan& b) {
          return a.busy_s() < b.busy_s();
        });
    t.compute_s = m * slowest.compute_s;
    t.ipu_link_s = m * slowest.ipu_link_s;
    t.host_s = m * slowest.host_s;
    t.pipeline_ramp_s = static_cast<double>(r.num_stages - 1) * slowest.busy_s();
    return t;
  }
  for (const compiler::IpuPlan& p : r.ipus) {  // one IPU works at a time
    t.compute_s += m * p.compute_s;
    t.ipu_link_s += m * p.ipu_link_s;
    t.host_s += m * p.host_s;
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
                       "; the executable's inputs are listed by `ipupod inspect`"));
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

// Micro-batch j's slice of every input.
absl::StatusOr<std::vector<graph::Tensor>> SliceInputs(
    const Executable& e, const std::vector<const graph::Tensor*>& inputs, int64_t j) {
  std::vector<graph::Tensor> out;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const size_t n = inputs[i]->byte_size() / static_cast<size_t>(e.batch_size_factor);
    IPUPOD_ASSIGN_OR_RETURN(graph::Tensor t,
                            graph::Tensor::FromBytes(e.inputs[i].dtype, e.inputs[i].shape,
                                                     inputs[i]->bytes().substr(j * n, n)));
    out.push_back(std::move(t));
  }
  return out;
}

// Micro-batches whose outputs the host receives, in host order (all of
// them for sum, which reduces them per replica).
std::vector<int64_t> ReturnedMicroBatches(const Executable& e) {
  const int64_t r = e.replication_factor, m = e.device_iterations;
  int64_t first = 0, period = 1;
  switch (e.output_mode.kind) {
    case compiler::OutputMode::Kind::kAll:
    case compiler::OutputMode::Kind::kSum:
      break;
    case compiler::OutputMode::Kind::kFinal:
      first = m - 1;
      break;
    case compiler::OutputMode::Kind::kEveryN:
      first = e.output_mode.every_n - 1;
      period = e.output_mode.every_n;
      break;
  }
  std::vector<int64_t> out;
  for (int64_t i = first; i < m; i += period) {
    for (int64_t k = 0; k < r; ++k) out.push_back(i * r + k);
  }
  return out;
}

// Adds b into a element-wise (bool: or).
void Accumulate(graph::Tensor& a, const graph::Tensor& b) {
  for (int64_t k = 0; k < a.num_elements(); ++k) {
    switch (a.dtype()) {
      case graph::DType::kFloat32:
        a.mutable_data<float>()[k] += b.data<float>()[k];
        break;
      case graph::DType::kInt64:
        a.mutable_data<int64_t>()[k] += b.data<int64_t>()[k];
        break;
      case graph::DType::kInt32:
        a.mutable_data<int32_t>()[k] += b.data<int32_t>()[k];
        break;
      case graph::DType::kBool:
        a.mutable_data<bool>()[k] = a.data<bool>()[k] || b.data<bool>()[k];
        break;
    }
  }
}

// results[k][o]: output o of the k-th returned micro-batch. Sum mode folds
// device iterations per replica first (in iteration order).
std::vector<std::vector<graph::Tensor>> ApplySum(const Executable& e,
                                                 std::vector<std::vector<graph::Tensor>> results) {
  const size_t r = static_cast<size_t>(e.replication_factor);
  for (size_t k = r; k < results.size(); ++k) {
    for (size_t o = 0; o < results[k].size(); ++o) Accumulate(results[k % r][o], results[k][o]);
  }
  results.resize(r);
  return results;
}

absl::StatusOr<NamedTensors> Concatenate(const Executable& e,
                                         const std::vector<std::vector<graph::Tensor>>& results) {
  NamedTensors out;
  for (size_t o = 0; o < e.outputs.size(); ++o) {
    std::string bytes;
    for (const auto& micro_batch : results)
      bytes.append(micro_batch[o].bytes().data(), micro_batch[o].bytes().size());
    IPUPOD_ASSIGN_OR_RETURN(
        graph::Tensor t,
        graph::Tensor::FromBytes(e.outputs[o].dtype, compiler::HostOutputShape(e, e.outputs[o]),
                                 bytes));
    out.emplace_back(e.outputs[o].name, std::move(t));
  }
  return out;
}

}  // namespace

Program::Program(std::shared_ptr<const compiler::Executable> executable)
    : executable_(std::move(executable)), impl_(std::make_unique<Impl>()) {}
Program::~Program() = default;

absl::StatusOr<std::unique_ptr<Program>> Program::Create(
    std::shared_ptr<const compiler::Executable> executable) {
  if (executable == nullptr) return absl::InvalidArgumentError("no executable given");
  const Executable& e = *executable;
  auto imported = graph::ImportOnnx(e.model_bytes);
  if (!imported.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the executable's model does not import: ", imported.status().message()));
  }
  IPUPOD_RETURN_IF_ERROR(CheckSpecs(*imported, imported->inputs, e.inputs, "input"));
  IPUPOD_RETURN_IF_ERROR(CheckSpecs(*imported, imported->outputs, e.outputs, "output"));
  if (e.batch_size_factor != e.device_iterations * e.replication_factor) {
    return BadExecutable(absl::StrCat("batch_size_factor ", e.batch_size_factor, " is not ",
                                      "device_iterations x replication_factor"));
  }
  auto report = compiler::ReportFromJson(e.report_json);
  if (!report.ok()) return BadExecutable(report.status().message());
  std::unique_ptr<Program> program(new Program(std::move(executable)));
  Impl& impl = *program->impl_;
  IPUPOD_ASSIGN_OR_RETURN(impl.weights, FindWeights(e, *imported));
  auto interpreter = graph::Interpreter::Create(*std::move(imported));
  if (!interpreter.ok()) return BadExecutable(interpreter.status().message());
  impl.interpreter = *std::move(interpreter);
  impl.report = *std::move(report);
  impl.step_time = StepTime(impl.report);
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
    out.emplace_back(name, impl_->interpreter->graph().FindInitializer(name));
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

absl::StatusOr<StepResult> Program::RunStep(const NamedTensors& inputs) const {
  const absl::Time start = absl::Now();
  const Executable& e = *executable_;
  IPUPOD_ASSIGN_OR_RETURN(std::vector<const graph::Tensor*> arranged, ArrangeInputs(e, inputs));
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
  if (e.output_mode.kind == compiler::OutputMode::Kind::kSum) {
    results = ApplySum(e, std::move(results));
  }
  StepResult step;
  IPUPOD_ASSIGN_OR_RETURN(step.outputs, Concatenate(e, results));
  step.simulated = impl_->step_time;
  step.samples = samples_per_step();
  step.flops = impl_->interpreter->total_flops() * impl_->micro_batches;
  step.wall_s = absl::ToDoubleSeconds(absl::Now() - start);
  return step;
}

}  // namespace ipupod::runtime
