// Every backward rule against central finite differences (grad_check.h),
// plus the gradient-path analysis and Autodiff's error paths.
#include "device/training/autodiff.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device/graph/onnx_import.h"
#include "device/training/grad_rules.h"
#include "tests/device/training/grad_check.h"

namespace ipupod::training {
namespace {

using testing::ExpectGradientsMatch;
using testing::GradCase;
using ::testing::HasSubstr;
using testing::OnnxBuilder;

// ---- matrix products ----

TEST(AutodiffTest, MatMul2d) {
  GradCase c(14);
  auto a = c.RandomWeight("a", {3, 4});
  auto b = c.RandomWeight("b", {4, 5});
  c.builder().Node("MatMul", {a, b}, {"y"});
  c.Finish("y", {3, 5});
  ExpectGradientsMatch(c);
}

TEST(AutodiffTest, MatMulBatchedTimesMatrix) {
  GradCase c(14);
  auto a = c.RandomWeight("a", {2, 3, 4});
  auto b = c.RandomWeight("b", {4, 5});
  c.builder().Node("MatMul", {a, b}, {"y"});
  c.Finish("y", {2, 3, 5});
  ExpectGradientsMatch(c);
}

TEST(AutodiffTest, MatMulBroadcastBatchDims) {
  GradCase c(14);
  auto a = c.RandomWeight("a", {2, 1, 3, 4});
  auto b = c.RandomWeight("b", {3, 4, 2});
  c.builder().Node("MatMul", {a, b}, {"y"});
  c.Finish("y", {2, 3, 3, 2});
  ExpectGradientsMatch(c);
}

TEST(AutodiffTest, MatMulVectorOperands) {
  GradCase c(14);
  auto a = c.RandomWeight("a", {4});
  auto b = c.RandomWeight("b", {4, 3});
  auto v = c.RandomWeight("v", {3});
  c.builder().Node("MatMul", {a, b}, {"ab"});
  c.builder().Node("MatMul", {b, v}, {"bv"});
  OnnxBuilder::AttrInt(c.builder().Node("Concat", {"ab", "ab", "bv"}, {"y"}), "axis", 0);
  c.Finish("y", {10});
  ExpectGradientsMatch(c);
}

TEST(AutodiffTest, GemmPlain) {
  GradCase c(14);
  auto a = c.RandomWeight("a", {3, 4});
  auto b = c.RandomWeight("b", {4, 5});
  auto cc = c.RandomWeight("c", {3, 5});
  c.builder().Node("Gemm", {a, b, cc}, {"y"});
  c.Finish("y", {3, 5});
  ExpectGradientsMatch(c);
}

TEST(AutodiffTest, GemmTransposedScaledBroadcastC) {
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      SCOPED_TRACE("transA " + std::to_string(ta) + " transB " + std::to_string(tb));
      GradCase c(14);
      auto a = c.RandomWeight("a", ta ? std::vector<int64_t>{4, 3} : std::vector<int64_t>{3, 4});
      auto b = c.RandomWeight("b", tb ? std::vector<int64_t>{5, 4} : std::vector<int64_t>{4, 5});
      auto cc = c.RandomWeight("c", {5});
      auto& g = c.builder().Node("Gemm", {a, b, cc}, {"y"});
      OnnxBuilder::AttrInt(g, "transA", ta);
      OnnxBuilder::AttrInt(g, "transB", tb);
      OnnxBuilder::AttrFloat(g, "alpha", 0.5f);
      OnnxBuilder::AttrFloat(g, "beta", 2.0f);
      c.Finish("y", {3, 5});
      ExpectGradientsMatch(c);
    }
  }
}

// ---- elementwise ----

TEST(AutodiffTest, ArithmeticWithBroadcasting) {
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    SCOPED_TRACE(op);
    GradCase c(14);
    auto a = c.RandomWeight("a", {2, 3});
    auto b = c.RandomWeight("b", {3}, 0.5f, 2.0f);  // away from 0 for Div
    c.builder().Node(op, {a, b}, {"y"});
    c.Finish("y", {2, 3});
    ExpectGradientsMatch(c);
  }
}

TEST(AutodiffTest, SameValueOnBothSidesAccumulates) {
  GradCase c(14);
  auto a = c.RandomWeight("a", {2, 3});
  c.builder().Node("Mul", {a, a}, {"y"});  // d(a^2)/da = 2a
  c.Finish("y", {2, 3});
  ExpectGradientsMatch(c);
}

TEST(AutodiffTest, PowWithConstantExponent) {
  for (float e : {2.0f, 3.0f, 0.5f}) {
    GradCase c(14);
    auto x = c.RandomWeight("x", {2, 3}, 0.5f, 1.5f);
    c.builder().Floats("e", {}, {e});
    c.builder().Node("Pow", {x, "e"}, {"y"});
    c.Finish("y", {2, 3});
    ExpectGradientsMatch(c);
  }
}

