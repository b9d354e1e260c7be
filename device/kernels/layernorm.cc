#include "device/kernels/layernorm.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/kernels/data_movement.h"
#include "device/kernels/interrupt.h"
#include "device/kernels/shape_util.h"

namespace ipupod::kernels {
namespace {

// scale/bias broadcast to the normalised block; expand them to a flat [n]
// once so the row loop is simple.
absl::StatusOr<std::vector<float>> ExpandParam(const char* what, View<float> p, Dims block) {
  if (!BroadcastsTo(p.shape, block)) {
    return absl::InvalidArgumentError(absl::StrCat("layernorm ", what, " shape ",
                                                   ShapeString(p.shape), " does not broadcast to ",
                                                   ShapeString(block)));
  }
  std::vector<float> flat(static_cast<size_t>(NumElementsUnchecked(block)));
  IPUPOD_RETURN_IF_ERROR(Expand(p.data, p.shape, block, sizeof(float), flat.data()));
  return flat;
}

void NormalizeRow(const float* x, int64_t n, const float* scale, const float* bias, float eps,
                  float* y, float* mean_out, float* inv_std_out) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(n);
  double sq = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = x[i] - mean;
    sq += d * d;
  }
  const float m = static_cast<float>(mean);
  const float inv_std = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) {
    const float v = (x[i] - m) * inv_std * scale[i];
    y[i] = bias != nullptr ? v + bias[i] : v;
  }
  if (mean_out != nullptr) *mean_out = m;
  if (inv_std_out != nullptr) *inv_std_out = inv_std;
}

}  // namespace

absl::Status LayerNorm(View<float> x, int64_t axis, View<float> scale, View<float> bias,
                       float epsilon, MutableView<float> y, float* mean, float* inv_std_dev) {
  IPUPOD_RETURN_IF_ERROR(CheckShape("layernorm output", y.shape, x.shape));
  IPUPOD_ASSIGN_OR_RETURN(axis, NormalizeAxis(axis, static_cast<int64_t>(x.shape.size())));
  const Dims block = x.shape.subspan(axis);
  const int64_t n = NumElementsUnchecked(block);
  const int64_t rows = NumElementsUnchecked(x.shape.subspan(0, axis));
  IPUPOD_ASSIGN_OR_RETURN(std::vector<float> s, ExpandParam("scale", scale, block));
  std::vector<float> b;
  if (bias.data != nullptr) {
    IPUPOD_ASSIGN_OR_RETURN(b, ExpandParam("bias", bias, block));
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (InterruptPoint(n)) break;  // the output is discarded (device/kernels/interrupt.h)
    NormalizeRow(x.data + r * n, n, s.data(), b.empty() ? nullptr : b.data(), epsilon,
                 y.data + r * n, mean != nullptr ? mean + r : nullptr,
                 inv_std_dev != nullptr ? inv_std_dev + r : nullptr);
  }
  return absl::OkStatus();
}

}  // namespace ipupod::kernels
