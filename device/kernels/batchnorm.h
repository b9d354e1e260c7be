// File: device/kernels/batchnorm.h
//
// Batch normalisation over the channel axis 1 of x [N, C, D1, ...] (ONNX
// BatchNormalization from opset 9, torch nn.BatchNorm1d/2d/3d). Per channel c:
//
//   y = (x - mean_c) / sqrt(var_c + eps) * scale_c + bias_c
//
// Inference mode uses the given (running) mean_c and var_c. Training mode
// uses the batch statistics of channel c - the mean and the biased
// (population) variance of its n = N * D1 * ... values - and can also write
//   running_mean = input_mean * momentum + batch_mean * (1 - momentum)
//   running_var  = input_var * momentum + batch_var * n / (n - 1) * (1 - momentum)
//   saved_mean   = batch_mean,  saved_var = batch_var (biased)
// running_var takes the unbiased variance as torch.nn.BatchNorm does (the
// ONNX reference implementation takes the biased one; ipupod matches PyTorch).
// Statistics are accumulated in double.
//
// Thread safety: pure functions; single-threaded.
// Errors: INVALID_ARGUMENT if x has rank < 2, a parameter is not [C], y's
// shape differs from x's, a training batch has only one value per channel
// (as torch: the variance is undefined), or statistics are requested in
// inference mode.
#ifndef IPUPOD_KERNELS_BATCHNORM_H_
#define IPUPOD_KERNELS_BATCHNORM_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device/kernels/view.h"

namespace ipupod::kernels {

struct BatchNormOptions {
  float epsilon = 1e-5f;  // ONNX default
  float momentum = 0.9f;  // weight of the old running value (torch's 1 - momentum)
  bool training = false;  // batch statistics instead of the given mean/var
};

// x [N, C, D1, ...] viewed as [outer = N, channels = C, inner = D1 * ...].
struct BatchNormLayout {
  int64_t outer = 1;
  int64_t channels = 1;
  int64_t inner = 1;
  int64_t per_channel() const { return outer * inner; }  // n, values per channel
};

// Optional training-mode outputs: each null or [C] floats.
struct BatchNormStatistics {
  float* running_mean = nullptr;
  float* running_var = nullptr;
  float* saved_mean = nullptr;
  float* saved_var = nullptr;
  bool any() const {
    return running_mean != nullptr || running_var != nullptr || saved_mean != nullptr ||
           saved_var != nullptr;
  }
};

// The layout of x. INVALID_ARGUMENT if x has rank < 2.
absl::StatusOr<BatchNormLayout> BatchNormLayoutOf(Dims x);

// OK if x has rank >= 2, scale, bias, mean and var are each [C] (C = x[1])
// and, when `training`, every channel has more than one value. Lets shape
// inference reject a model before any data exists.
absl::Status CheckBatchNormShapes(Dims x, Dims scale, Dims bias, Dims mean, Dims var,
                                  bool training);

// Per channel: the mean and the biased variance of x's values (double
// accumulation, two passes). REQUIRES: x holds outer * channels * inner
// floats.
void BatchNormMoments(const float* x, const BatchNormLayout& layout, std::vector<double>& mean,
                      std::vector<double>& var);

// Normalises x into y. `mean`/`var` are ONNX's input_mean/input_var: the
// statistics in inference mode, the old running values in training mode.
// `stats` must be empty unless options.training.
absl::Status BatchNorm(View<float> x, View<float> scale, View<float> bias, View<float> mean,
                       View<float> var, const BatchNormOptions& options, MutableView<float> y,
                       const BatchNormStatistics& stats = {});

}  // namespace ipupod::kernels

#endif  // IPUPOD_KERNELS_BATCHNORM_H_
