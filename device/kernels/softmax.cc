#include "device/kernels/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "common/status_macros.h"
#include "device/kernels/interrupt.h"
#include "device/kernels/shape_util.h"

namespace ipupod::kernels {
namespace {

absl::Status CheckLayout(View<float> in, SoftmaxLayout layout, MutableView<float> out) {
  IPUPOD_RETURN_IF_ERROR(CheckShape("softmax output", out.shape, in.shape));
  if (layout.outer * layout.n * layout.inner != NumElementsUnchecked(in.shape)) {
    return absl::InvalidArgumentError("softmax layout does not cover the input");
  }
  return absl::OkStatus();
}

// One row: n elements `stride` apart. Sums in float like torch; the max
// shift keeps exp() in range.
template <bool kLog, typename Stride>
void SoftmaxRow(const float* x, int64_t n, Stride stride, float* y) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) max = std::max(max, x[i * stride]);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float e = std::exp(x[i * stride] - max);
    if (!kLog) y[i * stride] = e;
    sum += e;
  }
  if (kLog) {
    const float log_sum = std::log(sum);
    for (int64_t i = 0; i < n; ++i) y[i * stride] = (x[i * stride] - max) - log_sum;
  } else {
    for (int64_t i = 0; i < n; ++i) y[i * stride] /= sum;
  }
}

template <bool kLog>
absl::Status Run(View<float> in, SoftmaxLayout layout, MutableView<float> out) {
  IPUPOD_RETURN_IF_ERROR(CheckLayout(in, layout, out));
  for (int64_t o = 0; o < layout.outer; ++o) {
    for (int64_t i = 0; i < layout.inner; ++i) {
      if (InterruptPoint(layout.n))
        return absl::OkStatus();  // discarded (device/kernels/interrupt.h)
      const int64_t base = o * layout.n * layout.inner + i;
      if (layout.inner == 1) {  // contiguous rows: a constant stride lets loops vectorise
        SoftmaxRow<kLog>(in.data + base, layout.n, std::integral_constant<int64_t, 1>(),
                         out.data + base);
      } else {
        SoftmaxRow<kLog>(in.data + base, layout.n, layout.inner, out.data + base);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

SoftmaxLayout SoftmaxLayoutFor(Dims shape, int64_t axis, bool flatten_from_axis) {
  SoftmaxLayout layout;
  layout.outer = NumElementsUnchecked(shape.subspan(0, axis));
  if (flatten_from_axis) {
    layout.n = NumElementsUnchecked(shape.subspan(axis));
    layout.inner = 1;
  } else {
    layout.n = shape.empty() ? 1 : shape[axis];
    layout.inner = NumElementsUnchecked(shape.subspan(axis + 1));
  }
  return layout;
}

absl::Status Softmax(View<float> in, SoftmaxLayout layout, MutableView<float> out) {
  return Run<false>(in, layout, out);
}

absl::Status LogSoftmax(View<float> in, SoftmaxLayout layout, MutableView<float> out) {
  return Run<true>(in, layout, out);
}

}  // namespace ipupod::kernels
