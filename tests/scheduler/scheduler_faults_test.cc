// Faults, resets, repairs, random faults, restart and shutdown.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/errors.h"
#include "tests/scheduler/scheduler_fixture.h"

namespace ipupod::scheduler::testing {
namespace {

using device::IpuState;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr auto kPrecondition = absl::StatusCode::kFailedPrecondition;
constexpr auto kDenied = absl::StatusCode::kPermissionDenied;

class FaultsTest : public SchedulerTest {
 protected:
  FaultResult MustFault(int ipu, FaultKind kind) {
    absl::StatusOr<FaultResult> r = sched_->InjectFault(admin_, ipu, kind);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : FaultResult{};
  }
  absl::StatusOr<ResetResult> ResetIpu(const Caller& c, int ipu) {
    return WaitReset([&](ResetDone d) { sched_->ResetIpu(c, ipu, std::move(d)); });
  }
  absl::StatusOr<ResetResult> ResetPartition(const Caller& c, const std::string& name) {
    return WaitReset([&](ResetDone d) { sched_->ResetPartition(c, name, std::move(d)); });
  }
  absl::StatusOr<ResetResult> ResetSession(const Caller& c, const std::string& id) {
    return WaitReset([&](ResetDone d) { sched_->ResetSession(c, id, std::move(d)); });
  }
  absl::StatusOr<ResetResult> ResetPod(const Caller& c) {
    return WaitReset([&](ResetDone d) { sched_->ResetPod(c, std::move(d)); });
  }
  bool PollState(int ipu, IpuState state) {
    return PollUntil([&] { return StateOf(ipu) == state; });
  }
};

// ---------------------------------------------------------------- faults

TEST_F(FaultsTest, InjectFaultIsForAdminsAndRealIpus) {
  EXPECT_EQ(sched_->InjectFault(bob_, 0, FaultKind::kIpuReset).status().code(), kDenied);
  absl::Status s = sched_->InjectFault(admin_, 16, FaultKind::kIpuReset).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "IPU 16 does not exist; POD16 has IPUs 0 to 15");
  EXPECT_EQ(sched_->InjectFault(admin_, -1, FaultKind::kIpuReset).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(sched_->InjectFault(admin_, 0, static_cast<FaultKind>(99)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StateOf(0), IpuState::kIdle);
}

TEST_F(FaultsTest, IpuResetFaultSurfacesOnGetSessionAndResetIpuClearsIt) {
  Handle h = MustAttach(alice_, Req(4));
  FaultResult f = MustFault(1, FaultKind::kIpuReset);
  EXPECT_THAT(f.affected_ipus, ElementsAre(1));
  EXPECT_THAT(f.affected_sessions, ElementsAre("s1-1"));
  EXPECT_EQ(StateOf(1), IpuState::kError);
  EXPECT_FALSE(h.observer->ended().has_value());  // faults do not end sessions

  absl::Status s = sched_->GetSession(alice_, "s1-1").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(GetErrorKind(s), ErrorKind::kRecoverable);
  EXPECT_EQ(GetRecoveryAction(s), RecoveryAction::kIpuReset);
  EXPECT_THAT(GetErrorIpus(s), ElementsAre(1));
  EXPECT_THAT(s.message(), HasSubstr("IPU 1 has a recoverable error: run IPU_RESET"));
  EXPECT_THAT(s.message(), HasSubstr("`ipupod ipu reset 1`"));

  absl::StatusOr<ResetResult> r = ResetIpu(alice_, 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->reset_ipus, ElementsAre(1));
  EXPECT_THAT(r->affected_sessions, ElementsAre("s1-1"));
  EXPECT_DOUBLE_EQ(r->simulated_seconds, 0.005);
  EXPECT_EQ(StateOf(1), IpuState::kAttached);
  absl::StatusOr<SessionView> v = sched_->GetSession(alice_, "s1-1");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->needs_load);
}

TEST_F(FaultsTest, ResettingIpusAreUnavailable) {
  SchedulerOptions o = Options();
  o.ipu_reset_time = absl::Seconds(30);  // stays resetting for the whole test
  Start(o);
  Handle h = MustAttach(alice_, Req(2));
  auto sink = ResetSink::Make();
  sched_->ResetIpu(alice_, 0, ResetSink::Callback(sink));
  EXPECT_FALSE(sink->HasCompleted());
  EXPECT_EQ(StateOf(0), IpuState::kResetting);
  absl::Status s = sched_->GetSession(alice_, h.session()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "IPU 0 is resetting; retry in a moment");
  absl::Status again = ResetIpu(alice_, 0).status();
  EXPECT_EQ(again.code(), kPrecondition);  // a reset while resetting
  EXPECT_THAT(again.message(), HasSubstr("already resetting"));
  sched_->Shutdown();  // the pending reset ends with UNAVAILABLE, exactly once
  EXPECT_EQ(sink->Wait().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(sink->calls(), 1);
}

TEST_F(FaultsTest, LinkResetCoversTheSession) {
  MustAttach(alice_, Req(4));  // 0-3
  FaultResult f = MustFault(2, FaultKind::kLinkReset);
  EXPECT_THAT(f.affected_ipus, ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(f.affected_sessions, ElementsAre("s1-1"));
  f = MustFault(8, FaultKind::kLinkReset);  // unattached: itself only
  EXPECT_THAT(f.affected_ipus, ElementsAre(8));
  EXPECT_TRUE(f.affected_sessions.empty());
  EXPECT_EQ(sched_->GetPod().ipus[0].recovery_action, RecoveryAction::kLinkReset);
}

TEST_F(FaultsTest, PartitionResetCoversThePartitionOrTheSession) {
  MustPartition(alice_, "p1", 4);  // 0-3
  MustAttach(bob_, Req(2));        // 4-5
  EXPECT_THAT(MustFault(1, FaultKind::kPartitionReset).affected_ipus, ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(MustFault(5, FaultKind::kPartitionReset).affected_ipus, ElementsAre(4, 5));
  EXPECT_THAT(MustFault(12, FaultKind::kPartitionReset).affected_ipus, ElementsAre(12));
}

TEST_F(FaultsTest, LargerActionWins) {
  MustAttach(alice_, Req(2));
  MustFault(0, FaultKind::kPartitionReset);
  MustFault(0, FaultKind::kIpuReset);
  EXPECT_EQ(sched_->GetPod().ipus[0].recovery_action, RecoveryAction::kPartitionReset);
  EXPECT_EQ(GetRecoveryAction(sched_->GetSession(alice_, "s1-1").status()),
            RecoveryAction::kPartitionReset);
}

TEST_F(FaultsTest, FullResetFaultNeedsAPodReset) {
  MustFault(3, FaultKind::kUnrecoverable);
  Handle h = MustAttach(alice_, Req(2));
  FaultResult f = MustFault(0, FaultKind::kFullReset);
  EXPECT_EQ(f.affected_ipus.size(), 15u);  // all but the failed IPU
  EXPECT_THAT(f.affected_sessions, ElementsAre("s1-1"));
  absl::Status s = sched_->GetSession(alice_, "s1-1").status();
  EXPECT_EQ(GetRecoveryAction(s), RecoveryAction::kFullReset);
  EXPECT_THAT(s.message(), HasSubstr("an admin must run `ipupod pod reset`"));
  EXPECT_EQ(ResetSession(alice_, "s1-1").status().code(), kPrecondition);
  sched_->Release(h.ticket);  // FULL_RESET errors are not auto-reset
  EXPECT_EQ(StateOf(0), IpuState::kError);
  EXPECT_EQ(ResetPod(bob_).status().code(), kDenied);
  absl::StatusOr<ResetResult> r = ResetPod(admin_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->reset_ipus.size(), 15u);
  EXPECT_DOUBLE_EQ(r->simulated_seconds, 0.015);
  PodView pod = sched_->GetPod();
  EXPECT_EQ(pod.free_ipus, 15);
  EXPECT_EQ(pod.ipus[3].state, IpuState::kFailed);
}

TEST_F(FaultsTest, UnrecoverableFaultPersistsAndNeedsRepair) {
  Start(Options(4));
  Handle h = MustAttach(alice_, Req(1));  // IPU 0
  FaultResult f = MustFault(0, FaultKind::kUnrecoverable);
  EXPECT_THAT(f.affected_ipus, ElementsAre(0));
  ASSERT_EQ(store_.failures.count(0), 1u);
  EXPECT_THAT(store_.failures[0].reason, HasSubstr("root"));
  absl::Status s = sched_->GetSession(alice_, h.session()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(GetErrorKind(s), ErrorKind::kUnrecoverable);
  EXPECT_THAT(GetErrorIpus(s), ElementsAre(0));
  EXPECT_THAT(s.message(), HasSubstr("`ipupod ipu repair 0`"));

  sched_->Release(h.ticket);
  EXPECT_EQ(StateOf(0), IpuState::kFailed);  // never back by itself
  Handle w = MustAttach(bob_, Req(4, true));
  EXPECT_FALSE(w.observer->granted().has_value());
  EXPECT_EQ(ResetIpu(admin_, 0).status().code(), kPrecondition);
  EXPECT_EQ(sched_->RepairIpu(bob_, 0).status().code(), kDenied);
  EXPECT_EQ(sched_->RepairIpu(admin_, 1).status().code(), kPrecondition);
  EXPECT_EQ(sched_->RepairIpu(admin_, 9).status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<IpuView> repaired = sched_->RepairIpu(admin_, 0);
  ASSERT_TRUE(repaired.ok()) << repaired.status();
  EXPECT_EQ(store_.failures.count(0), 0u);
  ASSERT_TRUE(w.observer->granted().has_value());  // the repair let the waiter through
  EXPECT_EQ(repaired->state, IpuState::kAttached);
  EXPECT_EQ(repaired->session, w.session());
}

TEST_F(FaultsTest, FailureStoreErrorsChangeNothing) {
  store_.fail_writes = true;
  EXPECT_EQ(sched_->InjectFault(admin_, 0, FaultKind::kUnrecoverable).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(StateOf(0), IpuState::kIdle);
  store_.fail_writes = false;
  MustFault(0, FaultKind::kUnrecoverable);
  store_.fail_writes = true;
  EXPECT_EQ(sched_->RepairIpu(admin_, 0).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(StateOf(0), IpuState::kFailed);
}

TEST_F(FaultsTest, RepairOfAnAttachedIpuNeedsALoad) {
  Handle h = MustAttach(alice_, Req(2));
  MustFault(1, FaultKind::kUnrecoverable);
  ASSERT_TRUE(sched_->RepairIpu(admin_, 1).ok());
  EXPECT_EQ(StateOf(1), IpuState::kAttached);
  absl::StatusOr<SessionView> v = sched_->GetSession(alice_, h.session());
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->needs_load);
}

// An IPU that fails mid-reset leaves that reset (scheduler/reset_book.h):
// repaired and reset again, it stays resetting until the new reset ends, not
// the old one; the old one still reports it.
TEST_F(FaultsTest, AnIpuFailedMidResetIsEndedOnlyByItsNextReset) {
  SchedulerOptions o = Options();
  o.ipu_reset_time = absl::Seconds(1);
  Start(o);
  auto first = ResetSink::Make();
  sched_->ResetIpu(admin_, 0, ResetSink::Callback(first));
  EXPECT_EQ(StateOf(0), IpuState::kResetting);
  MustFault(0, FaultKind::kUnrecoverable);
  EXPECT_EQ(StateOf(0), IpuState::kFailed);
  ASSERT_TRUE(sched_->RepairIpu(admin_, 0).ok());
  EXPECT_EQ(StateOf(0), IpuState::kIdle);
  absl::SleepFor(absl::Milliseconds(500));  // the second ends well after the first
  auto second = ResetSink::Make();
  sched_->ResetIpu(admin_, 0, ResetSink::Callback(second));
  absl::StatusOr<ResetResult> r = first->Wait();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->reset_ipus, ElementsAre(0));
  EXPECT_FALSE(second->HasCompleted());
  EXPECT_EQ(StateOf(0), IpuState::kResetting);
  EXPECT_TRUE(second->Wait().ok());
  EXPECT_EQ(StateOf(0), IpuState::kIdle);
}

TEST_F(FaultsTest, GetSessionReportsTheMostSevereFault) {
  Handle h = MustAttach(alice_, Req(4));
  MustFault(0, FaultKind::kIpuReset);
  MustFault(2, FaultKind::kIpuReset);
  absl::Status s = sched_->GetSession(alice_, h.session()).status();
  EXPECT_THAT(GetErrorIpus(s), ElementsAre(0, 2));
  EXPECT_THAT(s.message(), HasSubstr("`ipupod session reset s1-1`"));
  MustFault(3, FaultKind::kUnrecoverable);
  s = sched_->GetSession(alice_, h.session()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(GetErrorIpus(s), ElementsAre(3));
}

// ---------------------------------------------------------------- resets

TEST_F(FaultsTest, ResetIpuNamesTheCommandThatClearsALargerError) {
  MustPartition(alice_, "p1", 4);       // 0-3
  Handle b = MustAttach(bob_, Req(2));  // 4-5
  MustFault(1, FaultKind::kPartitionReset);
  absl::Status s = ResetIpu(alice_, 1).status();
  EXPECT_EQ(s.code(), kPrecondition);
  EXPECT_EQ(s.message(), "IPU 1 needs PARTITION_RESET: run `ipupod partition reset p1`");
  MustFault(5, FaultKind::kLinkReset);
  s = ResetIpu(bob_, 5).status();
  EXPECT_EQ(s.message(), "IPU 5 needs LINK_RESET: run `ipupod session reset s1-1`");
  MustFault(12, FaultKind::kLinkReset);
  s = ResetIpu(bob_, 12).status();
  EXPECT_THAT(s.message(), HasSubstr("an admin must run `ipupod pod reset`"));
  EXPECT_EQ(StateOf(12), IpuState::kError);
  EXPECT_EQ(ResetIpu(bob_, 99).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(FaultsTest, ResetIpuPermissions) {
  Handle a = MustAttach(alice_, Req(2));  // 0-1
  EXPECT_EQ(ResetIpu(bob_, 0).status().code(), kDenied);
  EXPECT_TRUE(ResetIpu(alice_, 0).ok());
  EXPECT_TRUE(ResetIpu(admin_, 1).ok());
  EXPECT_TRUE(ResetIpu(bob_, 8).ok());  // unowned: anyone
  const PartitionView p = MustPartition(alice_, "p1", 4);
  const int in_p1 = p.block.start;
  EXPECT_EQ(ResetIpu(bob_, in_p1).status().code(), kDenied);
  EXPECT_TRUE(ResetIpu(alice_, in_p1).ok());
  Handle root = MustAttach(admin_, Req(1, false, "p1"));  // root's session in alice's partition
  const int ipu = root.observer->granted()->ipus[0];
  EXPECT_TRUE(ResetIpu(alice_, ipu).ok());  // the partition's owner
  EXPECT_EQ(ResetIpu(bob_, ipu).status().code(), kDenied);
}

TEST_F(FaultsTest, ResetPartitionClearsUpToPartitionReset) {
  MustPartition(alice_, "p1", 4);  // 0-3
  MustFault(0, FaultKind::kIpuReset);
  MustFault(1, FaultKind::kLinkReset);
  MustFault(2, FaultKind::kUnrecoverable);  // skipped
  EXPECT_EQ(ResetPartition(bob_, "p1").status().code(), kDenied);
  EXPECT_EQ(ResetPartition(alice_, "zz").status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<ResetResult> r = ResetPartition(alice_, "p1");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->reset_ipus, ElementsAre(0, 1, 3));
  EXPECT_DOUBLE_EQ(r->simulated_seconds, 0.010);
  EXPECT_EQ(StateOf(0), IpuState::kIdle);
  EXPECT_EQ(StateOf(1), IpuState::kIdle);
  EXPECT_EQ(StateOf(2), IpuState::kFailed);
  EXPECT_TRUE(ResetPartition(admin_, "p1").ok());
}

TEST_F(FaultsTest, ResetIsAtomic) {
  MustPartition(alice_, "p1", 4);
  MustFault(0, FaultKind::kIpuReset);
  MustFault(9, FaultKind::kFullReset);  // every IPU now needs FULL_RESET
  absl::Status s = ResetPartition(alice_, "p1").status();
  EXPECT_EQ(s.code(), kPrecondition);
  EXPECT_EQ(s.message(), "IPU 0 needs FULL_RESET: an admin must run `ipupod pod reset`");
  for (const IpuView& ipu : sched_->GetPod().ipus) {
    EXPECT_EQ(ipu.state, IpuState::kError);
    EXPECT_EQ(ipu.recovery_action, RecoveryAction::kFullReset);
  }
}

TEST_F(FaultsTest, ResetSessionOwnerOrAdminAndNeedsLoad) {
  Handle h = MustAttach(alice_, Req(4));
  MustFault(2, FaultKind::kPartitionReset);
  absl::Status s = sched_->GetSession(alice_, h.session()).status();
  EXPECT_EQ(GetRecoveryAction(s), RecoveryAction::kPartitionReset);
  EXPECT_THAT(GetErrorIpus(s), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(s.message(), HasSubstr("`ipupod session reset s1-1`"));
  EXPECT_EQ(ResetSession(bob_, h.session()).status().code(), kDenied);
  const absl::Status missing = ResetSession(alice_, "s1-77").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  // It names a command the CLI has.
  EXPECT_THAT(missing.message(), HasSubstr("list sessions with `ipupod info`"));
  absl::StatusOr<ResetResult> r = ResetSession(alice_, h.session());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->reset_ipus, ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(r->affected_sessions, ElementsAre("s1-1"));
  absl::StatusOr<SessionView> v = sched_->GetSession(alice_, h.session());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->needs_load);
  EXPECT_TRUE(ResetSession(admin_, h.session()).ok());
}

TEST_F(FaultsTest, ResetOfNothingCompletesAtOnce) {
  MustPartition(alice_, "p1", 1);
  const int ipu = sched_->GetPartition("p1")->block.start;
  MustFault(ipu, FaultKind::kUnrecoverable);
  auto sink = ResetSink::Make();
  sched_->ResetPartition(alice_, "p1", ResetSink::Callback(sink));
  EXPECT_TRUE(sink->HasCompleted());  // before the call returned
  absl::StatusOr<ResetResult> r = sink->Wait();
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->reset_ipus.empty());
  EXPECT_EQ(r->simulated_seconds, 0);
}

TEST_F(FaultsTest, ResetDoneRunsWithoutTheSchedulerLock) {
  MustAttach(alice_, Req(1));
  for (const Caller& who : {bob_, alice_}) {  // error path, then the timer path
    absl::Notification called;
    sched_->ResetIpu(who, 0, [&](absl::StatusOr<ResetResult>) {
      EXPECT_EQ(sched_->GetPod().num_ipus, 16);  // would deadlock under the lock
      sync::Notify(&called);
    });
    EXPECT_TRUE(sync::WaitForNotificationWithTimeout(&called, kWaitLimit));
  }
}

TEST_F(FaultsTest, SessionEndAutoResetsRecoverableErrors) {
  Handle a = MustAttach(alice_, Req(2));  // 0-1
  Handle b = MustAttach(bob_, Req(2));    // 2-3
  MustFault(0, FaultKind::kIpuReset);
  MustFault(1, FaultKind::kPartitionReset);
  MustFault(2, FaultKind::kUnrecoverable);
  sched_->Release(a.ticket);
  EXPECT_TRUE(PollState(0, IpuState::kIdle));
  EXPECT_TRUE(PollState(1, IpuState::kIdle));
  sched_->Release(b.ticket);
  EXPECT_EQ(StateOf(2), IpuState::kFailed);
  EXPECT_EQ(StateOf(3), IpuState::kIdle);
}

TEST_F(FaultsTest, WaitersGetIpusBackAfterAReset) {
  Start(Options(4));
  MustFault(0, FaultKind::kIpuReset);  // idle but faulted: not allocatable
  Handle w = MustAttach(alice_, Req(4, true));
  EXPECT_FALSE(w.observer->granted().has_value());
  ASSERT_TRUE(ResetIpu(bob_, 0).ok());  // unowned: anyone may reset
  EXPECT_TRUE(w.observer->WaitGranted());
}

// ---------------------------------------------------------------- random faults

TEST_F(FaultsTest, RandomFaultsAreSeededAndDeterministic) {
  auto faulted_ipus = [&](uint64_t seed) {
    SchedulerOptions o = Options();
    o.random_faults = RandomFaults{seed, 1.0, {FaultKind::kIpuReset}};
    Start(o);
    Handle h = MustAttach(alice_, Req(16));
    absl::Status s = sched_->GetSession(alice_, h.session()).status();
    EXPECT_EQ(GetRecoveryAction(s), RecoveryAction::kIpuReset);
    return GetErrorIpus(s);
  };
  const std::vector<int> first = faulted_ipus(7);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(faulted_ipus(7), first);
  bool differs = false;
  for (uint64_t seed = 8; seed < 16 && !differs; ++seed) differs = faulted_ipus(seed) != first;
  EXPECT_TRUE(differs);
}

TEST_F(FaultsTest, RandomFaultKindsAndProbabilityZero) {
  SchedulerOptions o = Options();
  o.random_faults = RandomFaults{3, 1.0, {FaultKind::kUnrecoverable}};
  Start(o);
  Handle h = MustAttach(alice_, Req(1));
  EXPECT_EQ(sched_->GetSession(alice_, h.session()).status().code(), absl::StatusCode::kDataLoss);
  ASSERT_EQ(store_.failures.size(), 1u);
  EXPECT_EQ(store_.failures.begin()->second.reason, "random fault (seed 3)");
  o.random_faults = RandomFaults{3, 0.0, {FaultKind::kUnrecoverable}};
  Start(o);
  Handle ok = MustAttach(alice_, Req(2));
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(sched_->GetSession(alice_, ok.session()).ok());
}

// ---------------------------------------------------------------- restart

TEST_F(FaultsTest, RestartRestoresPartitionsAndFailures) {
  MustPartition(alice_, "p1", 4);
  MustFault(9, FaultKind::kUnrecoverable);
  MustAttach(bob_, Req(2));
  Start(Options());  // same store: a restart
  absl::StatusOr<PartitionView> p = sched_->GetPartition("p1");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->block, (device::Block{0, 4}));
  EXPECT_EQ(p->owner, "alice");
  PodView pod = sched_->GetPod();
  EXPECT_EQ(pod.ipus[9].state, IpuState::kFailed);
  EXPECT_THAT(pod.ipus[9].failure_reason, HasSubstr("root"));
  EXPECT_TRUE(pod.sessions.empty());  // sessions are not persisted
  EXPECT_EQ(MustAttach(bob_, Req(1)).session(), "s2-1");
}

TEST_F(FaultsTest, RestartRefusesStateThatDoesNotFit) {
  store_.partitions["a"] = StoredPartition{"a", 0, 8, "alice", 1};
  store_.partitions["b"] = StoredPartition{"b", 4, 4, "bob", 1};    // overlaps a
  store_.partitions["c"] = StoredPartition{"c", 10, 4, "bob", 1};   // misaligned
  store_.partitions["d"] = StoredPartition{"d", 16, 16, "bob", 1};  // outside POD16
  const uint64_t boot = store_.boot;
  absl::StatusOr<std::unique_ptr<Scheduler>> s = Scheduler::Create(Options(), &store_);
  ASSERT_EQ(s.status().code(), kPrecondition);
  EXPECT_THAT(s.status().message(),
              HasSubstr("partition b (start 4, size 4) overlaps partition a"));
  EXPECT_THAT(s.status().message(), HasSubstr("partition c (start 10, size 4) is misaligned"));
  EXPECT_THAT(s.status().message(),
              HasSubstr("partition d (start 16, size 16) does not fit POD16"));
  EXPECT_EQ(store_.boot, boot);  // a refused start changes nothing
  store_.partitions.erase("b");
  store_.partitions.erase("c");
  EXPECT_TRUE(Scheduler::Create(Options(32), &store_).ok());  // d fits a POD32
}

TEST_F(FaultsTest, RestartRefusesFailuresOutsideThePod) {
  store_.failures[20] = StoredFailure{20, "x"};
  absl::StatusOr<std::unique_ptr<Scheduler>> s = Scheduler::Create(Options(), &store_);
  EXPECT_EQ(s.status().code(), kPrecondition);
  EXPECT_THAT(s.status().message(), HasSubstr("failed IPU 20 is outside POD16"));
  store_.failures.clear();
  store_.fail_load = true;
  EXPECT_EQ(Scheduler::Create(Options(), &store_).status().code(), absl::StatusCode::kUnavailable);
}

// ---------------------------------------------------------------- clock

TEST_F(FaultsTest, TheClockIsInjectable) {
  auto clock = std::make_shared<FakeClock>();
  SchedulerOptions o = Options();
  o.clock = [clock] { return clock->Now(); };
  Start(o);
  EXPECT_EQ(MustPartition(alice_, "p1", 1).created_unix_ms, 1'700'000'000'000);
  Handle h = MustAttach(alice_, Req(8));
  EXPECT_EQ(h.observer->granted()->attached_unix_ms, 1'700'000'000'000);
  AttachRequest r = Req(8, true);
  r.wait_timeout = absl::Seconds(5);
  Handle w = MustAttach(bob_, r);
  clock->Advance(absl::Seconds(2));
  ASSERT_EQ(sched_->ListQueue().size(), 1u);
  EXPECT_DOUBLE_EQ(sched_->ListQueue()[0].waited_seconds, 2.0);
  EXPECT_FALSE(w.observer->ended().has_value());  // 2 s of 5 on the clock
  clock->Advance(absl::Seconds(3));
  ASSERT_TRUE(w.observer->WaitEnded());  // the timer re-reads the clock within 500 ms
  EXPECT_EQ(w.observer->ended()->code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(w.observer->ended()->message(), HasSubstr("waited 5.0 s for 8 IPUs"));
}

// ---------------------------------------------------------------- shutdown

TEST_F(FaultsTest, ShutdownEndsEverySessionAndRequest) {
  MustPartition(admin_, "p", 1);          // IPU 0
  Handle a = MustAttach(alice_, Req(8));  // 8-15
  Handle w = MustAttach(bob_, Req(8, true));
  ASSERT_FALSE(w.observer->granted().has_value());
  sched_->Shutdown();
  ASSERT_TRUE(a.observer->ended().has_value());
  EXPECT_EQ(a.observer->ended()->code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(a.observer->ended()->message(), "server is shutting down; session s1-1 ended");
  ASSERT_TRUE(w.observer->ended().has_value());
  EXPECT_EQ(w.observer->ended()->code(), absl::StatusCode::kUnavailable);
  sched_->Shutdown();  // idempotent
  sched_->Release(a.ticket);
  EXPECT_EQ(a.observer->ends(), 1);

  constexpr auto kUnavailable = absl::StatusCode::kUnavailable;
  EXPECT_EQ(AttachStatus(alice_, Req(1)).code(), kUnavailable);
  EXPECT_EQ(sched_->CreatePartition(alice_, "q", 1).status().code(), kUnavailable);
  EXPECT_EQ(sched_->RemovePartition(admin_, "p", true).status().code(), kUnavailable);
  EXPECT_EQ(sched_->Detach(admin_, "s1-1").status().code(), kUnavailable);
  EXPECT_EQ(sched_->GetSession(admin_, "s1-1").status().code(), kUnavailable);
  EXPECT_EQ(sched_->InjectFault(admin_, 0, FaultKind::kIpuReset).status().code(), kUnavailable);
  EXPECT_EQ(sched_->RepairIpu(admin_, 0).status().code(), kUnavailable);
  EXPECT_EQ(ResetPod(admin_).status().code(), kUnavailable);
  EXPECT_EQ(ResetIpu(admin_, 0).status().code(), kUnavailable);
  EXPECT_EQ(ResetSession(admin_, "s1-1").status().code(), kUnavailable);
  EXPECT_EQ(ResetPartition(admin_, "p").status().code(), kUnavailable);
  PodView pod = sched_->GetPod();
  EXPECT_TRUE(pod.sessions.empty());
  EXPECT_EQ(pod.waiting, 0);
}

}  // namespace
}  // namespace ipupod::scheduler::testing
