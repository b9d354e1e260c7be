#include "device/kernels/loss.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/kernels/shape_util.h"

namespace ipupod::kernels {
namespace {

// [N, C, D] view of log_prob.
struct Layout {
  int64_t n = 0;
  int64_t c = 0;
  int64_t d = 1;
};

absl::StatusOr<Layout> LayoutOf(Dims log_prob, Dims labels) {
  if (log_prob.size() < 2 || labels.size() + 1 != log_prob.size() || labels[0] != log_prob[0]) {
    return absl::InvalidArgumentError(absl::StrCat("labels ", ShapeString(labels),
                                                   " do not match scores ", ShapeString(log_prob),
                                                   "; expected [N, C, D...] and [N, D...]"));
  }
  Layout l{log_prob[0], log_prob[1], 1};
  for (size_t i = 2; i < log_prob.size(); ++i) {
    if (labels[i - 1] != log_prob[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "labels ", ShapeString(labels), " do not match scores ", ShapeString(log_prob)));
    }
    l.d *= log_prob[i];
  }
  return l;
}

absl::Status CheckWeight(View<float> weight, const Layout& l) {
  if (weight.data == nullptr) return absl::OkStatus();
  return CheckShape("class weights", weight.shape, std::vector<int64_t>{l.c});
}

// Validates every label; fills the per-element class weight (0 if ignored).
template <typename Index>
absl::StatusOr<std::vector<double>> ElementWeights(View<Index> labels, View<float> weight,
                                                   const LossOptions& o, const Layout& l) {
  std::vector<double> w(static_cast<size_t>(l.n * l.d));
  for (size_t i = 0; i < w.size(); ++i) {
    const int64_t t = static_cast<int64_t>(labels.data[i]);
    if (o.ignore_index.has_value() && t == *o.ignore_index) {
      w[i] = 0.0;
      continue;
    }
    if (t < 0 || t >= l.c) {
      return absl::InvalidArgumentError(absl::StrCat(
          "label ", t, " at element ", i, " is outside [0, ", l.c, ")",
          o.ignore_index.has_value() ? absl::StrCat(" and is not ignore_index ", *o.ignore_index)
                                     : ""));
    }
    w[i] = weight.data == nullptr ? 1.0 : weight.data[t];
  }
  return w;
}

double Denominator(const std::vector<double>& w) {
  double sum = 0;
  for (double x : w) sum += x;
  return sum;
}

template <typename Index>
int64_t Offset(const Layout& l, int64_t i, Index t) {
  const int64_t n = i / l.d;
  const int64_t d = i % l.d;
  return (n * l.c + static_cast<int64_t>(t)) * l.d + d;
}

}  // namespace

absl::StatusOr<LossReduction> ParseLossReduction(absl::string_view name) {
  if (name == "none") return LossReduction::kNone;
  if (name == "sum") return LossReduction::kSum;
  if (name == "mean") return LossReduction::kMean;
  return absl::InvalidArgumentError(
      absl::StrCat("reduction '", name, "' is not one of none, sum, mean"));
}

absl::StatusOr<std::vector<int64_t>> LossShape(Dims log_prob, Dims labels,
                                               LossReduction reduction) {
  IPUPOD_RETURN_IF_ERROR(LayoutOf(log_prob, labels).status());
  if (reduction == LossReduction::kNone) return std::vector<int64_t>(labels.begin(), labels.end());
  return std::vector<int64_t>{};
}

template <typename Index>
absl::Status NllLoss(View<float> log_prob, View<Index> labels, View<float> weight,
                     const LossOptions& options, MutableView<float> loss) {
  IPUPOD_ASSIGN_OR_RETURN(Layout l, LayoutOf(log_prob.shape, labels.shape));
  IPUPOD_RETURN_IF_ERROR(CheckWeight(weight, l));
  IPUPOD_ASSIGN_OR_RETURN(std::vector<int64_t> shape,
                          LossShape(log_prob.shape, labels.shape, options.reduction));
  IPUPOD_RETURN_IF_ERROR(CheckShape("loss output", loss.shape, shape));
  IPUPOD_ASSIGN_OR_RETURN(std::vector<double> w, ElementWeights(labels, weight, options, l));
  double sum = 0;
  for (int64_t i = 0; i < l.n * l.d; ++i) {
    const double li = w[i] == 0.0 ? 0.0 : -w[i] * log_prob.data[Offset(l, i, labels.data[i])];
    if (options.reduction == LossReduction::kNone) loss.data[i] = static_cast<float>(li);
    sum += li;
  }
  if (options.reduction == LossReduction::kSum) loss.data[0] = static_cast<float>(sum);
  if (options.reduction == LossReduction::kMean) {
    loss.data[0] = static_cast<float>(sum / Denominator(w));
  }
  return absl::OkStatus();
}

template <typename Index>
absl::Status NllLossGrad(View<float> grad_loss, View<Index> labels, View<float> weight,
                         const LossOptions& options, MutableView<float> grad_log_prob) {
  IPUPOD_ASSIGN_OR_RETURN(Layout l, LayoutOf(grad_log_prob.shape, labels.shape));
  IPUPOD_RETURN_IF_ERROR(CheckWeight(weight, l));
  IPUPOD_ASSIGN_OR_RETURN(std::vector<int64_t> shape,
                          LossShape(grad_log_prob.shape, labels.shape, options.reduction));
  IPUPOD_RETURN_IF_ERROR(CheckShape("loss gradient", grad_loss.shape, shape));
  IPUPOD_ASSIGN_OR_RETURN(std::vector<double> w, ElementWeights(labels, weight, options, l));
  std::fill_n(grad_log_prob.data, l.n * l.c * l.d, 0.0f);
  double scale = 1.0;
  if (options.reduction != LossReduction::kNone) scale = grad_loss.data[0];
  if (options.reduction == LossReduction::kMean) scale /= Denominator(w);
  for (int64_t i = 0; i < l.n * l.d; ++i) {
    if (w[i] == 0.0) continue;
    const double g = options.reduction == LossReduction::kNone ? grad_loss.data[i] : scale;
    grad_log_prob.data[Offset(l, i, labels.data[i])] = static_cast<float>(-w[i] * g);
  }
  return absl::OkStatus();
}

#define IPUPOD_INSTANTIATE_LOSS(Index)                                                            \
  template absl::Status NllLoss<Index>(View<float>, View<Index>, View<float>, const LossOptions&, \
                                       MutableView<float>);                                       \
  template absl::Status NllLossGrad<Index>(View<float>, View<Index>, View<float>,                 \
                                           const LossOptions&, MutableView<float>);
IPUPOD_INSTANTIATE_LOSS(int64_t)
IPUPOD_INSTANTIATE_LOSS(int32_t)
#undef IPUPOD_INSTANTIATE_LOSS

}  // namespace ipupod::kernels
