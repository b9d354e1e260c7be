// Unit tests of common/driver/inference_driver.h against FakeExecutable: steps in
// order, outputs concatenated, errors with the step, stopping.
#include "common/driver/inference_driver.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "common/errors.h"
#include "tests/common/driver/fake_executable.h"

namespace ipupod::driver {
namespace {

using testing::Data;
using testing::FakeExecutable;
using testing::Fault;

TEST(InferenceDriverTest, RunsEveryStepAndConcatenates) {
  FakeExecutable fake;
  const StepPlan data = Data(3);
  std::vector<int64_t> steps;
  auto outputs = RunInference(fake, data, {.on_step = [&](const RunProgress& p) {
                                EXPECT_EQ(p.runs, 3);
                                steps.push_back(p.run);
                              }});
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_EQ(steps, (std::vector<int64_t>{0, 1, 2}));
  ASSERT_EQ(outputs->size(), 1u);
  EXPECT_EQ((*outputs)[0].second.shape(), (tensor::Shape{3}));
  EXPECT_EQ((*outputs)[0].second.data<float>()[2], 2.0f);
}

TEST(InferenceDriverTest, AStepErrorNamesTheStepAndKeepsThePayload) {
  FakeExecutable fake;
  fake.run_faults[2] = Fault(RecoveryAction::kLinkReset);
  const StepPlan data = Data(3);
  auto outputs = RunInference(fake, data, {});
  EXPECT_EQ(outputs.status().code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(absl::StartsWith(outputs.status().message(), "step 2 of 3: ")) << outputs.status();
  EXPECT_EQ(GetRecoveryAction(outputs.status()), RecoveryAction::kLinkReset);
}

TEST(InferenceDriverTest, StopRequestedEndsCancelled) {
  FakeExecutable fake;
  const StepPlan data = Data(3);
  auto outputs =
      RunInference(fake, data, {.stop_requested = [&] { return fake.data_seen().size() == 1; }});
  EXPECT_EQ(outputs.status().code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace ipupod::driver
