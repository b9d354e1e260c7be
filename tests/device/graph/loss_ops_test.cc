// SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss (device/graph/ops_loss.cc)
// on the Interpreter against hand-computed values, and their errors.
#include <cmath>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device/graph/interpreter.h"
#include "device/graph/onnx_import.h"
#include "tests/device/graph/onnx_builder.h"

namespace ipupod::graph {
namespace {

using ::testing::HasSubstr;
using testing::kFloat;
using testing::kInt64;
using testing::OnnxBuilder;

// Row 0 = [1, 2, 3] label 2: loss log(1 + e^-1 + e^-2); row 1 = [1, 1, 1]
// label 0: loss log(3).
const double kLoss0 = std::log(1 + std::exp(-1.0) + std::exp(-2.0));
const double kLoss1 = std::log(3.0);

void SetReduction(onnx::NodeProto& n, const std::string& reduction) {
  auto* a = n.add_attribute();
  a->set_name("reduction");
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(reduction);
}

// scores [2, 3] input -> op -> loss (and log_prob when `log_prob`).
absl::StatusOr<std::vector<Tensor>> RunLoss(const std::string& op, const std::string& reduction,
                                            std::vector<float> scores, std::vector<int64_t> labels,
                                            int64_t ignore = -1000, bool weights = false,
                                            bool log_prob = false) {
  OnnxBuilder b(13);
  b.Input("s", kFloat, {2, 3}).Input("t", kInt64, {2}).Output("loss", kFloat);
  std::vector<std::string> inputs = {"s", "t"};
  if (weights) {
    b.Floats("w", {3}, {1, 2, 3});
    inputs.push_back("w");
  }
  std::vector<std::string> outputs = {"loss"};
  if (log_prob) {
    outputs.push_back("lp");
    b.Output("lp", kFloat);
  }
  auto& n = b.Node(op, inputs, outputs);
  SetReduction(n, reduction);
  if (ignore != -1000) OnnxBuilder::AttrInt(n, "ignore_index", ignore);
  auto graph = ImportOnnx(b.Bytes());
  if (!graph.ok()) return graph.status();
  auto interp = Interpreter::Create(*graph);
  if (!interp.ok()) return interp.status();
  return (*interp)->Run(
      {*Tensor::FromValues<float>({2, 3}, scores), *Tensor::FromValues<int64_t>({2}, labels)});
}

const std::vector<float> kScores = {1, 2, 3, 1, 1, 1};

TEST(LossOpsTest, SoftmaxCrossEntropyReductions) {
  auto mean = RunLoss("SoftmaxCrossEntropyLoss", "mean", kScores, {2, 0});
  ASSERT_TRUE(mean.ok()) << mean.status();
  EXPECT_EQ((*mean)[0].shape(), Shape{});
  EXPECT_NEAR((*mean)[0].data<float>()[0], (kLoss0 + kLoss1) / 2, 1e-6);
  auto sum = RunLoss("SoftmaxCrossEntropyLoss", "sum", kScores, {2, 0});
  ASSERT_TRUE(sum.ok());
  EXPECT_NEAR((*sum)[0].data<float>()[0], kLoss0 + kLoss1, 1e-6);
  auto none = RunLoss("SoftmaxCrossEntropyLoss", "none", kScores, {2, 0});
  ASSERT_TRUE(none.ok());
  ASSERT_EQ((*none)[0].shape(), Shape{2});
  EXPECT_NEAR((*none)[0].data<float>()[0], kLoss0, 1e-6);
  EXPECT_NEAR((*none)[0].data<float>()[1], kLoss1, 1e-6);
}

TEST(LossOpsTest, IgnoreIndexAndWeights) {
  auto ignored = RunLoss("SoftmaxCrossEntropyLoss", "mean", kScores, {2, 0}, /*ignore=*/0);
  ASSERT_TRUE(ignored.ok()) << ignored.status();
  EXPECT_NEAR((*ignored)[0].data<float>()[0], kLoss0, 1e-6);  // divides by 1, not 2
  auto weighted = RunLoss("SoftmaxCrossEntropyLoss", "mean", kScores, {2, 0}, -1000, true);
  ASSERT_TRUE(weighted.ok()) << weighted.status();
  EXPECT_NEAR((*weighted)[0].data<float>()[0], (3 * kLoss0 + 1 * kLoss1) / 4, 1e-6);
  auto all_ignored = RunLoss("SoftmaxCrossEntropyLoss", "mean", kScores, {1, 1}, 1);
  ASSERT_TRUE(all_ignored.ok());
  EXPECT_TRUE(std::isnan((*all_ignored)[0].data<float>()[0]));  // 0/0, as torch
}

TEST(LossOpsTest, LogProbOutput) {
  auto out = RunLoss("SoftmaxCrossEntropyLoss", "mean", kScores, {2, 0}, -1000, false, true);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[1].shape(), (Shape{2, 3}));
  EXPECT_NEAR((*out)[1].data<float>()[2], -kLoss0, 1e-6);
  EXPECT_NEAR((*out)[1].data<float>()[4], -kLoss1, 1e-6);
}

TEST(LossOpsTest, NegativeLogLikelihoodPicksTheLabel) {
  auto out = RunLoss("NegativeLogLikelihoodLoss", "none", {-1, -2, -3, -4, -5, -6}, {1, 2});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FLOAT_EQ((*out)[0].data<float>()[0], 2);
  EXPECT_FLOAT_EQ((*out)[0].data<float>()[1], 6);
  auto mean = RunLoss("NegativeLogLikelihoodLoss", "mean", {-1, -2, -3, -4, -5, -6}, {1, 2});
  ASSERT_TRUE(mean.ok());
  EXPECT_FLOAT_EQ((*mean)[0].data<float>()[0], 4);
}

TEST(LossOpsTest, LabelOutOfRangeFailsAtRun) {
  auto out = RunLoss("NegativeLogLikelihoodLoss", "mean", kScores, {3, 0});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("label 3"));
  // The ignore_index itself may be out of range (torch's -100).
  EXPECT_TRUE(RunLoss("NegativeLogLikelihoodLoss", "mean", kScores, {-100, 0}, -100).ok());
}

TEST(LossOpsTest, RejectsBadReductionAndShapes) {
  auto bad = RunLoss("SoftmaxCrossEntropyLoss", "avg", kScores, {0, 0});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("reduction 'avg'"));

  OnnxBuilder b(13);
  b.Input("s", kFloat, {2, 3}).Input("t", kInt64, {3}).Output("loss", kFloat);
  b.Node("SoftmaxCrossEntropyLoss", {"s", "t"}, {"loss"});
  auto graph = ImportOnnx(b.Bytes());
  ASSERT_FALSE(graph.ok());
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(graph.status().message(), HasSubstr("do not match scores"));

  OnnxBuilder old(11);
  old.Input("s", kFloat, {2, 3}).Input("t", kInt64, {2}).Output("loss", kFloat);
  old.Node("SoftmaxCrossEntropyLoss", {"s", "t"}, {"loss"});
  EXPECT_THAT(ImportOnnx(old.Bytes()).status().message(), HasSubstr("opset >= 12"));
}

}  // namespace
}  // namespace ipupod::graph
