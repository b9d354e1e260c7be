// Optimizer param groups: every weight takes its group's attributes over
// the optimizer-wide ones. Checked bit for bit against one optimizer per
// group (the single-group path) and against steps computed by hand; group
// variables ("group/<i>/<attr>") change one group; the error paths.
#include <cstring>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device/training/optimizer.h"

namespace ipupod::training {
namespace {

using tensor::Tensor;
using ::testing::HasSubstr;

Tensor F(std::vector<float> v) {
  return *Tensor::FromValues<float>({static_cast<int64_t>(v.size())}, v);
}

std::unique_ptr<Optimizer> Make(OptimizerKind kind, std::map<std::string, double> attrs,
                                std::vector<ParamGroupOptions> groups = {}) {
  auto spec = OptimizerSpec::Create(kind, attrs, groups);
  EXPECT_TRUE(spec.ok()) << spec.status();
  auto opt = Optimizer::Create(*spec);
  EXPECT_TRUE(opt.ok()) << opt.status();
  return *std::move(opt);
}

// Weights "a" and "b" (and "c" when given) after `steps` updates with fixed
// gradients that change sign, so momentum and moments see a varied history.
TensorMap Train(Optimizer& opt, int steps, bool with_c = false) {
  TensorMap w;
  w.emplace("a", F({0.5f, -1.25f, 2.0f}));
  w.emplace("b", F({0.125f, 3.0f}));
  if (with_c) w.emplace("c", F({-0.75f}));
  for (int s = 0; s < steps; ++s) {
    const float sign = s % 3 == 2 ? -1.0f : 1.0f;
    TensorMap g;
    g.emplace("a", F({0.25f * sign, -0.5f, 0.125f * sign}));
    g.emplace("b", F({-1.5f * sign, 0.0625f}));
    if (with_c) g.emplace("c", F({0.375f * sign}));
    EXPECT_TRUE(opt.Step(w, g).ok());
  }
  return w;
}

// Bit-for-bit equality of one tensor of two maps.
void ExpectSameBits(const TensorMap& got, const TensorMap& want, const std::string& name) {
  const Tensor& g = got.at(name);
  const Tensor& w = want.at(name);
  ASSERT_EQ(g.num_elements(), w.num_elements()) << name;
  EXPECT_EQ(std::memcmp(g.data<float>(), w.data<float>(), sizeof(float) * g.num_elements()), 0)
      << name << ": " << g.data<float>()[0] << " vs " << w.data<float>()[0];
}

struct KindCase {
  OptimizerKind kind;
  std::map<std::string, double> wide;   // optimizer-wide attributes
  std::map<std::string, double> group;  // group 0's (weight "b"), differing
};

class GroupsMatchOneOptimizerPerGroup : public ::testing::TestWithParam<KindCase> {};

// Weight "b" in a group trains exactly as an optimizer of the group's values
// alone; "a" (in no group) as one of the optimizer-wide values.
TEST_P(GroupsMatchOneOptimizerPerGroup, BitForBit) {
  const KindCase& c = GetParam();
  auto grouped = Make(c.kind, c.wide, {{{"b"}, c.group}});
  std::map<std::string, double> b_alone = c.wide;
  for (const auto& [k, v] : c.group) b_alone[k] = v;
  auto wide = Make(c.kind, c.wide);
  auto only_b = Make(c.kind, b_alone);
  const TensorMap got = Train(*grouped, 7);
  ExpectSameBits(got, Train(*wide, 7), "a");
  ExpectSameBits(got, Train(*only_b, 7), "b");
  const TensorMap state = grouped->ExportState();
  const TensorMap b_state = only_b->ExportState();
  for (const auto& [name, t] : b_state) {
    if (name.rfind("b/", 0) == 0) ExpectSameBits(state, b_state, name);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, GroupsMatchOneOptimizerPerGroup,
    ::testing::Values(
        KindCase{OptimizerKind::kSgd,
                 {{"lr", 0.1}, {"momentum", 0.9}, {"weight_decay", 0.01}},
                 {{"lr", 0.5}, {"momentum", 0.5}, {"dampening", 0.25}, {"weight_decay", 0}}},
        KindCase{OptimizerKind::kSgd,
                 {{"lr", 0.1}, {"momentum", 0.9}, {"velocity_scaling", 4}},
                 {{"velocity_scaling", 0.5}}},
        KindCase{OptimizerKind::kAdam,
                 {{"lr", 0.01}, {"weight_decay", 0.1}},
                 {{"beta1", 0.8}, {"beta2", 0.99}, {"eps", 1e-4}, {"weight_decay", 0}}},
        KindCase{OptimizerKind::kAdamW, {{"lr", 0.01}}, {{"weight_decay", 0}, {"lr", 0.03}}},
        KindCase{OptimizerKind::kRmsprop,
                 {{"lr", 0.01}, {"momentum", 0.5}},
                 {{"alpha", 0.9}, {"momentum", 0}, {"eps", 1e-3}}},
        KindCase{OptimizerKind::kLamb,
                 {{"lr", 0.01}, {"max_weight_norm", 10}},
                 {{"weight_decay", 0}, {"max_weight_norm", 0.5}}}));

TEST(OptimizerGroupsTest, GroupsRepeatingTheOptimizerValuesChangeNothing) {
  const std::map<std::string, double> attrs = {{"lr", 0.01}, {"weight_decay", 0.05}};
  auto plain = Make(OptimizerKind::kAdamW, attrs);
  auto grouped = Make(OptimizerKind::kAdamW, attrs, {{{"a"}, attrs}, {{"b", "c"}, attrs}});
  const TensorMap want = Train(*plain, 5, true);
  const TensorMap got = Train(*grouped, 5, true);
  for (const char* name : {"a", "b", "c"}) ExpectSameBits(got, want, name);
}

TEST(OptimizerGroupsTest, SgdTwoLearningRatesByHand) {
  auto opt = Make(OptimizerKind::kSgd, {{"lr", 0.1}}, {{{"b"}, {{"lr", 0.5}}}});
  TensorMap w;
  w.emplace("a", F({1.0f}));
  w.emplace("b", F({1.0f}));
  TensorMap g;
  g.emplace("a", F({0.5f}));
  g.emplace("b", F({0.5f}));
  ASSERT_TRUE(opt->Step(w, g).ok());
  EXPECT_FLOAT_EQ(w.at("a").data<float>()[0], 0.95f);     // 1 - 0.1 * 0.5
  EXPECT_FLOAT_EQ(w.at("b").data<float>()[0], 0.75f);     // 1 - 0.5 * 0.5
  EXPECT_FALSE(opt->PlainSgdLearningRate().has_value());  // one lr cannot serve both
}

TEST(OptimizerGroupsTest, AdamWWithoutDecayOnOneGroupByHand) {
  // Step 1 of Adam(W) moves every element by lr (m^ / sqrt(v^) = sign(g));
  // AdamW first multiplies by 1 - lr * wd, which the group without decay skips.
  auto opt = Make(OptimizerKind::kAdamW, {{"lr", 0.1}, {"weight_decay", 0.5}},
                  {{{"b"}, {{"weight_decay", 0}}}});
  TensorMap w;
  w.emplace("a", F({2.0f}));
  w.emplace("b", F({2.0f}));
  TensorMap g;
  g.emplace("a", F({0.5f}));
  g.emplace("b", F({0.5f}));
  ASSERT_TRUE(opt->Step(w, g).ok());
  EXPECT_NEAR(w.at("a").data<float>()[0], 2.0 * (1 - 0.1 * 0.5) - 0.1, 1e-6);
  EXPECT_NEAR(w.at("b").data<float>()[0], 2.0 - 0.1, 1e-6);
}

TEST(OptimizerGroupsTest, GroupVariablesChangeTheirGroupOnly) {
  auto opt = Make(OptimizerKind::kSgd, {{"lr", 0.1}},
                  {{{"a"}, {{"lr", 0.2}}}, {{"b"}, {{"weight_decay", 0}}}});
  const auto attrs = opt->spec().QualifiedAttributes();
  EXPECT_TRUE(attrs.at("group/0/lr").is_variable);
  EXPECT_TRUE(attrs.at("group/1/weight_decay").is_variable);
  EXPECT_FALSE(attrs.contains("group/1/lr"));  // group 1 follows the optimizer's lr
  ASSERT_TRUE(opt->SetVariable("group/0/lr", 0.4).ok());
  ASSERT_TRUE(opt->SetVariable("lr", 0.3).ok());
  EXPECT_DOUBLE_EQ(opt->spec().GroupSpec(0).value("lr"), 0.4);
  EXPECT_DOUBLE_EQ(opt->spec().GroupSpec(1).value("lr"), 0.3);
  TensorMap w;
  w.emplace("a", F({1.0f}));
  w.emplace("b", F({1.0f}));
  w.emplace("c", F({1.0f}));
  TensorMap g;
  for (const char* name : {"a", "b", "c"}) g.emplace(name, F({1.0f}));
  ASSERT_TRUE(opt->Step(w, g).ok());
  EXPECT_FLOAT_EQ(w.at("a").data<float>()[0], 0.6f);  // group 0: its own lr
  EXPECT_FLOAT_EQ(w.at("b").data<float>()[0], 0.7f);  // group 1: the optimizer's lr
  EXPECT_FLOAT_EQ(w.at("c").data<float>()[0], 0.7f);  // no group
}

TEST(OptimizerGroupsTest, EqualGroupsKeepTheFusedSgdPath) {
  auto opt = Make(OptimizerKind::kSgd, {{"lr", 0.1}}, {{{"a"}, {{"lr", 0.1}}}, {{"b"}, {}}});
  ASSERT_TRUE(opt->PlainSgdLearningRate().has_value());
  EXPECT_DOUBLE_EQ(*opt->PlainSgdLearningRate(), 0.1);
  ASSERT_TRUE(opt->SetVariable("group/0/weight_decay", 0.1).code() ==
              absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(opt->SetVariable("group/0/lr", 0.2).ok());
  EXPECT_FALSE(opt->PlainSgdLearningRate().has_value());
}

TEST(OptimizerGroupsTest, FlagsAndLossScalingMustBeEqualAcrossGroups) {
  auto nesterov =
      OptimizerSpec::Create(OptimizerKind::kSgd, {{"momentum", 0.9}}, {{{"a"}, {{"nesterov", 1}}}});
  EXPECT_EQ(nesterov.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(nesterov.status().message(), HasSubstr("same for every param group"));
  auto amsgrad = OptimizerSpec::Create(OptimizerKind::kAdam, {}, {{{"a"}, {{"amsgrad", 1}}}});
  EXPECT_EQ(amsgrad.status().code(), absl::StatusCode::kInvalidArgument);
  auto scaling = OptimizerSpec::Create(OptimizerKind::kAdam, {{"loss_scaling", 2}},
                                       {{{"a"}, {{"loss_scaling", 4}}}});
  EXPECT_EQ(scaling.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(scaling.status().message(), HasSubstr("loss_scaling"));
  auto accum = OptimizerSpec::Create(OptimizerKind::kLamb, {},
                                     {{{"a"}, {{"first_order_momentum_accum_type", 16}}}});
  EXPECT_EQ(accum.status().code(), absl::StatusCode::kInvalidArgument);
  // The optimizer's own value repeated is accepted (and not a group variable).
  auto same = OptimizerSpec::Create(OptimizerKind::kAdam, {{"amsgrad", 1}, {"loss_scaling", 2}},
                                    {{{"a"}, {{"amsgrad", 1}, {"loss_scaling", 2}}}});
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_TRUE(same->groups()[0].attributes.empty());
}

TEST(OptimizerGroupsTest, MalformedGroupsAreInvalidArguments) {
  const auto code = [](OptimizerKind kind, std::vector<ParamGroupOptions> groups) {
    return OptimizerSpec::Create(kind, {}, groups).status();
  };
  absl::Status twice = code(OptimizerKind::kSgd, {{{"a"}, {}}, {{"b", "a"}, {}}});
  EXPECT_EQ(twice.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(twice.message(), HasSubstr("'a' is in param group 0 and in param group 1"));
  EXPECT_EQ(code(OptimizerKind::kSgd, {{{"a", "a"}, {}}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(OptimizerKind::kSgd, {{{""}, {}}}).code(), absl::StatusCode::kInvalidArgument);
  absl::Status unknown = code(OptimizerKind::kSgd, {{{"a"}, {{"beta1", 0.5}}}});
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.message(), HasSubstr("sgd has no attribute 'beta1'"));
  absl::Status range = code(OptimizerKind::kAdam, {{}, {{"a"}, {{"beta2", 1.5}}}});
  EXPECT_EQ(range.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(range.message(), HasSubstr("param group 1: adam attribute 'beta2' is 1.5"));
  EXPECT_EQ(code(OptimizerKind::kSgd, {{{"a"}, {{"group/0/lr", 0.5}}}}).code(),
            absl::StatusCode::kInvalidArgument);
  // A group of its own nesterov-incompatible values fails as the optimizer would.
  auto nesterov = OptimizerSpec::Create(OptimizerKind::kSgd, {{"momentum", 0.9}, {"nesterov", 1}},
                                        {{{"a"}, {{"momentum", 0}}}});
  EXPECT_EQ(nesterov.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(nesterov.status().message(), HasSubstr("param group 0: nesterov"));
}

TEST(OptimizerGroupsTest, SetVariableErrorsChangeNothing) {
  auto opt = Make(OptimizerKind::kAdam, {{"lr", 0.1}}, {{{"a"}, {{"lr", 0.2}}}});
  EXPECT_EQ(opt->SetVariable("group/1/lr", 0.5).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(opt->SetVariable("group/x/lr", 0.5).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(opt->SetVariable("group/0", 0.5).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(opt->SetVariable("group/0/momentum", 0.5).code(), absl::StatusCode::kInvalidArgument);
  absl::Status not_set = opt->SetVariable("group/0/eps", 0.5);
  EXPECT_EQ(not_set.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(not_set.message(), HasSubstr("param group 0 does not set 'eps'"));
  EXPECT_EQ(opt->SetVariable("group/0/lr", -1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_DOUBLE_EQ(opt->spec().GroupSpec(0).value("lr"), 0.2);
}

TEST(OptimizerGroupsTest, MarkingGroupAttributes) {
  auto spec = OptimizerSpec::Create(OptimizerKind::kSgd, {},
                                    {{{"a"}, {{"lr", 0.2}, {"weight_decay", 0.1}}}});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->MarkAsConstant("group/0/lr").code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(spec->MarkAsConstant("group/0/weight_decay").ok());
  auto opt = Optimizer::Create(*spec);
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ((*opt)->SetVariable("group/0/weight_decay", 0).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE((*opt)->spec().QualifiedAttributes().at("group/0/weight_decay").is_variable);
}

TEST(OptimizerGroupsTest, EmptyGroupsKeepTheirIndex) {
  auto opt = Make(OptimizerKind::kSgd, {{"lr", 0.1}}, {{{}, {{"lr", 9}}}, {{"b"}, {{"lr", 0.5}}}});
  EXPECT_EQ(opt->spec().GroupOf("b"), 1);
  EXPECT_EQ(opt->spec().GroupOf("a"), -1);
  const TensorMap w = Train(*opt, 1);
  EXPECT_FLOAT_EQ(w.at("b").data<float>()[0], 0.125f - 0.5f * -1.5f);
}

}  // namespace
}  // namespace ipupod::training
