// Elementwise ops: arithmetic, comparisons, logical And/Or/Not, Where, unary
// math and activations. All broadcast per numpy rules (ONNX opset >= 7).
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/graph/ops.h"
#include "device/kernels/elementwise.h"
#include "device/kernels/shape_util.h"

namespace ipupod::graph {
namespace {

using kernels::BinaryOp;
using kernels::CompareOp;
using kernels::UnaryOp;

constexpr std::initializer_list<DType> kNumeric = {DType::kFloat32, DType::kInt64, DType::kInt32};
constexpr std::initializer_list<DType> kAll = {DType::kFloat32, DType::kInt64, DType::kInt32,
                                               DType::kBool};

int64_t FlopsPerOutput(const OpContext&, absl::Span<const TensorType> outputs) {
  return NumElementsOf(outputs[0]);
}

absl::Status SameDType(const OpContext& c, size_t i, size_t j) {
  if (c.dtype(i) == c.dtype(j)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("inputs ", i, " and ", j, " have dtypes ",
                                                 DTypeName(c.dtype(i)), " and ",
                                                 DTypeName(c.dtype(j)), "; they must match"));
}

absl::StatusOr<Shape> BroadcastInputs(const OpContext& c) {
  Shape out = c.shape(0);
  for (size_t i = 1; i < c.types.size(); ++i) {
    IPUPOD_ASSIGN_OR_RETURN(out, kernels::BroadcastShapes(out, c.shape(i)));
  }
  return out;
}

// ---- Add, Sub, Mul, Div, Pow ----

absl::StatusOr<std::vector<TensorType>> InferArith(const OpContext& c) {
  IPUPOD_RETURN_IF_ERROR(RequireDType("input 0", c.dtype(0), kNumeric));
  if (c.node.op_type == "Pow") {
    // Pow-12+ lets the exponent type differ; ipupod computes in float.
    IPUPOD_RETURN_IF_ERROR(RequireDType("Pow base", c.dtype(0), {DType::kFloat32}));
    IPUPOD_RETURN_IF_ERROR(RequireDType("Pow exponent", c.dtype(1), kNumeric));
  } else {
    IPUPOD_RETURN_IF_ERROR(SameDType(c, 0, 1));
  }
  IPUPOD_ASSIGN_OR_RETURN(Shape shape, BroadcastInputs(c));
  return std::vector<TensorType>{{c.dtype(0), shape}};
}

// Exponent as float32, converting an integer exponent tensor.
absl::StatusOr<Tensor> FloatExponent(const Tensor& e) {
  IPUPOD_ASSIGN_OR_RETURN(Tensor f, Tensor::Create(DType::kFloat32, e.shape()));
  float* out = f.mutable_data<float>();
  for (int64_t i = 0; i < e.num_elements(); ++i) {
    out[i] = e.dtype() == DType::kFloat32 ? e.data<float>()[i] : static_cast<float>(e.IntAt(i));
  }
  return f;
}

template <BinaryOp kOp>
absl::Status RunArith(const OpContext& c, absl::Span<Tensor> out) {
  if constexpr (kOp == BinaryOp::kPow) {
    IPUPOD_ASSIGN_OR_RETURN(Tensor e, FloatExponent(*c.values[1]));
    return kernels::Binary(kOp, ViewOf<float>(*c.values[0]), ViewOf<float>(e),
                           MutableViewOf<float>(out[0]));
  }
  return VisitDType(c.dtype(0), [&](auto tag) -> absl::Status {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      return absl::InvalidArgumentError("arithmetic on bool tensors is not supported");
    } else {
      return kernels::Binary(kOp, ViewOf<T>(*c.values[0]), ViewOf<T>(*c.values[1]),
                             MutableViewOf<T>(out[0]));
    }
  });
}

// ---- Equal, Less, Greater, LessOrEqual, GreaterOrEqual ----

absl::StatusOr<std::vector<TensorType>> InferCompare(const OpContext& c) {
  IPUPOD_RETURN_IF_ERROR(RequireDType("input 0", c.dtype(0), kAll));
  IPUPOD_RETURN_IF_ERROR(SameDType(c, 0, 1));
  IPUPOD_ASSIGN_OR_RETURN(Shape shape, BroadcastInputs(c));
  return std::vector<TensorType>{{DType::kBool, shape}};
}

template <CompareOp kOp>
absl::Status RunCompare(const OpContext& c, absl::Span<Tensor> out) {
  return VisitDType(c.dtype(0), [&](auto tag) -> absl::Status {
    using T = decltype(tag);
    return kernels::Compare(kOp, ViewOf<T>(*c.values[0]), ViewOf<T>(*c.values[1]),
                            MutableViewOf<bool>(out[0]));
  });
}

// ---- And, Or (bool operands, broadcasting) ----

absl::StatusOr<std::vector<TensorType>> InferLogical(const OpContext& c) {
  IPUPOD_RETURN_IF_ERROR(RequireDType("input 0", c.dtype(0), {DType::kBool}));
  IPUPOD_RETURN_IF_ERROR(RequireDType("input 1", c.dtype(1), {DType::kBool}));
  IPUPOD_ASSIGN_OR_RETURN(Shape shape, BroadcastInputs(c));
  return std::vector<TensorType>{{DType::kBool, shape}};
}

template <kernels::LogicalOp kOp>
absl::Status RunLogical(const OpContext& c, absl::Span<Tensor> out) {
  return kernels::Logical(kOp, ViewOf<bool>(*c.values[0]), ViewOf<bool>(*c.values[1]),
                          MutableViewOf<bool>(out[0]));
}

// ---- Where, Not ----

absl::StatusOr<std::vector<TensorType>> InferWhere(const OpContext& c) {
  IPUPOD_RETURN_IF_ERROR(RequireDType("condition", c.dtype(0), {DType::kBool}));
  IPUPOD_RETURN_IF_ERROR(SameDType(c, 1, 2));
  IPUPOD_ASSIGN_OR_RETURN(Shape shape, BroadcastInputs(c));
  return std::vector<TensorType>{{c.dtype(1), shape}};
}

absl::Status RunWhere(const OpContext& c, absl::Span<Tensor> out) {
  return VisitDType(c.dtype(1), [&](auto tag) -> absl::Status {
    using T = decltype(tag);
    return kernels::Where(ViewOf<bool>(*c.values[0]), ViewOf<T>(*c.values[1]),
                          ViewOf<T>(*c.values[2]), MutableViewOf<T>(out[0]));
  });
}

absl::StatusOr<std::vector<TensorType>> InferNot(const OpContext& c) {
  IPUPOD_RETURN_IF_ERROR(RequireDType("input 0", c.dtype(0), {DType::kBool}));
  return std::vector<TensorType>{c.type(0)};
}

absl::Status RunNot(const OpContext& c, absl::Span<Tensor> out) {
  return kernels::LogicalNot(ViewOf<bool>(*c.values[0]), MutableViewOf<bool>(out[0]));
}

// ---- unary math ----

template <bool kIntegersToo>
absl::StatusOr<std::vector<TensorType>> InferUnary(const OpContext& c) {
  if (kIntegersToo) {
    IPUPOD_RETURN_IF_ERROR(RequireDType("input 0", c.dtype(0), kNumeric));
  } else {
    IPUPOD_RETURN_IF_ERROR(RequireDType("input 0", c.dtype(0), {DType::kFloat32}));
  }
  return std::vector<TensorType>{c.type(0)};
}

template <UnaryOp kOp>
absl::Status RunUnary(const OpContext& c, absl::Span<Tensor> out) {
  return VisitDType(c.dtype(0), [&](auto tag) -> absl::Status {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      return absl::InvalidArgumentError("unary math on bool tensors is not supported");
    } else {
      return kernels::Unary(kOp, ViewOf<T>(*c.values[0]), MutableViewOf<T>(out[0]));
    }
  });
}

