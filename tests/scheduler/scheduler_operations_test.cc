// Session operations for the ExecutionService: ownership, health and random
// faults on begin, busy IPUs, load accounting and its clearing by resets,
// faults, repairs and detach, and the session-ended callback.
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/errors.h"
#include "common/sync.h"
#include "tests/scheduler/scheduler_fixture.h"

namespace ipupod::scheduler::testing {
namespace {

using device::IpuState;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = uint64_t{1} << 20;

// Collects on_session_ended calls.
class EndedSessions {
 public:
  void Add(const std::string& id) {
    sync::MutexLock lock(&mu_);
    ids_.push_back(id);
  }
  std::vector<std::string> ids() const {
    sync::MutexLock lock(&mu_);
    return ids_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> ids_ ABSL_GUARDED_BY(mu_);
};

class OperationsTest : public SchedulerTest {
 protected:
  void SetUp() override {
    SchedulerOptions o = Options();
    o.on_session_ended = [this](const std::string& id) { ended_.Add(id); };
    Start(o);
  }
  uint64_t MemoryOf(int ipu) { return sched_->GetPod().ipus[ipu].memory_used_bytes; }
  // Begins, loads `bytes` on every IPU, ends; returns the new generation.
  uint64_t MustLoad(const std::string& session, uint64_t bytes) {
    absl::StatusOr<SessionOperation> op = sched_->BeginSessionOperation(alice_, session);
    EXPECT_TRUE(op.ok()) << op.status();
    if (!op.ok()) return 0;
    std::vector<uint64_t> charge(op->session.ipus.size(), bytes);
    absl::StatusOr<uint64_t> gen = sched_->RecordLoad(session, op->load_generation, charge);
    sched_->EndSessionOperation(session);
    EXPECT_TRUE(gen.ok()) << gen.status();
    return gen.ok() ? *gen : 0;
  }
  absl::Status ResetIpu(int ipu) {
    return WaitReset([&](ResetDone d) { sched_->ResetIpu(alice_, ipu, std::move(d)); }).status();
  }

