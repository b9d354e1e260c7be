// File: device/kernels/layernorm.h
//
// Layer normalisation over the trailing block of a row-major tensor viewed
// as [rows, n] (ONNX LayerNormalization with stash_type float, torch
// nn.LayerNorm):
//
//   y = (x - mean) * inv_std * scale + bias,   inv_std = 1 / sqrt(var + eps)
//
// with the biased variance. Mean and variance are accumulated in double.
//
// Thread safety: pure functions; single-threaded.
// Errors: INVALID_ARGUMENT if `scale`/`bias` do not broadcast to the
// normalised block [n] (given as trailing dims) or the output shape differs.
#ifndef IPUPOD_KERNELS_LAYERNORM_H_
#define IPUPOD_KERNELS_LAYERNORM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "device/kernels/view.h"

namespace ipupod::kernels {

// Normalises `x` over dims [axis, rank). `bias.data` may be null (no bias).
// `mean` and `inv_std_dev` may be null; if given they receive one value per
// row (the caller shapes them, e.g. [rows..., 1...]).
absl::Status LayerNorm(View<float> x, int64_t axis, View<float> scale, View<float> bias,
                       float epsilon, MutableView<float> y, float* mean, float* inv_std_dev);

}  // namespace ipupod::kernels

#endif  // IPUPOD_KERNELS_LAYERNORM_H_