absl::Status RunLeakyRelu(const OpContext& c, absl::Span<Tensor> out) {
  IPUPOD_ASSIGN_OR_RETURN(float alpha, c.Float("alpha", 0.01f));
  return kernels::LeakyRelu(alpha, ViewOf<float>(*c.values[0]), MutableViewOf<float>(out[0]));
}

// ---- Mod: the fmod attribute picks the remainder's sign ----

absl::Status RunMod(const OpContext& c, absl::Span<Tensor> out) {
  IPUPOD_ASSIGN_OR_RETURN(int64_t fmod, c.Int("fmod", 0));
  if (fmod != 0 && fmod != 1) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'fmod' must be 0 or 1, got ", fmod));
  }
  const BinaryOp op = fmod == 1 ? BinaryOp::kFmod : BinaryOp::kMod;
  return VisitDType(c.dtype(0), [&](auto tag) -> absl::Status {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      return absl::InvalidArgumentError("Mod of bool tensors is not supported");
    } else {
      return kernels::Binary(op, ViewOf<T>(*c.values[0]), ViewOf<T>(*c.values[1]),
                             MutableViewOf<T>(out[0]));
    }
  });
}

// ---- HardSigmoid (alpha 0.2, beta 0.5 by default; torch writes alpha 1/6), HardSwish ----

