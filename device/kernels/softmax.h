// File: device/kernels/softmax.h
//
// Numerically stable softmax and log-softmax over one axis of a row-major
// tensor viewed as [outer, n, inner] (ONNX opset >= 13 semantics: only the
// axis is normalised; opset < 13's "flatten to 2-D at axis" is the special
// case inner = 1, n = prod(dims[axis:])).
//
//   softmax(x)    = exp(x - max) / sum(exp(x - max))
//   logsoftmax(x) = (x - max) - log(sum(exp(x - max)))
//
// Rows that are entirely -inf give NaN, as in torch.
//
// Thread safety: pure functions; single-threaded.
// Errors: INVALID_ARGUMENT if outer * n * inner disagrees with the shapes.
#ifndef IPUPOD_KERNELS_SOFTMAX_H_
#define IPUPOD_KERNELS_SOFTMAX_H_

#include <cstdint>

#include "absl/status/status.h"
#include "device/kernels/view.h"

namespace ipupod::kernels {

struct SoftmaxLayout {
  int64_t outer = 1;
  int64_t n = 1;      // length of the normalised axis (or block)
  int64_t inner = 1;  // stride between consecutive elements of the axis
};

// Layout for normalising over `axis` (already in [0, rank)) alone, or (when
// `flatten_from_axis`) over every dim from `axis` on (opset < 13).
SoftmaxLayout SoftmaxLayoutFor(Dims shape, int64_t axis, bool flatten_from_axis);

absl::Status Softmax(View<float> in, SoftmaxLayout layout, MutableView<float> out);
absl::Status LogSoftmax(View<float> in, SoftmaxLayout layout, MutableView<float> out);

}  // namespace ipupod::kernels

#endif  // IPUPOD_KERNELS_SOFTMAX_H_
