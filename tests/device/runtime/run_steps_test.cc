// Unit tests of the input checks of `ipupod run` and batch jobs (device/runtime/run_steps.h; the
// steps themselves: tests/common/driver/steps_test.cc). The tensor wire helpers are tested in
// tests/common/wire/.
#include "device/runtime/run_steps.h"

#include <gtest/gtest.h>

#include "tests/support/tensors.h"

namespace ipupod::runtime {
namespace {

using test_support::Iota;

// micro-batch 2, 2 device iterations, 2 replicas: 8 samples per step.
compiler::Executable TwoInputs() {
  compiler::Executable e;
  e.micro_batch_size = 2;
  e.device_iterations = 2;
  e.replication_factor = 2;
  e.batch_size_factor = 4;
  e.inputs = {{"a", tensor::DType::kFloat32, {2, 3}}, {"b", tensor::DType::kFloat32, {2}}};
  return e;
}

TEST(PlanStepsTest, SplitsWholeStepsInExecutableOrder) {
  auto plan = PlanSteps(TwoInputs(), {{"b", Iota({16})}, {"a", Iota({16, 3})}}, "in.npz");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->steps, 2);
  EXPECT_EQ(plan->samples_per_step, 8);
  EXPECT_EQ(plan->inputs[0].first, "a");
  auto step = StepInputs(*plan, 1);
  ASSERT_TRUE(step.ok());
  EXPECT_EQ((*step)[0].second.shape(), (tensor::Shape{8, 3}));
  EXPECT_EQ((*step)[0].second.values<float>()[0], 24.0f);  // row 8 of a
  EXPECT_EQ((*step)[1].second.values<float>()[7], 15.0f);
}

TEST(PlanStepsTest, ErrorsNameTheInputAndTheStepSize) {
  auto partial = PlanSteps(TwoInputs(), {{"a", Iota({12, 3})}, {"b", Iota({12})}}, "in.npz");
  EXPECT_EQ(partial.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(partial.status().message().find(
                "12 samples (dim 0), not a positive multiple of the 8 samples of one step "
                "(micro-batch 2 x device_iterations 2 x replication 2)"),
            std::string::npos)
      << partial.status();
  auto missing = PlanSteps(TwoInputs(), {{"a", Iota({8, 3})}}, "in.npz");
  EXPECT_NE(missing.status().message().find("input 'b' is missing from in.npz"), std::string::npos)
      << missing.status();
  auto extra =
      PlanSteps(TwoInputs(), {{"a", Iota({8, 3})}, {"b", Iota({8})}, {"c", Iota({8})}}, "in.npz");
  EXPECT_NE(extra.status().message().find("'c', which is not an input"), std::string::npos);
  auto shape = PlanSteps(TwoInputs(), {{"a", Iota({8, 4})}, {"b", Iota({8})}}, "in.npz");
  EXPECT_NE(shape.status().message().find("float32[N, 3]"), std::string::npos) << shape.status();
  auto disagree = PlanSteps(TwoInputs(), {{"a", Iota({8, 3})}, {"b", Iota({16})}}, "in.npz");
  EXPECT_NE(disagree.status().message().find("disagree"), std::string::npos);
  auto empty = PlanSteps(TwoInputs(), {{"a", Iota({0, 3})}, {"b", Iota({0})}}, "in.npz");
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
}

// A [2, 3] batch beside a [1, 3] mask: each input gives a step its own
// micro-batch's rows (PopTorch's inputs whose dim 0 differ).
TEST(PlanStepsTest, InputsWhoseDimZeroDiffersEachGiveAStepTheirOwnRows) {
  compiler::Executable e = TwoInputs();
  e.inputs[1] = {"mask", tensor::DType::kFloat32, {1, 3}};
  auto plan = PlanSteps(e, {{"a", Iota({16, 3})}, {"mask", Iota({8, 3})}}, "in.npz");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->steps, 2);
  EXPECT_EQ(plan->samples, 16);
  auto step = StepInputs(*plan, 1);
  ASSERT_TRUE(step.ok());
  EXPECT_EQ((*step)[0].second.shape(), (tensor::Shape{8, 3}));
  EXPECT_EQ((*step)[1].second.shape(), (tensor::Shape{4, 3}));
  EXPECT_EQ((*step)[1].second.values<float>()[0], 12.0f);  // row 4 of mask
  auto rows = PlanSteps(e, {{"a", Iota({16, 3})}, {"mask", Iota({6, 3})}}, "in.npz");
  EXPECT_NE(rows.status().message().find(
                "input 'mask' in in.npz has 6 rows (dim 0), not a positive multiple of the 4 rows "
                "one step takes of it (micro-batch 1 x device_iterations 2 x replication 2)"),
            std::string::npos)
      << rows.status();
  auto steps = PlanSteps(e, {{"a", Iota({16, 3})}, {"mask", Iota({12, 3})}}, "in.npz");
  EXPECT_NE(steps.status().message().find("disagree on the number of steps: 'a' has 16 rows "
                                          "(dim 0), 8 per step, 'mask' has 12, 4 per step"),
            std::string::npos)
      << steps.status();
}

TEST(PlanStepsTest, AModelWithoutInputsIsRefusedSayingWhy) {
  compiler::Executable counter = TwoInputs();
  counter.inputs.clear();
  auto plan = PlanSteps(counter, {}, "in.npz");
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("the model takes no inputs"), std::string::npos)
      << plan.status();
  EXPECT_NE(plan.status().message().find("CounterModel"), std::string::npos);
}

}  // namespace
}  // namespace ipupod::runtime
