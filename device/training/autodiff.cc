#include "device/training/autodiff.h"

#include <algorithm>
#include <deque>
#include <new>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "device/graph/custom_ops.h"
#include "device/graph/ops.h"
#include "device/kernels/interrupt.h"
#include "device/kernels/shape_util.h"
#include "device/training/grad_rules.h"

namespace ipupod::training {

using graph::TensorType;
using tensor::Tensor;

namespace {

absl::Status NoCustomGradient(const graph::CustomOp& op) {
  return absl::InvalidArgumentError(absl::StrCat(
      "custom op ", op.name(), " (", op.origin(),
      ") has no gradient function, but lies between a trainable weight and the loss; give "
      "the op a gradient in its library (IpupodCustomOp.gradient), or keep it off the "
      "gradient's path (detach its inputs, or freeze the weights before it)"));
}

}  // namespace

// One node resolved to slots (-1: omitted operand).
struct Autodiff::Step {
  const graph::Node* node = nullptr;
  const graph::OpDef* def = nullptr;
  const GradRule* rule = nullptr;  // set iff the node is on a weight -> loss path
  std::vector<int> inputs;
  std::vector<int> outputs;
  std::vector<TensorType> output_types;  // including omitted outputs'
  std::vector<int> release;              // slots whose last forward reader this is
  std::vector<bool> wants;               // per input, when active
  int64_t flops = 0;
};

// One call's values and gradients, per slot. With `defer` (RunSgdStep),
// weights in deferrable_ may get their gradient as a product instead.
struct Autodiff::Tape {
  std::vector<Tensor> owned;
  std::vector<const Tensor*> value;
  std::vector<std::optional<Tensor>> grad;
  bool defer = false;
  std::vector<std::optional<ProductGrad>> product;
  float loss_scale = 1.0f;  // d(loss)/d(loss): the loss scaling factor
};

Autodiff::Autodiff(graph::Graph graph, std::string loss, std::vector<std::string> weights,
                   BufferUpdates buffers)
    : graph_(std::move(graph)),
      loss_(std::move(loss)),
      weights_(std::move(weights)),
      buffers_(std::move(buffers)) {}
Autodiff::~Autodiff() = default;

absl::StatusOr<std::unique_ptr<Autodiff>> Autodiff::Create(graph::Graph graph, std::string loss,
                                                           std::vector<std::string> weights,
                                                           BufferUpdates buffers) {
  if (weights.empty()) {
    for (const auto& [name, t] : graph.initializers) {
      if (tensor::IsFloat(t.dtype()) && t.rank() >= 1 && !buffers.contains(name)) {
        weights.push_back(name);
      }
    }
  }
  std::sort(weights.begin(), weights.end());
  std::unique_ptr<Autodiff> ad(
      new Autodiff(std::move(graph), std::move(loss), std::move(weights), std::move(buffers)));
  IPUPOD_RETURN_IF_ERROR(ad->Plan());
  return ad;
}

TensorMap Autodiff::InitialWeights() const {
  TensorMap out;
  for (const std::string& w : weights_) out.emplace(w, graph_.initializers.at(w));
  return out;
}

TensorMap Autodiff::InitialBuffers() const {
  TensorMap out;
  for (const auto& [b, update] : buffers_) out.emplace(b, graph_.initializers.at(b));
  return out;
}

absl::Status Autodiff::Plan() {
  IPUPOD_RETURN_IF_ERROR(PlanSlots());
  for (const graph::Node& node : graph_.nodes) IPUPOD_RETURN_IF_ERROR(PlanStep(node));
  IPUPOD_RETURN_IF_ERROR(PlanBuffers());
  for (const graph::ValueInfo& out : graph_.outputs) {
    auto it = slot_of_.find(out.name);
    if (it == slot_of_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph output '", out.name, "' is never computed"));
    }
    output_slots_.push_back(it->second);
  }
  auto loss = slot_of_.find(loss_);
  if (loss == slot_of_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss '", loss_, "' is not a value of the graph"));
  }
  loss_slot_ = loss->second;
  const TensorType& lt = *slot_types_[loss_slot_];
  if (!tensor::IsFloat(lt.dtype) || graph::NumElementsOf(lt) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("loss '", loss_, "' is ", graph::TypeString(lt),
                                                   "; it must be a float scalar (one element)"));
  }
  IPUPOD_RETURN_IF_ERROR(PlanGradientPath());
  PlanLiveness();
  return absl::OkStatus();
}

