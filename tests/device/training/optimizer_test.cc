// Optimizer update rules against steps computed by hand from torch 1.13's
// formulas, variable/constant attributes, and state export/import.
#include "device/training/optimizer.h"

#include <cmath>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ipupod::training {
namespace {

using tensor::Tensor;
using ::testing::HasSubstr;

Tensor F(std::vector<float> v) {
  return *Tensor::FromValues<float>({static_cast<int64_t>(v.size())}, v);
}

std::unique_ptr<Optimizer> Make(OptimizerKind kind, std::map<std::string, double> attrs) {
  auto spec = OptimizerSpec::Create(kind, attrs);
  EXPECT_TRUE(spec.ok()) << spec.status();
  auto opt = Optimizer::Create(*spec);
  EXPECT_TRUE(opt.ok()) << opt.status();
  return *std::move(opt);
}

// Runs steps with the given gradients on weight "w"; returns w.
std::vector<float> Steps(Optimizer& opt, std::vector<float> w, std::vector<std::vector<float>> gs) {
  TensorMap weights;
  weights.emplace("w", F(w));
  for (auto& g : gs) {
    TensorMap grads;
    grads.emplace("w", F(g));
    EXPECT_TRUE(opt.Step(weights, grads).ok());
  }
  auto v = weights.at("w").values<float>();
  return {v.begin(), v.end()};
}

TEST(OptimizerTest, SgdPlain) {
  auto opt = Make(OptimizerKind::kSgd, {{"lr", 0.1}});
  auto w = Steps(*opt, {1, 2}, {{0.5f, -1}});
  EXPECT_FLOAT_EQ(w[0], 0.95f);
  EXPECT_FLOAT_EQ(w[1], 2.1f);
  EXPECT_EQ(opt->step(), 1);
  EXPECT_EQ(opt->ExportState().size(), 1u);  // just "step": no momentum buffer
}

TEST(OptimizerTest, SgdMomentumDampeningWeightDecay) {
  auto opt = Make(OptimizerKind::kSgd,
                  {{"lr", 0.1}, {"momentum", 0.9}, {"dampening", 0.1}, {"weight_decay", 0.01}});
  // d1 = 0.51, buf = 0.51, w = 0.949; d2 = 0.50949, buf = 0.9*0.51 + 0.9*d2, w -= 0.1 buf.
  auto w = Steps(*opt, {1}, {{0.5f}, {0.5f}});
  EXPECT_NEAR(w[0], 0.8572459, 1e-6);
  EXPECT_NEAR(opt->ExportState().at("w/momentum_buffer").data<float>()[0], 0.917541, 1e-6);
}

TEST(OptimizerTest, SgdNesterov) {
  auto opt = Make(OptimizerKind::kSgd, {{"lr", 0.1}, {"momentum", 0.9}, {"nesterov", 1}});
  EXPECT_NEAR(Steps(*opt, {1}, {{0.5f}})[0], 0.905, 1e-6);  // d = 0.5 + 0.9 * 0.5
}

TEST(OptimizerTest, AdamMovesLrPerStepOnAConstantGradient) {
  auto opt = Make(OptimizerKind::kAdam, {{"lr", 0.1}});
  auto w = Steps(*opt, {1}, {{0.5f}, {0.5f}});
  EXPECT_NEAR(w[0], 0.8, 1e-6);
  const TensorMap state = opt->ExportState();
  EXPECT_NEAR(state.at("w/exp_avg").data<float>()[0], 0.095, 1e-7);
  EXPECT_NEAR(state.at("w/exp_avg_sq").data<float>()[0], 0.00049975, 1e-9);
  EXPECT_EQ(state.at("w/step").data<float>()[0], 2.0f);
  EXPECT_FALSE(state.contains("w/max_exp_avg_sq"));
}

TEST(OptimizerTest, AdamWeightDecayIsL2AndAdamWIsDecoupled) {
  // Adam: g' = 0.5 + 0.1 * 1 = 0.6, first step still moves by lr.
  EXPECT_NEAR(
      Steps(*Make(OptimizerKind::kAdam, {{"lr", 0.1}, {"weight_decay", 0.1}}), {1}, {{0.5f}})[0],
      0.9, 1e-6);
  // AdamW: w = 1 * (1 - 0.1 * 0.1) - 0.1.
  EXPECT_NEAR(
      Steps(*Make(OptimizerKind::kAdamW, {{"lr", 0.1}, {"weight_decay", 0.1}}), {1}, {{0.5f}})[0],
      0.89, 1e-6);
  EXPECT_DOUBLE_EQ(Make(OptimizerKind::kAdamW, {})->spec().value("weight_decay"), 1e-2);
}

TEST(OptimizerTest, AdamAmsgradKeepsTheMaximum) {
  auto opt = Make(OptimizerKind::kAdam, {{"lr", 0.1}, {"amsgrad", 1}});
  Steps(*opt, {1}, {{1.0f}, {0.0f}});
  const TensorMap state = opt->ExportState();
  EXPECT_NEAR(state.at("w/max_exp_avg_sq").data<float>()[0], 0.001, 1e-9);
  EXPECT_NEAR(state.at("w/exp_avg_sq").data<float>()[0], 0.000999, 1e-9);
}

TEST(OptimizerTest, Rmsprop) {
  EXPECT_NEAR(Steps(*Make(OptimizerKind::kRmsprop, {}), {1}, {{0.5f}})[0], 0.9, 1e-6);
  EXPECT_NEAR(Steps(*Make(OptimizerKind::kRmsprop, {{"centered", 1}}), {1}, {{0.5f}})[0],
              1 - 0.005 / std::sqrt(0.002475), 1e-6);
  auto opt = Make(OptimizerKind::kRmsprop, {{"momentum", 0.9}});
  // buf1 = 10, w = 0.9; sq2 = 0.004975, buf2 = 9 + 0.5 / sqrt(sq2).
  EXPECT_NEAR(Steps(*opt, {1}, {{0.5f}, {0.5f}})[0], 0.9 - 0.01 * (9 + 0.5 / std::sqrt(0.004975)),
              1e-5);
}

TEST(OptimizerTest, LambTrustRatio) {
  // m^ = g, v^ = g^2 after bias correction: u = [1, 1], ||w|| = 5, ||u|| = sqrt(2).
  auto w = Steps(*Make(OptimizerKind::kLamb, {{"lr", 0.1}, {"weight_decay", 0}}), {3, 4}, {{1, 1}});
  EXPECT_NEAR(w[0], 3 - 0.1 * 5 / std::sqrt(2.0), 1e-5);
  EXPECT_NEAR(w[1], 4 - 0.1 * 5 / std::sqrt(2.0), 1e-5);
  // max_weight_norm clips ||w|| to 1.
  w = Steps(*Make(OptimizerKind::kLamb, {{"lr", 0.1}, {"weight_decay", 0}, {"max_weight_norm", 1}}),
            {3, 4}, {{1, 1}});
  EXPECT_NEAR(w[0], 3 - 0.1 / std::sqrt(2.0), 1e-5);
  // A zero weight norm gives ratio 1.
  w = Steps(*Make(OptimizerKind::kLamb, {{"lr", 0.1}, {"weight_decay", 0}}), {0, 0}, {{1, 1}});
  EXPECT_NEAR(w[0], -0.1, 1e-6);
  // Weight decay enters the update before the norms: u = 1 + 0.1 * w.
  w = Steps(*Make(OptimizerKind::kLamb, {{"lr", 0.1}, {"weight_decay", 0.1}}), {3, 4}, {{1, 1}});
  const double u0 = 1.3, u1 = 1.4, ratio = 5 / std::sqrt(u0 * u0 + u1 * u1);
  EXPECT_NEAR(w[0], 3 - 0.1 * ratio * u0, 1e-5);
}

TEST(OptimizerTest, WeightsWithoutGradientAreLeftAlone) {
  auto opt = Make(OptimizerKind::kSgd, {{"lr", 0.1}, {"weight_decay", 0.5}});
  TensorMap weights;
  weights.emplace("w", F({1}));
  weights.emplace("frozen", F({7}));
  TensorMap grads;
  grads.emplace("w", F({0}));
  ASSERT_TRUE(opt->Step(weights, grads).ok());
  EXPECT_FLOAT_EQ(weights.at("frozen").data<float>()[0], 7);
  EXPECT_FLOAT_EQ(weights.at("w").data<float>()[0], 0.95f);
}

TEST(OptimizerTest, StepRejectsMismatchesAndChangesNothing) {
  auto opt = Make(OptimizerKind::kAdam, {});
  TensorMap weights;
  weights.emplace("w", F({1, 2}));
  TensorMap bad_shape;
  bad_shape.emplace("w", F({1}));
  EXPECT_EQ(opt->Step(weights, bad_shape).code(), absl::StatusCode::kInvalidArgument);
  TensorMap unknown;
  unknown.emplace("v", F({1, 2}));
  EXPECT_EQ(opt->Step(weights, unknown).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(opt->step(), 0);
  EXPECT_FLOAT_EQ(weights.at("w").data<float>()[0], 1);
}

TEST(OptimizerTest, ExplicitAttributesAreVariablesOthersConstants) {
  auto opt = Make(OptimizerKind::kSgd, {{"momentum", 0.5}});
  const auto& attrs = opt->spec().attributes();
  EXPECT_TRUE(attrs.at("lr").is_variable);  // always
  EXPECT_TRUE(attrs.at("momentum").is_variable);
  EXPECT_FALSE(attrs.at("dampening").is_variable);
  EXPECT_TRUE(opt->SetVariable("lr", 0.5).ok());
  EXPECT_TRUE(opt->SetVariable("momentum", 0.8).ok());
  EXPECT_DOUBLE_EQ(opt->spec().value("lr"), 0.5);

  const absl::Status constant = opt->SetVariable("dampening", 0.1);
  EXPECT_EQ(constant.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(constant.message(), HasSubstr("'dampening' is a constant"));
  EXPECT_EQ(opt->SetVariable("beta1", 0.1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(opt->SetVariable("lr", -1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_DOUBLE_EQ(opt->spec().value("lr"), 0.5);  // a failed call changes nothing
}

TEST(OptimizerTest, MarkAsConstantAndVariable) {
  auto spec = OptimizerSpec::Create(OptimizerKind::kAdam, {{"beta1", 0.8}});
  ASSERT_TRUE(spec.ok());
  ASSERT_TRUE(spec->MarkAsConstant("beta1").ok());
  ASSERT_TRUE(spec->MarkAsVariable("eps").ok());
  EXPECT_EQ(spec->MarkAsConstant("lr").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(spec->MarkAsVariable("amsgrad").code(), absl::StatusCode::kInvalidArgument);
  auto opt = Optimizer::Create(*spec);
  ASSERT_TRUE(opt.ok());
  EXPECT_EQ((*opt)->SetVariable("beta1", 0.9).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE((*opt)->SetVariable("eps", 1e-6).ok());
  // Flags stay constants even when passed explicitly.
  auto flagged = OptimizerSpec::Create(OptimizerKind::kAdam, {{"amsgrad", 1}});
  ASSERT_TRUE(flagged.ok());
  EXPECT_FALSE(flagged->attributes().at("amsgrad").is_variable);
}

TEST(OptimizerTest, CreateRejectsBadAttributes) {
  EXPECT_EQ(ParseOptimizerKind("adagrad").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseOptimizerKind("lamb"), OptimizerKind::kLamb);
  const std::vector<std::pair<OptimizerKind, std::map<std::string, double>>> bad = {
      {OptimizerKind::kSgd, {{"beta1", 0.9}}},
      {OptimizerKind::kSgd, {{"nesterov", 1}}},  // needs momentum
      {OptimizerKind::kAdam, {{"beta2", 1.0}}},
      {OptimizerKind::kRmsprop, {{"lr", -0.1}}},
  };
  for (const auto& [kind, attrs] : bad) {
    auto spec = OptimizerSpec::Create(kind, attrs);
    ASSERT_FALSE(spec.ok());
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << spec.status();
  }
}

TEST(OptimizerTest, StateRoundTripResumesExactly) {
  auto a = Make(OptimizerKind::kAdam, {{"lr", 0.05}, {"amsgrad", 1}});
  TensorMap wa;
  wa.emplace("w", F({1, -2, 3}));
  TensorMap g;
  g.emplace("w", F({0.3f, -0.1f, 0.7f}));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(a->Step(wa, g).ok());
  auto b = Make(OptimizerKind::kAdam, {{"lr", 0.05}, {"amsgrad", 1}});
  ASSERT_TRUE(b->ImportState(a->ExportState()).ok());
  EXPECT_EQ(b->step(), 3);
  TensorMap wb = wa;
  ASSERT_TRUE(a->Step(wa, g).ok());
  ASSERT_TRUE(b->Step(wb, g).ok());
  EXPECT_EQ(wa.at("w"), wb.at("w"));
}

TEST(OptimizerTest, ImportStateRejectsBadTensors) {
  auto opt = Make(OptimizerKind::kSgd, {{"momentum", 0.9}});
  TensorMap no_step;
  EXPECT_EQ(opt->ImportState(no_step).code(), absl::StatusCode::kInvalidArgument);
  TensorMap unknown;
  unknown.emplace("step", Tensor::Scalar(int64_t{1}));
  unknown.emplace("w/exp_avg", F({1}));
  EXPECT_THAT(opt->ImportState(unknown).message(), HasSubstr("no state 'exp_avg'"));
  TensorMap wrong_type;
  wrong_type.emplace("step", Tensor::Scalar(1.0f));
  EXPECT_EQ(opt->ImportState(wrong_type).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ipupod::training

namespace ipupod::training {
namespace {

TEST(OptimizerTest, LossScalingDividesTheGradientsOut) {
  auto opt = Make(OptimizerKind::kSgd, {{"lr", 0.1}, {"loss_scaling", 512}});
  EXPECT_FALSE(opt->PlainSgdLearningRate().has_value());  // the fused step would not unscale
  EXPECT_EQ(opt->loss_scale(), 512);
  EXPECT_EQ(Steps(*opt, {1.0f}, {{512 * 0.5f}}), std::vector<float>{1.0f - 0.1f * 0.5f});
  for (double bad : {0.0, -1.0, 70000.0}) {
    auto spec = OptimizerSpec::Create(OptimizerKind::kAdam, {{"loss_scaling", bad}});
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(spec.status().message(), HasSubstr("loss_scaling")) << bad;
  }
}

TEST(OptimizerTest, Float16WeightsUpdateInFloat32AndRoundBack) {
  auto opt = Make(OptimizerKind::kSgd, {{"lr", 0.001}, {"momentum", 0.9}});
  TensorMap weights;
  weights.emplace("w", *Tensor::FromValues<tensor::Float16>({1}, {tensor::ToFloat16(1.0f)}));
  TensorMap grads;
  grads.emplace("w", F({0.5f}));
  ASSERT_TRUE(opt->Step(weights, grads).ok());
  ASSERT_EQ(weights.at("w").dtype(), tensor::DType::kFloat16);
  // 1 - 0.0005 lies between float16's 1 - 2^-11 and 1: nearer the former.
  EXPECT_EQ(tensor::ToFloat32(weights.at("w").values<tensor::Float16>()[0]), 1.0f - 0x1p-11f);
  EXPECT_EQ(opt->ExportState().at("w/momentum_buffer").dtype(), tensor::DType::kFloat32);
}

TEST(OptimizerTest, AutomaticLossScalingSkipsOverflowAndMovesByTwo) {
  auto opt = Make(OptimizerKind::kSgd, {{"lr", 1.0}, {"loss_scaling", 128}});
  opt->EnableAutomaticLossScaling();
  TensorMap weights;
  weights.emplace("w", F({1.0f, 1.0f}));
  auto step = [&](std::vector<float> g) {
    TensorMap grads;
    grads.emplace("w", F(std::move(g)));
    EXPECT_TRUE(opt->Step(weights, grads).ok());
    return std::vector<float>(weights.at("w").values<float>().begin(),
                              weights.at("w").values<float>().end());
  };
  // Small gradients: the update (g / 128) is applied and the scale doubles.
  EXPECT_EQ(step({128.0f, 64.0f}), (std::vector<float>{0.0f, 0.5f}));
  EXPECT_FALSE(opt->last_step_skipped());
  EXPECT_EQ(opt->loss_scale(), 256);
  // An overflow: nothing changes but the scale, which halves.
  EXPECT_EQ(step({INFINITY, 1.0f}), (std::vector<float>{0.0f, 0.5f}));
  EXPECT_TRUE(opt->last_step_skipped());
  EXPECT_EQ(opt->loss_scale(), 128);
  EXPECT_EQ(opt->step(), 2);
  // Near overflow (|g| >= 65504 / 8): applied, and the scale halves.
  EXPECT_EQ(step({8192.0f, 0.0f}), (std::vector<float>{-64.0f, 0.5f}));
  EXPECT_EQ(opt->loss_scale(), 64);
  // The scale is state: a restored optimizer goes on from it.
  const TensorMap state = opt->ExportState();
  ASSERT_TRUE(state.contains("loss_scaling"));
  auto restored = Make(OptimizerKind::kSgd, {{"lr", 1.0}, {"loss_scaling", 128}});
  restored->EnableAutomaticLossScaling();
  ASSERT_TRUE(restored->ImportState(state).ok());
  EXPECT_EQ(restored->loss_scale(), 64);
}

}  // namespace
}  // namespace ipupod::training

namespace ipupod::training {
namespace {

TEST(OptimizerTest, Float16StateTypesRoundTheirSlots) {
  auto opt = Make(OptimizerKind::kAdam, {{"first_order_momentum_accum_type", 16}});
  EXPECT_FALSE(opt->spec().attributes().at("first_order_momentum_accum_type").is_variable);
  Steps(*opt, {1.0f}, {{0.1234567f}});
  const TensorMap state = opt->ExportState();
  const float m = state.at("w/exp_avg").values<float>()[0];
  const float v = state.at("w/exp_avg_sq").values<float>()[0];
  EXPECT_EQ(m, tensor::ToFloat32(tensor::ToFloat16(0.1f * 0.1234567f)));  // float16
  EXPECT_FLOAT_EQ(v, 0.001f * 0.1234567f * 0.1234567f);                   // float32
  EXPECT_NE(m, 0.1f * 0.1234567f);
  auto bad = OptimizerSpec::Create(OptimizerKind::kLamb, {{"accum_type", 8}});
  EXPECT_THAT(bad.status().message(), HasSubstr("32 (float32) or 16 (float16)"));
}

TEST(OptimizerTest, SgdVelocityScalingOnlyMovesWhereTheVelocityRounds) {
  // float32 and a power of two: the same steps exactly.
  auto plain = Make(OptimizerKind::kSgd, {{"lr", 0.1}, {"momentum", 0.9}});
  auto scaled =
      Make(OptimizerKind::kSgd, {{"lr", 0.1}, {"momentum", 0.9}, {"velocity_scaling", 8}});
  const std::vector<std::vector<float>> gs = {{0.5f}, {0.25f}, {-0.125f}};
  EXPECT_EQ(Steps(*plain, {1.0f}, gs), Steps(*scaled, {1.0f}, gs));
  EXPECT_EQ(scaled->ExportState().at("w/momentum_buffer").values<float>()[0],
            8 * plain->ExportState().at("w/momentum_buffer").values<float>()[0]);
  // A float16 weight's velocity is float16: a tiny velocity underflows unless scaled.
  for (double vs : {1.0, 1024.0}) {
    auto opt =
        Make(OptimizerKind::kSgd, {{"lr", 1.0}, {"momentum", 0.9}, {"velocity_scaling", vs}});
    TensorMap weights;
    weights.emplace("w", *Tensor::FromValues<tensor::Float16>({1}, {tensor::ToFloat16(0.0f)}));
    TensorMap grads;
    grads.emplace("w", F({1e-8f}));
    ASSERT_TRUE(opt->Step(weights, grads).ok());
    const float kept = opt->ExportState().at("w/momentum_buffer").values<float>()[0];
    EXPECT_EQ(kept == 0.0f, vs == 1.0) << vs;  // 1e-8 is under float16's smallest subnormal
  }
}

}  // namespace
}  // namespace ipupod::training
