// Compute-heavy ops: MatMul, Gemm, Softmax, LogSoftmax, ReduceMean,
// ReduceSum, ReduceMax, LayerNormalization, BatchNormalization. fp32 only.
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/graph/ops.h"
#include "device/kernels/batchnorm.h"
#include "device/kernels/layernorm.h"
#include "device/kernels/matmul.h"
#include "device/kernels/reduce.h"
#include "device/kernels/shape_util.h"
#include "device/kernels/softmax.h"

namespace ipupod::graph {
namespace {

absl::Status RequireFloatInputs(const OpContext& c) {
  for (size_t i = 0; i < c.types.size(); ++i) {
    if (c.has(i)) {
      IPUPOD_RETURN_IF_ERROR(
          RequireDType(absl::StrCat("input ", i), c.dtype(i), {DType::kFloat32}));
    }
  }
  return absl::OkStatus();
}

kernels::View<float> OptionalView(const OpContext& c, size_t i) {
  if (!c.has(i)) return kernels::View<float>{nullptr, {}};
  return ViewOf<float>(*c.values[i]);
}

// ---- MatMul ----

absl::StatusOr<std::vector<TensorType>> InferMatMul(const OpContext& c) {
  IPUPOD_RETURN_IF_ERROR(RequireFloatInputs(c));
  IPUPOD_ASSIGN_OR_RETURN(Shape out, kernels::MatMulShape(c.shape(0), c.shape(1)));
  return std::vector<TensorType>{{DType::kFloat32, std::move(out)}};
}

absl::Status RunMatMul(const OpContext& c, absl::Span<Tensor> out) {
  return kernels::MatMul(ViewOf<float>(*c.values[0]), ViewOf<float>(*c.values[1]),
                         MutableViewOf<float>(out[0]));
}

int64_t MatMulFlops(const OpContext& c, absl::Span<const TensorType> out) {
  // out has one element per (batch, m, n); each costs K multiply-adds.
  const int64_t k = c.shape(0).back();
  return 2 * NumElementsOf(out[0]) * k;
}

// ---- Gemm ----

absl::StatusOr<kernels::GemmOptions> GemmOptionsOf(const OpContext& c) {
  kernels::GemmOptions o;
  IPUPOD_ASSIGN_OR_RETURN(int64_t ta, c.Int("transA", 0));
  IPUPOD_ASSIGN_OR_RETURN(int64_t tb, c.Int("transB", 0));
  IPUPOD_ASSIGN_OR_RETURN(o.alpha, c.Float("alpha", 1.0f));
  IPUPOD_ASSIGN_OR_RETURN(o.beta, c.Float("beta", 1.0f));
  o.trans_a = ta != 0;
  o.trans_b = tb != 0;
  return o;
}

absl::StatusOr<std::vector<TensorType>> InferGemm(const OpContext& c) {
  IPUPOD_RETURN_IF_ERROR(RequireFloatInputs(c));
  IPUPOD_ASSIGN_OR_RETURN(kernels::GemmOptions o, GemmOptionsOf(c));
  IPUPOD_ASSIGN_OR_RETURN(Shape out, kernels::GemmShape(c.shape(0), c.shape(1), o));
  if (c.has(2) && !kernels::BroadcastsTo(c.shape(2), out)) {
    return absl::InvalidArgumentError(absl::StrCat("C of shape ", kernels::ShapeString(c.shape(2)),
                                                   " does not broadcast to ",
                                                   kernels::ShapeString(out)));
  }
  return std::vector<TensorType>{{DType::kFloat32, std::move(out)}};
}

absl::Status RunGemm(const OpContext& c, absl::Span<Tensor> out) {
  IPUPOD_ASSIGN_OR_RETURN(kernels::GemmOptions o, GemmOptionsOf(c));
  return kernels::Gemm(ViewOf<float>(*c.values[0]), ViewOf<float>(*c.values[1]), OptionalView(c, 2),
                       o, MutableViewOf<float>(out[0]));
}

int64_t GemmFlops(const OpContext& c, absl::Span<const TensorType> out) {
  const bool trans_a = c.Int("transA", 0).value_or(0) != 0;
  const int64_t k = trans_a ? c.shape(0)[0] : c.shape(0)[1];
  const int64_t mn = NumElementsOf(out[0]);
  return 2 * mn * k + (c.has(2) ? mn : 0);
}

// ---- Softmax / LogSoftmax: opset < 13 flattens from axis (default 1) ----

absl::StatusOr<kernels::SoftmaxLayout> SoftmaxLayoutOf(const OpContext& c) {
  const bool legacy = c.opset < 13;
  IPUPOD_ASSIGN_OR_RETURN(int64_t a, c.Int("axis", legacy ? 1 : -1));
  const int64_t rank = c.rank(0);
  if (rank == 0) return absl::InvalidArgumentError("input must have rank >= 1");
  IPUPOD_ASSIGN_OR_RETURN(int64_t axis, kernels::NormalizeAxis(a, rank));
  return kernels::SoftmaxLayoutFor(c.shape(0), axis, legacy);
}

absl::StatusOr<std::vector<TensorType>> InferSoftmax(const OpContext& c) {
  IPUPOD_RETURN_IF_ERROR(RequireFloatInputs(c));
  IPUPOD_RETURN_IF_ERROR(SoftmaxLayoutOf(c).status());
  return std::vector<TensorType>{c.type(0)};
}

template <bool kLog>
absl::Status RunSoftmax(const OpContext& c, absl::Span<Tensor> out) {
  IPUPOD_ASSIGN_OR_RETURN(kernels::SoftmaxLayout layout, SoftmaxLayoutOf(c));
  if (kLog) {
    return kernels::LogSoftmax(ViewOf<float>(*c.values[0]), layout, MutableViewOf<float>(out[0]));
  }
  return kernels::Softmax(ViewOf<float>(*c.values[0]), layout, MutableViewOf<float>(out[0]));
}

int64_t SoftmaxFlops(const OpContext&, absl::Span<const TensorType> out) {
  return 4 * NumElementsOf(out[0]);
}

// ---- ReduceMean / ReduceSum / ReduceMax ----
// axes is an attribute, except ReduceSum from opset 13 where it is an
// optional input and noop_with_empty_axes applies.

struct ReducePlan {
  std::vector<int64_t> axes;  // normalised; empty + noop = identity
  bool keepdims = true;
  bool noop = false;
};

absl::StatusOr<ReducePlan> PlanReduce(const OpContext& c) {
  ReducePlan p;
  IPUPOD_ASSIGN_OR_RETURN(int64_t keepdims, c.Int("keepdims", 1));
  IPUPOD_ASSIGN_OR_RETURN(int64_t noop_empty, c.Int("noop_with_empty_axes", 0));
  p.keepdims = keepdims != 0;
  std::vector<int64_t> axes;
  const bool axes_input = c.node.op_type == "ReduceSum" && c.opset >= 13;
  if (axes_input) {
    if (c.HasAttr("axes")) return absl::InvalidArgumentError("from opset 13, axes is an input");
    if (c.has(1)) {
      IPUPOD_ASSIGN_OR_RETURN(axes, c.ConstantInts(1, "axes"));
    }
  } else {
    if (c.has(1) || c.HasAttr("noop_with_empty_axes")) {
      return absl::InvalidArgumentError("axes is an attribute at this opset");
    }
    IPUPOD_ASSIGN_OR_RETURN(auto attr, c.Ints("axes"));
    if (attr) axes = *attr;
  }
  p.noop = axes.empty() && noop_empty != 0;
  if (!p.noop) {
    IPUPOD_ASSIGN_OR_RETURN(p.axes, kernels::NormalizeReduceAxes(axes, c.rank(0)));
  }
  return p;
}

absl::StatusOr<std::vector<TensorType>> InferReduce(const OpContext& c) {
  IPUPOD_RETURN_IF_ERROR(RequireDType("input 0", c.dtype(0), {DType::kFloat32}));
  IPUPOD_ASSIGN_OR_RETURN(ReducePlan p, PlanReduce(c));
  if (p.noop) return std::vector<TensorType>{c.type(0)};
  return std::vector<TensorType>{
      {DType::kFloat32, kernels::ReducedShape(c.shape(0), p.axes, p.keepdims)}};
}

template <kernels::ReduceOp kOp>
absl::Status RunReduce(const OpContext& c, absl::Span<Tensor> out) {
  IPUPOD_ASSIGN_OR_RETURN(ReducePlan p, PlanReduce(c));
  const Tensor& in = *c.values[0];
  if (p.noop) {
    std::copy_n(in.data<float>(), in.num_elements(), out[0].mutable_data<float>());
    return absl::OkStatus();
  }
  return kernels::Reduce(kOp, ViewOf<float>(in), p.axes, MutableViewOf<float>(out[0]));
}

int64_t ReduceFlops(const OpContext& c, absl::Span<const TensorType>) {
  return NumElementsOf(c.type(0));
}

// ---- LayerNormalization (opset 17) ----

absl::StatusOr<int64_t> LayerNormAxis(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(int64_t stash, c.Int("stash_type", 1));
  if (stash != 1) return absl::InvalidArgumentError("only stash_type 1 (float) is supported");
  IPUPOD_ASSIGN_OR_RETURN(int64_t a, c.Int("axis", -1));
  return kernels::NormalizeAxis(a, c.rank(0));
}

absl::StatusOr<std::vector<TensorType>> InferLayerNorm(const OpContext& c) {
  IPUPOD_RETURN_IF_ERROR(RequireFloatInputs(c));
  IPUPOD_ASSIGN_OR_RETURN(int64_t axis, LayerNormAxis(c));
  const Shape& x = c.shape(0);
  const Shape block(x.begin() + axis, x.end());
  for (size_t i = 1; i < 3; ++i) {
    if (c.has(i) && !kernels::BroadcastsTo(c.shape(i), block)) {
      return absl::InvalidArgumentError(
          absl::StrCat(i == 1 ? "Scale " : "B ", kernels::ShapeString(c.shape(i)),
                       " does not broadcast to the normalised dims ", kernels::ShapeString(block)));
    }
  }
  std::vector<TensorType> out = {c.type(0)};
  Shape stats(x.begin(), x.begin() + axis);
  stats.resize(x.size(), 1);
  for (size_t i = 1; i < c.node.outputs.size(); ++i) out.push_back({DType::kFloat32, stats});
  return out;
}

absl::Status RunLayerNorm(const OpContext& c, absl::Span<Tensor> out) {
  IPUPOD_ASSIGN_OR_RETURN(int64_t axis, LayerNormAxis(c));
  IPUPOD_ASSIGN_OR_RETURN(float epsilon, c.Float("epsilon", 1e-5f));
  float* mean = out.size() > 1 ? out[1].mutable_data<float>() : nullptr;
  float* inv_std = out.size() > 2 ? out[2].mutable_data<float>() : nullptr;
  return kernels::LayerNorm(ViewOf<float>(*c.values[0]), axis, ViewOf<float>(*c.values[1]),
                            OptionalView(c, 2), epsilon, MutableViewOf<float>(out[0]), mean,
                            inv_std);
}

int64_t LayerNormFlops(const OpContext&, absl::Span<const TensorType> out) {
  return 8 * NumElementsOf(out[0]);
}

// ---- BatchNormalization (opset 9+): per channel, over all axes but 1 ----

// Training mode from opset 14 is the training_mode attribute; before, it is
// "more than one output" (Y plus running and saved statistics).
absl::StatusOr<bool> BatchNormTrainingMode(const OpContext& c) {
  const size_t outputs = c.node.outputs.size();
  if (c.opset < 14) {
    if (c.HasAttr("training_mode")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "attribute 'training_mode' exists from opset 14; at opset ", c.opset,
          " training mode is selected by listing more than one output (Y, running_mean, "
          "running_var, saved_mean, saved_var)"));
    }
    return outputs > 1;
  }
  IPUPOD_ASSIGN_OR_RETURN(int64_t mode, c.Int("training_mode", 0));
  if (mode != 0 && mode != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'training_mode' must be 0 or 1, got ", mode));
  }
  if (outputs > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("has ", outputs,
                     " outputs; from opset 14 BatchNormalization has at most 3 (Y, "
                     "running_mean, running_var) - saved_mean/saved_var were removed"));
  }
  if (mode == 0 && outputs > 1) {
    return absl::InvalidArgumentError(
        "outputs running_mean and running_var exist only in training mode; set "
        "training_mode=1 or keep only output Y");
  }
  return mode == 1;
}

