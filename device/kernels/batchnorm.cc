#include "device/kernels/batchnorm.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/kernels/shape_util.h"

namespace ipupod::kernels {
namespace {

absl::Status CheckParam(const char* what, Dims param, Dims x) {
  if (param.size() == 1 && param[0] == x[1]) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("batchnorm ", what, " has shape ", ShapeString(param), "; it must be [C] = [",
                   x[1], "], one value per channel (dim 1 of X ", ShapeString(x), ")"));
}

// Writes the optional training-mode outputs of channel c.
void WriteStatistics(const BatchNormStatistics& s, int64_t c, double mean, double var, int64_t n,
                     float input_mean, float input_var, double momentum) {
  const double unbiased = var * static_cast<double>(n) / static_cast<double>(n - 1);
  if (s.running_mean != nullptr) {
    s.running_mean[c] = static_cast<float>(input_mean * momentum + mean * (1.0 - momentum));
  }
  if (s.running_var != nullptr) {
    s.running_var[c] = static_cast<float>(input_var * momentum + unbiased * (1.0 - momentum));
  }
  if (s.saved_mean != nullptr) s.saved_mean[c] = static_cast<float>(mean);
  if (s.saved_var != nullptr) s.saved_var[c] = static_cast<float>(var);
}

// y = (x - mean) * inv_std * scale + bias over the blocks of channel c.
void NormalizeChannel(const float* x, const BatchNormLayout& l, int64_t c, double mean,
                      double inv_std, double scale, double bias, float* y) {
  const double a = inv_std * scale;
  for (int64_t o = 0; o < l.outer; ++o) {
    const int64_t base = (o * l.channels + c) * l.inner;
    for (int64_t i = 0; i < l.inner; ++i) {
      y[base + i] = static_cast<float>((x[base + i] - mean) * a + bias);
    }
  }
}

}  // namespace

absl::StatusOr<BatchNormLayout> BatchNormLayoutOf(Dims x) {
  if (x.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("batchnorm input X has shape ", ShapeString(x),
                     "; it must be [N, C, D1, ...] with rank >= 2 (channels on dim 1)"));
  }
  BatchNormLayout l;
  l.outer = x[0];
  l.channels = x[1];
  l.inner = NumElementsUnchecked(x.subspan(2));
  return l;
}

absl::Status CheckBatchNormShapes(Dims x, Dims scale, Dims bias, Dims mean, Dims var,
                                  bool training) {
  IPUPOD_ASSIGN_OR_RETURN(BatchNormLayout l, BatchNormLayoutOf(x));
  IPUPOD_RETURN_IF_ERROR(CheckParam("scale", scale, x));
  IPUPOD_RETURN_IF_ERROR(CheckParam("B", bias, x));
  IPUPOD_RETURN_IF_ERROR(CheckParam("input_mean", mean, x));
  IPUPOD_RETURN_IF_ERROR(CheckParam("input_var", var, x));
  if (training && l.per_channel() <= 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Expected more than 1 value per channel when training, got X of shape ", ShapeString(x),
        "; train with a batch of 2 or more, or export the model in eval mode"));
  }
  return absl::OkStatus();
}

void BatchNormMoments(const float* x, const BatchNormLayout& l, std::vector<double>& mean,
                      std::vector<double>& var) {
  mean.assign(static_cast<size_t>(l.channels), 0.0);
  var.assign(static_cast<size_t>(l.channels), 0.0);
  const double n = static_cast<double>(l.per_channel());
  for (int64_t o = 0; o < l.outer; ++o) {
    for (int64_t c = 0; c < l.channels; ++c) {
      const float* block = x + (o * l.channels + c) * l.inner;
      for (int64_t i = 0; i < l.inner; ++i) mean[c] += block[i];
    }
  }
  for (double& m : mean) m /= n;
  for (int64_t o = 0; o < l.outer; ++o) {
    for (int64_t c = 0; c < l.channels; ++c) {
      const float* block = x + (o * l.channels + c) * l.inner;
      for (int64_t i = 0; i < l.inner; ++i) {
        const double d = block[i] - mean[c];
        var[c] += d * d;
      }
    }
  }
  for (double& v : var) v /= n;
}

absl::Status BatchNorm(View<float> x, View<float> scale, View<float> bias, View<float> mean,
                       View<float> var, const BatchNormOptions& options, MutableView<float> y,
                       const BatchNormStatistics& stats) {
  IPUPOD_RETURN_IF_ERROR(CheckBatchNormShapes(x.shape, scale.shape, bias.shape, mean.shape,
                                              var.shape, options.training));
  IPUPOD_RETURN_IF_ERROR(CheckShape("batchnorm output", y.shape, x.shape));
  if (!options.training && stats.any()) {
    return absl::InvalidArgumentError(
        "batchnorm running and saved statistics exist only in training mode");
  }
  IPUPOD_ASSIGN_OR_RETURN(BatchNormLayout l, BatchNormLayoutOf(x.shape));
  std::vector<double> batch_mean, batch_var;
  if (options.training) BatchNormMoments(x.data, l, batch_mean, batch_var);
  for (int64_t c = 0; c < l.channels; ++c) {
    const double m = options.training ? batch_mean[c] : mean.data[c];
    const double v = options.training ? batch_var[c] : var.data[c];
    const double inv_std = 1.0 / std::sqrt(v + options.epsilon);
    NormalizeChannel(x.data, l, c, m, inv_std, scale.data[c], bias.data[c], y.data);
    if (options.training) {
      WriteStatistics(stats, c, m, v, l.per_channel(), mean.data[c], var.data[c], options.momentum);
    }
  }
  return absl::OkStatus();
}

}  // namespace ipupod::kernels
