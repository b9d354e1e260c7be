#include "device/runtime/program.h"

#include <algorithm>
#include <climits>
#include <map>
#include <random>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "common/text_match.h"
#include "device/compiler/memory_plan.h"
#include "device/compiler/report.h"
#include "device/graph/onnx_import.h"
#include "device/graph/run_context.h"
#include "device/hardware.h"
#include "device/kernels/shape_util.h"
#include "device/runtime/program_modes.h"

namespace ipupod::runtime {

namespace {

using compiler::Executable;
using compiler::TensorSpec;

constexpr const device::IpuSpec& kIpu = device::kGc200;

std::string SpecString(const TensorSpec& spec) {
  return absl::StrCat(tensor::DTypeName(spec.dtype), kernels::ShapeString(spec.shape));
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
    const TensorSpec actual{model[i].name, type ? type->dtype : tensor::DType::kFloat32,
                            type ? type->shape : graph::Shape{}};
    if (type == nullptr || !(actual == recorded[i])) {
      return BadExecutable(absl::StrCat(kind, " ", i, " is recorded as '", recorded[i].name, "' ",
                                        SpecString(recorded[i]), " but the model has '",
                                        actual.name, "' ", SpecString(actual)));
    }
  }
  return absl::OkStatus();
}

const compiler::IpuPlan& SlowestIpu(const compiler::Report& r) {
  return *std::max_element(r.ipus.begin(), r.ipus.end(),
                           [](const compiler::IpuPlan& a, const compiler::IpuPlan& b) {
                             return a.busy_s() < b.busy_s();
                           });
}

// " (did you mean 'a', 'b'?)" for the nearest names within a few edits, or "".
std::string SpecHint(absl::string_view name, const std::vector<TensorSpec>& specs) {
  std::vector<std::string> names;
  for (const TensorSpec& s : specs) names.push_back(s.name);
  const std::vector<std::string> close = ipupod::CloseMatches(
      name, names, {.length_divisor = 4, .substrings = false, .nearest_only = true});
  return close.empty() ? "" : absl::StrCat(" (", DidYouMean(close), ")");
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
      "input '", spec.name, "' ", what, "; a step takes ", tensor::DTypeName(spec.dtype),
      kernels::ShapeString(host), ": ", e.batch_size_factor, " micro-batches (device_iterations ",
      e.device_iterations, " x replication ", e.replication_factor, ") of ", SpecString(spec),
      " concatenated along dim 0"));
}

// The step's inputs in the executable's order.
absl::StatusOr<std::vector<const tensor::Tensor*>> ArrangeInputs(
    const Executable& e, const tensor::NamedTensors& inputs) {
  std::vector<const tensor::Tensor*> arranged(e.inputs.size(), nullptr);
  for (const tensor::NamedTensor& input : inputs) {
    const std::string& name = input.first;
    const tensor::Tensor& t = input.second;
    auto it = std::find_if(e.inputs.begin(), e.inputs.end(),
                           [&](const TensorSpec& s) { return s.name == name; });
    if (it == e.inputs.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown input '", name, "'", SpecHint(name, e.inputs),
                       "; `ipupod inspect FILE.ipx` lists the executable's inputs"));
    }
    const size_t i = static_cast<size_t>(it - e.inputs.begin());
    if (arranged[i] != nullptr) return BadInput(e, *it, "is given twice");
    if (t.dtype() != it->dtype || t.shape() != compiler::HostInputShape(e, *it)) {
      return BadInput(
          e, *it,
          absl::StrCat("is ", tensor::DTypeName(t.dtype()), kernels::ShapeString(t.shape())));
    }
    arranged[i] = &t;
  }
  for (size_t i = 0; i < arranged.size(); ++i) {
    if (arranged[i] == nullptr) return BadInput(e, e.inputs[i], "is missing");
  }
  return arranged;
}

}  // namespace

absl::Status BadExecutable(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("the executable does not match its model: ", what,
                                                 "; recompile it with ipupod compile"));
}

