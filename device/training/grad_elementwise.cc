// Backward rules of the elementwise ops: Add, Sub, Mul, Div, Pow (constant
// exponent), Sqrt, Erf, Neg, Abs, Relu, Clip, HardSigmoid, HardSwish, Sigmoid, Tanh, Where, and the
// identities Identity, Dropout (the mask in training mode) and Cast (float to float). Broadcast
// operands get their gradient summed back to their own shape.
#include <cmath>

#include "common/status_macros.h"
#include "device/training/grad_rules.h"

namespace ipupod::training {
namespace {

using kernels::BinaryOp;

using Grads = std::vector<std::optional<Tensor>>;

// Sets input i's gradient to `g` reduced to the input's shape.
absl::Status SetReduced(const GradContext& c, size_t i, const Tensor& g, Grads& grads) {
  IPUPOD_ASSIGN_OR_RETURN(grads[i], SumToShape(g, c.op.shape(i)));
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Negated(const Tensor& g) {
  return Generate(g.shape(), [p = g.data<float>()](int64_t i) { return -p[i]; });
}

absl::StatusOr<int64_t> AddGrad(const GradContext& c, Grads& grads) {
  for (size_t i = 0; i < 2; ++i) {
    if (c.wants[i]) IPUPOD_RETURN_IF_ERROR(SetReduced(c, i, c.grad(0), grads));
  }
  return 2 * c.grad(0).num_elements();
}

absl::StatusOr<int64_t> SubGrad(const GradContext& c, Grads& grads) {
  if (c.wants[0]) IPUPOD_RETURN_IF_ERROR(SetReduced(c, 0, c.grad(0), grads));
  if (c.wants[1]) {
    IPUPOD_ASSIGN_OR_RETURN(Tensor neg, Negated(c.grad(0)));
    IPUPOD_RETURN_IF_ERROR(SetReduced(c, 1, neg, grads));
  }
  return 3 * c.grad(0).num_elements();
}

absl::StatusOr<int64_t> MulGrad(const GradContext& c, Grads& grads) {
  for (size_t i = 0; i < 2; ++i) {
    if (!c.wants[i]) continue;
    IPUPOD_ASSIGN_OR_RETURN(Tensor g, Binary(BinaryOp::kMul, c.grad(0), c.input(1 - i)));
    IPUPOD_RETURN_IF_ERROR(SetReduced(c, i, g, grads));
  }
  return 4 * c.grad(0).num_elements();
}

// d(a/b)/da = 1/b; d(a/b)/db = -a/b^2.
absl::StatusOr<int64_t> DivGrad(const GradContext& c, Grads& grads) {
  const Tensor& a = c.input(0);
  const Tensor& b = c.input(1);
  IPUPOD_ASSIGN_OR_RETURN(Tensor g_over_b, Binary(BinaryOp::kDiv, c.grad(0), b));
  if (c.wants[0]) IPUPOD_RETURN_IF_ERROR(SetReduced(c, 0, g_over_b, grads));
  if (c.wants[1]) {
    IPUPOD_ASSIGN_OR_RETURN(Tensor t, Binary(BinaryOp::kMul, g_over_b, a));
    IPUPOD_ASSIGN_OR_RETURN(t, Binary(BinaryOp::kDiv, t, b));
    IPUPOD_ASSIGN_OR_RETURN(t, Negated(t));
    IPUPOD_RETURN_IF_ERROR(SetReduced(c, 1, t, grads));
  }
  return 5 * c.grad(0).num_elements();
}

// d(x^e)/dx = e * x^(e-1); the exponent must not be on the gradient path.
absl::StatusOr<int64_t> PowGrad(const GradContext& c, Grads& grads) {
  if (c.wants[1]) {
    return absl::InvalidArgumentError(
        "the exponent of Pow depends on a trainable weight; only constant exponents are "
        "differentiable");
  }
  if (!c.wants[0]) return 0;
  const Tensor& e_in = c.input(1);
  IPUPOD_ASSIGN_OR_RETURN(Tensor e, Generate(e_in.shape(), [&e_in](int64_t i) {
                            return e_in.dtype() == DType::kFloat32
                                       ? e_in.data<float>()[i]
                                       : static_cast<float>(e_in.IntAt(i));
                          }));
  IPUPOD_ASSIGN_OR_RETURN(Tensor e_minus_1, Generate(e.shape(), [p = e.data<float>()](int64_t i) {
                            return p[i] - 1.0f;
                          }));
  IPUPOD_ASSIGN_OR_RETURN(Tensor t, Binary(BinaryOp::kPow, c.input(0), e_minus_1));
  IPUPOD_ASSIGN_OR_RETURN(t, Binary(BinaryOp::kMul, t, e));
  IPUPOD_ASSIGN_OR_RETURN(t, Binary(BinaryOp::kMul, c.grad(0), t));
  IPUPOD_RETURN_IF_ERROR(SetReduced(c, 0, t, grads));
  return 4 * c.grad(0).num_elements();
}

// dx = f(g, v) elementwise, with v the saved input (kOfInput) or output.
template <bool kOfInput, typename F>
absl::StatusOr<int64_t> UnaryGrad(const GradContext& c, Grads& grads, F f) {
  if (!c.wants[0]) return 0;
  const float* g = c.grad(0).data<float>();
  const float* v = kOfInput ? c.input(0).data<float>() : c.outputs[0]->data<float>();
  IPUPOD_ASSIGN_OR_RETURN(grads[0],
                          Generate(c.op.shape(0), [&](int64_t i) { return f(g[i], v[i]); }));
  return 3 * c.grad(0).num_elements();
}

absl::StatusOr<int64_t> SqrtGrad(const GradContext& c, Grads& grads) {
  return UnaryGrad<false>(c, grads, [](float g, float y) { return g / (2.0f * y); });
}

absl::StatusOr<int64_t> ErfGrad(const GradContext& c, Grads& grads) {
  constexpr float kTwoOverSqrtPi = 1.12837916709551257390f;
  return UnaryGrad<true>(c, grads,
                         [](float g, float x) { return g * kTwoOverSqrtPi * std::exp(-x * x); });
}

absl::StatusOr<int64_t> NegGrad(const GradContext& c, Grads& grads) {
  if (c.wants[0]) {
    IPUPOD_ASSIGN_OR_RETURN(grads[0], Negated(c.grad(0)));
  }
  return c.grad(0).num_elements();
}

// torch's abs backward: g * sign(x), 0 at 0 (L1Loss's gradient).
absl::StatusOr<int64_t> AbsGrad(const GradContext& c, Grads& grads) {
  return UnaryGrad<true>(c, grads,
                         [](float g, float x) { return x > 0.0f ? g : (x < 0.0f ? -g : 0.0f); });
}

absl::StatusOr<int64_t> ReluGrad(const GradContext& c, Grads& grads) {
  return UnaryGrad<false>(c, grads, [](float g, float y) { return y > 0.0f ? g : 0.0f; });
}

// Clip passes the gradient strictly inside its bounds, as torch's hardtanh
// and ReLU6 do (torch.clamp also passes it at a bound itself).
absl::StatusOr<int64_t> ClipGrad(const GradContext& c, Grads& grads) {
  IPUPOD_ASSIGN_OR_RETURN(const auto bounds, graph::ClipBounds(c.op));
  const float lo = bounds.first;  // (clang 14 cannot capture a structured binding)
  const float hi = bounds.second;
  return UnaryGrad<true>(c, grads,
                         [lo, hi](float g, float x) { return x > lo && x < hi ? g : 0.0f; });
}

// HardSigmoid passes alpha * g where it is not clamped (torch: -3 < x < 3).
absl::StatusOr<int64_t> HardSigmoidGrad(const GradContext& c, Grads& grads) {
  IPUPOD_ASSIGN_OR_RETURN(const float alpha, c.op.Float("alpha", 0.2f));
  IPUPOD_ASSIGN_OR_RETURN(const float beta, c.op.Float("beta", 0.5f));
  return UnaryGrad<true>(c, grads, [alpha, beta](float g, float x) {
    const float v = alpha * x + beta;
    return v > 0.0f && v < 1.0f ? g * alpha : 0.0f;
  });
}

// HardSwish as torch differentiates it: 0 below -3, g above 3, g (x / 3 + 1/2) between.
absl::StatusOr<int64_t> HardSwishGrad(const GradContext& c, Grads& grads) {
  return UnaryGrad<true>(c, grads, [](float g, float x) {
    if (x < -3.0f) return 0.0f;
    return x <= 3.0f ? g * (x / 3.0f + 0.5f) : g;
  });
}

absl::StatusOr<int64_t> SigmoidGrad(const GradContext& c, Grads& grads) {
  return UnaryGrad<false>(c, grads, [](float g, float y) { return g * (1.0f - y) * y; });
}

absl::StatusOr<int64_t> TanhGrad(const GradContext& c, Grads& grads) {
  return UnaryGrad<false>(c, grads, [](float g, float y) { return g * (1.0f - y * y); });
}

// Training-mode Dropout: y = x * mask * scale, so dx = g * mask * scale with
// the forward's own mask, recomputed from the same run context (the
// trainer runs a micro-batch's forward and backward under one). In
// inference mode it is the identity.
absl::StatusOr<int64_t> DropoutGrad(const GradContext& c, Grads& grads) {
  IPUPOD_ASSIGN_OR_RETURN(graph::DropoutPlan plan, graph::DropoutPlanOf(c.op));
  if (!c.wants[0]) return 0;
  if (!plan.drops) {
    grads[0] = c.grad(0);
    return 0;
  }
  const Tensor& g = c.grad(0);
  IPUPOD_ASSIGN_OR_RETURN(std::vector<uint8_t> keep,
                          graph::DropoutKeepMask(c.op, plan, g.num_elements()));
  IPUPOD_ASSIGN_OR_RETURN(Tensor dx, Zeros(g.shape()));
  const float* in = g.data<float>();
  float* out = dx.mutable_data<float>();
  for (int64_t i = 0; i < g.num_elements(); ++i) out[i] = keep[i] != 0 ? in[i] * plan.scale : 0.0f;
  grads[0] = std::move(dx);
  return g.num_elements();
}

// Identity, Dropout (inference mode) and float-to-float Cast pass the
// gradient through; other Casts have no float input on the path.
absl::StatusOr<int64_t> IdentityGrad(const GradContext& c, Grads& grads) {
  if (c.wants[0] && c.op.dtype(0) == DType::kFloat32) grads[0] = c.grad(0);
  return 0;
}

// where(cond, x, y): x gets g where cond holds, y elsewhere.
absl::StatusOr<int64_t> WhereGrad(const GradContext& c, Grads& grads) {
  const Tensor& g = c.grad(0);
  const Tensor zero = Tensor::Scalar(0.0f);
  for (size_t i = 1; i < 3; ++i) {
    if (!c.wants[i]) continue;
    IPUPOD_ASSIGN_OR_RETURN(Tensor t, Zeros(g.shape()));
    const Tensor& when_true = i == 1 ? g : zero;
    const Tensor& when_false = i == 1 ? zero : g;
    IPUPOD_RETURN_IF_ERROR(
        kernels::Where(graph::ViewOf<bool>(c.input(0)), graph::ViewOf<float>(when_true),
                       graph::ViewOf<float>(when_false), graph::MutableViewOf<float>(t)));
    IPUPOD_RETURN_IF_ERROR(SetReduced(c, i, t, grads));
  }
  return 2 * g.num_elements();
}

GradRule Rule(std::string op, GradFn fn, bool needs_inputs, bool needs_outputs) {
  return GradRule{std::move(op), fn, needs_inputs, needs_outputs};
}

}  // namespace

void RegisterElementwiseGrads(std::vector<GradRule>& rules) {
  rules.push_back(Rule("Add", AddGrad, false, false));
  rules.push_back(Rule("Sub", SubGrad, false, false));
  rules.push_back(Rule("Mul", MulGrad, true, false));
  rules.push_back(Rule("Div", DivGrad, true, false));
  rules.push_back(Rule("Pow", PowGrad, true, false));
  rules.push_back(Rule("Sqrt", SqrtGrad, false, true));
  rules.push_back(Rule("Erf", ErfGrad, true, false));
  rules.push_back(Rule("Neg", NegGrad, false, false));
  rules.push_back(Rule("Abs", AbsGrad, true, false));
  rules.push_back(Rule("Relu", ReluGrad, false, true));
  rules.push_back(Rule("Clip", ClipGrad, true, false));
  rules.push_back(Rule("HardSigmoid", HardSigmoidGrad, true, false));
  rules.push_back(Rule("HardSwish", HardSwishGrad, true, false));
  rules.push_back(Rule("Sigmoid", SigmoidGrad, false, true));
  rules.push_back(Rule("Tanh", TanhGrad, false, true));
  rules.push_back(Rule("Where", WhereGrad, true, false));
  rules.push_back(Rule("Identity", IdentityGrad, false, false));
  rules.push_back(Rule("Dropout", DropoutGrad, false, false));
  rules.push_back(Rule("Cast", IdentityGrad, false, false));
}

}  // namespace ipupod::training
