// Backward rules of the losses: NegativeLogLikelihoodLoss (gradient of the
// log-probabilities, kernels::NllLossGrad) and SoftmaxCrossEntropyLoss
// (that, plus any gradient of its log_prob output, through log-softmax over
// the class axis: dscores = dlogp - softmax * sum_c dlogp). Class weights
// are constants: a weight input on the gradient path is an error.
#include <cmath>

#include "common/status_macros.h"
#include "device/kernels/loss.h"
#include "device/kernels/softmax.h"
#include "device/training/grad_rules.h"

namespace ipupod::training {
namespace {

using Grads = std::vector<std::optional<Tensor>>;

absl::Status CheckWeightsConstant(const GradContext& c) {
  if (!c.has_wanted(2)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "the class weights depend on a trainable weight; only constant class weights are "
      "supported");
}

// d(total)/d(log_prob) from the loss output's gradient (zeros if none).
absl::StatusOr<Tensor> LogProbGrad(const GradContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(Tensor d, Zeros(c.op.shape(0)));
  if (c.output_grads[0] == nullptr) return d;
  IPUPOD_ASSIGN_OR_RETURN(kernels::LossOptions o, graph::LossOptionsOf(c.op));
  const kernels::View<float> w =
      c.op.has(2) ? graph::ViewOf<float>(c.input(2)) : kernels::View<float>{nullptr, {}};
  const Tensor& labels = c.input(1);
  if (labels.dtype() == DType::kInt32) {
    IPUPOD_RETURN_IF_ERROR(kernels::NllLossGrad(graph::ViewOf<float>(c.grad(0)),
                                                graph::ViewOf<int32_t>(labels), w, o,
                                                graph::MutableViewOf<float>(d)));
  } else {
    IPUPOD_RETURN_IF_ERROR(kernels::NllLossGrad(graph::ViewOf<float>(c.grad(0)),
                                                graph::ViewOf<int64_t>(labels), w, o,
                                                graph::MutableViewOf<float>(d)));
  }
  return d;
}

absl::StatusOr<int64_t> NllGrad(const GradContext& c, Grads& grads) {
  IPUPOD_RETURN_IF_ERROR(CheckWeightsConstant(c));
  if (!c.wants[0]) return 0;
  IPUPOD_ASSIGN_OR_RETURN(grads[0], LogProbGrad(c));
  return c.op.type(1).shape.empty() ? 1 : graph::NumElementsOf(c.op.type(1));
}

absl::StatusOr<int64_t> SoftmaxCrossEntropyGrad(const GradContext& c, Grads& grads) {
  IPUPOD_RETURN_IF_ERROR(CheckWeightsConstant(c));
  if (!c.wants[0]) return 0;
  IPUPOD_ASSIGN_OR_RETURN(Tensor dlogp, LogProbGrad(c));
  if (c.output_grads.size() > 1 && c.output_grads[1] != nullptr) {
    IPUPOD_RETURN_IF_ERROR(AddInto(dlogp, *c.output_grads[1]));
  }
  const Shape& shape = c.op.shape(0);
  IPUPOD_ASSIGN_OR_RETURN(Tensor logp, Zeros(shape));
  const kernels::SoftmaxLayout l = graph::ScoresLayout(shape);
  IPUPOD_RETURN_IF_ERROR(
      kernels::LogSoftmax(graph::ViewOf<float>(c.input(0)), l, graph::MutableViewOf<float>(logp)));
  const float* lp = logp.data<float>();
  float* d = dlogp.mutable_data<float>();
  for (int64_t o = 0; o < l.outer; ++o) {
    for (int64_t in = 0; in < l.inner; ++in) {
      const int64_t base = o * l.n * l.inner + in;
      double s = 0;
      for (int64_t j = 0; j < l.n; ++j) s += d[base + j * l.inner];
      for (int64_t j = 0; j < l.n; ++j) {
        const int64_t at = base + j * l.inner;
        d[at] = static_cast<float>(d[at] - std::exp(double{lp[at]}) * s);
      }
    }
  }
  const int64_t n = dlogp.num_elements();
  grads[0] = std::move(dlogp);
  return 8 * n;
}

}  // namespace

void RegisterLossGrads(std::vector<GradRule>& rules) {
  rules.push_back({"NegativeLogLikelihoodLoss", NllGrad, true, false});
  rules.push_back({"SoftmaxCrossEntropyLoss", SoftmaxCrossEntropyGrad, true, false});
}

}  // namespace ipupod::training
