// File: device/kernels/loss.h
//
// Classification losses as ONNX defines them (NegativeLogLikelihoodLoss,
// and the second half of SoftmaxCrossEntropyLoss) and as torch computes
// F.nll_loss / F.cross_entropy, plus their gradient with respect to the
// log-probabilities (for device/training/).
//
// Layout: log_prob is [N, C] or [N, C, D1, ..., Dk], viewed as [N, C, D]
// with D = D1*...*Dk (1 for rank 2); labels are [N] or [N, D1, ..., Dk].
// The per-element loss is l[n, d] = -w[t] * log_prob[n, t, d] with
// t = labels[n, d] and w the optional class weights (1 if absent);
// elements whose label equals ignore_index contribute 0 and no weight.
// Reductions: kNone keeps l (labels' shape), kSum adds it up, kMean divides
// the sum by the sum of the weights of the non-ignored elements (their
// count without weights) - NaN when every element is ignored, as in torch.
// Sums accumulate in double.
//
// Thread safety: pure functions; single-threaded.
// Errors: INVALID_ARGUMENT for inconsistent shapes or a label outside
// [0, C) that is not ignore_index (nothing is written then).
#ifndef IPUPOD_KERNELS_LOSS_H_
#define IPUPOD_KERNELS_LOSS_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "device/kernels/view.h"

namespace ipupod::kernels {

enum class LossReduction { kNone, kSum, kMean };

struct LossOptions {
  LossReduction reduction = LossReduction::kMean;
  std::optional<int64_t> ignore_index;  // absent: every label counts (ONNX default)
};

// "none", "sum", "mean" -> LossReduction; INVALID_ARGUMENT otherwise.
absl::StatusOr<LossReduction> ParseLossReduction(absl::string_view name);

// Shape of the loss output: labels' shape for kNone, a scalar otherwise.
// INVALID_ARGUMENT unless log_prob is [N, C, D...] and labels [N, D...].
absl::StatusOr<std::vector<int64_t>> LossShape(Dims log_prob, Dims labels, LossReduction reduction);

// `weight.data` may be null (no class weights); otherwise weight is [C].
template <typename Index>
absl::Status NllLoss(View<float> log_prob, View<Index> labels, View<float> weight,
                     const LossOptions& options, MutableView<float> loss);

// d(loss)/d(log_prob) given d(total)/d(loss) `grad_loss` (loss's shape).
// Overwrites every element of grad_log_prob (log_prob's shape).
template <typename Index>
absl::Status NllLossGrad(View<float> grad_loss, View<Index> labels, View<float> weight,
                         const LossOptions& options, MutableView<float> grad_log_prob);

}  // namespace ipupod::kernels

#endif  // IPUPOD_KERNELS_LOSS_H_