TEST(AutodiffTest, UnaryOps) {
  struct Case {
    const char* op;
    float lo, hi;
  };
  for (const Case& k : {Case{"Sqrt", 0.5f, 2.0f}, Case{"Erf", -1.5f, 1.5f}, Case{"Neg", -1, 1},
                        Case{"Sigmoid", -2, 2}, Case{"Tanh", -2, 2}, Case{"Identity", -1, 1}}) {
    SCOPED_TRACE(k.op);
    GradCase c(14);
    auto x = c.RandomWeight("x", {3, 4}, k.lo, k.hi);
    c.builder().Node(k.op, {x}, {"y"});
    c.Finish("y", {3, 4});
    ExpectGradientsMatch(c);
  }
}

TEST(AutodiffTest, ReluAwayFromTheKink) {
  GradCase c(14);
  auto x = c.Weight("x", {2, 3}, {-1.0f, 0.5f, -0.3f, 2.0f, 0.7f, -2.0f});
  c.builder().Node("Relu", {x}, {"y"});
  c.Finish("y", {2, 3});
  ExpectGradientsMatch(c);
}

TEST(AutodiffTest, AbsAwayFromTheKink) {  // L1Loss as torch exports it: Sub, Abs, ReduceMean
  GradCase c(14);
  auto x = c.Weight("x", {2, 3}, {-1.0f, 0.5f, -0.3f, 2.0f, 0.7f, -2.0f});
  c.builder().Node("Abs", {x}, {"y"});
  c.Finish("y", {2, 3});
  ExpectGradientsMatch(c);
}

TEST(AutodiffTest, GeluAsTorchExportsIt) {
  // x * 0.5 * (1 + erf(x / sqrt(2))): Div, Erf, Add, Mul, Mul.
  GradCase c(14);
  auto x = c.RandomWeight("x", {2, 5}, -2, 2);
  auto& b = c.builder();
  b.Floats("sqrt2", {}, {1.4142135f}).Floats("one_f", {}, {1.0f}).Floats("half", {}, {0.5f});
  b.Node("Div", {x, "sqrt2"}, {"d"});
  b.Node("Erf", {"d"}, {"e"});
  b.Node("Add", {"e", "one_f"}, {"p"});
  b.Node("Mul", {x, "p"}, {"m"});
  b.Node("Mul", {"m", "half"}, {"y"});
  c.Finish("y", {2, 5});
  ExpectGradientsMatch(c);
}

TEST(AutodiffTest, WhereRoutesGradients) {
  GradCase c(14);
  auto x = c.RandomWeight("x", {2, 3});
  auto z = c.RandomWeight("z", {3});
  auto& b = c.builder();
  b.Floats("p", {2, 3}, {1, -1, 1, -1, -1, 1}).Floats("zero", {}, {0.0f});
  b.Node("Greater", {"p", "zero"}, {"cond"});
  b.Node("Where", {"cond", x, z}, {"y"});
  c.Finish("y", {2, 3});
  ExpectGradientsMatch(c);
}

TEST(AutodiffTest, DropoutAndCastPassThrough) {
  GradCase c(14);
  auto x = c.RandomWeight("x", {2, 3});
  c.builder().Node("Dropout", {x}, {"d"});
  auto& cast = c.builder().Node("Cast", {"d"}, {"y"});
  OnnxBuilder::AttrInt(cast, "to", testing::kFloat);
  c.Finish("y", {2, 3});
  ExpectGradientsMatch(c);
}

// ---- softmax and reductions ----

TEST(AutodiffTest, SoftmaxAndLogSoftmax) {
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    for (int64_t axis : {-1, 1}) {
      SCOPED_TRACE(std::string(op) + " axis " + std::to_string(axis));
      GradCase c(14);
      auto x = c.RandomWeight("x", {2, 3, 4}, -2, 2);
      OnnxBuilder::AttrInt(c.builder().Node(op, {x}, {"y"}), "axis", axis);
      c.Finish("y", {2, 3, 4});
      ExpectGradientsMatch(c);
    }
  }
}

TEST(AutodiffTest, SoftmaxOpset11FlattensFromAxis) {
  GradCase c(11);
  auto x = c.RandomWeight("x", {2, 3, 4}, -2, 2);
  OnnxBuilder::AttrInt(c.builder().Node("Softmax", {x}, {"y"}), "axis", 1);
  c.Finish("y", {2, 3, 4});
  ExpectGradientsMatch(c);
}