absl::StatusOr<std::vector<TensorType>> InferBatchNorm(const OpContext& c) {
  IPUPOD_RETURN_IF_ERROR(RequireFloatInputs(c));
  IPUPOD_ASSIGN_OR_RETURN(kernels::BatchNormOptions o, BatchNormOptionsOf(c));
  IPUPOD_RETURN_IF_ERROR(kernels::CheckBatchNormShapes(c.shape(0), c.shape(1), c.shape(2),
                                                       c.shape(3), c.shape(4), o.training));
  std::vector<TensorType> out = {c.type(0)};
  const Shape channels = {c.shape(0)[1]};
  for (size_t i = 1; i < c.node.outputs.size(); ++i) out.push_back({DType::kFloat32, channels});
  return out;
}

absl::Status RunBatchNorm(const OpContext& c, absl::Span<Tensor> out) {
  IPUPOD_ASSIGN_OR_RETURN(kernels::BatchNormOptions o, BatchNormOptionsOf(c));
  kernels::BatchNormStatistics s;
  float** stats[] = {&s.running_mean, &s.running_var, &s.saved_mean, &s.saved_var};
  for (size_t k = 1; k < out.size() && k <= 4; ++k) *stats[k - 1] = out[k].mutable_data<float>();
  return kernels::BatchNorm(ViewOf<float>(*c.values[0]), ViewOf<float>(*c.values[1]),
                            ViewOf<float>(*c.values[2]), ViewOf<float>(*c.values[3]),
                            ViewOf<float>(*c.values[4]), o, MutableViewOf<float>(out[0]), s);
}

