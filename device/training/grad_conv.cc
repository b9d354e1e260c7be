// Backward rules of the convolutional ops (device/graph/ops_conv.cc) on oneDNN's
// backward primitives (device/kernels/conv.h), with the geometry the forward op
// resolved (graph::ConvGeometryOf, graph::PoolGeometryOf), and of Pad,
// whose gradient is its input's region of the output gradient.
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/kernels/conv.h"
#include "device/kernels/data_movement.h"
#include "device/training/grad_rules.h"

namespace ipupod::training {
namespace {

using Grads = std::vector<std::optional<Tensor>>;

// Conv: dx from dy and w; dw and db from x and dy (one oneDNN pass gives both).
absl::StatusOr<int64_t> ConvGrad(const GradContext& c, Grads& grads) {
  IPUPOD_ASSIGN_OR_RETURN(const kernels::ConvGeometry g, graph::ConvGeometryOf(c.op));
  const float* dy = c.grad(0).data<float>();
  const int64_t product = 2 * g.MultiplyAdds();
  int64_t flops = 0;
  if (c.has_wanted(0)) {
    IPUPOD_ASSIGN_OR_RETURN(Tensor dx, Zeros(c.op.shape(0)));
    IPUPOD_RETURN_IF_ERROR(
        kernels::ConvBackwardData(g, dy, c.input(1).data<float>(), dx.mutable_data<float>()));
    grads[0] = std::move(dx);
    flops += product;
  }
  const bool want_bias = c.op.has(2) && c.has_wanted(2);
  if (c.has_wanted(1) || want_bias) {
    IPUPOD_ASSIGN_OR_RETURN(Tensor dw, Zeros(c.op.shape(1)));
    std::optional<Tensor> db;
    if (want_bias) {
      IPUPOD_ASSIGN_OR_RETURN(db, Zeros(c.op.shape(2)));
    }
    IPUPOD_RETURN_IF_ERROR(
        kernels::ConvBackwardWeights(g, c.input(0).data<float>(), dy, dw.mutable_data<float>(),
                                     db.has_value() ? db->mutable_data<float>() : nullptr));
    if (c.has_wanted(1)) grads[1] = std::move(dw);
    if (want_bias) grads[2] = std::move(db);
    flops += product + (want_bias ? c.grad(0).num_elements() : 0);
  }
  return flops;
}

// MaxPool (the maxima found again from x), AveragePool, GlobalAveragePool.
absl::StatusOr<int64_t> PoolGrad(const GradContext& c, Grads& grads) {
  if (!c.has_wanted(0)) return 0;
  IPUPOD_ASSIGN_OR_RETURN(const kernels::PoolGeometry g, graph::PoolGeometryOf(c.op));
  IPUPOD_ASSIGN_OR_RETURN(Tensor dx, Zeros(c.op.shape(0)));
  IPUPOD_RETURN_IF_ERROR(kernels::PoolBackward(g, c.input(0).data<float>(), c.grad(0).data<float>(),
                                               dx.mutable_data<float>()));
  const int64_t flops = dx.num_elements() + c.grad(0).num_elements();
  grads[0] = std::move(dx);
  return flops;
}

// Pad: the gradient of the input is the output gradient's region where the
// input was copied.
absl::StatusOr<int64_t> PadGrad(const GradContext& c, Grads& grads) {
  if (!c.has_wanted(0)) return 0;
  IPUPOD_ASSIGN_OR_RETURN(const std::vector<int64_t> pads, c.op.ConstantInts(1, "pads"));
  const Shape& in = c.op.shape(0);
  std::vector<kernels::SliceAxis> axes;
  for (size_t d = 0; d < in.size(); ++d) axes.push_back({pads[d], 1, in[d]});
  IPUPOD_ASSIGN_OR_RETURN(Tensor dx, Zeros(in));
  const Tensor& dy = c.grad(0);
  IPUPOD_RETURN_IF_ERROR(
      kernels::Slice(dy.raw_data(), dy.shape(), axes, sizeof(float), dx.mutable_raw_data()));
  grads[0] = std::move(dx);
  return 0;
}

}  // namespace

void RegisterConvGrads(std::vector<GradRule>& rules) {
  rules.push_back({"Conv", ConvGrad, true, false});
  for (const char* op : {"MaxPool", "AveragePool", "GlobalAveragePool"}) {
    rules.push_back({op, PoolGrad, true, false});
  }
  rules.push_back({"Pad", PadGrad, false, false});
}

}  // namespace ipupod::training
