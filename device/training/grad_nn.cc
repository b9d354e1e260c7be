// Backward rules of the compute-heavy ops: MatMul (numpy batching and 1-D
// promotion), Gemm (transA/transB/alpha/beta), Softmax, LogSoftmax,
// ReduceMean, ReduceSum, LayerNormalization and BatchNormalization.
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/kernels/batchnorm.h"
#include "device/kernels/data_movement.h"
#include "device/kernels/matmul.h"
#include "device/kernels/reduce.h"
#include "device/kernels/shape_util.h"
#include "device/kernels/softmax.h"
#include "device/training/grad_rules.h"

namespace ipupod::training {
namespace {

using Grads = std::vector<std::optional<Tensor>>;

// ---- gradients that are one matrix product ----

// Input i's gradient alpha op(a) op(b), of the input's shape: left to the
// caller as a ProductGrad when it allows (c.can_defer), computed now
// otherwise. `a` and `b` must outlive the backward pass (tape values).
absl::Status SetProductGrad(const GradContext& c, size_t i, ProductGrad p, Grads& grads) {
  if (c.can_defer(i)) {
    (*c.products)[i] = std::move(p);
    return absl::OkStatus();
  }
  IPUPOD_ASSIGN_OR_RETURN(grads[i], EvaluateProduct(p, c.op.shape(i)));
  return absl::OkStatus();
}

ProductGrad ProductOf(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha) {
  return ProductGrad{a.data<float>(), a.shape(), b.data<float>(), b.shape(), trans_a,
                     trans_b,         alpha};
}

// ---- MatMul ----

// `t` with its last two dims swapped.
absl::StatusOr<Tensor> SwapLastTwo(const Tensor& t) {
  std::vector<int64_t> perm(static_cast<size_t>(t.rank()));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  IPUPOD_ASSIGN_OR_RETURN(Shape shape, kernels::TransposedShape(t.shape(), perm));
  IPUPOD_ASSIGN_OR_RETURN(Tensor out, Zeros(shape));
  IPUPOD_RETURN_IF_ERROR(
      kernels::Transpose(t.raw_data(), t.shape(), perm, sizeof(float), out.mutable_raw_data()));
  return out;
}

absl::StatusOr<Tensor> MatMulOf(const Tensor& a, const Tensor& b) {
  IPUPOD_ASSIGN_OR_RETURN(Shape shape, kernels::MatMulShape(a.shape(), b.shape()));
  IPUPOD_ASSIGN_OR_RETURN(Tensor out, Zeros(shape));
  IPUPOD_RETURN_IF_ERROR(kernels::MatMul(graph::ViewOf<float>(a), graph::ViewOf<float>(b),
                                         graph::MutableViewOf<float>(out)));
  return out;
}

// 1-D operands promoted as numpy does: a [K] -> [1, K], b [K] -> [K, 1].
absl::StatusOr<Tensor> Promoted(const Tensor& t, bool is_a) {
  if (t.rank() != 1) return t;
  return Reshaped(t, is_a ? Shape{1, t.shape()[0]} : Shape{t.shape()[0], 1});
}

// [batch..., M, K] x [K, N] (a Linear layer; batch may be empty): with the
// batch folded into M, dA = G B^T and dB = A^T G are single products on
// the tape's own tensors - no transposed or reshaped copies.
absl::StatusOr<int64_t> MatMulByMatrixGrad(const GradContext& c, Grads& grads) {
  const Tensor& a = c.input(0);
  const Tensor& b = c.input(1);
  const Tensor& g = c.grad(0);
  const int64_t k = b.shape()[0], n = b.shape()[1];
  const int64_t rows = k == 0 ? 0 : a.num_elements() / k;
  const float* gp = g.data<float>();
  int64_t total = 0;
  if (c.wants[0]) {
    IPUPOD_RETURN_IF_ERROR(SetProductGrad(
        c, 0, ProductGrad{gp, {rows, n}, b.data<float>(), b.shape(), false, true, 1.0f}, grads));
    total += 2 * g.num_elements() * k;
  }
  if (c.wants[1]) {
    IPUPOD_RETURN_IF_ERROR(SetProductGrad(
        c, 1, ProductGrad{a.data<float>(), {rows, k}, gp, {rows, n}, true, false, 1.0f}, grads));
    total += 2 * g.num_elements() * k;
  }
  return total;
}

// dA = G B^T and dB = A^T G on the promoted operands, each summed over the
// batch dims it was broadcast along.
absl::StatusOr<int64_t> MatMulGrad(const GradContext& c, Grads& grads) {
  if (c.op.rank(0) >= 2 && c.op.rank(1) == 2) return MatMulByMatrixGrad(c, grads);
  IPUPOD_ASSIGN_OR_RETURN(Tensor a, Promoted(c.input(0), true));
  IPUPOD_ASSIGN_OR_RETURN(Tensor b, Promoted(c.input(1), false));
  IPUPOD_ASSIGN_OR_RETURN(Shape g_shape, kernels::MatMulShape(a.shape(), b.shape()));
  IPUPOD_ASSIGN_OR_RETURN(Tensor g, Reshaped(c.grad(0), g_shape));
  const int64_t k = a.shape().back();
  const int64_t flops = 2 * g.num_elements() * k;
  int64_t total = 0;
  if (c.wants[0]) {
    IPUPOD_ASSIGN_OR_RETURN(Tensor bt, SwapLastTwo(b));
    IPUPOD_ASSIGN_OR_RETURN(Tensor da, MatMulOf(g, bt));
    IPUPOD_ASSIGN_OR_RETURN(da, SumToShape(da, a.shape()));
    IPUPOD_ASSIGN_OR_RETURN(grads[0], Reshaped(da, c.op.shape(0)));
    total += flops;
  }
  if (c.wants[1]) {
    IPUPOD_ASSIGN_OR_RETURN(Tensor at, SwapLastTwo(a));
    IPUPOD_ASSIGN_OR_RETURN(Tensor db, MatMulOf(at, g));
    IPUPOD_ASSIGN_OR_RETURN(db, SumToShape(db, b.shape()));
    IPUPOD_ASSIGN_OR_RETURN(grads[1], Reshaped(db, c.op.shape(1)));
    total += flops;
  }
  return total;
}

// ---- Gemm: Y = alpha op(A) op(B) + beta C ----

absl::StatusOr<int64_t> GemmGrad(const GradContext& c, Grads& grads) {
  IPUPOD_ASSIGN_OR_RETURN(const int64_t ta, c.op.Int("transA", 0));
  IPUPOD_ASSIGN_OR_RETURN(const int64_t tb, c.op.Int("transB", 0));
  IPUPOD_ASSIGN_OR_RETURN(const float alpha, c.op.Float("alpha", 1.0f));
  IPUPOD_ASSIGN_OR_RETURN(const float beta, c.op.Float("beta", 1.0f));
  const Tensor& g = c.grad(0);
  const int64_t k = ta ? c.op.shape(0)[0] : c.op.shape(0)[1];
  int64_t flops = 0;
  if (c.wants[0]) {  // d op(A) = alpha G op(B)^T, transposed back if transA
    const Tensor& b = c.input(1);
    IPUPOD_RETURN_IF_ERROR(SetProductGrad(
        c, 0, ta ? ProductOf(b, g, tb != 0, true, alpha) : ProductOf(g, b, false, tb == 0, alpha),
        grads));
    flops += 2 * g.num_elements() * k;
  }
  if (c.wants[1]) {  // d op(B) = alpha op(A)^T G, transposed back if transB
    const Tensor& a = c.input(0);
    IPUPOD_RETURN_IF_ERROR(SetProductGrad(
        c, 1, tb ? ProductOf(g, a, true, ta != 0, alpha) : ProductOf(a, g, ta == 0, false, alpha),
        grads));
    flops += 2 * g.num_elements() * k;
  }
  if (c.has_wanted(2)) {
    IPUPOD_ASSIGN_OR_RETURN(Tensor dc, SumToShape(g, c.op.shape(2)));
    float* p = dc.mutable_data<float>();
    for (int64_t i = 0; i < dc.num_elements(); ++i) p[i] *= beta;
    grads[2] = std::move(dc);
    flops += 2 * g.num_elements();
  }
  return flops;
}

// ---- Softmax / LogSoftmax (opset < 13 normalises everything from axis) ----

absl::StatusOr<kernels::SoftmaxLayout> SoftmaxLayoutOf(const GradContext& c) {
  const bool legacy = c.op.opset < 13;
  IPUPOD_ASSIGN_OR_RETURN(int64_t a, c.op.Int("axis", legacy ? 1 : -1));
  IPUPOD_ASSIGN_OR_RETURN(int64_t axis, kernels::NormalizeAxis(a, c.op.rank(0)));
  return kernels::SoftmaxLayoutFor(c.op.shape(0), axis, legacy);
}

// Per row of the layout: dx = y (g - sum(g y)) for softmax, and
// dx = g - exp(y) sum(g) for log-softmax (y the saved output).
template <bool kLog>
absl::StatusOr<int64_t> SoftmaxGrad(const GradContext& c, Grads& grads) {
  if (!c.wants[0]) return 0;
  IPUPOD_ASSIGN_OR_RETURN(kernels::SoftmaxLayout l, SoftmaxLayoutOf(c));
  const float* g = c.grad(0).data<float>();
  const float* y = c.outputs[0]->data<float>();
  IPUPOD_ASSIGN_OR_RETURN(Tensor dx, Zeros(c.op.shape(0)));
  float* out = dx.mutable_data<float>();
  for (int64_t o = 0; o < l.outer; ++o) {
    for (int64_t in = 0; in < l.inner; ++in) {
      const int64_t base = o * l.n * l.inner + in;
      double s = 0;
      for (int64_t j = 0; j < l.n; ++j) {
        const int64_t at = base + j * l.inner;
        s += kLog ? g[at] : double{g[at]} * y[at];
      }
      for (int64_t j = 0; j < l.n; ++j) {
        const int64_t at = base + j * l.inner;
        out[at] = kLog ? static_cast<float>(g[at] - std::exp(double{y[at]}) * s)
                       : static_cast<float>(y[at] * (g[at] - s));
      }
    }
  }
  const int64_t n = dx.num_elements();
  grads[0] = std::move(dx);
  return 4 * n;
}

// ---- ReduceMean / ReduceSum: broadcast g back over the reduced axes ----

absl::StatusOr<std::vector<int64_t>> ReduceAxes(const GradContext& c, bool* noop) {
  std::vector<int64_t> axes;
  if (c.op.node.op_type == "ReduceSum" && c.op.opset >= 13) {
    if (c.op.has(1)) {
      IPUPOD_ASSIGN_OR_RETURN(axes, c.op.ConstantInts(1, "axes"));
    }
  } else {
    IPUPOD_ASSIGN_OR_RETURN(auto attr, c.op.Ints("axes"));
    if (attr) axes = *attr;
  }
  IPUPOD_ASSIGN_OR_RETURN(int64_t noop_empty, c.op.Int("noop_with_empty_axes", 0));
  *noop = axes.empty() && noop_empty != 0;
  return kernels::NormalizeReduceAxes(axes, c.op.rank(0));
}

absl::StatusOr<int64_t> ReduceGrad(const GradContext& c, Grads& grads) {
  if (!c.wants[0]) return 0;
  bool noop = false;
  IPUPOD_ASSIGN_OR_RETURN(std::vector<int64_t> axes, ReduceAxes(c, &noop));
  const Shape& in = c.op.shape(0);
  if (noop) {
    grads[0] = c.grad(0);
    return 0;
  }
  Shape kept = in;
  for (int64_t a : axes) kept[a] = 1;
  IPUPOD_ASSIGN_OR_RETURN(Tensor g, Reshaped(c.grad(0), kept));
  IPUPOD_ASSIGN_OR_RETURN(Tensor dx, Zeros(in));
  IPUPOD_RETURN_IF_ERROR(
      kernels::Expand(g.raw_data(), g.shape(), in, sizeof(float), dx.mutable_raw_data()));
  if (c.op.node.op_type == "ReduceMean" && dx.num_elements() > 0) {
    const float scale = static_cast<float>(static_cast<double>(g.num_elements()) /
                                           static_cast<double>(dx.num_elements()));
    float* p = dx.mutable_data<float>();
    for (int64_t i = 0; i < dx.num_elements(); ++i) p[i] *= scale;
  }
  const int64_t n = dx.num_elements();
  grads[0] = std::move(dx);
  return n;
}

// ---- LayerNormalization: y = xhat * scale + bias, xhat = (x - mean) * inv_std ----

struct LayerNormDims {
  int64_t rows = 1;
  int64_t n = 1;  // elements per normalised row
  Shape block;    // the normalised dims
};

absl::StatusOr<LayerNormDims> LayerNormDimsOf(const GradContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(int64_t a, c.op.Int("axis", -1));
  IPUPOD_ASSIGN_OR_RETURN(int64_t axis, kernels::NormalizeAxis(a, c.op.rank(0)));
  LayerNormDims d;
  const Shape& x = c.op.shape(0);
  d.block.assign(x.begin() + axis, x.end());
  for (int64_t i = 0; i < axis; ++i) d.rows *= x[i];
  for (int64_t v : d.block) d.n *= v;
  return d;
}

absl::StatusOr<Tensor> ExpandedTo(const Tensor& t, const Shape& shape) {
  IPUPOD_ASSIGN_OR_RETURN(Tensor out, Zeros(shape));
  IPUPOD_RETURN_IF_ERROR(
      kernels::Expand(t.raw_data(), t.shape(), shape, sizeof(float), out.mutable_raw_data()));
  return out;
}

// One row: accumulates dscale/dbias and writes dx.
void LayerNormRow(const float* x, const float* g, const float* scale, int64_t n, double eps,
                  double* dscale, double* dbias, float* dx) {
  double mean = 0, var = 0;
  for (int64_t j = 0; j < n; ++j) mean += x[j];
  mean /= static_cast<double>(n);
  for (int64_t j = 0; j < n; ++j) var += (x[j] - mean) * (x[j] - mean);
  const double inv_std = 1.0 / std::sqrt(var / static_cast<double>(n) + eps);
  double mean_dxhat = 0, mean_dxhat_xhat = 0;
  for (int64_t j = 0; j < n; ++j) {
    const double xhat = (x[j] - mean) * inv_std;
    const double dxhat = double{g[j]} * scale[j];
    mean_dxhat += dxhat;
    mean_dxhat_xhat += dxhat * xhat;
    dscale[j] += g[j] * xhat;
    dbias[j] += g[j];
  }
  mean_dxhat /= static_cast<double>(n);
  mean_dxhat_xhat /= static_cast<double>(n);
  for (int64_t j = 0; j < n; ++j) {
    const double xhat = (x[j] - mean) * inv_std;
    const double dxhat = double{g[j]} * scale[j];
    dx[j] = static_cast<float>(inv_std * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
  }
}

absl::Status SetBlockGrad(const GradContext& c, size_t i, const std::vector<double>& block_grad,
                          const Shape& block, Grads& grads) {
  if (!c.has_wanted(i)) return absl::OkStatus();
  IPUPOD_ASSIGN_OR_RETURN(
      Tensor t, Generate(block, [&](int64_t j) { return static_cast<float>(block_grad[j]); }));
  IPUPOD_ASSIGN_OR_RETURN(grads[i], SumToShape(t, c.op.shape(i)));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> LayerNormGrad(const GradContext& c, Grads& grads) {
  for (size_t k = 1; k < c.output_grads.size(); ++k) {
    if (c.output_grads[k] != nullptr) {
      return absl::InvalidArgumentError(
          "the loss depends on LayerNormalization's Mean/InvStdDev outputs; only output Y is "
          "differentiable");
    }
  }
  IPUPOD_ASSIGN_OR_RETURN(LayerNormDims d, LayerNormDimsOf(c));
  IPUPOD_ASSIGN_OR_RETURN(const float eps, c.op.Float("epsilon", 1e-5f));
  IPUPOD_ASSIGN_OR_RETURN(Tensor scale, ExpandedTo(c.input(1), d.block));
  IPUPOD_ASSIGN_OR_RETURN(Tensor dx, Zeros(c.op.shape(0)));
  std::vector<double> dscale(static_cast<size_t>(d.n)), dbias(static_cast<size_t>(d.n));
  const float* x = c.input(0).data<float>();
  const float* g = c.grad(0).data<float>();
  for (int64_t r = 0; r < d.rows; ++r) {
    LayerNormRow(x + r * d.n, g + r * d.n, scale.data<float>(), d.n, eps, dscale.data(),
                 dbias.data(), dx.mutable_data<float>() + r * d.n);
  }
  if (c.wants[0]) grads[0] = std::move(dx);
  IPUPOD_RETURN_IF_ERROR(SetBlockGrad(c, 1, dscale, d.block, grads));
  IPUPOD_RETURN_IF_ERROR(SetBlockGrad(c, 2, dbias, d.block, grads));
  return 12 * d.rows * d.n;
}

// ---- BatchNormalization: per channel c, y = xhat * scale_c + B_c ----
// xhat = (x - mean_c) * inv_std_c. Training mode normalises with the batch
// statistics (recomputed here from X), so dX also flows through them:
//   dX = scale * inv_std * (dY - mean(dY) - xhat * mean(dY * xhat));
// inference mode's input_mean/input_var are constants: dX = dY * scale * inv_std.
// Both: dscale = sum(dY * xhat), dB = sum(dY), sums and means over the n
// values of a channel. input_mean/input_var get no gradient (torch buffers).
// FLOPs: 12 per element of X in training mode, 6 in inference mode.

struct ChannelStats {
  std::vector<double> mean;
  std::vector<double> inv_std;
};

ChannelStats BatchNormStatsOf(const GradContext& c, const kernels::BatchNormOptions& o,
                              const kernels::BatchNormLayout& l) {
  ChannelStats s;
  std::vector<double> var;
  if (o.training) {
    kernels::BatchNormMoments(c.input(0).data<float>(), l, s.mean, var);
  } else {
    const float* mean = c.input(3).data<float>();
    const float* v = c.input(4).data<float>();
    s.mean.assign(mean, mean + l.channels);
    var.assign(v, v + l.channels);
  }
  for (double v : var) s.inv_std.push_back(1.0 / std::sqrt(v + o.epsilon));
  return s;
}

// Calls f(channel, flat index) for every element of x [N, C, D...].
template <typename F>
void ForEachInChannel(const kernels::BatchNormLayout& l, F&& f) {
  for (int64_t o = 0; o < l.outer; ++o) {
    for (int64_t ch = 0; ch < l.channels; ++ch) {
      const int64_t base = (o * l.channels + ch) * l.inner;
      for (int64_t i = 0; i < l.inner; ++i) f(ch, base + i);
    }
  }
}

absl::Status SetChannelGrad(const GradContext& c, size_t i, const std::vector<double>& g,
                            Grads& grads) {
  if (!c.has_wanted(i)) return absl::OkStatus();
  IPUPOD_ASSIGN_OR_RETURN(
      grads[i], Generate(c.op.shape(i), [&](int64_t ch) { return static_cast<float>(g[ch]); }));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> BatchNormGrad(const GradContext& c, Grads& grads) {
  for (size_t k = 1; k < c.output_grads.size(); ++k) {
    if (c.output_grads[k] != nullptr) {
      return absl::InvalidArgumentError(
          "the loss depends on BatchNormalization's running or saved statistics outputs; only "
          "output Y is differentiable");
    }
  }
  IPUPOD_ASSIGN_OR_RETURN(const kernels::BatchNormOptions o, graph::BatchNormOptionsOf(c.op));
  IPUPOD_ASSIGN_OR_RETURN(const kernels::BatchNormLayout l,
                          kernels::BatchNormLayoutOf(c.op.shape(0)));
  const ChannelStats s = BatchNormStatsOf(c, o, l);
  const float* x = c.input(0).data<float>();
  const float* g = c.grad(0).data<float>();
  const float* scale = c.input(1).data<float>();
  std::vector<double> sum_g(static_cast<size_t>(l.channels)), sum_gx(sum_g.size());
  ForEachInChannel(l, [&](int64_t ch, int64_t at) {
    sum_g[ch] += g[at];
    sum_gx[ch] += g[at] * (x[at] - s.mean[ch]) * s.inv_std[ch];
  });
  if (c.wants[0]) {
    const double n = static_cast<double>(l.per_channel());
    IPUPOD_ASSIGN_OR_RETURN(Tensor dx, Zeros(c.op.shape(0)));
    float* out = dx.mutable_data<float>();
    ForEachInChannel(l, [&](int64_t ch, int64_t at) {
      const double xhat = (x[at] - s.mean[ch]) * s.inv_std[ch];
      const double centred =
          o.training ? g[at] - sum_g[ch] / n - xhat * sum_gx[ch] / n : double{g[at]};
      out[at] = static_cast<float>(scale[ch] * s.inv_std[ch] * centred);
    });
    grads[0] = std::move(dx);
  }
  IPUPOD_RETURN_IF_ERROR(SetChannelGrad(c, 1, sum_gx, grads));
  IPUPOD_RETURN_IF_ERROR(SetChannelGrad(c, 2, sum_g, grads));
  return (o.training ? 12 : 6) * c.input(0).num_elements();
}

}  // namespace

void RegisterNnGrads(std::vector<GradRule>& rules) {
  rules.push_back({"MatMul", MatMulGrad, true, false});
  rules.push_back({"Gemm", GemmGrad, true, false});
  rules.push_back({"Softmax", SoftmaxGrad<false>, false, true});
  rules.push_back({"LogSoftmax", SoftmaxGrad<true>, false, true});
  rules.push_back({"ReduceMean", ReduceGrad, false, false});
  rules.push_back({"ReduceSum", ReduceGrad, false, false});
  rules.push_back({"LayerNormalization", LayerNormGrad, true, false});
  rules.push_back({"BatchNormalization", BatchNormGrad, true, false});
}

}  // namespace ipupod::training
