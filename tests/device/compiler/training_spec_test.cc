// MakeTrainingSpec: the loss, the trainable weights, the optimizer's
// variable/constant split, and every way a model or request fails to train;
// OptimizerStateSlots per optimizer.
#include "device/compiler/training_spec.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device/graph/onnx_import.h"
#include "tests/device/compiler/test_models.h"

namespace ipupod::compiler {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::OnnxBuilder;
using ::testing::Pair;

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

graph::Graph Import(const std::string& bytes) {
  auto g = graph::ImportOnnx(bytes, graph::FoldOptions{.keep_weights = true});
  EXPECT_TRUE(g.ok()) << g.status();
  return *std::move(g);
}

TrainingOptions Optimizer(const std::string& name, std::map<std::string, double> attrs) {
  TrainingOptions o;
  o.optimizer = name;
  o.optimizer_attrs = std::move(attrs);
  return o;
}

TEST(TrainingSpecTest, DefaultsTheOnlyScalarLossEveryWeightAndSgd) {
  auto spec = MakeTrainingSpec(Import(testing::MlpWithLossBytes()), {}, 4);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->loss, "loss");
  EXPECT_THAT(spec->weights, ElementsAre("fc1.w", "fc2.w"));
  EXPECT_EQ(spec->gradient_accumulation_steps, 4);
  EXPECT_EQ(spec->optimizer, "sgd");
  EXPECT_THAT(spec->variables, ElementsAre(Pair("lr", 0.01)));
  EXPECT_EQ(spec->constants.at("momentum"), 0.0);
  EXPECT_EQ(spec->constants.at("nesterov"), 0.0);
}

// Gemm then BatchNormalization in training mode (running statistics as
// outputs 1, 2), loss = mean(y).
std::string BatchNormBytes() {
  OnnxBuilder b(15);
  b.Input("x", testing::kFloat, {4, 2});
  b.Floats("W", {2, 2}, {1, 2, 3, 4});
  b.Floats("bn.weight", {2}, {1, 1}).Floats("bn.bias", {2}, {0, 0});
  b.Floats("bn.running_mean", {2}, {0, 0}).Floats("bn.running_var", {2}, {1, 1});
  b.Node("Gemm", {"x", "W"}, {"h"});
  OnnxBuilder::AttrInt(
      b.Node("BatchNormalization",
             {"h", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"}, {"y", "rm", "rv"}),
      "training_mode", 1);
  OnnxBuilder::AttrInt(b.Node("ReduceMean", {"y"}, {"loss"}), "keepdims", 0);
  b.Output("loss", testing::kFloat);
  return b.Bytes();
}

TEST(TrainingSpecTest, BatchNormRunningStatisticsAreBuffersNotWeights) {
  auto spec = MakeTrainingSpec(Import(BatchNormBytes()), {}, 1);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->weights, ElementsAre("W", "bn.bias", "bn.weight"));
  EXPECT_THAT(spec->buffers,
              ElementsAre(Pair("bn.running_mean", "rm"), Pair("bn.running_var", "rv")));
  TrainingOptions freeze;
  freeze.frozen = {"bn.running_var"};
  EXPECT_THAT(MakeTrainingSpec(Import(BatchNormBytes()), freeze, 1).status().message(),
              HasSubstr("is a buffer"));
  TrainingOptions twice;
  twice.buffers = {{"bn.running_mean", "h"}};
  EXPECT_EQ(MakeTrainingSpec(Import(BatchNormBytes()), twice, 1).status().code(), kInvalid);
}

TEST(TrainingSpecTest, LossErrorsNameTheCandidates) {
  const graph::Graph g = Import(testing::MlpWithLossBytes());
  TrainingOptions unknown;
  unknown.loss = "nope";
  auto s = MakeTrainingSpec(g, unknown, 1).status();
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("--loss 'nope' is not an output of the model"),
                                 HasSubstr("scalar outputs: loss")));
  TrainingOptions not_scalar;
  not_scalar.loss = "y";
  EXPECT_THAT(MakeTrainingSpec(g, not_scalar, 1).status().message(),
              HasSubstr("--loss 'y' is not a float scalar"));
  TrainingOptions named;
  named.loss = "loss";
  EXPECT_TRUE(MakeTrainingSpec(g, named, 1).ok());
}

