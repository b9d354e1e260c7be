// Loss ops torch.onnx.export writes for training models:
// SoftmaxCrossEntropyLoss (opset 12+; F.cross_entropy, and F.nll_loss over
// F.log_softmax, which torch fuses into it) and NegativeLogLikelihoodLoss
// (opset 12+; F.nll_loss on anything else). F.mse_loss has no ONNX export
// in torch 1.13; ((y - t) ** 2).mean() exports as Sub/Pow/ReduceMean.
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/graph/ops.h"
#include "device/kernels/loss.h"
#include "device/kernels/shape_util.h"
#include "device/kernels/softmax.h"

namespace ipupod::graph {
namespace {

absl::StatusOr<std::vector<TensorType>> InferLoss(const OpContext& c) {
  IPUPOD_RETURN_IF_ERROR(RequireDType("scores", c.dtype(0), {DType::kFloat32}));
  IPUPOD_RETURN_IF_ERROR(RequireDType("labels", c.dtype(1), {DType::kInt64, DType::kInt32}));
  IPUPOD_ASSIGN_OR_RETURN(kernels::LossOptions o, LossOptionsOf(c));
  IPUPOD_ASSIGN_OR_RETURN(Shape shape, kernels::LossShape(c.shape(0), c.shape(1), o.reduction));
  if (c.has(2)) {
    IPUPOD_RETURN_IF_ERROR(RequireDType("weights", c.dtype(2), {DType::kFloat32}));
    if (c.shape(2) != Shape{c.shape(0)[1]}) {
      return absl::InvalidArgumentError(absl::StrCat("weights ", kernels::ShapeString(c.shape(2)),
                                                     " must be [C] = [", c.shape(0)[1], "]"));
    }
  }
  std::vector<TensorType> out = {{DType::kFloat32, std::move(shape)}};
  if (c.node.outputs.size() > 1) out.push_back(c.type(0));  // log_prob
  return out;
}

kernels::View<float> WeightView(const OpContext& c) {
  if (!c.has(2)) return kernels::View<float>{nullptr, {}};
  return ViewOf<float>(*c.values[2]);
}

absl::Status RunNll(const OpContext& c, const Tensor& log_prob, Tensor& loss) {
  IPUPOD_ASSIGN_OR_RETURN(kernels::LossOptions o, LossOptionsOf(c));
  const Tensor& labels = *c.values[1];
  if (labels.dtype() == DType::kInt32) {
    return kernels::NllLoss(ViewOf<float>(log_prob), ViewOf<int32_t>(labels), WeightView(c), o,
                            MutableViewOf<float>(loss));
  }
  return kernels::NllLoss(ViewOf<float>(log_prob), ViewOf<int64_t>(labels), WeightView(c), o,
                          MutableViewOf<float>(loss));
}

absl::Status RunNegativeLogLikelihood(const OpContext& c, absl::Span<Tensor> out) {
  return RunNll(c, *c.values[0], out[0]);
}

absl::Status RunSoftmaxCrossEntropy(const OpContext& c, absl::Span<Tensor> out) {
  Tensor scratch;
  Tensor* log_prob = &scratch;
  if (out.size() > 1) {
    log_prob = &out[1];
  } else {
    IPUPOD_ASSIGN_OR_RETURN(scratch, Tensor::Create(DType::kFloat32, c.shape(0)));
  }
  IPUPOD_RETURN_IF_ERROR(kernels::LogSoftmax(ViewOf<float>(*c.values[0]), ScoresLayout(c.shape(0)),
                                             MutableViewOf<float>(*log_prob)));
  return RunNll(c, *log_prob, out[0]);
}

int64_t NllFlops(const OpContext& c, absl::Span<const TensorType>) {
  return NumElementsOf(c.type(1));
}

int64_t SoftmaxCrossEntropyFlops(const OpContext& c, absl::Span<const TensorType>) {
  return 4 * NumElementsOf(c.type(0)) + NumElementsOf(c.type(1));
}

OpDef Def(std::string op, RunFn run, FlopsFn flops, int max_outputs) {
  OpDef d;
  d.op_type = std::move(op);
  d.since_opset = 12;
  d.min_inputs = 2;
  d.max_inputs = 3;
  d.max_outputs = max_outputs;
  d.attributes = {"reduction", "ignore_index"};
  d.infer = InferLoss;
  d.run = run;
  d.flops = flops;
  return d;
}

}  // namespace

absl::StatusOr<kernels::LossOptions> LossOptionsOf(const OpContext& c) {
  kernels::LossOptions o;
  if (const AttributeValue* v = c.node.FindAttribute("reduction")) {
    const auto* name = std::get_if<std::string>(v);
    if (name == nullptr)
      return absl::InvalidArgumentError("attribute 'reduction' must be a string");
    IPUPOD_ASSIGN_OR_RETURN(o.reduction, kernels::ParseLossReduction(*name));
  }
  if (c.HasAttr("ignore_index")) {
    IPUPOD_ASSIGN_OR_RETURN(o.ignore_index, c.RequiredInt("ignore_index"));
  }
  return o;
}

kernels::SoftmaxLayout ScoresLayout(const Shape& scores) {
  return kernels::SoftmaxLayoutFor(scores, 1, /*flatten_from_axis=*/false);
}

void RegisterLossOps(std::vector<OpDef>& defs) {
  defs.push_back(
      Def("SoftmaxCrossEntropyLoss", RunSoftmaxCrossEntropy, SoftmaxCrossEntropyFlops, 2));
  defs.push_back(Def("NegativeLogLikelihoodLoss", RunNegativeLogLikelihood, NllFlops, 1));
}

}  // namespace ipupod::graph
