#include "device/graph/interpreter.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <new>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/graph/ops.h"
#include "device/graph/shape_inference.h"
#include "device/kernels/interrupt.h"
#include "device/kernels/shape_util.h"

namespace ipupod::graph {

// One node, resolved to slots. Slot -1 marks an omitted optional operand.
struct Interpreter::Step {
  const Node* node = nullptr;
  const OpDef* def = nullptr;
  std::vector<int> inputs;
  std::vector<int> outputs;
  std::vector<TensorType> output_types;  // including omitted outputs' (they still get buffers)
  std::vector<int> release;              // slots whose last reader is this step
  bool prepared = false;                 // computed by Prepare, skipped by Run
};

namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Interpreter::Interpreter(Graph graph) : graph_(std::move(graph)) {}
Interpreter::~Interpreter() = default;

absl::StatusOr<std::unique_ptr<Interpreter>> Interpreter::Create(Graph graph) {
  std::unique_ptr<Interpreter> interp(new Interpreter(std::move(graph)));
  IPUPOD_RETURN_IF_ERROR(interp->Plan());
  return interp;
}

absl::StatusOr<int> Interpreter::AddSlot(const std::string& name, SlotMap& slot_of) {
  const TensorType* type = graph_.FindType(name);
  if (type == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "value '", name, "' has no inferred type; run InferShapesAndFold (ImportOnnx does)"));
  }
  const int slot = static_cast<int>(slot_names_.size());
  slot_of[name] = slot;
  slot_names_.push_back(name);
  slot_types_.push_back(type);
  constants_.push_back(graph_.FindInitializer(name));
  return slot;
}

absl::Status Interpreter::PlanStep(const Node& node, SlotMap& slot_of) {
  IPUPOD_RETURN_IF_ERROR(CheckNodeSignature(node, graph_.opset));
  Step step{&node, FindNodeOp(node), {}, {}, {}, {}};
  for (const std::string& in : node.inputs) {
    if (in.empty()) {
      step.inputs.push_back(-1);
      continue;
    }
    auto it = slot_of.find(in);
    if (it == slot_of.end()) {
      return NodeError(node, absl::InvalidArgumentError(
                                 absl::StrCat("input '", in, "' is not defined before use")));
    }
    step.inputs.push_back(it->second);
  }
  for (const std::string& out : node.outputs) {
    if (out.empty()) {
      step.outputs.push_back(-1);
      continue;
    }
    IPUPOD_ASSIGN_OR_RETURN(int slot, AddSlot(out, slot_of));
    step.outputs.push_back(slot);
  }
  steps_.push_back(std::move(step));
  return absl::OkStatus();
}

// A slot is released after its last reader, unless it is a graph output or a
// constant.
void Interpreter::PlanLiveness() {
  std::vector<int> last_use(slot_names_.size(), -1);
  for (size_t i = 0; i < steps_.size(); ++i) {
    for (int s : steps_[i].inputs) {
      if (s >= 0) last_use[s] = static_cast<int>(i);
    }
  }
  for (int s : output_slots_) last_use[s] = -1;
  for (size_t s = 0; s < last_use.size(); ++s) {
    if (last_use[s] >= 0 && constants_[s] == nullptr) {
      steps_[last_use[s]].release.push_back(static_cast<int>(s));
    }
  }
}

absl::Status Interpreter::Plan() {
  SlotMap slot_of;
  for (const auto& [name, t] : graph_.initializers) {
    IPUPOD_RETURN_IF_ERROR(AddSlot(name, slot_of).status());
  }
  for (const ValueInfo& in : graph_.inputs) {
    IPUPOD_ASSIGN_OR_RETURN(int slot, AddSlot(in.name, slot_of));
    input_slots_.push_back(slot);
  }
  for (const Node& node : graph_.nodes) IPUPOD_RETURN_IF_ERROR(PlanStep(node, slot_of));
  for (const ValueInfo& out : graph_.outputs) {
    auto it = slot_of.find(out.name);
    if (it == slot_of.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph output '", out.name, "' is never computed"));
    }
    output_slots_.push_back(it->second);
  }
  PlanLiveness();
  for (Step& step : steps_) IPUPOD_RETURN_IF_ERROR(PlanOutputs(step));
  return PlanPrepared();
}