absl::Status RunHardSigmoid(const OpContext& c, absl::Span<Tensor> out) {
  IPUPOD_ASSIGN_OR_RETURN(float alpha, c.Float("alpha", 0.2f));
  IPUPOD_ASSIGN_OR_RETURN(float beta, c.Float("beta", 0.5f));
  return kernels::HardSigmoid(alpha, beta, ViewOf<float>(*c.values[0]),
                              MutableViewOf<float>(out[0]));
}

absl::Status RunHardSwish(const OpContext& c, absl::Span<Tensor> out) {
  return kernels::HardSwish(ViewOf<float>(*c.values[0]), MutableViewOf<float>(out[0]));
}

// ---- Clip: bounds are attributes before opset 11, optional inputs after ----

}  // namespace

absl::StatusOr<std::pair<float, float>> ClipBounds(const OpContext& c) {
  float lo = -std::numeric_limits<float>::infinity();
  float hi = std::numeric_limits<float>::infinity();
  if (c.opset < 11) {
    IPUPOD_ASSIGN_OR_RETURN(lo, c.Float("min", lo));
    IPUPOD_ASSIGN_OR_RETURN(hi, c.Float("max", hi));
    return std::make_pair(lo, hi);
  }
  if (c.HasAttr("min") || c.HasAttr("max")) {
    return absl::InvalidArgumentError("from opset 11, Clip takes min/max as inputs");
  }
  if (c.has(1)) {
    IPUPOD_ASSIGN_OR_RETURN(lo, c.ConstantScalar(1, "min"));
  }
  if (c.has(2)) {
    IPUPOD_ASSIGN_OR_RETURN(hi, c.ConstantScalar(2, "max"));
  }
  return std::make_pair(lo, hi);
}

namespace {

absl::StatusOr<std::vector<TensorType>> InferClip(const OpContext& c) {
  IPUPOD_RETURN_IF_ERROR(RequireDType("input 0", c.dtype(0), {DType::kFloat32}));
  IPUPOD_RETURN_IF_ERROR(ClipBounds(c).status());
  return std::vector<TensorType>{c.type(0)};
}

absl::Status RunClip(const OpContext& c, absl::Span<Tensor> out) {
  IPUPOD_ASSIGN_OR_RETURN(auto bounds, ClipBounds(c));
  return kernels::Clip(bounds.first, bounds.second, ViewOf<float>(*c.values[0]),
                       MutableViewOf<float>(out[0]));
}

OpDef Def(std::string op, int n_in, InferFn infer, RunFn run, std::vector<std::string> attrs = {}) {
  OpDef d;
  d.op_type = std::move(op);
  d.min_inputs = d.max_inputs = n_in;
  d.attributes = std::move(attrs);
  d.infer = infer;
  d.run = run;
  d.flops = FlopsPerOutput;
  return d;
}

}  // namespace

