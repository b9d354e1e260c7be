#include "device/compiler/training_spec.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "device/graph/shape_inference.h"
#include "device/training/autodiff.h"
#include "device/training/buffers.h"
#include "device/training/optimizer.h"

namespace ipupod::compiler {
namespace {

bool IsScalarFloat(const graph::TensorType& t) {
  if (!tensor::IsFloat(t.dtype)) return false;
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  return n == 1;
}

absl::StatusOr<std::string> ChooseLoss(const graph::Graph& g, const std::string& wanted) {
  std::vector<std::string> scalars, all;
  for (const graph::ValueInfo& out : g.outputs) {
    all.push_back(out.name);
    const graph::TensorType* t = g.FindType(out.name);
    if (t != nullptr && IsScalarFloat(*t)) scalars.push_back(out.name);
  }
  if (!wanted.empty()) {
    if (std::find(scalars.begin(), scalars.end(), wanted) != scalars.end()) return wanted;
    const bool is_output = std::find(all.begin(), all.end(), wanted) != all.end();
    return absl::InvalidArgumentError(
        absl::StrCat("--loss '", wanted, "' ",
                     is_output ? "is not a float scalar" : "is not an output of the model",
                     "; the loss must be a scalar float output (the model's scalar outputs: ",
                     scalars.empty() ? "none" : absl::StrJoin(scalars, ", "), ")"));
  }
  if (scalars.size() == 1) return scalars.front();
  if (scalars.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the model has no scalar float output to train on (outputs: ", absl::StrJoin(all, ", "),
        "); return the loss from forward, e.g. `return out, loss`, and export again"));
  }
  return absl::InvalidArgumentError(absl::StrCat("the model has several scalar outputs (",
                                                 absl::StrJoin(scalars, ", "),
                                                 "); name the loss with --loss"));
}

absl::StatusOr<std::vector<std::string>> ChooseWeights(
    const graph::Graph& g, const std::vector<std::string>& frozen,
    const std::map<std::string, std::string>& buffers) {
  // A declared module state names the parameters (of any rank; its buffers
  // are never trained); otherwise every float initializer of rank >= 1 is.
  const graph::ModuleState& state = g.module_state;
  std::set<std::string> candidates;
  for (const auto& [name, t] : g.initializers) {
    const bool weight = state.declared
                            ? state.parameters.contains(name) && tensor::IsFloat(t.dtype())
                            : graph::IsWeightLike(t);
    if (weight && !buffers.contains(name)) candidates.insert(name);
  }
  const std::set<std::string> all = candidates;
  for (const std::string& f : frozen) {
    if (buffers.contains(f)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--freeze '", f, "' is a buffer the model updates in place; buffers are never trained"));
    }
    if (candidates.erase(f) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--freeze '", f, "' is not a float weight of the model; its float weights: ",
                       all.empty() ? std::string("none") : absl::StrJoin(all, ", ")));
    }
  }
  if (candidates.empty()) {
    return absl::InvalidArgumentError(
        "the model has no float weights left to train (every one is frozen, or it has none)");
  }
  return std::vector<std::string>(candidates.begin(), candidates.end());
}

// A group's weights must be trained: a frozen or unknown name is a typo or
// a misunderstanding, not something to ignore.
absl::Status CheckGroupWeights(const std::vector<ParamGroup>& groups,
                               const std::vector<std::string>& weights,
                               const std::vector<std::string>& frozen) {
  for (size_t i = 0; i < groups.size(); ++i) {
    for (const std::string& w : groups[i].weights) {
      if (std::binary_search(weights.begin(), weights.end(), w)) continue;
      const bool is_frozen = std::find(frozen.begin(), frozen.end(), w) != frozen.end();
      return absl::InvalidArgumentError(absl::StrCat(
          "param group ", i, " names '", w, "', which ",
          is_frozen ? "is frozen (--freeze); leave it out of the group"
                    : absl::StrCat("is not a trainable weight of the model; its trainable "
                                   "weights: ",
                                   absl::StrJoin(weights, ", "))));
    }
  }
  return absl::OkStatus();
}

std::vector<training::ParamGroupOptions> GroupOptions(const std::vector<ParamGroup>& groups) {
  std::vector<training::ParamGroupOptions> out;
  for (const ParamGroup& g : groups) out.push_back({g.weights, g.variables});
  return out;
}

