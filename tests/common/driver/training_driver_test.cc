// Unit tests of common/driver/training_driver.h against FakeExecutable: the run
// and data order, the host-copy (checkpoint) cadence, progress, and the
// recovery policy - which faults are recovered, that the runs since the
// last host copy are repeated from it, and the limits.
#include "common/driver/training_driver.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "tests/common/driver/fake_executable.h"

namespace ipupod::driver {
namespace {

using testing::Data;
using testing::FakeExecutable;
using testing::Fault;

// What a fault-free run of the same job leaves in `w`.
float CleanWeight(const StepPlan& data, const TrainingJob& job) {
  FakeExecutable clean;
  TrainingDriver driver(clean, data, job, {});
  EXPECT_TRUE(driver.Run().ok());
  return clean.w();
}

TEST(TrainingDriverTest, RunsWrapAroundTheDataAndReportProgress) {
  FakeExecutable fake;
  const StepPlan data = Data(3);
  std::vector<int64_t> runs;
  std::vector<float> losses;
  TrainingDriver driver(fake, data, {.runs = 5, .first_data_step = 1, .keep_outputs = true},
                        {.on_run = [&](const RunProgress& p) {
                          EXPECT_EQ(p.runs, 5);
                          runs.push_back(p.run);
                          losses.push_back(p.stats->losses.at(0));
                        }});
  ASSERT_TRUE(driver.Run().ok());
  EXPECT_EQ(fake.data_seen(), (std::vector<float>{1, 2, 0, 1, 2}));
  EXPECT_EQ(runs, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(losses.back(), fake.w());
  ASSERT_EQ(driver.outputs().size(), 5u);
  EXPECT_EQ(driver.outputs()[2].at(0).second.data<float>()[0], 0.0f);
  EXPECT_FALSE(driver.last_copy()) << "no host copies were asked for";
}

TEST(TrainingDriverTest, HostCopiesAtStartEveryKRunsAndAtTheEnd) {
  FakeExecutable fake;
  const StepPlan data = Data(4);
  std::vector<int64_t> copies;
  TrainingDriver driver(
      fake, data, {.runs = 5, .host_copy_every = 2}, {.on_host_copy = [&](const HostCopy& copy) {
        copies.push_back(copy.runs_done);
        EXPECT_EQ(copy.checkpoint.at(1).second.data<int64_t>()[0], copy.runs_done);
        return absl::OkStatus();
      }});
  ASSERT_TRUE(driver.Run().ok());
  EXPECT_EQ(copies, (std::vector<int64_t>{0, 2, 4, 5}));
  ASSERT_TRUE(driver.last_copy());
  EXPECT_EQ(driver.last_copy()->runs_done, 5);
}

TEST(TrainingDriverTest, AHostCopyErrorEndsTraining) {
  FakeExecutable fake;
  const StepPlan data = Data(4);
  TrainingDriver driver(
      fake, data, {.runs = 4, .host_copy_every = 2}, {.on_host_copy = [](const HostCopy& copy) {
        return copy.runs_done == 2 ? absl::InternalError("disk full") : absl::OkStatus();
      }});
  absl::Status status = driver.Run();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(status.message(), "run 2 of 4: disk full");
  EXPECT_EQ(fake.data_seen().size(), 2u);
}

TEST(TrainingDriverTest, RecoveryRepeatsTheRunsSinceTheHostCopy) {
  for (RecoveryAction action : {RecoveryAction::kIpuReset, RecoveryAction::kLinkReset,
                                RecoveryAction::kPartitionReset, RecoveryAction::kFullReset}) {
    SCOPED_TRACE(RecoveryActionName(action));
    FakeExecutable fake;
    fake.run_faults[4] = Fault(action);  // the 4th run call: run index 3
    const StepPlan data = Data(4);
    const TrainingJob job{.runs = 4, .host_copy_every = 2, .recover = true, .keep_outputs = true};
    std::vector<Recovery> recoveries;
    TrainingDriver driver(fake, data, job,
                          {.on_recovery = [&](const Recovery& r) { recoveries.push_back(r); }});
    ASSERT_TRUE(driver.Run().ok());
    ASSERT_EQ(recoveries.size(), 1u);
    EXPECT_EQ(recoveries[0].run, 3);
    EXPECT_EQ(recoveries[0].resume_after_run, 2);
    EXPECT_EQ(recoveries[0].action, action);
    ASSERT_EQ(fake.resets().size(), 1u);
    EXPECT_EQ(GetRecoveryAction(fake.resets()[0]), action);
    EXPECT_EQ(fake.loads(), 1);
    EXPECT_EQ(driver.recoveries(), 1);
    // Runs 2 (done, then lost with the device) and 3 again, from the copy.
    EXPECT_EQ(fake.data_seen(), (std::vector<float>{0, 1, 2, 2, 3}));
    EXPECT_EQ(fake.w(), CleanWeight(data, job));
    EXPECT_EQ(fake.step(), 4);
    ASSERT_EQ(driver.outputs().size(), 4u);
    EXPECT_EQ(driver.outputs()[3].at(0).second.data<float>()[0], 3.0f);
  }
}

TEST(TrainingDriverTest, AFaultWhileTakingAHostCopyRepeatsTheRunJustMade) {
  FakeExecutable fake;
  fake.checkpoint_faults[3] = Fault(RecoveryAction::kIpuReset);  // after run 2 (copies 0, 1, 2)
  const StepPlan data = Data(3);
  const TrainingJob job{.runs = 3, .host_copy_every = 1, .recover = true};
  std::vector<Recovery> recoveries;
  TrainingDriver driver(fake, data, job,
                        {.on_recovery = [&](const Recovery& r) { recoveries.push_back(r); }});
  ASSERT_TRUE(driver.Run().ok());
  ASSERT_EQ(recoveries.size(), 1u);
  EXPECT_EQ(recoveries[0].run, 1);
  EXPECT_EQ(recoveries[0].resume_after_run, 1);
  EXPECT_EQ(fake.data_seen(), (std::vector<float>{0, 1, 1, 2}));
  EXPECT_EQ(fake.w(), CleanWeight(data, job));
}

TEST(TrainingDriverTest, AFaultWhileRecoveringCountsAsAnotherRecovery) {
  FakeExecutable fake;
  fake.run_faults[2] = Fault(RecoveryAction::kLinkReset);
  fake.load_faults[1] = Fault(RecoveryAction::kIpuReset);  // the first reload
  const StepPlan data = Data(3);
  const TrainingJob job{.runs = 3, .host_copy_every = 1, .recover = true};
  TrainingDriver driver(fake, data, job, {});
  ASSERT_TRUE(driver.Run().ok());
  EXPECT_EQ(driver.recoveries(), 2);
  ASSERT_EQ(fake.resets().size(), 2u);
  EXPECT_EQ(GetRecoveryAction(fake.resets()[1]), RecoveryAction::kIpuReset);
  EXPECT_EQ(fake.data_seen(), (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(fake.w(), CleanWeight(data, job));
}

TEST(TrainingDriverTest, FaultsAreReturnedWithoutRecoverOrHostCopy) {
  const StepPlan data = Data(4);
  for (const TrainingJob& job :
       {TrainingJob{.runs = 4, .host_copy_every = 1}, TrainingJob{.runs = 4, .recover = true}}) {
    FakeExecutable fake;
    fake.run_faults[2] = Fault(RecoveryAction::kPartitionReset);
    TrainingDriver driver(fake, data, job, {});
    absl::Status status = driver.Run();
    EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
    EXPECT_TRUE(absl::StartsWith(status.message(), "run 2 of 4: IPU 0")) << status;
    EXPECT_EQ(GetRecoveryAction(status), RecoveryAction::kPartitionReset) << "payload kept";
    EXPECT_TRUE(fake.resets().empty());
  }
}

TEST(TrainingDriverTest, UnrecoverableFaultsAreReturned) {
  FakeExecutable fake;
  fake.run_faults[2] = UnrecoverableError({0}, "IPU 0 failed");
  const StepPlan data = Data(4);
  TrainingDriver driver(fake, data, {.runs = 4, .host_copy_every = 1, .recover = true}, {});
  absl::Status status = driver.Run();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(GetErrorKind(status), ErrorKind::kUnrecoverable);
  EXPECT_TRUE(fake.resets().empty());
  EXPECT_EQ(driver.recoveries(), 0);
}

TEST(TrainingDriverTest, AtMostMaxRecoveries) {
  FakeExecutable fake;
  for (int call = 2; call < 20; ++call) fake.run_faults[call] = Fault(RecoveryAction::kIpuReset);
  const StepPlan data = Data(4);
  TrainingDriver driver(
      fake, data, {.runs = 4, .host_copy_every = 1, .recover = true, .max_recoveries = 2}, {});
  absl::Status status = driver.Run();
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(driver.recoveries(), 2);
  EXPECT_EQ(fake.resets().size(), 2u);
  EXPECT_EQ(GetRecoveryAction(status), RecoveryAction::kIpuReset);
}

TEST(TrainingDriverTest, StopRequestedEndsCancelled) {
  FakeExecutable fake;
  const StepPlan data = Data(4);
  int runs = 0;
  TrainingDriver driver(
      fake, data, {.runs = 4},
      {.on_run = [&](const RunProgress&) { ++runs; }, .stop_requested = [&] { return runs == 2; }});
  absl::Status status = driver.Run();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(fake.data_seen().size(), 2u);
}

TEST(TrainingDriverTest, ResumedDataStepFollowsTheCheckpointsStep) {
  tensor::NamedTensors checkpoint = {
      {"w", *tensor::Tensor::FromValues<float>({1}, {1.0f})},
      {"optimizer/step", *tensor::Tensor::FromValues<int64_t>({1}, {int64_t{10}})}};
  EXPECT_EQ(ResumedDataStep(checkpoint, 2, 3), 2);  // run 5 of a 3-step data set
  EXPECT_EQ(ResumedDataStep(checkpoint, 1, 4), 2);
  EXPECT_EQ(ResumedDataStep({checkpoint[0]}, 2, 3), 0);
}

}  // namespace
}  // namespace ipupod::driver
