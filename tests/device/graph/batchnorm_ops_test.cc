// BatchNormalization (device/graph/ops_nn.cc) through ONNX import and the
// Interpreter: inference and training mode at opsets 13 (mode = number of
// outputs) and 15 (training_mode attribute), shape inference of every
// output, FLOPs, and the errors a model can hit.
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
using testing::OnnxBuilder;

// x [4, 2]: channel 0 = {1, 2, 3, 6} (mean 3, biased var 3.5, unbiased
// 14/3), channel 1 = {0, 0, 4, 4} (mean 2, biased var 4, unbiased 16/3).
const std::vector<float> kX = {1, 0, 2, 0, 3, 4, 6, 4};

struct BnSpec {
  int64_t opset = 15;
  Shape x = {4, 2};
  int outputs = 1;
  int64_t training_mode = -1;  // -1: no attribute
  Shape scale = {2};
  float momentum = 0.75f;
};

// The values of a [n] parameter: `two` when n == 2, else n copies of `fill`.
std::vector<float> PerChannel(int64_t n, std::vector<float> two, float fill) {
  return n == 2 ? two : std::vector<float>(static_cast<size_t>(n), fill);
}

// x -> BatchNormalization(x, scale, B, mean, var) -> y, o1, o2, ... with
// every output a graph output. Parameters are initializers: scale {2, 0.5},
// B {1, -1}, mean {1, 2}, var {4, 0.25} (for C = 2).
OnnxBuilder BnModel(const BnSpec& s) {
  OnnxBuilder b(s.opset);
  b.Input("x", kFloat, s.x);
  const int64_t c = s.x.size() > 1 ? s.x[1] : 1;
  b.Floats("scale", s.scale, PerChannel(s.scale[0], {2, 0.5f}, 1));
  b.Floats("B", {c}, PerChannel(c, {1, -1}, 0));
  b.Floats("mean", {c}, PerChannel(c, {1, 2}, 0));
  b.Floats("var", {c}, PerChannel(c, {4, 0.25f}, 1));
  std::vector<std::string> outs = {"y", "o1", "o2", "o3", "o4"};
  outs.resize(s.outputs);
  for (const auto& o : outs) b.Output(o, kFloat);
  auto& n = b.Node("BatchNormalization", {"x", "scale", "B", "mean", "var"}, outs, "/bn/BN");
  OnnxBuilder::AttrFloat(n, "epsilon", 1e-5f);
  OnnxBuilder::AttrFloat(n, "momentum", s.momentum);
  if (s.training_mode >= 0) OnnxBuilder::AttrInt(n, "training_mode", s.training_mode);
  return b;
}

struct BnRun {
  Graph graph;
  std::vector<Tensor> outputs;
  int64_t flops = 0;
};

absl::StatusOr<BnRun> RunBn(const BnSpec& spec, const std::vector<float>& x) {
  auto graph = ImportOnnx(BnModel(spec).Bytes());
  if (!graph.ok()) return graph.status();
  auto interp = Interpreter::Create(*graph);
  if (!interp.ok()) return interp.status();
  auto out = (*interp)->Run({*Tensor::FromValues<float>(spec.x, x)});
  if (!out.ok()) return out.status();
  return BnRun{*std::move(graph), *std::move(out), (*interp)->total_flops()};
}

std::vector<float> Floats(const Tensor& t) {
  return std::vector<float>(t.values<float>().begin(), t.values<float>().end());
}

void ExpectInvalid(const BnSpec& spec, const std::string& needle) {
  auto graph = ImportOnnx(BnModel(spec).Bytes());
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument) << graph.status();
  EXPECT_THAT(std::string(graph.status().message()), HasSubstr(needle));
}

// Inference with the initializers' statistics: channel 0 = (x - 1) / 2 * 2 + 1
// = x, channel 1 = (x - 2) / 0.5 * 0.5 - 1 = x - 3, up to epsilon.
std::vector<double> InferenceY() {
  const double k0 = 2 / std::sqrt(4 + 1e-5), k1 = 0.5 / std::sqrt(0.25 + 1e-5);
  std::vector<double> y;
  for (size_t i = 0; i < kX.size(); i += 2) {
    y.push_back((kX[i] - 1) * k0 + 1);
    y.push_back((kX[i + 1] - 2) * k1 - 1);
  }
  return y;
}

TEST(BatchNormOpsTest, InferenceModeAtOpsets13And15) {
  for (int64_t opset : {13, 15}) {
    SCOPED_TRACE(opset);
    BnSpec spec;
    spec.opset = opset;
    if (opset == 15) spec.training_mode = 0;  // as torch writes it
    auto r = RunBn(spec, kX);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->outputs.size(), 1u);
    const std::vector<double> want = InferenceY();
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(r->outputs[0].values<float>()[i], want[i], 1e-6) << i;
    }
    EXPECT_NEAR(want[6], 6, 1e-4);
    EXPECT_EQ(r->flops, 2 * 8);
  }
}