int64_t BatchNormFlops(const OpContext& c, absl::Span<const TensorType> out) {
  const bool training = BatchNormOptionsOf(c).value_or(kernels::BatchNormOptions{}).training;
  return (training ? 8 : 2) * NumElementsOf(out[0]);
}

}  // namespace

absl::StatusOr<kernels::BatchNormOptions> BatchNormOptionsOf(const OpContext& c) {
  kernels::BatchNormOptions o;
  IPUPOD_ASSIGN_OR_RETURN(o.epsilon, c.Float("epsilon", 1e-5f));
  IPUPOD_ASSIGN_OR_RETURN(o.momentum, c.Float("momentum", 0.9f));
  IPUPOD_ASSIGN_OR_RETURN(int64_t spatial, c.Int("spatial", 1));
  if (spatial != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'spatial' is ", spatial,
                     "; only spatial=1 (statistics per channel, the only mode from opset 9) is "
                     "supported"));
  }
  IPUPOD_ASSIGN_OR_RETURN(o.training, BatchNormTrainingMode(c));
  return o;
}

void RegisterNnOps(std::vector<OpDef>& defs) {
  defs.push_back(WritesEveryOutput(MakeOpDef("MatMul", 2, 2, InferMatMul, RunMatMul, MatMulFlops)));
  defs.push_back(WritesEveryOutput(MakeOpDef("Gemm", 2, 3, InferGemm, RunGemm, GemmFlops,
                                             {"alpha", "beta", "transA", "transB"})));
  defs.push_back(
      MakeOpDef("Softmax", 1, 1, InferSoftmax, RunSoftmax<false>, SoftmaxFlops, {"axis"}));
  defs.push_back(
      MakeOpDef("LogSoftmax", 1, 1, InferSoftmax, RunSoftmax<true>, SoftmaxFlops, {"axis"}));
  const std::vector<std::string> reduce_attrs = {"axes", "keepdims", "noop_with_empty_axes"};
  defs.push_back(MakeOpDef("ReduceMean", 1, 2, InferReduce, RunReduce<kernels::ReduceOp::kMean>,
                           ReduceFlops, reduce_attrs));
  defs.push_back(MakeOpDef("ReduceSum", 1, 2, InferReduce, RunReduce<kernels::ReduceOp::kSum>,
                           ReduceFlops, reduce_attrs));
  defs.push_back(MakeOpDef("ReduceMax", 1, 2, InferReduce, RunReduce<kernels::ReduceOp::kMax>,
                           ReduceFlops, reduce_attrs));
  defs.push_back(MakeOpDef("LayerNormalization", 2, 3, InferLayerNorm, RunLayerNorm, LayerNormFlops,
                           {"axis", "epsilon", "stash_type"}));
  defs.back().since_opset = 17;
  defs.back().max_outputs = 3;
  defs.push_back(MakeOpDef("BatchNormalization", 5, 5, InferBatchNorm, RunBatchNorm, BatchNormFlops,
                           {"epsilon", "momentum", "training_mode", "spatial"}));
  defs.back().since_opset = 9;
  defs.back().max_outputs = 5;
}

}  // namespace ipupod::graph