void RegisterElementwiseOps(std::vector<OpDef>& defs) {
  defs.push_back(WritesEveryOutput(Def("Add", 2, InferArith, RunArith<BinaryOp::kAdd>)));
  defs.push_back(WritesEveryOutput(Def("Sub", 2, InferArith, RunArith<BinaryOp::kSub>)));
  defs.push_back(WritesEveryOutput(Def("Mul", 2, InferArith, RunArith<BinaryOp::kMul>)));
  defs.push_back(WritesEveryOutput(Def("Div", 2, InferArith, RunArith<BinaryOp::kDiv>)));
  defs.push_back(WritesEveryOutput(Def("Pow", 2, InferArith, RunArith<BinaryOp::kPow>)));
  defs.push_back(WritesEveryOutput(Def("Mod", 2, InferArith, RunMod, {"fmod"})));
  defs.back().since_opset = 10;
  defs.push_back(Def("Equal", 2, InferCompare, RunCompare<CompareOp::kEqual>));
  defs.push_back(Def("Less", 2, InferCompare, RunCompare<CompareOp::kLess>));
  defs.push_back(Def("Greater", 2, InferCompare, RunCompare<CompareOp::kGreater>));
  defs.push_back(Def("LessOrEqual", 2, InferCompare, RunCompare<CompareOp::kLessOrEqual>));
  defs.back().since_opset = 12;
  defs.push_back(Def("GreaterOrEqual", 2, InferCompare, RunCompare<CompareOp::kGreaterOrEqual>));
  defs.back().since_opset = 12;
  // And and Or broadcast from opset 7; ipupod has no opset-1 `broadcast` attribute.
  defs.push_back(Def("And", 2, InferLogical, RunLogical<kernels::LogicalOp::kAnd>));
  defs.back().since_opset = 7;
  defs.push_back(Def("Or", 2, InferLogical, RunLogical<kernels::LogicalOp::kOr>));
  defs.back().since_opset = 7;
  defs.push_back(Def("Where", 3, InferWhere, RunWhere));
  defs.back().since_opset = 9;
  defs.push_back(Def("Not", 1, InferNot, RunNot));
  defs.push_back(WritesEveryOutput(Def("Neg", 1, InferUnary<true>, RunUnary<UnaryOp::kNeg>)));
  defs.push_back(WritesEveryOutput(Def("Abs", 1, InferUnary<true>, RunUnary<UnaryOp::kAbs>)));
  defs.push_back(WritesEveryOutput(Def("Relu", 1, InferUnary<true>, RunUnary<UnaryOp::kRelu>)));
  defs.push_back(WritesEveryOutput(Def("Sqrt", 1, InferUnary<false>, RunUnary<UnaryOp::kSqrt>)));
  defs.push_back(WritesEveryOutput(Def("Exp", 1, InferUnary<false>, RunUnary<UnaryOp::kExp>)));
  defs.push_back(WritesEveryOutput(Def("Log", 1, InferUnary<false>, RunUnary<UnaryOp::kLog>)));
  defs.push_back(WritesEveryOutput(Def("Erf", 1, InferUnary<false>, RunUnary<UnaryOp::kErf>)));
  defs.back().since_opset = 9;
  defs.push_back(
      WritesEveryOutput(Def("Sigmoid", 1, InferUnary<false>, RunUnary<UnaryOp::kSigmoid>)));
  defs.push_back(WritesEveryOutput(Def("Tanh", 1, InferUnary<false>, RunUnary<UnaryOp::kTanh>)));
  defs.push_back(
      WritesEveryOutput(Def("Reciprocal", 1, InferUnary<false>, RunUnary<UnaryOp::kReciprocal>)));
  defs.push_back(
      WritesEveryOutput(Def("LeakyRelu", 1, InferUnary<false>, RunLeakyRelu, {"alpha"})));
  defs.push_back(WritesEveryOutput(
      Def("HardSigmoid", 1, InferUnary<false>, RunHardSigmoid, {"alpha", "beta"})));
  defs.back().since_opset = 6;
  defs.push_back(WritesEveryOutput(Def("HardSwish", 1, InferUnary<false>, RunHardSwish)));
  defs.back().since_opset = 14;
  defs.push_back(WritesEveryOutput(Def("Clip", 1, InferClip, RunClip, {"min", "max"})));
  defs.back().max_inputs = 3;
}

}  // namespace ipupod::graph