absl::Status Autodiff::PlanSlots() {
  const std::set<std::string> weight_set(weights_.begin(), weights_.end());
  if (weight_set.size() != weights_.size()) {
    return absl::InvalidArgumentError("a trainable weight is listed twice");
  }
  for (const std::string& w : weights_) {
    const Tensor* t = graph_.FindInitializer(w);
    if (t == nullptr || !tensor::IsFloat(t->dtype())) {
      return absl::InvalidArgumentError(
          absl::StrCat("trainable weight '", w, "' is not a float initializer of the graph"));
    }
  }
  const auto add = [this](const std::string& name) -> absl::StatusOr<int> {
    const TensorType* type = graph_.FindType(name);
    if (type == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "value '", name, "' has no inferred type; run InferShapesAndFold (ImportOnnx does)"));
    }
    const int slot = static_cast<int>(slot_types_.size());
    slot_of_[name] = slot;
    slot_types_.push_back(type);
    constants_.push_back(nullptr);
    return slot;
  };
  for (const auto& [name, t] : graph_.initializers) {
    IPUPOD_ASSIGN_OR_RETURN(int slot, add(name));
    if (!weight_set.contains(name) && !buffers_.contains(name)) constants_[slot] = &t;
  }
  for (const std::string& w : weights_) weight_slots_.push_back(slot_of_.at(w));
  for (const graph::ValueInfo& in : graph_.inputs) {
    IPUPOD_ASSIGN_OR_RETURN(int slot, add(in.name));
    input_slots_.push_back(slot);
  }
  for (const graph::Node& node : graph_.nodes) {
    for (const std::string& out : node.outputs) {
      if (!out.empty()) IPUPOD_RETURN_IF_ERROR(add(out).status());
    }
  }
  return absl::OkStatus();
}

// Every buffer is an initializer other than a weight, replaced by a value
// a node computes with the buffer's type.
absl::Status Autodiff::PlanBuffers() {
  for (const auto& [buffer, update] : buffers_) {
    const Tensor* init = graph_.FindInitializer(buffer);
    if (init == nullptr || std::binary_search(weights_.begin(), weights_.end(), buffer)) {
      return absl::InvalidArgumentError(
          absl::StrCat("buffer '", buffer,
                       "' is not an initializer of the graph other than a trainable weight"));
    }
    auto it = slot_of_.find(update);
    const bool computed =
        it != slot_of_.end() && graph_.FindInitializer(update) == nullptr &&
        std::find(input_slots_.begin(), input_slots_.end(), it->second) == input_slots_.end();
    if (!computed) {
      return absl::InvalidArgumentError(absl::StrCat("buffer '", buffer, "' is updated from '",
                                                     update,
                                                     "', which no node of the graph computes"));
    }
    const TensorType& type = *slot_types_[it->second];
    if (type.dtype != init->dtype() || type.shape != init->shape()) {
      return absl::InvalidArgumentError(
          absl::StrCat("buffer '", buffer, "' is ", DTypeName(init->dtype()),
                       kernels::ShapeString(init->shape()), " but its update '", update, "' is ",
                       graph::TypeString(type)));
    }
    buffer_slots_.emplace_back(slot_of_.at(buffer), it->second);
  }
  return absl::OkStatus();
}