TEST(AutodiffTest, ReduceMeanAttributeAxes) {
  GradCase c(14);
  auto x = c.RandomWeight("x", {2, 3, 4});
  auto& n = c.builder().Node("ReduceMean", {x}, {"y"});
  OnnxBuilder::AttrInts(n, "axes", {1});
  OnnxBuilder::AttrInt(n, "keepdims", 0);
  c.Finish("y", {2, 4});
  ExpectGradientsMatch(c);
}

TEST(AutodiffTest, ReduceSumAxesInput) {
  GradCase c(14);
  auto x = c.RandomWeight("x", {2, 3, 4});
  c.builder().Ints("axes", {2}, {0, -1});
  c.builder().Node("ReduceSum", {x, "axes"}, {"y"});
  c.Finish("y", {1, 3, 1});
  ExpectGradientsMatch(c);
}

TEST(AutodiffTest, LayerNormalization) {
  for (int64_t axis : {-1, 1}) {
    SCOPED_TRACE(axis);
    GradCase c(17);
    auto x = c.RandomWeight("x", {2, 3, 4}, -2, 2);
    const std::vector<int64_t> block =
        axis == -1 ? std::vector<int64_t>{4} : std::vector<int64_t>{3, 4};
    auto s = c.RandomWeight("scale", block, 0.5f, 1.5f);
    auto b = c.RandomWeight("bias", block);
    auto& n = c.builder().Node("LayerNormalization", {x, s, b}, {"y"});
    OnnxBuilder::AttrInt(n, "axis", axis);
    c.Finish("y", {2, 3, 4});
    ExpectGradientsMatch(c);
  }
}

// x (trainable, shape `x`) -> BatchNormalization(x, scale, bias, mean, var)
// with trainable scale/bias [3] and constant mean/var; `outputs` names as
// torch writes them (Y, running_mean, running_var[, saved_mean, saved_var]).
struct BatchNormCase {
  int64_t opset;
  int64_t training_mode;  // -1: no attribute (opset < 14)
  int outputs;
  std::vector<int64_t> x;
};

void AddBatchNorm(GradCase& c, const BatchNormCase& m) {
  auto x = c.RandomWeight("x", m.x, -2, 2);
  auto s = c.RandomWeight("scale", {3}, 0.5f, 1.5f);
  auto b = c.RandomWeight("bias", {3});
  c.builder().Floats("mean", {3}, {0.1f, -0.2f, 0.3f}).Floats("var", {3}, {1, 0.5f, 2});
  std::vector<std::string> outputs = {"y", "rm", "rv", "sm", "sv"};
  outputs.resize(m.outputs);
  auto& n = c.builder().Node("BatchNormalization", {x, s, b, "mean", "var"}, outputs, "/bn");
  if (m.training_mode >= 0) OnnxBuilder::AttrInt(n, "training_mode", m.training_mode);
}

TEST(AutodiffTest, BatchNormalizationTrainingMode) {
  for (const BatchNormCase& m :
       {BatchNormCase{15, 1, 3, {4, 3}}, BatchNormCase{15, 1, 1, {2, 3}},
        BatchNormCase{15, 1, 3, {2, 3, 2, 2}}, BatchNormCase{13, -1, 5, {2, 3, 4}}}) {
    SCOPED_TRACE(::testing::Message() << "opset " << m.opset << ", rank " << m.x.size());
    GradCase c(m.opset);
    AddBatchNorm(c, m);
    c.Finish("y", m.x);
    ExpectGradientsMatch(c);
  }
}

TEST(AutodiffTest, BatchNormalizationInferenceMode) {
  for (const BatchNormCase& m :
       {BatchNormCase{15, 0, 1, {4, 3}}, BatchNormCase{13, -1, 1, {2, 3, 2, 2}}}) {
    SCOPED_TRACE(::testing::Message() << "opset " << m.opset << ", rank " << m.x.size());
    GradCase c(m.opset);
    AddBatchNorm(c, m);
    c.Finish("y", m.x);
    ExpectGradientsMatch(c);
  }
}

