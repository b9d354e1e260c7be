// File: device/graph/ops.h
//
// Internal to ipupod_graph (and read by ipupod_training): the op registry.
// Each supported ONNX op has an OpDef with three functions over an OpContext
// (one node plus what is known about its inputs):
//   infer  - output dtypes and static shapes; may need some inputs to be
//            constants (Reshape's shape, Slice's starts, ...),
//   run    - computes the outputs with ipupod_kernels into tensors already
//            allocated with the inferred types,
//   flops  - arithmetic operations one execution performs (see below).
// shape_inference.cc uses infer (and run, for constant folding);
// interpreter.cc uses run and flops; device/training/autodiff.cc runs the forward
// pass of its tape with run.
//
// FLOP convention: MatMul/Gemm 2*M*N*K (+M*N for a C term); elementwise
// and comparison ops 1 per output element (transcendentals included);
// reductions 1 per input element; Softmax/LogSoftmax 4 and
// LayerNormalization 8 per element; BatchNormalization 8 per element of X in
// training mode (batch statistics) and 2 in inference mode (one multiply-add
// with per-channel constants); NegativeLogLikelihoodLoss 1 per label,
// SoftmaxCrossEntropyLoss 4 per score + 1 per label; pure data movement 0.
//
// Thread safety: the registry is built once (thread-safe static) and then
// read-only. OpContext is a per-call value.
// Errors: INVALID_ARGUMENT for anything the model got wrong or ipupod does not
// support; callers prefix the node with NodeError().
#ifndef IPUPOD_GRAPH_OPS_H_
#define IPUPOD_GRAPH_OPS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/tensor/tensor.h"
#include "device/graph/graph.h"
#include "device/kernels/batchnorm.h"
#include "device/kernels/conv.h"
#include "device/kernels/loss.h"
#include "device/kernels/softmax.h"
#include "device/kernels/view.h"

namespace ipupod::graph {

struct OpContext {
  const Node& node;
  int64_t opset;
  std::vector<const TensorType*> types;  // per input; nullptr = omitted
  std::vector<const Tensor*> values;     // per input; nullptr = omitted or not constant
  // MatMul, Gemm and Conv of float16 operands accumulate in float16
  // (Graph::half_partials; see RunOp).
  bool half_partials = false;

  bool has(size_t i) const { return i < types.size() && types[i] != nullptr; }
  const TensorType& type(size_t i) const { return *types[i]; }
  const Shape& shape(size_t i) const { return types[i]->shape; }
  DType dtype(size_t i) const { return types[i]->dtype; }
  int64_t rank(size_t i) const { return static_cast<int64_t>(types[i]->shape.size()); }
  // The value of input i. During inference only constants have one, so an op
  // that needs it for shapes fails with "<role> must be a constant".
  absl::StatusOr<const Tensor*> Constant(size_t i, absl::string_view role) const;
  // A constant integer input (int64/int32) as a flat list.
  absl::StatusOr<std::vector<int64_t>> ConstantInts(size_t i, absl::string_view role) const;
  // A constant single-element input read as float (any numeric dtype).
  absl::StatusOr<float> ConstantScalar(size_t i, absl::string_view role) const;