TEST(BatchNormOpsTest, TrainingModeOpset15RunningStatistics) {
  BnSpec spec;
  spec.training_mode = 1;
  spec.outputs = 3;
  auto r = RunBn(spec, kX);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->graph.value_types.at("y").shape, (Shape{4, 2}));
  EXPECT_EQ(r->graph.value_types.at("o1").shape, (Shape{2}));
  EXPECT_EQ(r->graph.value_types.at("o2").shape, (Shape{2}));
  const double r0 = 1.0 / std::sqrt(3.5 + 1e-5), r1 = 1.0 / std::sqrt(4.0 + 1e-5);
  const std::vector<float>& y = Floats(r->outputs[0]);
  EXPECT_NEAR(y[0], (1 - 3) * r0 * 2 + 1, 1e-6);
  EXPECT_NEAR(y[7], (4 - 2) * r1 * 0.5 - 1, 1e-6);
  // running = input * 0.75 + batch * 0.25; the variance unbiased, as torch.
  EXPECT_THAT(Floats(r->outputs[1]),
              ::testing::ElementsAre(::testing::FloatEq(1.5f), ::testing::FloatEq(2.0f)));
  EXPECT_NEAR(r->outputs[2].values<float>()[0], 4 * 0.75 + 14.0 / 3 * 0.25, 1e-6);
  EXPECT_NEAR(r->outputs[2].values<float>()[1], 0.25 * 0.75 + 16.0 / 3 * 0.25, 1e-6);
  EXPECT_EQ(r->flops, 8 * 8);
  // training_mode=1 with Y alone still normalises with batch statistics.
  spec.outputs = 1;
  auto y_only = RunBn(spec, kX);
  ASSERT_TRUE(y_only.ok()) << y_only.status();
  EXPECT_EQ(Floats(y_only->outputs[0]), y);
}

TEST(BatchNormOpsTest, TrainingModeOpset13FiveOutputsRank4) {
  // x [2, 2, 1, 2]: channel 0 = {1, 2, 3, 6}, channel 1 = {0, 0, 4, 4} again.
  BnSpec spec;
  spec.opset = 13;
  spec.outputs = 5;
  spec.x = {2, 2, 1, 2};
  auto r = RunBn(spec, {1, 2, 0, 0, 3, 6, 4, 4});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->outputs.size(), 5u);
  EXPECT_EQ(r->outputs[0].shape(), (Shape{2, 2, 1, 2}));
  for (const char* name : {"o1", "o2", "o3", "o4"}) {
    EXPECT_EQ(r->graph.value_types.at(name).shape, (Shape{2})) << name;
  }
  const double r0 = 1.0 / std::sqrt(3.5 + 1e-5);
  EXPECT_NEAR(r->outputs[0].values<float>()[5], (6 - 3) * r0 * 2 + 1, 1e-6);
  EXPECT_THAT(Floats(r->outputs[1]), ::testing::ElementsAre(1.5f, 2.0f));
  EXPECT_THAT(Floats(r->outputs[3]), ::testing::ElementsAre(3.0f, 2.0f));  // saved_mean
  EXPECT_THAT(Floats(r->outputs[4]), ::testing::ElementsAre(3.5f, 4.0f));  // saved_var, biased
}

TEST(BatchNormOpsTest, RejectsWrongChannelCountAndRank) {
  BnSpec spec;
  spec.scale = {3};
  ExpectInvalid(spec,
                "BatchNormalization node '/bn/BN': batchnorm scale has shape [3]; it must "
                "be [C] = [2]");
  spec = BnSpec();
  spec.x = {8};
  ExpectInvalid(spec, "rank >= 2");
}

TEST(BatchNormOpsTest, RejectsStatisticsOutputsOutsideTrainingMode) {
  BnSpec spec;
  spec.training_mode = 0;
  spec.outputs = 3;
  ExpectInvalid(spec, "running_mean and running_var exist only in training mode");
  spec.training_mode = -1;  // default 0
  ExpectInvalid(spec, "only in training mode");
  spec.training_mode = 1;
  spec.outputs = 5;
  ExpectInvalid(spec, "has 5 outputs; from opset 14 BatchNormalization has at most 3");
  spec.training_mode = 2;
  spec.outputs = 1;
  ExpectInvalid(spec, "'training_mode' must be 0 or 1");
  spec.opset = 13;
  spec.training_mode = 1;
  ExpectInvalid(spec, "'training_mode' exists from opset 14");
}

TEST(BatchNormOpsTest, RejectsOneValuePerChannelWhenTraining) {
  BnSpec spec;
  spec.x = {1, 2};
  spec.training_mode = 1;
  ExpectInvalid(spec,
                "Expected more than 1 value per channel when training, got X of shape "
                "[1, 2]");
  spec.opset = 13;
  spec.training_mode = -1;
  spec.outputs = 5;
  ExpectInvalid(spec, "Expected more than 1 value per channel");
  spec.outputs = 1;  // inference with a batch of one is fine
  EXPECT_TRUE(RunBn(spec, {1, 0}).ok());
}

TEST(BatchNormOpsTest, RejectsOldOpsetsAndSpatialZero) {
  BnSpec spec;
  spec.opset = 8;
  ExpectInvalid(spec, "op needs opset >= 9, model has 8");
  spec.opset = 13;
  OnnxBuilder b = BnModel(spec);
  OnnxBuilder::AttrInt(*b.model().mutable_graph()->mutable_node(0), "spatial", 0);
  auto graph = ImportOnnx(b.Bytes());
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(graph.status().message()), HasSubstr("only spatial=1"));
}

}  // namespace
}  // namespace ipupod::graph
