// Backward rules of PopTorch's ops (device/training/grad_tensor.cc) and of
// training-mode Dropout (device/training/grad_elementwise.cc) against finite
// differences, and the trainer's run context (step, replica, micro-batch)
// that keys Dropout's masks.
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device/graph/run_context.h"
#include "device/training/trainer.h"
#include "tests/device/training/grad_check.h"

namespace ipupod::training {
namespace {

using testing::ExpectGradientsMatch;
using testing::GradCase;
using testing::OnnxBuilder;

onnx::NodeProto& Graphcore(GradCase& c, const std::string& op, const std::vector<std::string>& in,
                           const std::string& out) {
  if (c.builder().model().opset_import_size() == 1) {
    auto* o = c.builder().model().add_opset_import();
    o->set_domain("ai.graphcore");
    o->set_version(1);
  }
  onnx::NodeProto& n = c.builder().Node(op, in, {out}, "/m/" + op);
  n.set_domain("ai.graphcore");
  return n;
}

TEST(PoptorchGradsTest, DynamicSliceScattersTheGradientBack) {
  GradCase c(14);
  auto x = c.RandomWeight("x", {3, 5});
  c.IntInput("start", {1}, {2});
  auto& n = Graphcore(c, "DynamicSlice", {x, "start"}, "y");
  OnnxBuilder::AttrInts(n, "axes", {1});
  OnnxBuilder::AttrInts(n, "sizes", {3});
  c.Finish("y", {3, 3});
  ExpectGradientsMatch(c);
}

TEST(PoptorchGradsTest, DynamicUpdateSplitsTheGradient) {
  GradCase c(14);
  auto x = c.RandomWeight("x", {4, 3});
  auto u = c.RandomWeight("u", {2, 3});
  c.IntInput("start", {1}, {1});
  auto& n = Graphcore(c, "DynamicUpdate", {x, "start", u}, "y");
  OnnxBuilder::AttrInts(n, "axes", {0});
  OnnxBuilder::AttrInts(n, "sizes", {2});
  c.Finish("y", {4, 3});
  ExpectGradientsMatch(c);
}

TEST(PoptorchGradsTest, NopAndIpuPrintPassTheGradientAndPrintIt) {
  GradCase c(14);
  auto x = c.RandomWeight("x", {2, 2});
  auto& print = Graphcore(c, "IpuPrint", {x}, "p");
  OnnxBuilder::AttrString(print, "title", "x");
  OnnxBuilder::AttrInt(print, "print_gradient", 1);
  Graphcore(c, "Nop", {"p"}, "y");
  c.Finish("y", {2, 2});
  std::vector<std::string> log;
  graph::RunContext context;
  context.log = &log;
  graph::ScopedRunContext scope(&context);
  ExpectGradientsMatch(c);
  // The first Run prints the value and the gradient; the finite-difference
  // forwards print values only.
  ASSERT_GE(log.size(), 2u);
  EXPECT_THAT(log[0], ::testing::StartsWith("x: float32[2, 2] ["));
  EXPECT_THAT(log[1], ::testing::StartsWith("x_gradient: float32[2, 2] ["));
}

OnnxBuilder& TrainingDropout(GradCase& c, const std::string& x, float ratio) {
  OnnxBuilder& b = c.builder();
  b.Floats("ratio", {}, {ratio});
  onnx::TensorProto* mode = b.model().mutable_graph()->add_initializer();
  mode->set_name("training");
  mode->set_data_type(onnx::TensorProto::BOOL);
  mode->add_int32_data(1);
  b.Node("Dropout", {x, "ratio", "training"}, {"y"}, "/drop/Dropout");
  return b;
}

TEST(PoptorchGradsTest, TrainingDropoutAppliesTheForwardMask) {
  GradCase c(14);
  auto x = c.RandomWeight("x", {6, 8});
  TrainingDropout(c, x, 0.5f);
  c.Finish("y", {6, 8});
  graph::RunContext context;
  context.seed = 11;
  graph::ScopedRunContext scope(&context);
  ExpectGradientsMatch(c);  // every forward draws the same mask under one context

  auto g = graph::ImportOnnx(c.builder().Bytes());
  ASSERT_TRUE(g.ok()) << g.status();
  auto ad = Autodiff::Create(*g, "loss", c.weights());
  ASSERT_TRUE(ad.ok()) << ad.status();
  auto run = (*ad)->Run(c.inputs(), (*ad)->InitialWeights());
  ASSERT_TRUE(run.ok()) << run.status();
  const tensor::Tensor& y = run->outputs[0];
  const tensor::Tensor& grad = run->gradients.at("x");
  int64_t zeros = 0;
  for (int64_t i = 0; i < y.num_elements(); ++i) {
    const bool dropped = y.data<float>()[i] == 0.0f;
    zeros += dropped ? 1 : 0;
    if (dropped) {
      EXPECT_EQ(grad.data<float>()[i], 0.0f) << i;
    } else {
      EXPECT_NE(grad.data<float>()[i], 0.0f) << i;
    }
  }
  EXPECT_GT(zeros, 0);
  EXPECT_LT(zeros, y.num_elements());
}

// Two replicas of one update draw different masks, and one seed repeats.
TEST(PoptorchGradsTest, TrainerKeysMasksByReplicaAndStep) {
  GradCase c(14);
  auto x = c.RandomWeight("x", {64});
  TrainingDropout(c, x, 0.5f);
  c.Finish("y", {64});
  auto run_two_steps = [&](uint64_t seed) {
    auto g = graph::ImportOnnx(c.builder().Bytes());
    EXPECT_TRUE(g.ok()) << g.status();
    TrainerOptions options;
    options.loss = "loss";
    options.weights = c.weights();
    options.replicas = 2;
    auto trainer = Trainer::Create(*std::move(g), options);
    EXPECT_TRUE(trainer.ok()) << trainer.status();
    graph::RunContext context;
    context.seed = seed;
    graph::ScopedRunContext scope(&context);
    std::vector<std::vector<float>> ys;
    for (int step = 0; step < 2; ++step) {
      auto r = (*trainer)->Step({c.inputs(), c.inputs()});
      EXPECT_TRUE(r.ok()) << r.status();
      for (const auto& outputs : r->outputs) {
        ys.emplace_back(outputs[0].data<float>(), outputs[0].data<float>() + 64);
      }
    }
    return ys;
  };
  const auto first = run_two_steps(5);
  ASSERT_EQ(first.size(), 4u);
  std::vector<std::vector<bool>> masks;
  for (const auto& y : first) {
    std::vector<bool> m;
    for (float v : y) m.push_back(v != 0.0f);
    masks.push_back(m);
  }
  EXPECT_NE(masks[0], masks[1]) << "replicas 0 and 1 of step 0";
  EXPECT_NE(masks[0], masks[2]) << "replica 0 of steps 0 and 1";
  EXPECT_EQ(run_two_steps(5), first) << "one seed, bit-identical";
  EXPECT_NE(run_two_steps(6), first);
}

}  // namespace
}  // namespace ipupod::training