  bool HasAttr(absl::string_view attr) const;
  absl::StatusOr<int64_t> Int(absl::string_view attr, int64_t fallback) const;
  absl::StatusOr<int64_t> RequiredInt(absl::string_view attr) const;
  absl::StatusOr<float> Float(absl::string_view attr, float fallback) const;
  absl::StatusOr<std::optional<std::vector<int64_t>>> Ints(absl::string_view attr) const;
  absl::StatusOr<std::string> String(absl::string_view attr, absl::string_view fallback) const;
  absl::StatusOr<const Tensor*> TensorAttr(absl::string_view attr) const;
};

using InferFn = absl::StatusOr<std::vector<TensorType>> (*)(const OpContext&);
using RunFn = absl::Status (*)(const OpContext&, absl::Span<Tensor> outputs);
using FlopsFn = int64_t (*)(const OpContext&, absl::Span<const TensorType> outputs);

struct OpDef {
  std::string op_type;
  int64_t since_opset = 1;
  int min_inputs = 1;
  int max_inputs = 1;
  int min_outputs = 1;
  int max_outputs = 1;
  std::vector<std::string> attributes;  // every attribute name the op accepts
  InferFn infer = nullptr;
  RunFn run = nullptr;
  FlopsFn flops = nullptr;
  bool fold_from_types = false;  // output depends only on input types (Shape)
  // run() writes every element of every output (a GEMM, an elementwise
  // map), so its outputs need no zero fill (CreateOutputs).
  bool writes_every_output = false;
  // Never folded on constant inputs: run() has an effect beyond its outputs
  // (IpuPrint writes the run's log, device/graph/run_context.h).
  bool never_fold = false;
};

// An OpDef with these fields, for registration.
OpDef MakeOpDef(std::string op, int min_in, int max_in, InferFn infer, RunFn run, FlopsFn flops,
                std::vector<std::string> attrs = {});

// `def` with writes_every_output set, for registration.
inline OpDef WritesEveryOutput(OpDef def) {
  def.writes_every_output = true;
  return def;
}

// The output tensors to pass to def.run(), of the inferred `types`:
// zero-filled unless def.writes_every_output (then unspecified until run()
// writes them). RESOURCE_EXHAUSTED / INVALID_ARGUMENT as Tensor::Create.
absl::StatusOr<std::vector<Tensor>> CreateOutputs(const OpDef& def,
                                                  absl::Span<const TensorType> types);

// def.infer and def.run as every caller must call them: with float16
// operands the op computes in float32 on their widened values and rounds its
// float outputs to float16 (matrix products and convolutions with
// c.half_partials accumulate in float16 blocks); ops_float16.cc has the
// model. Ops never see float16 operands themselves, except Cast, Constant
// and ConstantOfShape.
absl::StatusOr<std::vector<TensorType>> InferOp(const OpDef& def, const OpContext& c);
absl::Status RunOp(const OpDef& def, const OpContext& c, absl::Span<Tensor> outputs);

// The definition of `op_type`, or nullptr if ipupod does not support it.
const OpDef* FindOp(absl::string_view op_type);

// The definition of `node`'s op: CustomOpDef() for a custom node (device/graph/custom_ops.h),
// else FindOp(node.op_type).
const OpDef* FindNodeOp(const Node& node);

// The one definition every custom node shares (device/graph/custom_ops.cc): infer and run call
// the node's CustomOp; FLOPs are one per output element (a library says nothing of its
// cost); never folded, so a custom op computes only when the model runs.
const OpDef& CustomOpDef();

// Every supported op type, sorted.
std::vector<std::string> SupportedOps();

// Node attributes that change no numerics, only the compiler's memory plan
// (device/compiler/temporaries.h, device/compiler/memory_plan.h): ipupod.poptorch's
// set_available_memory puts available_memory_proportion (float) on a
// MatMul, Gemm, Conv or Gather, serializedMatMul serialization_mode
// (string) and serialization_factor (int) on a MatMul, and
// recomputationCheckpoint recompute_checkpoint (int 1: the node's outputs
// are kept for the backward pass) on any op.
inline constexpr absl::string_view kAvailableMemoryProportion = "available_memory_proportion";
inline constexpr absl::string_view kSerializationMode = "serialization_mode";
inline constexpr absl::string_view kSerializationFactor = "serialization_factor";
inline constexpr absl::string_view kRecomputeCheckpoint = "recompute_checkpoint";
bool IsPlanningAttribute(absl::string_view op_type, absl::string_view attr);

// PopART's builder attributes, named "__<name>", on any op: those
// poptorch.Attribute sets (optimum-graphcore's outline_attribute writes
// __outline, a list of key, value strings). Carried with the model and
// changing nothing: the compiler names them in the report's notes
// (docs/differences.md). The placement attributes __ipu_number and
// __pipeline_stage are not among them: the compiler reads and strips them
// first (device/compiler/onnx_annotations.h), so one that reaches a graph is
// refused as an unsupported attribute.
bool IsPopartBuilderAttribute(absl::string_view attr);

// Checks a node against its OpDef: supported op, available at `opset`,
// operand counts, attribute names (and the planning attributes above); a custom
// node against what its op declares (CustomOp::CheckNode).
// INVALID_ARGUMENT naming op and node.
absl::Status CheckNodeSignature(const Node& node, int64_t opset);

// `status` with "<op> node '<name>': " prefixed to its message, same code.
absl::Status NodeError(const Node& node, const absl::Status& status);

// Registration hooks, one per ops_*.cc file.
void RegisterElementwiseOps(std::vector<OpDef>& defs);
void RegisterTensorOps(std::vector<OpDef>& defs);
void RegisterNnOps(std::vector<OpDef>& defs);
void RegisterLossOps(std::vector<OpDef>& defs);
void RegisterConvOps(std::vector<OpDef>& defs);
void RegisterPoptorchOps(std::vector<OpDef>& defs);  // ops_poptorch.cc

// Helpers shared by the op files (and device/training/'s backward rules).

// reduction and ignore_index of a SoftmaxCrossEntropyLoss or
// NegativeLogLikelihoodLoss node (ONNX defaults: "mean", no ignore_index).
absl::StatusOr<kernels::LossOptions> LossOptionsOf(const OpContext& c);
// epsilon, momentum and mode of a BatchNormalization node (ONNX defaults
// 1e-5, 0.9). Training mode: from opset 14 the training_mode attribute
// (outputs running_mean/running_var only allowed with it); opsets 9-13 have
// no such attribute and train iff the node has more than one output.
// INVALID_ARGUMENT for spatial != 1 and outputs the mode does not allow.
absl::StatusOr<kernels::BatchNormOptions> BatchNormOptionsOf(const OpContext& c);
// The [min, max] of a Clip node (attributes before opset 11, constant inputs
// from 11; a missing bound is infinite).
absl::StatusOr<std::pair<float, float>> ClipBounds(const OpContext& c);
// The geometry of a Conv node (x [N, C, I...], w [M, C/group, K...]: 1 to 3
// spatial axes; kernel_shape, strides, dilations, pads or auto_pad, group),
// and of a MaxPool, AveragePool or GlobalAveragePool node (with ceil_mode
// and count_include_pad). INVALID_ARGUMENT naming what is inconsistent.
absl::StatusOr<kernels::ConvGeometry> ConvGeometryOf(const OpContext& c);
absl::StatusOr<kernels::PoolGeometry> PoolGeometryOf(const OpContext& c);
// What a Dropout node does in the current run (device/graph/run_context.h): drops
// (training mode with ratio > 0) with keep probability 1 - ratio, scaling
// kept elements by `scale` (torch's 1 / (1 - ratio) in float), or is the
// identity. INVALID_ARGUMENT for a ratio outside [0, 1] or inputs that are
// not constants.
struct DropoutPlan {
  bool drops = false;
  float ratio = 0.0f;
  float scale = 1.0f;
};
absl::StatusOr<DropoutPlan> DropoutPlanOf(const OpContext& c);
// The keep mask (1 kept, 0 dropped) of `count` elements of a dropping node,
// drawn from the current run context's random stream, so the backward
// rule recomputes exactly the forward's mask. FAILED_PRECONDITION without
// a seeded run context.
absl::StatusOr<std::vector<uint8_t>> DropoutKeepMask(const OpContext& c, const DropoutPlan& plan,
                                                     int64_t count);
// IpuPrint's line for value `t` of node `c` (device/graph/ops_poptorch.cc):
// "<title or node name>: <dtype>[shape] [v0, v1, ...]", at most 1000 values.
absl::StatusOr<std::string> PrintLine(const OpContext& c, const Tensor& t);
// The class axis (1) of loss scores [N, C, D...] as a softmax layout.
kernels::SoftmaxLayout ScoresLayout(const Shape& scores);

template <typename T>
kernels::View<T> ViewOf(const Tensor& t) {
  return kernels::View<T>{t.data<T>(), t.shape()};
}
template <typename T>
kernels::MutableView<T> MutableViewOf(Tensor& t) {
  return kernels::MutableView<T>{t.mutable_data<T>(), t.shape()};
}

// Calls f(T{}) with T the C++ type of `dtype` (not float16: see RunOp).
template <typename F>
absl::Status VisitDType(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      return f(float{});
    case DType::kInt64:
      return f(int64_t{});
    case DType::kInt32:
      return f(int32_t{});
    case DType::kBool:
      return f(bool{});
    case DType::kFloat16:  // RunOp widens float16 before an op sees it
      return absl::InternalError("a float16 value reached an op that computes in float32");
  }
  return absl::InternalError("unknown dtype");
}

// INVALID_ARGUMENT unless `dtype` is one of `allowed`.
absl::Status RequireDType(absl::string_view what, DType dtype,
                          std::initializer_list<DType> allowed);

// Maps an ONNX TensorProto.DataType code to a DType; INVALID_ARGUMENT for
// types ipupod does not support (double, bfloat16, int8, string, ...).
absl::StatusOr<DType> DTypeFromOnnxCode(int64_t code);

inline int64_t NumElementsOf(const TensorType& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  return n;
}

}  // namespace ipupod::graph

#endif  // IPUPOD_GRAPH_OPS_H_