TEST(AutodiffTest, BatchNormalizationStatisticsCarryNoGradient) {
  // The running statistics feeding the loss: only Y is differentiable.
  GradCase c(15);
  AddBatchNorm(c, BatchNormCase{15, 1, 3, {4, 3}});
  c.Finish("rm", {3});
  auto graph = graph::ImportOnnx(c.builder().Bytes());
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto ad = Autodiff::Create(*graph, "loss", c.weights());
  ASSERT_TRUE(ad.ok()) << ad.status();
  auto result = (*ad)->Run(c.inputs(), (*ad)->InitialWeights());
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(),
              HasSubstr("BatchNormalization node '/bn': the loss depends on BatchNormalization's "
                        "running or saved statistics"));
  // input_mean/input_var are torch buffers: no gradient even when listed
  // as weights (here in inference mode, where Y does depend on them).
  GradCase inference(15);
  AddBatchNorm(inference, BatchNormCase{15, 0, 1, {4, 3}});
  inference.Finish("y", {4, 3});
  graph = graph::ImportOnnx(inference.builder().Bytes());
  ASSERT_TRUE(graph.ok()) << graph.status();
  ad = Autodiff::Create(*graph, "loss", {"x", "scale", "bias", "mean", "var"});
  ASSERT_TRUE(ad.ok()) << ad.status();
  result = (*ad)->Run(inference.inputs(), (*ad)->InitialWeights());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->gradients.contains("x"));
  EXPECT_FALSE(result->gradients.contains("mean"));
  EXPECT_FALSE(result->gradients.contains("var"));
  EXPECT_GE(result->backward_flops, 6 * 12);  // the rule: 6 per element of x
}

// ---- shape and data movement ----

TEST(AutodiffTest, ReshapeFlattenTransposeSqueezeUnsqueeze) {
  GradCase c(14);
  auto x = c.RandomWeight("x", {2, 3, 4});
  auto& b = c.builder();
  b.Ints("shape", {2}, {4, 6}).Ints("ax0", {1}, {0});
  b.Node("Reshape", {x, "shape"}, {"rs"});
  OnnxBuilder::AttrInts(b.Node("Transpose", {"rs"}, {"t"}), "perm", {1, 0});
  b.Node("Unsqueeze", {"t", "ax0"}, {"u"});
  b.Node("Squeeze", {"u", "ax0"}, {"s"});
  b.Node("Flatten", {"s"}, {"y"});
  c.Finish("y", {6, 4});
  ExpectGradientsMatch(c);
}

TEST(AutodiffTest, ConcatAndSliceWithNegativeStep) {
  GradCase c(14);
  auto a = c.RandomWeight("a", {2, 3});
  auto z = c.RandomWeight("z", {2, 2});
  auto& b = c.builder();
  OnnxBuilder::AttrInt(b.Node("Concat", {a, z}, {"cat"}), "axis", 1);
  b.Ints("starts", {2}, {-1, 4}).Ints("ends", {2}, {-3, 0}).Ints("axes", {2}, {0, 1});
  b.Ints("steps", {2}, {-1, -2});
  b.Node("Slice", {"cat", "starts", "ends", "axes", "steps"}, {"y"});
  c.Finish("y", {2, 2});
  ExpectGradientsMatch(c);
}

TEST(AutodiffTest, GatherScatterAddsRepeatedIndices) {
  for (int64_t axis : {0, 1}) {
    SCOPED_TRACE(axis);
    GradCase c(14);
    auto table = c.RandomWeight("table", {5, 3});
    c.IntInput("idx", {2, 3}, {0, 2, 2, -1, 0, 1});
    OnnxBuilder::AttrInt(c.builder().Node("Gather", {table, "idx"}, {"y"}), "axis", axis);
    c.Finish("y", axis == 0 ? std::vector<int64_t>{2, 3, 3} : std::vector<int64_t>{5, 2, 3});
    ExpectGradientsMatch(c);
  }
}

// optimum's SerializedEmbedding of a table tied to an LM head, as
// ipupod.poptorch exports it: each slice is a Slice of the one table, looked up
// with ids masked by GreaterOrEqual/Less/And (bool: off the gradient path),
// and the head reads the whole table. The table's gradient sums both uses.
TEST(AutodiffTest, SerializedLookupOfATiedTable) {
  GradCase c(14);
  auto table = c.RandomWeight("table", {4, 3});
  c.IntInput("ids", {5}, {0, 2, 3, 1, 3});
  OnnxBuilder& b = c.builder();
  b.Ints("zero", {}, {0}).Ints("rows", {}, {2}).Ints("axis0", {1}, {0}).Ints("last", {1}, {-1});
  for (int i = 0; i < 2; ++i) {
    const std::string s = std::to_string(i);
    b.Ints("start" + s, {1}, {2 * i}).Ints("end" + s, {1}, {2 * i + 2});
    b.Ints("offset" + s, {}, {2 * i});
    b.Node("Slice", {table, "start" + s, "end" + s, "axis0"}, {"part" + s});
    b.Node("Sub", {"ids", "offset" + s}, {"local" + s});
    b.Node("GreaterOrEqual", {"local" + s, "zero"}, {"above" + s});
    b.Node("Less", {"local" + s, "rows"}, {"below" + s});
    b.Node("And", {"above" + s, "below" + s}, {"mask" + s});
    OnnxBuilder::AttrInt(b.Node("Cast", {"mask" + s}, {"mask_i" + s}), "to", testing::kInt64);
    b.Node("Mul", {"local" + s, "mask_i" + s}, {"safe" + s});
    b.Node("Gather", {"part" + s, "safe" + s}, {"found" + s});
    b.Node("Unsqueeze", {"mask" + s, "last"}, {"mask_col" + s});
    OnnxBuilder::AttrInt(b.Node("Cast", {"mask_col" + s}, {"mask_f" + s}), "to", testing::kFloat);
    b.Node("Mul", {"found" + s, "mask_f" + s}, {"x" + s});
  }
  b.Node("Add", {"x0", "x1"}, {"embedded"});
  b.Node("Transpose", {table}, {"head"});
  b.Node("MatMul", {"embedded", "head"}, {"y"});
  c.Finish("y", {5, 4});
  ExpectGradientsMatch(c);
}