TEST(TrainingSpecTest, SeveralScalarOutputsNeedLoss) {
  OnnxBuilder b(14);
  b.Input("x", testing::kFloat, {2, 3});
  b.Floats("w", {3, 3}, testing::Zeros(9));
  b.Node("MatMul", {"x", "w"}, {"h"});
  OnnxBuilder::AttrInt(b.Node("ReduceMean", {"h"}, {"a"}), "keepdims", 0);
  OnnxBuilder::AttrInt(b.Node("ReduceSum", {"h"}, {"b"}), "keepdims", 0);
  b.Output("a", testing::kFloat, {}).Output("b", testing::kFloat, {});
  const graph::Graph g = Import(b.Bytes());
  auto s = MakeTrainingSpec(g, {}, 1).status();
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("several scalar outputs (a, b)"),
                                 HasSubstr("name the loss with --loss")));
  TrainingOptions b_loss;
  b_loss.loss = "b";
  auto spec = MakeTrainingSpec(g, b_loss, 1);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->loss, "b");
  // No scalar output at all.
  EXPECT_THAT(MakeTrainingSpec(Import(testing::MlpBytes()), {}, 1).status().message(),
              HasSubstr("no scalar float output to train on"));
}

TEST(TrainingSpecTest, FrozenWeightsAreLeftOut) {
  const graph::Graph g = Import(testing::MlpWithLossBytes());
  TrainingOptions frozen;
  frozen.frozen = {"fc1.w"};
  auto spec = MakeTrainingSpec(g, frozen, 1);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->weights, ElementsAre("fc2.w"));
  frozen.frozen = {"nope"};
  auto unknown = MakeTrainingSpec(g, frozen, 1).status();
  EXPECT_EQ(unknown.code(), kInvalid);
  EXPECT_THAT(unknown.message(), HasSubstr("--freeze 'nope' is not a float weight"));
  EXPECT_THAT(unknown.message(), HasSubstr("its float weights: fc1.w, fc2.w"));
  frozen.frozen = {"fc1.w", "fc2.w"};
  EXPECT_THAT(MakeTrainingSpec(g, frozen, 1).status().message(),
              HasSubstr("no float weights left to train"));
}

TEST(TrainingSpecTest, ExplicitAttributesAreVariablesFlagsConstants) {
  const graph::Graph g = Import(testing::MlpWithLossBytes());
  auto sgd = MakeTrainingSpec(g, Optimizer("sgd", {{"momentum", 0.9}, {"nesterov", 1}}), 1);
  ASSERT_TRUE(sgd.ok()) << sgd.status();
  // lr was not given but is always a variable; nesterov is a flag: constant.
  EXPECT_THAT(sgd->variables, ElementsAre(Pair("lr", 0.01), Pair("momentum", 0.9)));
  EXPECT_EQ(sgd->constants.at("nesterov"), 1.0);
  EXPECT_EQ(sgd->constants.count("momentum"), 0u);
  auto adam = MakeTrainingSpec(g, Optimizer("adam", {{"lr", 1e-4}, {"beta1", 0.8}}), 1);
  ASSERT_TRUE(adam.ok()) << adam.status();
  EXPECT_EQ(adam->optimizer, "adam");
  EXPECT_THAT(adam->variables, ElementsAre(Pair("beta1", 0.8), Pair("lr", 1e-4)));
  EXPECT_EQ(adam->constants.at("beta2"), 0.999);
  EXPECT_EQ(MakeTrainingSpec(g, Optimizer("adagrad", {}), 1).status().code(), kInvalid);
  EXPECT_EQ(MakeTrainingSpec(g, Optimizer("sgd", {{"beta1", 0.9}}), 1).status().code(), kInvalid);
  EXPECT_EQ(MakeTrainingSpec(g, Optimizer("sgd", {{"lr", -1}}), 1).status().code(), kInvalid);
}