absl::Status Interpreter::PlanPrepared() {
  prepared_values_.resize(slot_names_.size());
  // Derived from weights: a weight (an initializer the import kept a variable)
  // or another prepared value. Constants the import left unfolded were over
  // its budget: they run on every Run, as before.
  std::vector<bool> derived(slot_names_.size(), false);
  for (size_t s = 0; s < slot_names_.size(); ++s) {
    const Tensor* t = graph_.FindInitializer(slot_names_[s]);
    derived[s] = t != nullptr && IsVariable(graph_.module_state, slot_names_[s], *t);
  }
  int64_t budget = graph_.InitializerBytes() + kPreparedSlackBytes;
  for (Step& step : steps_) {
    bool constant = !step.def->never_fold && !step.def->fold_from_types;
    bool from_weights = false;
    for (int s : step.inputs) {
      constant = constant && (s < 0 || constants_[s] != nullptr);
      from_weights = from_weights || (s >= 0 && derived[s]);
    }
    if (!from_weights) continue;
    int64_t bytes = 0;
    for (const TensorType& t : step.output_types) {
      bytes += *CheckedNumElements(t.dtype, t.shape) * static_cast<int64_t>(DTypeSize(t.dtype));
    }
    if (!constant || bytes > budget) continue;
    budget -= bytes;
    step.prepared = true;
    for (int out : step.outputs) {
      if (out < 0) continue;
      constants_[out] = &prepared_values_[out];
      derived[out] = true;
    }
  }
  return Prepare();
}

absl::Status Interpreter::RunStep(const Step& step, const std::vector<const Tensor*>& value,
                                  std::vector<Tensor>& outs) const {
  OpContext ctx{*step.node, graph_.opset, {}, {}, graph_.half_partials};
  for (int s : step.inputs) {
    ctx.types.push_back(s >= 0 ? slot_types_[s] : nullptr);
    ctx.values.push_back(s >= 0 ? value[s] : nullptr);
  }
  IPUPOD_ASSIGN_OR_RETURN(outs, CreateOutputs(*step.def, step.output_types));
  return NodeError(*step.node, RunOp(*step.def, ctx, absl::MakeSpan(outs)));
}

absl::Status Interpreter::Prepare(const std::vector<const Tensor*>* replaced) {
  std::vector<bool> dirty(slot_names_.size(), replaced == nullptr);
  if (replaced != nullptr) {
    for (size_t s = 0; s < dirty.size(); ++s) {
      dirty[s] = std::find(replaced->begin(), replaced->end(), constants_[s]) != replaced->end();
    }
  }
  for (const Step& step : steps_) {
    bool stale = false;
    for (int s : step.inputs) stale = stale || (s >= 0 && dirty[s]);
    if (!step.prepared || !stale) continue;
    for (int out : step.outputs) {
      if (out >= 0) dirty[out] = true;
    }
    std::vector<Tensor> outs;
    IPUPOD_RETURN_IF_ERROR(kernels::CheckInterrupt());
    IPUPOD_RETURN_IF_ERROR(RunStep(step, constants_, outs));
    IPUPOD_RETURN_IF_ERROR(kernels::InterruptStatus());  // never keep a stopped kernel's values
    for (size_t k = 0; k < outs.size(); ++k) {
      if (step.outputs[k] >= 0) prepared_values_[step.outputs[k]] = std::move(outs[k]);
    }
  }
  return absl::OkStatus();
}

// Re-infers a step's output types (checking them against the graph's) and
// records its static cost.
absl::Status Interpreter::PlanOutputs(Step& step) {
  OpContext ctx{*step.node, graph_.opset, {}, {}, graph_.half_partials};
  for (int s : step.inputs) {
    ctx.types.push_back(s >= 0 ? slot_types_[s] : nullptr);
    ctx.values.push_back(s >= 0 ? constants_[s] : nullptr);
  }
  auto types = InferOp(*step.def, ctx);
  if (!types.ok()) return NodeError(*step.node, types.status());
  for (size_t k = 0; k < step.outputs.size(); ++k) {
    if (step.outputs[k] >= 0 && !(*slot_types_[step.outputs[k]] == (*types)[k])) {
      return NodeError(*step.node, absl::InvalidArgumentError(
                                       absl::StrCat("output ", k, " is recorded as ",
                                                    TypeString(*slot_types_[step.outputs[k]]),
                                                    " but infers as ", TypeString((*types)[k]))));
    }
  }
  step.output_types = *std::move(types);
  const int64_t flops = step.def->flops(ctx, step.output_types);
  costs_.push_back({step.node->name, step.node->op_type, step.node->module_path, flops});
  total_flops_ += flops;
  return absl::OkStatus();
}