TEST(AutodiffTest, ExpandSumsBroadcastCopies) {
  GradCase c(14);
  auto x = c.RandomWeight("x", {3, 1});
  c.builder().Ints("shape", {3}, {2, 3, 4});
  c.builder().Node("Expand", {x, "shape"}, {"y"});
  c.Finish("y", {2, 3, 4});
  ExpectGradientsMatch(c);
}

TEST(AutodiffTest, SplitOutputsBothCarryGradient) {
  GradCase c(14);
  auto x = c.RandomWeight("x", {2, 5});
  c.builder().Ints("sizes", {2}, {2, 3});
  OnnxBuilder::AttrInt(c.builder().Node("Split", {x, "sizes"}, {"p", "q"}), "axis", 1);
  OnnxBuilder::AttrInt(c.builder().Node("Concat", {"q", "p"}, {"y"}), "axis", 1);
  c.Finish("y", {2, 5});
  ExpectGradientsMatch(c);
}

// ---- losses ----

void AddLossNode(GradCase& c, const std::string& op, const std::vector<std::string>& inputs,
                 const std::vector<std::string>& outputs, const std::string& reduction,
                 int64_t ignore_index, bool set_ignore) {
  auto& n = c.builder().Node(op, inputs, outputs);
  auto* a = n.add_attribute();
  a->set_name("reduction");
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(reduction);
  if (set_ignore) OnnxBuilder::AttrInt(n, "ignore_index", ignore_index);
}

TEST(AutodiffTest, SoftmaxCrossEntropyReductions) {
  for (const char* reduction : {"mean", "sum", "none"}) {
    SCOPED_TRACE(reduction);
    GradCase c(14);
    auto x = c.RandomWeight("x", {4, 3}, -2, 2);
    c.IntInput("t", {4}, {0, 2, 1, 2});
    AddLossNode(c, "SoftmaxCrossEntropyLoss", {x, "t"}, {"y"}, reduction, 1, true);
    c.Finish("y",
             std::string(reduction) == "none" ? std::vector<int64_t>{4} : std::vector<int64_t>{});
    ExpectGradientsMatch(c);
  }
}

TEST(AutodiffTest, SoftmaxCrossEntropyWeightsSpatialAndLogProb) {
  GradCase c(14);
  auto x = c.RandomWeight("x", {2, 3, 2}, -2, 2);
  c.IntInput("t", {2, 2}, {0, 2, 1, 1});
  c.builder().Floats("w", {3}, {0.5f, 2.0f, 1.0f});
  AddLossNode(c, "SoftmaxCrossEntropyLoss", {x, "t", "w"}, {"l", "lp"}, "mean", 0, false);
  // Both outputs reach the loss: y = [l, sum(lp)].
  auto& b = c.builder();
  OnnxBuilder::AttrInt(b.Node("ReduceSum", {"lp"}, {"lps"}), "keepdims", 0);
  b.Ints("ax0", {1}, {0});
  b.Node("Unsqueeze", {"l", "ax0"}, {"l1"});
  b.Node("Unsqueeze", {"lps", "ax0"}, {"lps1"});
  OnnxBuilder::AttrInt(b.Node("Concat", {"l1", "lps1"}, {"y"}), "axis", 0);
  c.Finish("y", {2});
  ExpectGradientsMatch(c);
}

TEST(AutodiffTest, NegativeLogLikelihoodAfterLogSoftmax) {
  GradCase c(14);
  auto x = c.RandomWeight("x", {4, 5}, -2, 2);
  c.IntInput("t", {4}, {4, 0, 3, 3});
  OnnxBuilder::AttrInt(c.builder().Node("LogSoftmax", {x}, {"lp"}), "axis", 1);
  AddLossNode(c, "NegativeLogLikelihoodLoss", {"lp", "t"}, {"y"}, "mean", 0, true);
  c.Finish("y", {});
  ExpectGradientsMatch(c);
}