  // sched_ (a base member) would outlive ended_: shut it down first.
  void TearDown() override {
    SchedulerTest::TearDown();
    sched_.reset();
  }
  EndedSessions ended_;
};

TEST_F(OperationsTest, BeginChecksOwnershipAndExistence) {
  Handle h = MustAttach(alice_, Req(2));
  absl::Status denied = sched_->BeginSessionOperation(bob_, h.session()).status();
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(denied.message(), HasSubstr("only alice or an admin may use it"));
  EXPECT_EQ(sched_->BeginSessionOperation(alice_, "s9-9").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(StateOf(0), IpuState::kAttached);  // failed calls change nothing
  ASSERT_TRUE(sched_->BeginSessionOperation(admin_, h.session()).ok());
  sched_->EndSessionOperation(h.session());
}

TEST_F(OperationsTest, OperationMarksIpusBusyAndASecondOneIsUnavailable) {
  Handle h = MustAttach(alice_, Req(2));
  absl::StatusOr<SessionOperation> op = sched_->BeginSessionOperation(alice_, h.session());
  ASSERT_TRUE(op.ok()) << op.status();
  EXPECT_EQ(op->session.id, h.session());
  EXPECT_THAT(op->session.ipus, ElementsAre(0, 1));
  EXPECT_EQ(StateOf(0), IpuState::kBusy);
  EXPECT_EQ(StateOf(1), IpuState::kBusy);
  absl::Status second = sched_->BeginSessionOperation(alice_, h.session()).status();
  EXPECT_EQ(second.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.message(), HasSubstr("busy with another operation"));
  sched_->EndSessionOperation(h.session());
  EXPECT_EQ(StateOf(0), IpuState::kAttached);
  sched_->EndSessionOperation("s9-9");  // unknown: ignored
}

TEST_F(OperationsTest, BeginSurfacesFaultsWithPayloads) {
  Handle h = MustAttach(alice_, Req(2));
  ASSERT_TRUE(sched_->InjectFault(admin_, 1, FaultKind::kIpuReset).ok());
  absl::Status s = sched_->BeginSessionOperation(alice_, h.session()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(GetRecoveryAction(s), RecoveryAction::kIpuReset);
  EXPECT_THAT(GetErrorIpus(s), ElementsAre(1));
  EXPECT_EQ(StateOf(0), IpuState::kAttached);  // not left busy
  ASSERT_TRUE(sched_->InjectFault(admin_, 0, FaultKind::kUnrecoverable).ok());
  s = sched_->BeginSessionOperation(alice_, h.session()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(GetErrorKind(s), ErrorKind::kUnrecoverable);
}

TEST_F(OperationsTest, BeginWhileResettingIsUnavailable) {
  SchedulerOptions o = Options();
  o.ipu_reset_time = absl::Seconds(30);
  Start(o);
  Handle h = MustAttach(alice_, Req(2));
  auto sink = ResetSink::Make();
  sched_->ResetIpu(alice_, 0, ResetSink::Callback(sink));
  EXPECT_EQ(sched_->BeginSessionOperation(alice_, h.session()).status().code(),
            absl::StatusCode::kUnavailable);
  sched_->Shutdown();
}

TEST_F(OperationsTest, BeginDrawsRandomFaults) {
  SchedulerOptions o = Options();
  o.random_faults = RandomFaults{.seed = 7, .probability_per_operation = 1.0};
  Start(o);
  Handle h = MustAttach(alice_, Req(2));
  absl::Status s = sched_->BeginSessionOperation(alice_, h.session()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(GetRecoveryAction(s), RecoveryAction::kIpuReset);
}

TEST_F(OperationsTest, RecordLoadChargesMemoryAndClearsNeedsLoad) {
  Handle h = MustAttach(alice_, Req(2));
  const uint64_t gen = MustLoad(h.session(), 100 * kMiB);
  EXPECT_EQ(gen, 1u);
  EXPECT_EQ(MemoryOf(0), 100 * kMiB);
  EXPECT_EQ(MemoryOf(1), 100 * kMiB);
  EXPECT_EQ(MemoryOf(2), 0u);
  EXPECT_EQ(MustLoad(h.session(), 10 * kMiB), 2u);  // a new load replaces the old charge
  EXPECT_EQ(MemoryOf(0), 10 * kMiB);
  absl::StatusOr<SessionOperation> op = sched_->BeginSessionOperation(alice_, h.session());
  ASSERT_TRUE(op.ok());
  EXPECT_EQ(op->load_generation, 2u);
  EXPECT_FALSE(op->session.needs_load);
  sched_->EndSessionOperation(h.session());
}

TEST_F(OperationsTest, RecordLoadErrorsChangeNothing) {
  Handle h = MustAttach(alice_, Req(2));
  MustLoad(h.session(), 5 * kMiB);
  absl::StatusOr<SessionOperation> op = sched_->BeginSessionOperation(alice_, h.session());
  ASSERT_TRUE(op.ok());
  const uint64_t total = sched_->GetPod().ipus[1].memory_total_bytes;
  absl::Status s = sched_->RecordLoad(h.session(), op->load_generation, {kMiB, total + 1}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("IPU 1 of session"));
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat(total + 1, " bytes")));
  EXPECT_EQ(sched_->RecordLoad(h.session(), op->load_generation, {kMiB}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sched_->RecordLoad(h.session(), op->load_generation + 5, {kMiB, kMiB}).status().code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(sched_->RecordLoad("s9-9", 0, {kMiB}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(MemoryOf(0), 5 * kMiB);
  EXPECT_EQ(MemoryOf(1), 5 * kMiB);
  sched_->EndSessionOperation(h.session());
}

TEST_F(OperationsTest, AResetDuringALoadAbortsIt) {
  Handle h = MustAttach(alice_, Req(2));
  absl::StatusOr<SessionOperation> op = sched_->BeginSessionOperation(alice_, h.session());
  ASSERT_TRUE(op.ok());
  ASSERT_TRUE(ResetIpu(1).ok());
  absl::Status s = sched_->RecordLoad(h.session(), op->load_generation, {kMiB, kMiB}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(s.message(), HasSubstr("reset while loading; load again"));
  sched_->EndSessionOperation(h.session());
}

TEST_F(OperationsTest, AnyResetFreesTheWholeSessionAndNeedsALoad) {
  Handle h = MustAttach(alice_, Req(2));
  const uint64_t gen = MustLoad(h.session(), 7 * kMiB);
  ASSERT_TRUE(ResetIpu(1).ok());
  EXPECT_EQ(MemoryOf(0), 0u);  // the program spans both IPUs
  EXPECT_EQ(MemoryOf(1), 0u);
  absl::StatusOr<SessionOperation> op = sched_->BeginSessionOperation(alice_, h.session());
  ASSERT_TRUE(op.ok());
  EXPECT_TRUE(op->session.needs_load);
  EXPECT_NE(op->load_generation, gen);
  sched_->EndSessionOperation(h.session());
  EXPECT_GT(MustLoad(h.session(), kMiB), gen);
  EXPECT_EQ(MemoryOf(1), kMiB);
}

TEST_F(OperationsTest, UnrecoverableFaultAndRepairClearTheLoad) {
  Handle h = MustAttach(alice_, Req(2));
  const uint64_t gen = MustLoad(h.session(), 3 * kMiB);
  ASSERT_TRUE(sched_->InjectFault(admin_, 1, FaultKind::kUnrecoverable).ok());
  EXPECT_EQ(MemoryOf(0), 0u);
  ASSERT_TRUE(sched_->RepairIpu(admin_, 1).ok());
  absl::StatusOr<SessionOperation> op = sched_->BeginSessionOperation(alice_, h.session());
  ASSERT_TRUE(op.ok()) << op.status();
  EXPECT_TRUE(op->session.needs_load);
  EXPECT_GE(op->load_generation, gen + 2);
  sched_->EndSessionOperation(h.session());
}

TEST_F(OperationsTest, DetachFreesMemoryAndReportsTheEnd) {
  Handle h = MustAttach(alice_, Req(2));
  MustLoad(h.session(), 9 * kMiB);
  ASSERT_TRUE(sched_->Detach(alice_, h.session()).ok());
  EXPECT_EQ(MemoryOf(0), 0u);
  EXPECT_THAT(ended_.ids(), ElementsAre(h.session()));
}

TEST_F(OperationsTest, EveryWayASessionEndsIsReported) {
  Handle released = MustAttach(alice_, Req(1));
  MustPartition(bob_, "p1", 4);
  Handle in_partition = MustAttach(bob_, Req(2, false, "p1"));
  Handle at_shutdown = MustAttach(alice_, Req(1));
  sched_->Release(released.ticket);
  ASSERT_TRUE(sched_->RemovePartition(bob_, "p1", /*force=*/true).ok());
  sched_->Shutdown();
  EXPECT_THAT(ended_.ids(),
              ElementsAre(released.session(), in_partition.session(), at_shutdown.session()));
}

TEST_F(OperationsTest, EndedCallbackRunsWithoutTheSchedulerLock) {
  SchedulerOptions o = Options();
  int pod_sessions = -1;
  o.on_session_ended = [&](const std::string&) {
    pod_sessions = static_cast<int>(sched_->GetPod().sessions.size());  // would deadlock
  };
  Start(o);
  Handle h = MustAttach(alice_, Req(1));
  ASSERT_TRUE(sched_->Detach(alice_, h.session()).ok());
  EXPECT_EQ(pod_sessions, 0);
}

}  // namespace
}  // namespace ipupod::scheduler::testing
