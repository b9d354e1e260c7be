#include "device/ipu.h"

#include <gtest/gtest.h>

#include "gmock/gmock.h"

namespace ipupod::device {
namespace {

using ::testing::HasSubstr;

constexpr absl::StatusCode kPrecondition = absl::StatusCode::kFailedPrecondition;

Ipu AttachedIpu(int id = 3) {
  Ipu ipu(id);
  EXPECT_TRUE(ipu.Attach().ok());
  return ipu;
}

TEST(IpuTest, StartsIdleAndEmpty) {
  Ipu ipu(3);
  EXPECT_EQ(ipu.id(), 3);
  EXPECT_EQ(ipu.state(), IpuState::kIdle);
  EXPECT_FALSE(ipu.attached());
  EXPECT_TRUE(ipu.Allocatable());
  EXPECT_EQ(ipu.recovery_action(), RecoveryAction::kNone);
  EXPECT_EQ(ipu.memory_used_bytes(), 0u);
  EXPECT_EQ(ipu.memory_total_bytes(), kGc200.memory_bytes);
  EXPECT_TRUE(ipu.HealthStatus().ok());
}

TEST(IpuTest, StateNames) {
  EXPECT_EQ(IpuStateName(IpuState::kIdle), "idle");
  EXPECT_EQ(IpuStateName(IpuState::kAttached), "attached");
  EXPECT_EQ(IpuStateName(IpuState::kBusy), "busy");
  EXPECT_EQ(IpuStateName(IpuState::kError), "error");
  EXPECT_EQ(IpuStateName(IpuState::kResetting), "resetting");
  EXPECT_EQ(IpuStateName(IpuState::kFailed), "failed");
}

TEST(IpuTest, AttachOperateDetach) {
  Ipu ipu(0);
  ASSERT_TRUE(ipu.Attach().ok());
  EXPECT_EQ(ipu.state(), IpuState::kAttached);
  EXPECT_TRUE(ipu.attached());
  EXPECT_FALSE(ipu.Allocatable());
  ASSERT_TRUE(ipu.BeginOperation().ok());
  EXPECT_EQ(ipu.state(), IpuState::kBusy);
  ipu.EndOperation();
  EXPECT_EQ(ipu.state(), IpuState::kAttached);
  ASSERT_TRUE(ipu.Allocate(100).ok());
  ASSERT_TRUE(ipu.Detach().ok());
  EXPECT_EQ(ipu.state(), IpuState::kIdle);
  EXPECT_FALSE(ipu.attached());
  EXPECT_EQ(ipu.memory_used_bytes(), 0u);
}

TEST(IpuTest, DetachWhileBusyGoesIdle) {
  Ipu ipu = AttachedIpu();
  ASSERT_TRUE(ipu.BeginOperation().ok());
  ASSERT_TRUE(ipu.Detach().ok());
  EXPECT_EQ(ipu.state(), IpuState::kIdle);
}

TEST(IpuTest, IllegalTransitionsAreFailedPrecondition) {
  Ipu idle(1);
  EXPECT_EQ(idle.Detach().code(), kPrecondition);
  EXPECT_EQ(idle.BeginOperation().code(), kPrecondition);
  EXPECT_EQ(idle.Repair().code(), kPrecondition);
  Ipu attached = AttachedIpu();
  EXPECT_EQ(attached.Attach().code(), kPrecondition);
  ASSERT_TRUE(attached.BeginOperation().ok());
  EXPECT_EQ(attached.BeginOperation().code(), kPrecondition);  // already busy
  EXPECT_EQ(attached.Attach().code(), kPrecondition);
  Ipu faulted(2);
  faulted.Fault(RecoveryAction::kIpuReset);
  EXPECT_EQ(faulted.Attach().code(), kPrecondition);
  EXPECT_EQ(faulted.Repair().code(), kPrecondition);
  Ipu resetting(4);
  ASSERT_TRUE(resetting.BeginReset(RecoveryAction::kIpuReset).ok());
  EXPECT_EQ(resetting.Attach().code(), kPrecondition);
  EXPECT_EQ(resetting.BeginReset(RecoveryAction::kFullReset).code(), kPrecondition);
  Ipu failed(5);
  failed.Fail("burnt");
  EXPECT_EQ(failed.Attach().code(), kPrecondition);
  EXPECT_EQ(failed.BeginReset(RecoveryAction::kFullReset).code(), kPrecondition);
}

TEST(IpuTest, EndOperationIsNoOpOutsideBusy) {
  Ipu ipu = AttachedIpu();
  ASSERT_TRUE(ipu.BeginOperation().ok());
  ipu.Fault(RecoveryAction::kIpuReset);
  ipu.EndOperation();
  EXPECT_EQ(ipu.state(), IpuState::kError);
  Ipu idle(1);
  idle.EndOperation();
  EXPECT_EQ(idle.state(), IpuState::kIdle);
}

TEST(IpuTest, FaultFromEveryHealthyState) {
  Ipu idle(1);
  idle.Fault(RecoveryAction::kLinkReset);
  EXPECT_EQ(idle.state(), IpuState::kError);
  EXPECT_FALSE(idle.attached());
  EXPECT_FALSE(idle.Allocatable());
  Ipu attached = AttachedIpu();
  attached.Fault(RecoveryAction::kIpuReset);
  EXPECT_EQ(attached.state(), IpuState::kError);
  EXPECT_TRUE(attached.attached());
  Ipu busy = AttachedIpu();
  ASSERT_TRUE(busy.BeginOperation().ok());
  busy.Fault(RecoveryAction::kFullReset);
  EXPECT_EQ(busy.state(), IpuState::kError);
  EXPECT_EQ(busy.recovery_action(), RecoveryAction::kFullReset);
}

TEST(IpuTest, LargerActionWins) {
  Ipu ipu(3);
  ipu.Fault(RecoveryAction::kIpuReset);
  ipu.Fault(RecoveryAction::kPartitionReset);
  EXPECT_EQ(ipu.recovery_action(), RecoveryAction::kPartitionReset);
  ipu.Fault(RecoveryAction::kLinkReset);
  EXPECT_EQ(ipu.recovery_action(), RecoveryAction::kPartitionReset);
  ipu.Fault(RecoveryAction::kFullReset);
  EXPECT_EQ(ipu.recovery_action(), RecoveryAction::kFullReset);
}

TEST(IpuTest, FaultIgnoredWhenFailedOrResetting) {
  Ipu failed(1);
  failed.Fail("gone");
  failed.Fault(RecoveryAction::kIpuReset);
  EXPECT_EQ(failed.state(), IpuState::kFailed);
  Ipu resetting(2);
  ASSERT_TRUE(resetting.BeginReset(RecoveryAction::kIpuReset).ok());
  resetting.Fault(RecoveryAction::kIpuReset);
  EXPECT_EQ(resetting.state(), IpuState::kResetting);
}

TEST(IpuTest, ResetLevelMustCoverTheError) {
  Ipu ipu = AttachedIpu(5);
  ipu.Fault(RecoveryAction::kPartitionReset);
  absl::Status too_small = ipu.BeginReset(RecoveryAction::kIpuReset);
  EXPECT_EQ(too_small.code(), kPrecondition);
  EXPECT_THAT(too_small.message(), HasSubstr("PARTITION_RESET"));
  EXPECT_EQ(ipu.BeginReset(RecoveryAction::kLinkReset).code(), kPrecondition);
  EXPECT_EQ(ipu.state(), IpuState::kError);  // a refused reset changes nothing
  ASSERT_TRUE(ipu.BeginReset(RecoveryAction::kPartitionReset).ok());
  EXPECT_EQ(ipu.state(), IpuState::kResetting);
  EXPECT_EQ(ipu.recovery_action(), RecoveryAction::kNone);
  ipu.EndReset();
  EXPECT_EQ(ipu.state(), IpuState::kAttached);
}

TEST(IpuTest, HigherLevelResetClearsLowerErrors) {
  for (RecoveryAction level : {RecoveryAction::kIpuReset, RecoveryAction::kLinkReset,
                               RecoveryAction::kPartitionReset, RecoveryAction::kFullReset}) {
    Ipu ipu(0);
    ipu.Fault(RecoveryAction::kIpuReset);
    ASSERT_TRUE(ipu.BeginReset(level).ok());
    ipu.EndReset();
    EXPECT_EQ(ipu.state(), IpuState::kIdle);
  }
  Ipu ipu(0);
  EXPECT_EQ(ipu.BeginReset(RecoveryAction::kNone).code(), absl::StatusCode::kInvalidArgument);
}

TEST(IpuTest, ResetOfHealthyIpusClearsMemory) {
  Ipu ipu = AttachedIpu();
  ASSERT_TRUE(ipu.Allocate(1000).ok());
  ASSERT_TRUE(ipu.BeginReset(RecoveryAction::kIpuReset).ok());
  EXPECT_EQ(ipu.memory_used_bytes(), 0u);
  ipu.EndReset();
  EXPECT_EQ(ipu.state(), IpuState::kAttached);
  Ipu idle(1);
  ASSERT_TRUE(idle.BeginReset(RecoveryAction::kFullReset).ok());
  idle.EndReset();
  EXPECT_EQ(idle.state(), IpuState::kIdle);
}

TEST(IpuTest, EndResetIsNoOpOutsideResetting) {
  Ipu ipu = AttachedIpu();
  ipu.EndReset();
  EXPECT_EQ(ipu.state(), IpuState::kAttached);
}

TEST(IpuTest, DetachKeepsErrorResettingAndFailed) {
  Ipu faulted = AttachedIpu();
  faulted.Fault(RecoveryAction::kIpuReset);
  ASSERT_TRUE(faulted.Detach().ok());
  EXPECT_EQ(faulted.state(), IpuState::kError);
  EXPECT_FALSE(faulted.attached());
  ASSERT_TRUE(faulted.BeginReset(RecoveryAction::kIpuReset).ok());
  faulted.EndReset();
  EXPECT_EQ(faulted.state(), IpuState::kIdle);

  Ipu resetting = AttachedIpu();
  ASSERT_TRUE(resetting.BeginReset(RecoveryAction::kIpuReset).ok());
  ASSERT_TRUE(resetting.Detach().ok());
  EXPECT_EQ(resetting.state(), IpuState::kResetting);
  resetting.EndReset();
  EXPECT_EQ(resetting.state(), IpuState::kIdle);

  Ipu failed = AttachedIpu();
  failed.Fail("smoke");
  ASSERT_TRUE(failed.Detach().ok());
  EXPECT_EQ(failed.state(), IpuState::kFailed);
  ASSERT_TRUE(failed.Repair().ok());
  EXPECT_EQ(failed.state(), IpuState::kIdle);
}

TEST(IpuTest, FailAndRepair) {
  Ipu ipu = AttachedIpu(3);
  ASSERT_TRUE(ipu.Allocate(5).ok());
  ipu.Fault(RecoveryAction::kIpuReset);
  ipu.Fail("thermal trip");
  EXPECT_EQ(ipu.state(), IpuState::kFailed);
  EXPECT_TRUE(ipu.attached());
  EXPECT_EQ(ipu.recovery_action(), RecoveryAction::kNone);
  EXPECT_EQ(ipu.failure_reason(), "thermal trip");
  EXPECT_EQ(ipu.memory_used_bytes(), 0u);
  EXPECT_FALSE(ipu.Allocatable());
  ASSERT_TRUE(ipu.Repair().ok());
  EXPECT_EQ(ipu.state(), IpuState::kAttached);
  EXPECT_TRUE(ipu.failure_reason().empty());
  Ipu resetting(4);
  ASSERT_TRUE(resetting.BeginReset(RecoveryAction::kIpuReset).ok());
  resetting.Fail("during reset");
  EXPECT_EQ(resetting.state(), IpuState::kFailed);
}

TEST(IpuTest, HealthStatusCarriesTheDeviceError) {
  Ipu ipu = AttachedIpu(3);
  EXPECT_TRUE(ipu.HealthStatus().ok());
  ipu.Fault(RecoveryAction::kIpuReset);
  absl::Status recoverable = ipu.HealthStatus();
  EXPECT_EQ(recoverable.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(GetErrorKind(recoverable), ErrorKind::kRecoverable);
  EXPECT_EQ(GetRecoveryAction(recoverable), RecoveryAction::kIpuReset);
  EXPECT_EQ(GetErrorIpus(recoverable), std::vector<int>{3});
  EXPECT_EQ(recoverable.message(),
            "IPU 3 has a recoverable error: run IPU_RESET (ipupod ipu reset 3)");
  EXPECT_EQ(ipu.BeginOperation().code(), absl::StatusCode::kAborted);

  ASSERT_TRUE(ipu.BeginReset(RecoveryAction::kIpuReset).ok());
  absl::Status resetting = ipu.HealthStatus();
  EXPECT_EQ(resetting.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(resetting.message(), "IPU 3 is resetting; retry in a moment");

  ipu.Fail("ECC storm");
  absl::Status failed = ipu.HealthStatus();
  EXPECT_EQ(failed.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(GetErrorKind(failed), ErrorKind::kUnrecoverable);
  EXPECT_EQ(GetErrorIpus(failed), std::vector<int>{3});
  EXPECT_EQ(failed.message(),
            "IPU 3 failed: ECC storm; it is out of service until an admin runs "
            "`ipupod ipu repair 3`");
}

TEST(IpuTest, MemoryAccounting) {
  Ipu ipu = AttachedIpu();
  const uint64_t total = ipu.memory_total_bytes();
  ASSERT_TRUE(ipu.Allocate(total - 10).ok());
  EXPECT_EQ(ipu.memory_used_bytes(), total - 10);
  absl::Status full = ipu.Allocate(11);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.message(), HasSubstr("10 of 900000000 bytes free"));
  EXPECT_EQ(ipu.memory_used_bytes(), total - 10);  // a failed allocation changes nothing
  EXPECT_EQ(ipu.Allocate(UINT64_MAX).code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(ipu.Allocate(10).ok());
  EXPECT_EQ(ipu.memory_used_bytes(), total);
  ipu.Free(total - 100);
  EXPECT_EQ(ipu.memory_used_bytes(), 100u);
  ipu.Free(1000);  // over-free clamps at zero
  EXPECT_EQ(ipu.memory_used_bytes(), 0u);
}

TEST(IpuTest, CustomSpecSetsMemoryTotal) {
  IpuSpec small = kGc200;
  small.memory_bytes = 64;
  Ipu ipu(0, small);
  EXPECT_EQ(ipu.memory_total_bytes(), 64u);
  EXPECT_EQ(ipu.Allocate(65).code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace ipupod::device
