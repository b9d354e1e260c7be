// File: device/training/grad_rules.h
//
// Internal to ipupod_training: the backward rule of every op that carries a
// gradient, and the tensor helpers the rules share. Autodiff (autodiff.h)
// calls a node's rule once in its reverse walk with the gradients of the
// node's outputs; the rule returns the gradients of the inputs it is asked
// for (GradContext::wants) and the FLOPs it spent.
//
// A rule says which forward values it reads (needs_inputs / needs_outputs),
// so the tape keeps exactly those alive until the backward pass; input and
// output *types* are always available.
//
// Rules are grouped like graph/ops_*.cc: grad_elementwise.cc, grad_nn.cc,
// grad_tensor.cc, grad_loss.cc, grad_conv.cc. The FLOP convention follows device/graph/ops.h:
// a multiply-add is 2, elementwise work 1 per element touched.
//
// Thread safety: the rule table is built once (thread-safe static) and then
// read-only; rules are pure functions.
// Errors: INVALID_ARGUMENT for what cannot be differentiated (e.g. a Pow
// exponent on the gradient path); callers prefix the node with NodeError().
#ifndef IPUPOD_TRAINING_GRAD_RULES_H_
#define IPUPOD_TRAINING_GRAD_RULES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "common/tensor/tensor.h"
#include "device/graph/ops.h"
#include "device/kernels/elementwise.h"

namespace ipupod::training {

using tensor::DType;
using tensor::Shape;
using tensor::Tensor;

// A gradient left unevaluated as one matrix product, alpha op(A) op(B)
// (op: optional transposition), with A and B viewed as the given 2-D
// shapes. The operands point into the tape (forward values and output
// gradients), which Autodiff keeps alive until it applies the product
// straight into the weight (Autodiff::RunSgdStep): the gradient is never
// materialised.
struct ProductGrad {
  const float* a = nullptr;
  Shape a_shape;
  const float* b = nullptr;
  Shape b_shape;
  bool trans_a = false;
  bool trans_b = false;
  float alpha = 1.0f;
};

struct GradContext {
  // The node, its input types, and the input values the rule asked for
  // (constants - initializers - are always there; others only if
  // needs_inputs).
  const graph::OpContext& op;
  // Per output: the forward value if needs_outputs (else nullptr), its type,
  // and the gradient flowing into it (nullptr: none flows, i.e. zero).
  std::vector<const Tensor*> outputs;
  std::vector<const graph::TensorType*> output_types;
  std::vector<const Tensor*> output_grads;
  // Per input: whether its gradient is wanted.
  std::vector<bool> wants;
  // Per input (or empty): whether the rule may leave a wanted gradient
  // that is one matrix product in (*products)[i] instead of input_grads[i].
  // Only set for a weight that nothing else gives a gradient.
  std::vector<bool> may_defer;
  std::vector<std::optional<ProductGrad>>* products = nullptr;

  bool has_wanted(size_t i) const { return i < wants.size() && wants[i]; }
  bool can_defer(size_t i) const {
    return products != nullptr && i < may_defer.size() && may_defer[i];
  }
  const Tensor& input(size_t i) const { return *op.values[i]; }
  const Tensor& grad(size_t k) const { return *output_grads[k]; }
};

// Fills input_grads[i] (sized like the inputs, all empty on entry) for
// wanted inputs, or (*c.products)[i] where c.can_defer(i); an input left
// empty in both receives no gradient. Returns FLOPs.
using GradFn = absl::StatusOr<int64_t> (*)(const GradContext& c,
                                           std::vector<std::optional<Tensor>>& input_grads);

struct GradRule {
  std::string op_type;
  GradFn fn = nullptr;
  bool needs_inputs = false;
  bool needs_outputs = false;
};

// The rule for `op_type`, or nullptr if ipupod cannot differentiate it.
const GradRule* FindGradRule(absl::string_view op_type);

// The rule for `node`: its custom op's gradient function (grad_custom.cc) when it is a
// custom node whose op has one, else FindGradRule(node.op_type); nullptr if none.
const GradRule* FindNodeGradRule(const graph::Node& node);

// Every op type with a rule, sorted.
std::vector<std::string> DifferentiableOps();

void RegisterElementwiseGrads(std::vector<GradRule>& rules);
void RegisterNnGrads(std::vector<GradRule>& rules);
void RegisterTensorGrads(std::vector<GradRule>& rules);
void RegisterLossGrads(std::vector<GradRule>& rules);
void RegisterConvGrads(std::vector<GradRule>& rules);

// ---- helpers shared by the rule files (grad_util.cc) ----

// A float32 tensor of `shape`, zero-filled.
absl::StatusOr<Tensor> Zeros(const Shape& shape);

// Sums `g` over the dims it was broadcast along so it has `shape` (numpy
// broadcasting reversed). REQUIRES: shape broadcasts to g.shape().
absl::StatusOr<Tensor> SumToShape(const Tensor& g, const Shape& shape);

// out = a <op> b with numpy broadcasting, as a new float tensor.
absl::StatusOr<Tensor> Binary(kernels::BinaryOp op, const Tensor& a, const Tensor& b);

// Elementwise map over a float tensor: out[i] = f(i).
template <typename F>
absl::StatusOr<Tensor> Generate(const Shape& shape, F&& f) {
  IPUPOD_ASSIGN_OR_RETURN(Tensor t, Zeros(shape));
  float* out = t.mutable_data<float>();
  for (int64_t i = 0; i < t.num_elements(); ++i) out[i] = f(i);
  return t;
}

// `t` with the same elements under `shape`.
absl::StatusOr<Tensor> Reshaped(const Tensor& t, const Shape& shape);

// a += b elementwise. INTERNAL if the shapes differ.
absl::Status AddInto(Tensor& a, const Tensor& b);

// The [M, N] shape of p's product; INVALID_ARGUMENT if its operands do
// not multiply.
absl::StatusOr<Shape> ProductShape(const ProductGrad& p);

// p's product as a new float tensor of `shape` (ProductShape(p) or a shape
// with the same elements in the same order).
absl::StatusOr<Tensor> EvaluateProduct(const ProductGrad& p, const Shape& shape);

// into += scale * (p's product), in place with one sgemm (beta 1).
// REQUIRES: into has as many elements as the product (checked: INTERNAL).
absl::Status AccumulateProduct(const ProductGrad& p, float scale, Tensor& into);

}  // namespace ipupod::training

#endif  // IPUPOD_TRAINING_GRAD_RULES_H_