absl::Status Interpreter::CheckInputs(absl::Span<const Tensor> inputs) const {
  if (inputs.size() != graph_.inputs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model takes ", graph_.inputs.size(), " inputs, got ", inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorType& want = graph_.inputs[i].type;
    if (inputs[i].dtype() != want.dtype || inputs[i].shape() != want.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input ", i, " ('", graph_.inputs[i].name, "') is ", DTypeName(inputs[i].dtype()),
          kernels::ShapeString(inputs[i].shape()), "; the model needs ", TypeString(want)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> Interpreter::Execute(absl::Span<const Tensor> inputs,
                                                         RunStats* stats) const {
  std::vector<Tensor> owned(slot_names_.size());
  std::vector<const Tensor*> value(constants_);
  for (size_t i = 0; i < input_slots_.size(); ++i) value[input_slots_[i]] = &inputs[i];
  RunStats run_stats;
  const int64_t run_start = NowNs();
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Step& step = steps_[i];
    if (step.prepared) {
      run_stats.nodes.push_back({costs_[i].flops, 0});
      continue;
    }
    std::vector<Tensor> outs;
    const int64_t start = NowNs();
    // A deadline, a cancel or shutdown stops the run here or inside the
    // node's kernels (device/kernels/interrupt.h), whose outputs are then dropped.
    IPUPOD_RETURN_IF_ERROR(kernels::CheckInterrupt());
    IPUPOD_RETURN_IF_ERROR(RunStep(step, value, outs));
    IPUPOD_RETURN_IF_ERROR(kernels::InterruptStatus());
    run_stats.nodes.push_back({costs_[i].flops, NowNs() - start});
    for (size_t k = 0; k < outs.size(); ++k) {
      if (step.outputs[k] < 0) continue;
      owned[step.outputs[k]] = std::move(outs[k]);
      value[step.outputs[k]] = &owned[step.outputs[k]];
    }
    for (int s : step.release) owned[s] = Tensor();
  }
  std::vector<Tensor> result;
  for (int s : output_slots_) result.push_back(*value[s]);
  run_stats.total_flops = total_flops_;
  run_stats.elapsed_ns = NowNs() - run_start;
  if (stats != nullptr) *stats = std::move(run_stats);
  return result;
}

absl::StatusOr<std::vector<Tensor>> Interpreter::Run(absl::Span<const Tensor> inputs,
                                                     RunStats* stats) const {
  IPUPOD_RETURN_IF_ERROR(CheckInputs(inputs));
  try {
    return Execute(inputs, stats);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory while running the model");
  }
}

absl::Status Interpreter::CheckReplacement(
    const std::vector<std::pair<std::string, Tensor>>& values) const {
  std::map<std::string, int> seen;
  for (const auto& [name, value] : values) {
    const Tensor* old = graph_.FindInitializer(name);
    if (old == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", name, "' is not an initializer of the graph"));
    }
    if (++seen[name] > 1) {
      return absl::InvalidArgumentError(absl::StrCat("initializer '", name, "' is given twice"));
    }
    if (value.dtype() != old->dtype() || value.shape() != old->shape()) {
      return absl::InvalidArgumentError(
          absl::StrCat("initializer '", name, "' is ", DTypeName(old->dtype()),
                       kernels::ShapeString(old->shape()), " but the new value is ",
                       DTypeName(value.dtype()), kernels::ShapeString(value.shape())));
    }
  }
  return absl::OkStatus();
}

// Output types were inferred with the constants' values (a Reshape's shape,
// a Pad's pads); a replacement must leave every such type as planned.
absl::Status Interpreter::RecheckTypesAfterReplacing(
    const std::vector<const Tensor*>& replaced) const {
  for (const Step& step : steps_) {
    bool reads = false;
    for (int s : step.inputs) {
      if (s < 0 || constants_[s] == nullptr) continue;
      for (const Tensor* t : replaced) reads = reads || constants_[s] == t;
    }
    if (!reads) continue;
    OpContext ctx{*step.node, graph_.opset, {}, {}, graph_.half_partials};
    for (int s : step.inputs) {
      ctx.types.push_back(s >= 0 ? slot_types_[s] : nullptr);
      ctx.values.push_back(s >= 0 ? constants_[s] : nullptr);
    }
    auto types = InferOp(*step.def, ctx);
    if (!types.ok() || *types != step.output_types) {
      return NodeError(*step.node,
                       absl::InvalidArgumentError(
                           "a replaced initializer determines this node's output shape; only "
                           "values the computation reads (weights) can be replaced"));
    }
  }
  return absl::OkStatus();
}

absl::Status Interpreter::ReplaceInitializers(std::vector<std::pair<std::string, Tensor>>& values) {
  IPUPOD_RETURN_IF_ERROR(CheckReplacement(values));
  std::vector<const Tensor*> replaced;
  const auto swap_all = [&] {
    for (auto& [name, value] : values) std::swap(graph_.initializers.at(name), value);
  };
  swap_all();  // swapping keeps each initializer's address, which constants_ holds
  for (const auto& [name, value] : values) replaced.push_back(graph_.FindInitializer(name));
  absl::Status status = RecheckTypesAfterReplacing(replaced);
  if (status.ok()) status = Prepare(&replaced);  // values derived from the weights follow them
  if (!status.ok()) {
    swap_all();  // back to the old values, at the same addresses
    IPUPOD_RETURN_IF_ERROR(Prepare(&replaced));
  }
  return status;
}

}  // namespace ipupod::graph