absl::Status Autodiff::PlanStep(const graph::Node& node) {
  IPUPOD_RETURN_IF_ERROR(graph::CheckNodeSignature(node, graph_.opset));
  Step step;
  step.node = &node;
  step.def = graph::FindNodeOp(node);
  graph::OpContext ctx{node, graph_.opset, {}, {}, graph_.half_partials};
  for (const std::string& in : node.inputs) {
    if (in.empty()) {
      step.inputs.push_back(-1);
      ctx.types.push_back(nullptr);
      ctx.values.push_back(nullptr);
      continue;
    }
    auto it = slot_of_.find(in);
    if (it == slot_of_.end()) {
      return graph::NodeError(
          node, absl::InvalidArgumentError(absl::StrCat("input '", in, "' is not defined")));
    }
    step.inputs.push_back(it->second);
    ctx.types.push_back(slot_types_[it->second]);
    ctx.values.push_back(constants_[it->second]);
  }
  for (const std::string& out : node.outputs)
    step.outputs.push_back(out.empty() ? -1 : slot_of_.at(out));
  auto types = graph::InferOp(*step.def, ctx);
  if (!types.ok()) return graph::NodeError(node, types.status());
  step.output_types = *std::move(types);
  step.flops = step.def->flops(ctx, step.output_types);
  forward_flops_ += step.flops;
  steps_.push_back(std::move(step));
  return absl::OkStatus();
}

namespace {

// A node on the gradient path without a backward rule; inference-only ops
// say so.
absl::Status NoRuleError(const graph::Node& node) {
  if (node.op_type == "ai.graphcore.CtcBeamSearchDecoder") {
    return graph::NodeError(
        node, absl::InvalidArgumentError(
                  "is inference only: poptorch.ctc_beam_search_decoder has no gradient (nor in "
                  "PopTorch), but lies between a trainable weight and the loss; decode outside "
                  "the loss's path (return its outputs beside the loss) or in an inferenceModel"));
  }
  return graph::NodeError(node, absl::InvalidArgumentError(absl::StrCat(
                                    "has no gradient rule, but lies between a trainable weight "
                                    "and the loss; differentiable ops: ",
                                    absl::StrJoin(DifferentiableOps(), ", "))));
}

}  // namespace

// Marks what depends on a weight (requires_grad_), then walks back from the
// loss: a node is on the path if one of its outputs leads to the loss and
// depends on a weight. Every such node needs a backward rule.
absl::Status Autodiff::PlanGradientPath() {
  requires_grad_.assign(slot_types_.size(), false);
  for (int s : weight_slots_) requires_grad_[s] = true;
  for (const Step& step : steps_) {
    bool any = false;
    for (int s : step.inputs) any = any || (s >= 0 && requires_grad_[s]);
    for (int s : step.outputs) {
      if (s >= 0 && any) requires_grad_[s] = tensor::IsFloat(slot_types_[s]->dtype);
    }
  }
  std::vector<bool> needed(slot_types_.size(), false);
  needed[loss_slot_] = requires_grad_[loss_slot_];
  for (auto it = steps_.rbegin(); it != steps_.rend(); ++it) {
    Step& step = *it;
    bool active = false;
    for (int s : step.outputs) active = active || (s >= 0 && needed[s]);
    if (!active) continue;
    step.rule = FindNodeGradRule(*step.node);
    if (step.rule == nullptr && step.node->custom_op != nullptr) {
      return graph::NodeError(*step.node, NoCustomGradient(*step.node->custom_op));
    }
    if (step.rule == nullptr) return NoRuleError(*step.node);
    for (int s : step.inputs) {
      step.wants.push_back(s >= 0 && requires_grad_[s]);
      if (s >= 0 && requires_grad_[s]) needed[s] = true;
    }
  }
  std::vector<int> contributions(slot_types_.size(), 0);
  for (const Step& step : steps_) {
    for (size_t i = 0; i < step.wants.size(); ++i) {
      if (step.wants[i]) ++contributions[step.inputs[i]];
    }
  }
  deferrable_.assign(slot_types_.size(), false);
  // A float16 weight's gradient is rounded to float16 before any update
  // (BackwardStep), so it is never left as a product.
  for (int s : weight_slots_) {
    deferrable_[s] = contributions[s] == 1 && slot_types_[s]->dtype == tensor::DType::kFloat32;
  }
  saved_.assign(slot_types_.size(), false);
  for (const Step& step : steps_) {
    if (step.rule == nullptr) continue;
    for (int s : step.inputs) {
      if (s >= 0 && step.rule->needs_inputs) saved_[s] = true;
    }
    for (int s : step.outputs) {
      if (s >= 0 && step.rule->needs_outputs) saved_[s] = true;
    }
  }
  return absl::OkStatus();
}