// ---- the gradient path and errors ----

absl::StatusOr<std::unique_ptr<Autodiff>> Build(GradCase& c) {
  auto graph = graph::ImportOnnx(c.builder().Bytes());
  if (!graph.ok()) return graph.status();
  return Autodiff::Create(*graph, "loss", c.weights());
}

TEST(AutodiffTest, OpWithoutRuleOnThePathIsAnError) {
  GradCase c(14);
  auto x = c.RandomWeight("x", {2, 3});
  c.builder().Node("Exp", {x}, {"y"}, "/head/Exp");
  c.Finish("y", {2, 3});
  auto ad = Build(c);
  ASSERT_FALSE(ad.ok());
  EXPECT_EQ(ad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ad.status().message(), HasSubstr("Exp node '/head/Exp'"));
  EXPECT_THAT(ad.status().message(), HasSubstr("no gradient rule"));
}

TEST(AutodiffTest, CtcBeamSearchDecoderIsInferenceOnly) {
  GradCase c(14);
  auto x = c.RandomWeight("x", {3, 1, 4});
  c.IntInput("lengths", {1}, {3});
  onnx::NodeProto& n =
      c.builder().Node("CtcBeamSearchDecoder", {x, "lengths"}, {"y"}, "/head/Decoder");
  n.set_domain("ai.graphcore");
  auto* o = c.builder().model().add_opset_import();
  o->set_domain("ai.graphcore");
  o->set_version(1);
  c.Finish("y", {1, 1});
  auto ad = Build(c);
  EXPECT_EQ(ad.status().code(), absl::StatusCode::kInvalidArgument) << ad.status().ToString();
  EXPECT_THAT(ad.status().message(),
              AllOf(HasSubstr("'/head/Decoder'"), HasSubstr("is inference only"),
                    HasSubstr("poptorch.ctc_beam_search_decoder has no gradient")));
}

TEST(AutodiffTest, OpWithoutRuleOffThePathIsFine) {
  GradCase c(14);
  auto x = c.RandomWeight("x", {2, 3});
  c.builder().Input("other", testing::kFloat, {2, 3});
  c.builder().Node("Abs", {"other"}, {"abs"});  // no weight upstream
  c.builder().Node("Add", {x, "abs"}, {"y"});
  c.Finish("y", {2, 3});
  auto graph = graph::ImportOnnx(c.builder().Bytes());
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto ad = Autodiff::Create(*graph, "loss", c.weights());
  ASSERT_TRUE(ad.ok()) << ad.status();
}

TEST(AutodiffTest, BoolPathCarriesNoGradient) {
  GradCase c(14);
  auto x = c.RandomWeight("x", {2, 3});
  auto& b = c.builder();
  b.Floats("zero", {}, {0.0f}).Floats("p", {2, 3}, {1, 2, 3, 4, 5, 6});
  b.Floats("q", {2, 3}, {6, 5, 4, 3, 2, 1});
  b.Node("Greater", {x, "zero"}, {"cond"});
  b.Node("Where", {"cond", "p", "q"}, {"y"});
  c.Finish("y", {2, 3});
  auto ad = Build(c);
  ASSERT_TRUE(ad.ok()) << ad.status();
  auto result = (*ad)->Run(c.inputs(), (*ad)->InitialWeights());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->gradients.empty());
  EXPECT_EQ(result->backward_flops, 0);
}

TEST(AutodiffTest, TrainableExponentIsAnError) {
  GradCase c(14);
  auto x = c.RandomWeight("x", {2}, 0.5f, 1.5f);
  auto e = c.RandomWeight("e", {2});
  c.builder().Node("Pow", {x, e}, {"y"}, "/Pow");
  c.Finish("y", {2});
  auto ad = Build(c);
  ASSERT_TRUE(ad.ok()) << ad.status();
  auto result = (*ad)->Run(c.inputs(), (*ad)->InitialWeights());
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("Pow node '/Pow'"));
}

TEST(AutodiffTest, RejectsBadLossAndWeights) {
  GradCase c(14);
  auto x = c.RandomWeight("x", {2, 3});
  c.builder().Node("Relu", {x}, {"y"});
  c.Finish("y", {2, 3});
  auto graph = graph::ImportOnnx(c.builder().Bytes());
  ASSERT_TRUE(graph.ok()) << graph.status();
  const std::vector<std::pair<std::string, std::vector<std::string>>> bad = {
      {"y", {"x"}},           // not a scalar
      {"nope", {"x"}},        // not a value
      {"loss", {"missing"}},  // not an initializer
      {"loss", {"x", "x"}},   // twice
  };
  for (const auto& [loss, weights] : bad) {
    auto ad = Autodiff::Create(*graph, loss, weights);
    ASSERT_FALSE(ad.ok()) << loss;
    EXPECT_EQ(ad.status().code(), absl::StatusCode::kInvalidArgument) << ad.status();
  }
}