absl::Status SplitAttributes(const training::OptimizerSpec& spec, TrainingSpec& out) {
  out.optimizer = std::string(training::OptimizerKindName(spec.kind()));
  for (const auto& [name, attr] : spec.attributes()) {
    (attr.is_variable ? out.variables : out.constants)[name] = attr.value;
  }
  for (const training::ParamGroup& group : spec.groups()) {
    ParamGroup g;
    g.weights = group.weights;
    std::sort(g.weights.begin(), g.weights.end());
    for (const auto& [name, attr] : group.attributes) g.variables[name] = attr.value;
    out.param_groups.push_back(std::move(g));
  }
  return absl::OkStatus();
}

// The attribute's value, or 0 if the optimizer has no such attribute.
double Attribute(const TrainingSpec& spec, const std::string& name) {
  auto v = spec.variables.find(name);
  if (v != spec.variables.end()) return v->second;
  auto c = spec.constants.find(name);
  return c != spec.constants.end() ? c->second : 0.0;
}

// Momentum may become non-zero later when it is a variable.
bool HasMomentum(const TrainingSpec& spec) {
  if (spec.variables.count("momentum") > 0 || Attribute(spec, "momentum") != 0.0) return true;
  for (const ParamGroup& g : spec.param_groups) {
    if (g.variables.count("momentum") > 0) return true;
  }
  return false;
}

}  // namespace

std::map<std::string, double> OptimizerVariables(const TrainingSpec& spec) {
  std::map<std::string, double> out = spec.variables;
  for (size_t i = 0; i < spec.param_groups.size(); ++i) {
    for (const auto& [name, value] : spec.param_groups[i].variables) {
      out[training::GroupAttributeName(i, name)] = value;
    }
  }
  return out;
}

int64_t OptimizerStateSlots(const TrainingSpec& spec) {
  if (spec.optimizer == "sgd") return HasMomentum(spec) ? 1 : 0;
  if (spec.optimizer == "adam" || spec.optimizer == "adamw") {
    return Attribute(spec, "amsgrad") != 0.0 ? 3 : 2;
  }
  if (spec.optimizer == "rmsprop") {
    return 1 + (HasMomentum(spec) ? 1 : 0) + (Attribute(spec, "centered") != 0.0 ? 1 : 0);
  }
  return 2;  // lamb
}

int64_t OptimizerStateElementBytes(const TrainingSpec& spec, tensor::DType weight_dtype) {
  const auto bytes = [&spec](const char* type) {
    return Attribute(spec, type) == 16.0 ? int64_t{2} : int64_t{4};
  };
  const int64_t first = bytes("first_order_momentum_accum_type");
  const int64_t second = bytes("second_order_momentum_accum_type");
  if (spec.optimizer == "sgd") {
    return HasMomentum(spec) ? static_cast<int64_t>(tensor::DTypeSize(weight_dtype)) : 0;
  }
  if (spec.optimizer == "adam" || spec.optimizer == "adamw") {
    return first + second * (Attribute(spec, "amsgrad") != 0.0 ? 2 : 1);
  }
  if (spec.optimizer == "rmsprop") {
    return second + (HasMomentum(spec) ? first : 0) +
           (Attribute(spec, "centered") != 0.0 ? first : 0);
  }
  return first + second;  // lamb
}

absl::StatusOr<TrainingSpec> MakeTrainingSpec(const graph::Graph& graph,
                                              const TrainingOptions& options,
                                              int64_t gradient_accumulation_steps) {
  TrainingSpec spec;
  spec.gradient_accumulation_steps = gradient_accumulation_steps;
  IPUPOD_ASSIGN_OR_RETURN(spec.loss, ChooseLoss(graph, options.loss));
  IPUPOD_ASSIGN_OR_RETURN(spec.buffers, training::AllBufferUpdates(graph, options.buffers));
  IPUPOD_ASSIGN_OR_RETURN(spec.weights, ChooseWeights(graph, options.frozen, spec.buffers));
  IPUPOD_ASSIGN_OR_RETURN(
      training::OptimizerKind kind,
      training::ParseOptimizerKind(options.optimizer.empty() ? "sgd" : options.optimizer));
  IPUPOD_RETURN_IF_ERROR(CheckGroupWeights(options.param_groups, spec.weights, options.frozen));
  IPUPOD_ASSIGN_OR_RETURN(training::OptimizerSpec optimizer,
                          training::OptimizerSpec::Create(kind, options.optimizer_attrs,
                                                          GroupOptions(options.param_groups)));
  IPUPOD_RETURN_IF_ERROR(SplitAttributes(optimizer, spec));
  // Builds the backward pass once, so a missing gradient rule fails here.
  IPUPOD_RETURN_IF_ERROR(
      training::Autodiff::Create(graph, spec.loss, spec.weights, spec.buffers).status());
  return spec;
}

}  // namespace ipupod::compiler