absl::StatusOr<ImportedModel> ImportForProgram(const Executable& e, const LoadOptions& options,
                                               bool keep_weights, int64_t accumulation,
                                               absl::string_view accumulation_name) {
  auto imported =
      graph::ImportOnnx(e.model_bytes,
                        graph::FoldOptions{.keep_weights = keep_weights,
                                           .max_folded_bytes = options.max_folded_bytes,
                                           .cancelled = options.cancelled,
                                           .half_partials = e.config.enable_half_partials},
                        options.custom_ops);
  if (!imported.ok() && imported.status().code() != absl::StatusCode::kInvalidArgument) {
    return imported.status();  // CANCELLED, RESOURCE_EXHAUSTED: not the executable's fault
  }
  if (!imported.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the executable's model does not import: ", imported.status().message()));
  }
  IPUPOD_RETURN_IF_ERROR(CheckSpecs(*imported, imported->inputs, e.inputs, "input"));
  IPUPOD_RETURN_IF_ERROR(CheckSpecs(*imported, imported->outputs, e.outputs, "output"));
  if (e.batch_size_factor != e.device_iterations * e.replication_factor * accumulation) {
    return BadExecutable(absl::StrCat("batch_size_factor ", e.batch_size_factor, " is not ",
                                      "device_iterations x replication_factor",
                                      accumulation_name.empty() ? "" : " x ", accumulation_name));
  }
  auto report = compiler::ReportFromJson(e.report_json);
  if (!report.ok()) return BadExecutable(report.status().message());
  IPUPOD_RETURN_IF_ERROR(compiler::CheckReportCoversModel(e, *report, *imported));
  return ImportedModel{*std::move(imported), *std::move(report)};
}

// Pipelines advance in lockstep (every IPU syncs each cycle), so M
// micro-batches over S stages take M + S - 1 cycles of the slowest IPU: M
// cycles of work (here) plus S - 1 of fill and drain (the ramp, which each
// mode counts in PipelineCycleSeconds).
SimulatedTime MicroBatchesTime(const compiler::Report& r, double m) {
  SimulatedTime t;
  if (r.ipus.empty()) return t;
  if (compiler::IsPhased(r.strategy)) {  // phases in turn (device/compiler/phase_plan.h)
    for (const compiler::PhasePlan& phase : r.phases) {
      t.compute_s += m * phase.compute_s;
      t.ipu_link_s += m * phase.ipu_link_s;
      t.host_s += m * phase.streaming_s;
    }
    for (const compiler::IpuPlan& p : r.ipus) t.host_s += m * p.host_s;
    return t;
  }
  if (r.strategy == compiler::ExecutionStrategy::kPipelined && r.num_stages > 1) {
    const compiler::IpuPlan& slowest = SlowestIpu(r);
    t.compute_s = m * slowest.compute_s;
    t.ipu_link_s = m * slowest.ipu_link_s;
    t.host_s = m * slowest.host_s;
    return t;
  }
  for (const compiler::IpuPlan& p : r.ipus) {  // one IPU works at a time
    t.compute_s += m * p.compute_s;
    t.ipu_link_s += m * p.ipu_link_s;
    t.host_s += m * p.host_s;
  }
  return t;
}

double PipelineCycleSeconds(const compiler::Report& r) {
  if (r.ipus.empty() || r.strategy != compiler::ExecutionStrategy::kPipelined ||
      r.num_stages <= 1) {
    return 0;
  }
  return SlowestIpu(r).busy_s();
}

absl::StatusOr<std::unique_ptr<Program>> Program::Create(
    std::shared_ptr<const compiler::Executable> executable, const LoadOptions& options) {
  if (executable == nullptr) return absl::InvalidArgumentError("no executable given");
  if (executable->mode == compiler::ExecutableMode::kTraining) {
    return CreateTrainingProgram(std::move(executable), options);
  }
  return CreateInferenceProgram(std::move(executable), options);
}

int64_t HostMemoryBytes(const compiler::Report& report) { return report.host_bytes(); }

int64_t Program::host_memory_bytes() const { return HostMemoryBytes(report_); }

Program::Program(std::shared_ptr<const compiler::Executable> executable, compiler::Report report,
                 std::vector<compiler::TensorSpec> weights, SimulatedTime step_time,
                 const std::map<std::string, std::string>& aliases)
    : executable_(std::move(executable)),
      report_(std::move(report)),
      weights_(std::move(weights)),
      step_time_(step_time) {
  for (const auto& [alias, weight] : aliases) {
    if (FindSpec(weights_, weight) != nullptr && FindSpec(weights_, alias) == nullptr) {
      aliases_.emplace(alias, weight);
    }
  }
}

int64_t Program::alias_bytes() const {
  int64_t bytes = 0;
  for (const auto& [alias, weight] : aliases_) {
    const TensorSpec& s = *FindSpec(weights_, weight);
    bytes += static_cast<int64_t>(tensor::DTypeSize(s.dtype)) *
             tensor::CheckedNumElements(s.dtype, s.shape).value_or(0);
  }
  return bytes;
}

