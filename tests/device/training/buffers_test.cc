// Buffers: which initializers a graph updates in place (BatchNormalization
// in training mode), explicit updates, and the checks Autodiff::Create adds.
#include "device/training/buffers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device/graph/onnx_import.h"
#include "tests/device/graph/onnx_builder.h"

namespace ipupod::training {
namespace {

using graph::testing::kFloat;
using graph::testing::OnnxBuilder;
using ::testing::HasSubstr;

// x [4, 3] -> Gemm -> BatchNormalization (opset 15, training_mode as given,
// with `stat_outputs` running-statistics outputs) -> loss = mean(y).
graph::Graph BatchNormModel(int64_t training_mode, bool stat_outputs) {
  OnnxBuilder b(15);
  b.Input("x", kFloat, {4, 3});
  b.Floats("W", {3, 3}, {1, 0, 2, 0, 1, 0, -1, 0, 1}).Floats("bias", {3}, {0, 0.5f, 1});
  b.Floats("bn.weight", {3}, {1, 2, 3}).Floats("bn.bias", {3}, {0, 0, 1});
  b.Floats("bn.running_mean", {3}, {0, 0, 0}).Floats("bn.running_var", {3}, {1, 1, 1});
  b.Node("Gemm", {"x", "W", "bias"}, {"h"});
  std::vector<std::string> outs = {"y"};
  if (stat_outputs) outs.insert(outs.end(), {"rm_next", "rv_next"});
  OnnxBuilder::AttrInt(
      b.Node("BatchNormalization",
             {"h", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"}, outs, "bn"),
      "training_mode", training_mode);
  OnnxBuilder::AttrInt(b.Node("ReduceMean", {"y"}, {"loss"}), "keepdims", 0);
  b.Output("loss", kFloat);
  return *graph::ImportOnnx(b.Bytes(), graph::FoldOptions{.keep_weights = true});
}

TEST(BuffersTest, BatchNormInTrainingModeUpdatesItsRunningStatistics) {
  auto updates = ImplicitBufferUpdates(BatchNormModel(1, true));
  ASSERT_TRUE(updates.ok()) << updates.status();
  EXPECT_EQ(*updates,
            (BufferUpdates{{"bn.running_mean", "rm_next"}, {"bn.running_var", "rv_next"}}));
}

TEST(BuffersTest, BatchNormWithoutStatisticsOutputsUpdatesNothing) {
  EXPECT_TRUE(ImplicitBufferUpdates(BatchNormModel(1, false))->empty());
  EXPECT_TRUE(ImplicitBufferUpdates(BatchNormModel(0, false))->empty());
}

TEST(BuffersTest, ExplicitUpdatesJoinAndMayNotContradict) {
  const graph::Graph g = BatchNormModel(1, true);
  auto all = AllBufferUpdates(g, {{"bias", "h"}, {"bn.running_mean", "rm_next"}});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), 3u);
  auto clash = AllBufferUpdates(g, {{"bn.running_mean", "h"}});
  EXPECT_EQ(clash.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(clash.status().message(), HasSubstr("'bn.running_mean'"));
}

TEST(BuffersTest, RunningStatisticsThatAreNotInitializersAreRejected) {
  OnnxBuilder b(15);
  b.Input("x", kFloat, {4, 3}).Input("mean", kFloat, {3});
  b.Floats("s", {3}, {1, 1, 1}).Floats("c", {3}, {0, 0, 0}).Floats("v", {3}, {1, 1, 1});
  OnnxBuilder::AttrInt(
      b.Node("BatchNormalization", {"x", "s", "c", "mean", "v"}, {"y", "m2", "v2"}, "bn"),
      "training_mode", 1);
  b.Output("y", kFloat);
  auto g = graph::ImportOnnx(b.Bytes(), graph::FoldOptions{.keep_weights = true});
  ASSERT_TRUE(g.ok()) << g.status();
  auto updates = ImplicitBufferUpdates(*g);
  EXPECT_EQ(updates.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(updates.status().message(), HasSubstr("must be an initializer"));
}

TEST(BuffersTest, AutodiffKeepsBuffersOutOfTheWeightsAndChecksTheirUpdates) {
  const graph::Graph g = BatchNormModel(1, true);
  auto ad = Autodiff::Create(g, "loss", {}, *ImplicitBufferUpdates(g));
  ASSERT_TRUE(ad.ok()) << ad.status();
  EXPECT_THAT((*ad)->weights(), ::testing::ElementsAre("W", "bias", "bn.bias", "bn.weight"));
  EXPECT_EQ((*ad)->InitialBuffers().size(), 2u);

  auto wrong_shape = Autodiff::Create(g, "loss", {}, {{"bias", "y"}});
  EXPECT_THAT(wrong_shape.status().message(), HasSubstr("its update 'y'"));
  auto not_computed = Autodiff::Create(g, "loss", {}, {{"bias", "x"}});
  EXPECT_THAT(not_computed.status().message(), HasSubstr("no node of the graph computes"));
  auto a_weight = Autodiff::Create(g, "loss", {"bias"}, {{"bias", "rm_next"}});
  EXPECT_THAT(a_weight.status().message(), HasSubstr("other than a trainable weight"));
}

TEST(BuffersTest, AutodiffRunTakesAndReturnsBuffers) {
  const graph::Graph g = BatchNormModel(1, true);
  auto ad = Autodiff::Create(g, "loss", {}, *ImplicitBufferUpdates(g));
  ASSERT_TRUE(ad.ok()) << ad.status();
  auto x = tensor::Tensor::FromValues<float>(
      {4, 3}, std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  std::vector<tensor::Tensor> inputs = {*x};
  EXPECT_THAT((*ad)->Run(inputs, (*ad)->InitialWeights()).status().message(),
              HasSubstr("buffer 'bn.running_mean' is missing"));
  auto run = (*ad)->Run(inputs, (*ad)->InitialWeights(), (*ad)->InitialBuffers());
  ASSERT_TRUE(run.ok()) << run.status();
  // h = x W + bias; column 0 is x0 - x2 = -2 for every row: mean -2, and
  // the running mean moves 10% of the way from 0.
  EXPECT_NEAR(run->buffers.at("bn.running_mean").data<float>()[0], -0.2f, 1e-6);
  // Column 0 is constant: unbiased variance 0, running variance 0.9 * 1.
  EXPECT_NEAR(run->buffers.at("bn.running_var").data<float>()[0], 0.9f, 1e-6);
}

}  // namespace
}  // namespace ipupod::training