TEST(TrainingSpecTest, ParamGroupsKeepTheirOrderSortedWeightsAndVariables) {
  const graph::Graph g = Import(testing::MlpWithLossBytes());
  TrainingOptions o = Optimizer("adamw", {{"lr", 1e-3}});
  o.param_groups = {{{"fc2.w", "fc1.w"}, {{"weight_decay", 0}, {"amsgrad", 0}}}, {{}, {}}};
  auto spec = MakeTrainingSpec(g, o, 1);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->param_groups.size(), 2u);
  EXPECT_THAT(spec->param_groups[0].weights, ElementsAre("fc1.w", "fc2.w"));
  // amsgrad, a flag equal to the optimizer's, is not a group variable.
  EXPECT_THAT(spec->param_groups[0].variables, ElementsAre(Pair("weight_decay", 0.0)));
  EXPECT_TRUE(spec->param_groups[1].weights.empty());
  EXPECT_THAT(OptimizerVariables(*spec),
              ElementsAre(Pair("group/0/weight_decay", 0.0), Pair("lr", 1e-3)));
  EXPECT_TRUE(MakeTrainingSpec(g, Optimizer("adamw", {}), 1)->param_groups.empty());
}

TEST(TrainingSpecTest, ParamGroupErrorsAreCompileErrors) {
  const graph::Graph g = Import(testing::MlpWithLossBytes());
  TrainingOptions o = Optimizer("sgd", {{"momentum", 0.9}});
  o.param_groups = {{{"fc1.w", "nope"}, {{"lr", 0.1}}}};
  auto unknown = MakeTrainingSpec(g, o, 1).status();
  EXPECT_EQ(unknown.code(), kInvalid);
  EXPECT_THAT(unknown.message(), AllOf(HasSubstr("param group 0 names 'nope'"),
                                       HasSubstr("its trainable weights: fc1.w, fc2.w")));
  o.frozen = {"fc1.w"};
  EXPECT_THAT(MakeTrainingSpec(g, o, 1).status().message(), HasSubstr("is frozen (--freeze)"));
  o.frozen.clear();
  o.param_groups = {{{"fc1.w"}, {{"lr", 0.1}}}, {{"fc1.w"}, {{"lr", 0.2}}}};
  EXPECT_THAT(MakeTrainingSpec(g, o, 1).status().message(),
              HasSubstr("in param group 0 and in param group 1"));
  o.param_groups = {{{"fc1.w"}, {{"nesterov", 1}}}};
  EXPECT_THAT(MakeTrainingSpec(g, o, 1).status().message(),
              HasSubstr("must be the same for every param group"));
}

TEST(TrainingSpecTest, OpWithoutBackwardRuleIsACompileError) {
  auto s = MakeTrainingSpec(Import(testing::MlpWithLossBytes(4, "Exp")), {}, 1).status();
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("/act/Exp"), HasSubstr("has no gradient rule")));
  // Frozen below the Exp, nothing between a weight and the loss needs its rule.
  TrainingOptions frozen;
  frozen.frozen = {"fc1.w"};
  EXPECT_TRUE(MakeTrainingSpec(Import(testing::MlpWithLossBytes(4, "Exp")), frozen, 1).ok());
}

TEST(TrainingSpecTest, OptimizerStateSlots) {
  const graph::Graph g = Import(testing::MlpWithLossBytes());
  auto slots = [&](const std::string& name, std::map<std::string, double> attrs) {
    auto spec = MakeTrainingSpec(g, Optimizer(name, std::move(attrs)), 1);
    EXPECT_TRUE(spec.ok()) << spec.status();
    return spec.ok() ? OptimizerStateSlots(*spec) : -1;
  };
  EXPECT_EQ(slots("sgd", {}), 0);
  EXPECT_EQ(slots("sgd", {{"momentum", 0.9}}), 1);
  EXPECT_EQ(slots("sgd", {{"momentum", 0}}), 1) << "a variable momentum may be set later";
  EXPECT_EQ(slots("adam", {}), 2);
  EXPECT_EQ(slots("adam", {{"amsgrad", 1}}), 3);
  EXPECT_EQ(slots("adamw", {}), 2);
  EXPECT_EQ(slots("rmsprop", {}), 1);
  EXPECT_EQ(slots("rmsprop", {{"momentum", 0.5}, {"centered", 1}}), 3);
  EXPECT_EQ(slots("lamb", {}), 2);
  TrainingOptions grouped = Optimizer("sgd", {});
  grouped.param_groups = {{{"fc1.w"}, {{"momentum", 0.5}}}};
  auto spec = MakeTrainingSpec(g, grouped, 1);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(OptimizerStateSlots(*spec), 1) << "a group's momentum keeps a buffer";
}

}  // namespace
}  // namespace ipupod::compiler