// A slot a node produced is released after its last forward reader unless
// it is a graph output or the loss. Initializers and inputs are never owned.
void Autodiff::PlanLiveness() {
  std::vector<bool> produced(slot_types_.size(), false);
  for (const Step& step : steps_) {
    for (int s : step.outputs) {
      if (s >= 0) produced[s] = true;
    }
  }
  std::vector<int> last_use(slot_types_.size(), -1);
  for (size_t i = 0; i < steps_.size(); ++i) {
    for (int s : steps_[i].inputs) {
      if (s >= 0) last_use[s] = static_cast<int>(i);
    }
  }
  for (int s : output_slots_) last_use[s] = -1;
  for (const auto& [buffer, update] : buffer_slots_) last_use[update] = -1;
  last_use[loss_slot_] = -1;
  for (size_t s = 0; s < last_use.size(); ++s) {
    if (last_use[s] >= 0 && produced[s]) {
      steps_[last_use[s]].release.push_back(static_cast<int>(s));
    }
  }
}

namespace {

// Checks that `given` holds exactly `names`' tensors with the graph's
// dtype and shape; `what` is "trainable weight" or "buffer".
absl::Status CheckStateTensors(const graph::Graph& g, const std::vector<std::string>& names,
                               const TensorMap& given, absl::string_view what) {
  for (const auto& [name, t] : given) {
    if (!std::binary_search(names.begin(), names.end(), name)) {
      return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not a ", what));
    }
  }
  for (const std::string& w : names) {
    auto it = given.find(w);
    const Tensor& init = g.initializers.at(w);
    if (it == given.end()) {
      return absl::InvalidArgumentError(absl::StrCat(what, " '", w, "' is missing"));
    }
    if (it->second.dtype() != init.dtype() || it->second.shape() != init.shape()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " '", w, "' is ", DTypeName(it->second.dtype()),
                       kernels::ShapeString(it->second.shape()), "; the model needs ",
                       DTypeName(init.dtype()), kernels::ShapeString(init.shape())));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Autodiff::CheckCall(absl::Span<const Tensor> inputs, const TensorMap& weights,
                                 const TensorMap& buffers) const {
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
  IPUPOD_RETURN_IF_ERROR(CheckStateTensors(graph_, weights_, weights, "trainable weight"));
  std::vector<std::string> buffer_names;
  for (const auto& [b, update] : buffers_) buffer_names.push_back(b);
  return CheckStateTensors(graph_, buffer_names, buffers, "buffer");
}

Autodiff::Tape Autodiff::NewTape(absl::Span<const Tensor> inputs, const TensorMap& weights,
                                 const TensorMap& buffers, bool with_gradients) const {
  Tape tape{std::vector<Tensor>(slot_types_.size()),
            constants_,
            std::vector<std::optional<Tensor>>(with_gradients ? slot_types_.size() : 0),
            false,
            {}};
  for (size_t i = 0; i < weights_.size(); ++i)
    tape.value[weight_slots_[i]] = &weights.at(weights_[i]);
  size_t k = 0;
  for (const auto& [b, update] : buffers_) tape.value[buffer_slots_[k++].first] = &buffers.at(b);
  for (size_t i = 0; i < input_slots_.size(); ++i) tape.value[input_slots_[i]] = &inputs[i];
  return tape;
}

absl::Status Autodiff::RunForward(Tape& tape, bool keep_for_backward) const {
  for (const Step& step : steps_) {
    graph::OpContext ctx{*step.node, graph_.opset, {}, {}, graph_.half_partials};
    for (int s : step.inputs) {
      ctx.types.push_back(s >= 0 ? slot_types_[s] : nullptr);
      ctx.values.push_back(s >= 0 ? tape.value[s] : nullptr);
    }
    IPUPOD_ASSIGN_OR_RETURN(std::vector<Tensor> outs,
                            graph::CreateOutputs(*step.def, step.output_types));
    IPUPOD_RETURN_IF_ERROR(
        graph::NodeError(*step.node, graph::RunOp(*step.def, ctx, absl::MakeSpan(outs))));
    for (size_t k = 0; k < outs.size(); ++k) {
      if (step.outputs[k] < 0) continue;
      tape.owned[step.outputs[k]] = std::move(outs[k]);
      tape.value[step.outputs[k]] = &tape.owned[step.outputs[k]];
    }
    for (int s : step.release) {
      if (keep_for_backward && saved_[s]) continue;
      tape.owned[s] = Tensor();
      tape.value[s] = nullptr;
    }
  }
  return absl::OkStatus();
}

namespace {

// float16 forward values as the backward rules read them: widened to float32
// (rules compute in float32, as ops do: device/graph/ops.h, RunOp). Held here.
class WidenedForRule {
 public:
  absl::Status Widen(graph::OpContext& op, GradContext& c) {
    for (size_t i = 0; i < op.types.size(); ++i) {
      if (op.types[i] != nullptr) op.types[i] = Type(op.types[i]);
      IPUPOD_RETURN_IF_ERROR(Value(op.values[i]));
    }
    for (const Tensor*& out : c.outputs) IPUPOD_RETURN_IF_ERROR(Value(out));
    for (const graph::TensorType*& t : c.output_types) t = Type(t);
    return absl::OkStatus();
  }

 private:
  const graph::TensorType* Type(const graph::TensorType* t) {
    if (t->dtype != tensor::DType::kFloat16) return t;
    types_.push_back(graph::TensorType{tensor::DType::kFloat32, t->shape});
    return &types_.back();
  }
  absl::Status Value(const Tensor*& t) {
    if (t == nullptr || t->dtype() != tensor::DType::kFloat16) return absl::OkStatus();
    IPUPOD_ASSIGN_OR_RETURN(Tensor wide, t->WidenedToFloat32());
    values_.push_back(std::move(wide));
    t = &values_.back();
    return absl::OkStatus();
  }

  std::deque<graph::TensorType> types_;  // deques: pointers into them stay valid
  std::deque<Tensor> values_;
};

}  // namespace

absl::Status Autodiff::RoundIfHalf(int slot, Tensor& grad) const {
  if (slot_types_[slot]->dtype != tensor::DType::kFloat16) return absl::OkStatus();
  if (grad.dtype() != tensor::DType::kFloat32) {
    return absl::InternalError("a float16 value's gradient is not held in float32");
  }
  tensor::RoundThroughFloat16(
      absl::MakeSpan(grad.mutable_data<float>(), static_cast<size_t>(grad.num_elements())));
  return absl::OkStatus();
}

absl::Status Autodiff::BackwardStep(const Step& step, Tape& tape, int64_t& flops) const {
  graph::OpContext op{*step.node, graph_.opset, {}, {}};
  for (int s : step.inputs) {
    op.types.push_back(s >= 0 ? slot_types_[s] : nullptr);
    op.values.push_back(s >= 0 ? tape.value[s] : nullptr);
  }
  std::vector<std::optional<ProductGrad>> products(step.inputs.size());
  GradContext c{op, {}, {}, {}, step.wants, {}, nullptr};
  if (tape.defer) {
    for (size_t i = 0; i < step.inputs.size(); ++i) {
      c.may_defer.push_back(step.wants[i] && deferrable_[step.inputs[i]]);
    }
    c.products = &products;
  }
  bool any = false;
  for (int s : step.outputs) {
    const bool has = s >= 0 && tape.grad[s].has_value();
    c.output_grads.push_back(has ? &*tape.grad[s] : nullptr);
    c.outputs.push_back(s >= 0 ? tape.value[s] : nullptr);
    any = any || has;
  }
  if (!any) return absl::OkStatus();
  for (const TensorType& t : step.output_types) c.output_types.push_back(&t);
  WidenedForRule widened;
  IPUPOD_RETURN_IF_ERROR(graph::NodeError(*step.node, widened.Widen(op, c)));
  std::vector<std::optional<Tensor>> grads(step.inputs.size());
  auto spent = step.rule->fn(c, grads);
  if (!spent.ok()) return graph::NodeError(*step.node, spent.status());
  flops += *spent;
  bool deferred = false;
  for (size_t i = 0; i < products.size(); ++i) {
    if (!products[i].has_value()) continue;
    IPUPOD_RETURN_IF_ERROR(
        graph::NodeError(*step.node, DeferProduct(step, i, *std::move(products[i]), tape)));
    deferred = deferred || tape.product[step.inputs[i]].has_value();
  }
  for (size_t i = 0; i < grads.size(); ++i) {
    const int s = step.inputs[i];
    if (!grads[i].has_value() || s < 0 || !step.wants[i]) continue;
    // A float16 value's gradient is float16 too: rounded (and so may
    // underflow to zero, which loss scaling exists to prevent).
    if (tape.grad[s].has_value()) {
      IPUPOD_RETURN_IF_ERROR(graph::NodeError(*step.node, AddInto(*tape.grad[s], *grads[i])));
      IPUPOD_RETURN_IF_ERROR(RoundIfHalf(s, *tape.grad[s]));
      flops += grads[i]->num_elements();
    } else {
      IPUPOD_RETURN_IF_ERROR(RoundIfHalf(s, *grads[i]));
      tape.grad[s] = std::move(grads[i]);
    }
  }
  if (deferred) return absl::OkStatus();  // a product reads these gradients later
  for (int s : step.outputs) {
    if (s >= 0) tape.grad[s].reset();  // every reader of s has already run backward
  }
  return absl::OkStatus();
}

// Keeps input `input`'s product gradient for ApplySgd, or evaluates it now
// when an operand is a weight (ApplySgd may have changed it by then).
absl::Status Autodiff::DeferProduct(const Step& step, size_t input, ProductGrad product,
                                    Tape& tape) const {
  const int s = step.inputs[input];
  IPUPOD_ASSIGN_OR_RETURN(const Shape shape, ProductShape(product));
  if (kernels::NumElementsUnchecked(shape) != graph::NumElementsOf(*slot_types_[s])) {
    return absl::InternalError(absl::StrCat("product gradient ", kernels::ShapeString(shape),
                                            " does not fit weight ",
                                            graph::TypeString(*slot_types_[s])));
  }
  for (int w : weight_slots_) {
    if (tape.value[w]->dtype() != tensor::DType::kFloat32) continue;  // never an operand
    const float* data = tape.value[w]->data<float>();
    if (product.a == data || product.b == data) {
      IPUPOD_ASSIGN_OR_RETURN(tape.grad[s], EvaluateProduct(product, slot_types_[s]->shape));
      return absl::OkStatus();
    }
  }
  tape.product[s] = std::move(product);
  return absl::OkStatus();
}

absl::Status Autodiff::RunBackward(Tape& tape, GradientResult& result) const {
  if (!requires_grad_[loss_slot_]) return absl::OkStatus();  // no weight reaches the loss
  IPUPOD_ASSIGN_OR_RETURN(Tensor seed,
                          Tensor::Create(tensor::DType::kFloat32, slot_types_[loss_slot_]->shape));
  seed.mutable_data<float>()[0] = tape.loss_scale;
  IPUPOD_RETURN_IF_ERROR(RoundIfHalf(loss_slot_, seed));
  tape.grad[loss_slot_] = std::move(seed);
  for (auto it = steps_.rbegin(); it != steps_.rend(); ++it) {
    if (it->rule != nullptr) IPUPOD_RETURN_IF_ERROR(BackwardStep(*it, tape, result.backward_flops));
  }
  for (size_t i = 0; i < weights_.size(); ++i) {
    std::optional<Tensor>& g = tape.grad[weight_slots_[i]];
    if (g.has_value()) result.gradients.emplace(weights_[i], *std::move(g));
  }
  return absl::OkStatus();
}

absl::StatusOr<GradientResult> Autodiff::Execute(Tape& tape) const {
  IPUPOD_RETURN_IF_ERROR(RunForward(tape, /*keep_for_backward=*/true));
  GradientResult result;
  for (int s : output_slots_) result.outputs.push_back(*tape.value[s]);
  size_t k = 0;
  for (const auto& [b, update] : buffers_) {
    result.buffers.emplace(b, *tape.value[buffer_slots_[k++].second]);
  }
  const Tensor& loss = *tape.value[loss_slot_];
  result.loss = loss.dtype() == tensor::DType::kFloat16
                    ? tensor::ToFloat32(loss.data<tensor::Float16>()[0])
                    : loss.data<float>()[0];
  result.forward_flops = forward_flops_;
  IPUPOD_RETURN_IF_ERROR(RunBackward(tape, result));
  return result;
}

absl::StatusOr<GradientResult> Autodiff::Run(absl::Span<const Tensor> inputs,
                                             const TensorMap& weights, const TensorMap& buffers,
                                             double loss_scale) const {
  IPUPOD_RETURN_IF_ERROR(CheckCall(inputs, weights, buffers));
  try {
    Tape tape = NewTape(inputs, weights, buffers, /*with_gradients=*/true);
    tape.loss_scale = static_cast<float>(loss_scale);
    return Execute(tape);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory while computing gradients");
  }
}

absl::StatusOr<GradientResult> Autodiff::RunSgdStep(absl::Span<const Tensor> inputs,
                                                    TensorMap& weights, const TensorMap& buffers,
                                                    double lr) const {
  IPUPOD_RETURN_IF_ERROR(CheckCall(inputs, weights, buffers));
  for (const auto& [name, w] : weights) {
    if (w.dtype() != tensor::DType::kFloat32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the fused SGD step updates float32 weights; '", name, "' is ", DTypeName(w.dtype())));
    }
  }
  try {
    Tape tape = NewTape(inputs, weights, buffers, /*with_gradients=*/true);
    tape.defer = true;
    tape.product.resize(slot_types_.size());
    IPUPOD_ASSIGN_OR_RETURN(GradientResult result, Execute(tape));
    // Gradients of a pass stopped inside its kernels are garbage, and the
    // update itself is not interrupted (device/kernels/interrupt.h): all or nothing.
    IPUPOD_RETURN_IF_ERROR(kernels::CheckInterrupt());
    kernels::ScopedInterrupt uninterrupted(nullptr);
    // The same float step size as Optimizer's SGD.
    IPUPOD_RETURN_IF_ERROR(ApplySgd(tape, static_cast<float>(-lr), weights, result));
    return result;
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory while computing gradients");
  }
}

// w += neg_lr * dL/dw for every weight with a gradient, materialised or a
// product; the products' shapes were checked when they were deferred.
absl::Status Autodiff::ApplySgd(const Tape& tape, float neg_lr, TensorMap& weights,
                                GradientResult& result) const {
  for (size_t i = 0; i < weights_.size(); ++i) {
    Tensor& w = weights.at(weights_[i]);
    const std::optional<ProductGrad>& product = tape.product[weight_slots_[i]];
    if (product.has_value()) {
      IPUPOD_RETURN_IF_ERROR(AccumulateProduct(*product, neg_lr, w));
      ++result.fused_products;
      continue;
    }
    auto g = result.gradients.find(weights_[i]);
    if (g == result.gradients.end()) continue;  // no gradient reaches this weight
    float* wp = w.mutable_data<float>();
    const float* gp = g->second.data<float>();
    for (int64_t k = 0; k < w.num_elements(); ++k) wp[k] = wp[k] + neg_lr * gp[k];
  }
  result.gradients.clear();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> Autodiff::Forward(absl::Span<const Tensor> inputs,
                                                      const TensorMap& weights,
                                                      const TensorMap& buffers) const {
  IPUPOD_RETURN_IF_ERROR(CheckCall(inputs, weights, buffers));
  try {
    Tape tape = NewTape(inputs, weights, buffers, /*with_gradients=*/false);
    IPUPOD_RETURN_IF_ERROR(RunForward(tape, /*keep_for_backward=*/false));
    std::vector<Tensor> outputs;
    for (int s : output_slots_) outputs.push_back(*tape.value[s]);
    return outputs;
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory while running the model");
  }
}

}  // namespace ipupod::training