absl::Status Program::ResolveAliases(tensor::NamedTensors& weights) const {
  if (aliases_.empty()) return absl::OkStatus();
  std::map<std::string, size_t> given;  // weight -> index of its value in `weights`
  std::map<std::string, std::string> given_as;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!aliases_.contains(weights[i].first)) given.emplace(weights[i].first, i);
  }
  tensor::NamedTensors resolved;
  for (auto& [name, value] : weights) {
    auto alias = aliases_.find(name);
    if (alias == aliases_.end()) continue;
    const std::string& weight = alias->second;
    auto it = given.find(weight);
    if (it == given.end()) {
      given.emplace(weight, weights.size() + resolved.size());
      given_as[weight] = name;
      resolved.emplace_back(weight, std::move(value));
      continue;
    }
    const tensor::Tensor& other = it->second < weights.size()
                                      ? weights[it->second].second
                                      : resolved[it->second - weights.size()].second;
    if (!(other.dtype() == value.dtype() && other.shape() == value.shape() &&
          other.bytes() == value.bytes())) {
      const std::string other_name = given_as.contains(weight) ? given_as[weight] : weight;
      return absl::InvalidArgumentError(
          absl::StrCat("'", name, "' and '", other_name,
                       "' are one tensor in the model (tied weights: '", name, "' is '", weight,
                       "'), but the values given differ; give one of them, or equal "
                       "values"));
    }
  }
  std::erase_if(weights, [&](const auto& w) { return aliases_.contains(w.first); });
  for (auto& w : resolved) weights.push_back(std::move(w));
  return absl::OkStatus();
}

Program::~Program() = default;

int64_t Program::samples_per_step() const {
  return executable_->micro_batch_size * executable_->batch_size_factor;
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

int64_t Program::weight_bytes() const {
  int64_t bytes = 0;
  for (const TensorSpec& s : weights_) {
    bytes += static_cast<int64_t>(tensor::DTypeSize(s.dtype)) *
             tensor::CheckedNumElements(s.dtype, s.shape).value_or(0);
  }
  return bytes;
}

std::vector<int64_t> Program::memory_bytes_per_ipu() const {
  std::vector<int64_t> out;
  for (const compiler::IpuPlan& p : report_.ipus) out.push_back(p.total_bytes);
  return out;
}

std::vector<uint64_t> Program::MemoryChargePerIpu(size_t session_ipus) const {
  const std::vector<int64_t> per_ipu = memory_bytes_per_ipu();
  std::vector<uint64_t> charge(session_ipus, 0);
  for (int64_t r = 0; r < executable_->replication_factor; ++r) {
    for (size_t i = 0; i < per_ipu.size(); ++i) {
      const size_t index = static_cast<size_t>(r) * per_ipu.size() + i;
      if (index < charge.size()) charge[index] = static_cast<uint64_t>(per_ipu[i]);
    }
  }
  return charge;
}

double Program::SimulatedHostToDeviceSeconds(int64_t bytes) const {
  return static_cast<double>(bytes) * static_cast<double>(executable_->replication_factor) /
         kIpu.host_link_bytes_per_s;
}

double Program::SimulatedLoadSeconds() const {
  int64_t bytes = 0;
  for (const compiler::IpuPlan& p : report_.ipus) bytes += p.code_bytes + p.weight_bytes;
  return SimulatedHostToDeviceSeconds(bytes);
}

absl::Status Program::CheckWeights(const tensor::NamedTensors& weights) const {
  std::set<std::string> seen;
  for (const auto& [name, t] : weights) {
    const TensorSpec* spec = FindSpec(weights_, name);
    if (spec == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown weight '", name, "'", SpecHint(name, weights_),
                       "; the model's weights are listed by GetWeights and weight_specs"));
    }
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat("weight '", name, "' is given twice"));
    }
    if (t.dtype() != spec->dtype || t.shape() != spec->shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("weight '", name, "' is ", SpecString(*spec), " but the new value is ",
                       tensor::DTypeName(t.dtype()), kernels::ShapeString(t.shape()),
                       "; pass a tensor of the weight's dtype and shape"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<tensor::TensorRef>> Program::ViewWeights(
    absl::Span<const std::string> names) const {
  std::vector<std::string> wanted(names.begin(), names.end());
  if (wanted.empty()) {
    for (const TensorSpec& s : weights_) wanted.push_back(s.name);
    for (const auto& [alias, weight] : aliases_) wanted.push_back(alias);
  }
  std::vector<tensor::TensorRef> out;
  for (const std::string& name : wanted) {
    auto alias = aliases_.find(name);
    if (alias != aliases_.end()) {
      out.emplace_back(name, FindWeight(alias->second));
      continue;
    }
    if (FindSpec(weights_, name) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown weight '", name, "'",
                                                     SpecHint(name, weights_),
                                                     "; ask for no names to get every weight"));
    }
    out.emplace_back(name, FindWeight(name));
  }
  return out;
}