TEST(AutodiffTest, RejectsBadInputsAndWeightsAtRun) {
  GradCase c(14);
  auto x = c.RandomWeight("x", {2, 3});
  c.builder().Node("Relu", {x}, {"y"});
  c.Finish("y", {2, 3});
  auto ad = Build(c);
  ASSERT_TRUE(ad.ok()) << ad.status();
  TensorMap weights = (*ad)->InitialWeights();
  EXPECT_EQ((*ad)->Run({}, weights).status().code(), absl::StatusCode::kInvalidArgument);
  TensorMap missing;
  EXPECT_EQ((*ad)->Run(c.inputs(), missing).status().code(), absl::StatusCode::kInvalidArgument);
  TensorMap wrong = weights;
  wrong.at("x") = *tensor::Tensor::Create(tensor::DType::kFloat32, {3, 2});
  EXPECT_THAT((*ad)->Run(c.inputs(), wrong).status().message(), HasSubstr("weight 'x'"));
  TensorMap extra = weights;
  extra.emplace("r", weights.at("x"));
  EXPECT_EQ((*ad)->Run(c.inputs(), extra).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(AutodiffTest, LabelOutOfRangeIsAnError) {
  GradCase c(14);
  auto x = c.RandomWeight("x", {2, 3});
  c.IntInput("t", {2}, {0, 3});
  AddLossNode(c, "SoftmaxCrossEntropyLoss", {x, "t"}, {"y"}, "mean", 0, false);
  c.Finish("y", {});
  auto ad = Build(c);
  ASSERT_TRUE(ad.ok()) << ad.status();
  auto result = (*ad)->Run(c.inputs(), (*ad)->InitialWeights());
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("label 3"));
}

// ---- RunSgdStep: forward, backward and plain SGD fused ----

// loss = mean((MatMul(relu(x W1^T + b1), W2) - t)^2): a Gemm layer as torch
// exports Linear, then a MatMul layer on a 3-D batch. `tied` makes the second
// layer reuse W1 (so W1 gets two gradient contributions).
graph::Graph TwoLayerRegressor(bool tied) {
  OnnxBuilder b(14);
  b.Input("x", graph::testing::kFloat, {4, 3}).Input("t", graph::testing::kFloat, {2, 2, 3});
  b.Floats("W1", {3, 3}, testing::RandomValues(9, -1, 1, 1));
  b.Floats("b1", {3}, testing::RandomValues(3, -1, 1, 2));
  b.Floats("W2", {3, 3}, testing::RandomValues(9, -1, 1, 3));
  b.Ints("shape", {3}, {2, 2, 3});
  OnnxBuilder::AttrInt(b.Node("Gemm", {"x", "W1", "b1"}, {"h"}), "transB", 1);
  b.Node("Relu", {"h"}, {"r"});
  b.Node("Reshape", {"r", "shape"}, {"r3"});
  b.Node("MatMul", {"r3", tied ? "W1" : "W2"}, {"y"});
  b.Node("Sub", {"y", "t"}, {"d"});
  b.Node("Mul", {"d", "d"}, {"sq"});
  OnnxBuilder::AttrInt(b.Node("ReduceMean", {"sq"}, {"loss"}), "keepdims", 0);
  b.Output("loss", graph::testing::kFloat);
  return *graph::ImportOnnx(b.Bytes(), graph::FoldOptions{.keep_weights = true});
}

std::vector<tensor::Tensor> RegressorBatch() {
  return {*tensor::Tensor::FromValues<float>({4, 3}, testing::RandomValues(12, -1, 1, 4)),
          *tensor::Tensor::FromValues<float>({2, 2, 3}, testing::RandomValues(12, -1, 1, 5))};
}

// Runs `ad` both ways from its initial weights: RunSgdStep against Run
// followed by w + (-lr) g. Returns RunSgdStep's result.
GradientResult ExpectSgdStepMatchesRunThenUpdate(const Autodiff& ad,
                                                 const std::vector<tensor::Tensor>& inputs) {
  constexpr double kLr = 0.5;
  const TensorMap start = ad.InitialWeights();
  auto plain = ad.Run(inputs, start);
  EXPECT_TRUE(plain.ok()) << plain.status();
  TensorMap fused_weights = start;
  auto fused = ad.RunSgdStep(inputs, fused_weights, {}, kLr);
  EXPECT_TRUE(fused.ok()) << fused.status();
  if (!plain.ok() || !fused.ok()) return {};
  EXPECT_EQ(fused->loss, plain->loss);
  EXPECT_TRUE(fused->gradients.empty());
  for (const auto& [name, w0] : start) {
    SCOPED_TRACE(name);
    const tensor::Tensor& g = plain->gradients.at(name);
    const tensor::Tensor& w = fused_weights.at(name);
    for (int64_t i = 0; i < w0.num_elements(); ++i) {
      const float want = w0.data<float>()[i] + static_cast<float>(-kLr) * g.data<float>()[i];
      EXPECT_NEAR(w.data<float>()[i], want, 1e-6f * (1.0f + std::abs(want))) << i;
    }
    EXPECT_NE(w, w0);  // it moved
  }
  return *std::move(fused);
}

TEST(AutodiffTest, RunSgdStepAccumulatesProductGradientsIntoTheWeights) {
  auto ad = Autodiff::Create(TwoLayerRegressor(false), "loss", {});
  ASSERT_TRUE(ad.ok()) << ad.status();
  const GradientResult r = ExpectSgdStepMatchesRunThenUpdate(**ad, RegressorBatch());
  EXPECT_EQ(r.fused_products, 2);  // W1 (Gemm) and W2 (MatMul); b1 is a reduction
}

TEST(AutodiffTest, RunSgdStepMaterialisesAWeightWithTwoContributions) {
  auto ad = Autodiff::Create(TwoLayerRegressor(true), "loss", {});
  ASSERT_TRUE(ad.ok()) << ad.status();
  const GradientResult r = ExpectSgdStepMatchesRunThenUpdate(**ad, RegressorBatch());
  EXPECT_EQ(r.fused_products, 0);
}

TEST(AutodiffTest, RunSgdStepEvaluatesProductsThatReadAWeightBeforeUpdating) {
  // y = x (A B): dA = G_ab B^T reads B and dB = A^T G_ab reads A, so neither
  // may wait until the other weight has been updated.
  OnnxBuilder b(14);
  b.Input("x", graph::testing::kFloat, {2, 3});
  b.Floats("A", {3, 3}, testing::RandomValues(9, -1, 1, 6));
  b.Floats("B", {3, 2}, testing::RandomValues(6, -1, 1, 7));
  b.Node("MatMul", {"A", "B"}, {"ab"});
  b.Node("MatMul", {"x", "ab"}, {"y"});
  OnnxBuilder::AttrInt(b.Node("ReduceSum", {"y"}, {"loss"}), "keepdims", 0);
  b.Output("loss", graph::testing::kFloat);
  auto ad = Autodiff::Create(
      *graph::ImportOnnx(b.Bytes(), graph::FoldOptions{.keep_weights = true}), "loss", {});
  ASSERT_TRUE(ad.ok()) << ad.status();
  const GradientResult r = ExpectSgdStepMatchesRunThenUpdate(
      **ad, {*tensor::Tensor::FromValues<float>({2, 3}, testing::RandomValues(6, -1, 1, 8))});
  EXPECT_EQ(r.fused_products, 0);
}

TEST(AutodiffTest, RunSgdStepLeavesTheWeightsAloneOnError) {
  auto ad = Autodiff::Create(TwoLayerRegressor(false), "loss", {});
  ASSERT_TRUE(ad.ok()) << ad.status();
  TensorMap weights = (*ad)->InitialWeights();
  std::vector<tensor::Tensor> bad = RegressorBatch();
  bad[1] = *tensor::Tensor::Create(tensor::DType::kFloat32, {2, 3});
  auto r = (*ad)->RunSgdStep(bad, weights, {}, 0.5);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("input 1 ('t')"));
  EXPECT_EQ(weights, (*ad)->InitialWeights());
}

TEST(AutodiffTest, EveryIssue3OpHasARule) {
  for (const char* op : {"MatMul",
                         "Gemm",
                         "Add",
                         "Sub",
                         "Mul",
                         "Div",
                         "Pow",
                         "Sqrt",
                         "Erf",
                         "Neg",
                         "Relu",
                         "Sigmoid",
                         "Tanh",
                         "Softmax",
                         "LogSoftmax",
                         "ReduceMean",
                         "ReduceSum",
                         "Gather",
                         "Reshape",
                         "Flatten",
                         "Transpose",
                         "Unsqueeze",
                         "Squeeze",
                         "Concat",
                         "Slice",
                         "Expand",
                         "Where",
                         "Identity",
                         "Dropout",
                         "Cast",
                         "LayerNormalization",
                         "BatchNormalization",
                         "SoftmaxCrossEntropyLoss",
                         "NegativeLogLikelihoodLoss"}) {
    EXPECT_NE(FindGradRule(op), nullptr) << op;
  }
}

}  // namespace
}  // namespace ipupod::training