absl::StatusOr<tensor::NamedTensors> Program::GetWeights(
    absl::Span<const std::string> names) const {
  IPUPOD_ASSIGN_OR_RETURN(std::vector<tensor::TensorRef> views, ViewWeights(names));
  tensor::NamedTensors out;
  out.reserve(views.size());
  for (const auto& [name, tensor] : views) out.emplace_back(name, *tensor);
  return out;
}

namespace {

// Synthetic data (IpuConfig synthetic_data, PopTorch's enableSyntheticData
// with PopART's RandomNormal mode): the device makes each step's inputs,
// floats from a standard normal (drawn from the executable's seed and the
// step) and integers zero, whatever the host sent; nothing goes back but
// zeros of the outputs' shapes.
absl::StatusOr<std::vector<tensor::Tensor>> SyntheticInputs(
    const std::vector<const tensor::Tensor*>& given, uint64_t seed) {
  std::mt19937_64 bits(seed);
  std::normal_distribution<float> normal;
  std::vector<tensor::Tensor> made;
  for (const tensor::Tensor* t : given) {
    IPUPOD_ASSIGN_OR_RETURN(tensor::Tensor m, tensor::Tensor::Create(t->dtype(), t->shape()));
    if (m.dtype() == tensor::DType::kFloat32) {
      for (float& v : absl::Span<float>(m.mutable_data<float>(), m.num_elements()))
        v = normal(bits);
    } else if (m.dtype() == tensor::DType::kFloat16) {
      tensor::Float16* p = m.mutable_data<tensor::Float16>();
      for (int64_t i = 0; i < m.num_elements(); ++i) p[i] = tensor::ToFloat16(normal(bits));
    }
    made.push_back(std::move(m));
  }
  return made;
}

absl::Status ZeroOutputs(tensor::NamedTensors& outputs) {
  for (auto& [name, t] : outputs) {
    IPUPOD_ASSIGN_OR_RETURN(t, tensor::Tensor::Create(t.dtype(), t.shape()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StepResult> Program::RunStep(const tensor::NamedTensors& inputs) {
  const absl::Time start = absl::Now();
  IPUPOD_ASSIGN_OR_RETURN(std::vector<const tensor::Tensor*> arranged,
                          ArrangeInputs(*executable_, inputs));
  const bool synthetic = executable_->config.synthetic_data;
  std::vector<tensor::Tensor> made;
  if (synthetic) {
    const uint64_t seed = static_cast<uint64_t>(executable_->config.seed.value_or(0)) ^
                          (synthetic_steps_.fetch_add(1) * 0x9e3779b97f4a7c15ull);
    IPUPOD_ASSIGN_OR_RETURN(made, SyntheticInputs(arranged, seed));
    for (size_t i = 0; i < made.size(); ++i) arranged[i] = &made[i];
  }
  // The step's random ops draw from the executable's seed; its IpuPrint
  // lines come back in step.log (device/graph/run_context.h).
  std::vector<std::string> log;
  int64_t dropped = 0;
  graph::RunContext context;
  if (executable_->config.seed.has_value())
    context.seed = static_cast<uint64_t>(*executable_->config.seed);
  context.log = &log;
  context.log_dropped = &dropped;
  absl::StatusOr<StepResult> result = [&] {
    graph::ScopedRunContext scope(&context);
    return Step(arranged);
  }();
  if (!result.ok()) return result.status();
  StepResult step = *std::move(result);
  if (synthetic) IPUPOD_RETURN_IF_ERROR(ZeroOutputs(step.outputs));
  step.log = std::move(log);
  if (dropped > 0) step.log.push_back(absl::StrCat("... ", dropped, " more lines not kept"));
  step.simulated = step_time_;
  step.samples = samples_per_step();
  step.wall_s = absl::ToDoubleSeconds(absl::Now() - start);
  return step;
}

}  // namespace ipupod::runtime
