// The scheduler's PodEventObserver: grants, ends, faults, resets and repairs
// reach it as they happen, with what a status page or the metrics keep.
#include "scheduler/pod_events.h"

#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/sync.h"
#include "scheduler/accounting/ledger.h"
#include "tests/scheduler/scheduler_fixture.h"

namespace ipupod::scheduler::testing {
namespace {

using ::testing::ElementsAre;

// Keeps copies of every event (the scheduler's mutex is held while it runs).
class RecordingEvents : public PodEventObserver {
 public:
  void OnGranted(const GrantEvent& e) override {
    sync::MutexLock lock(&mu_);
    grants_.push_back(e);
  }
  void OnSessionEnded(const SessionEndEvent& e) override {
    sync::MutexLock lock(&mu_);
    ends_.push_back(e);
  }
  void OnFault(const FaultEvent& e) override {
    sync::MutexLock lock(&mu_);
    faults_.push_back(e);
  }
  void OnResetStarted(const ResetEvent& e) override {
    sync::MutexLock lock(&mu_);
    resets_.push_back(e);
  }
  void OnRepaired(const RepairEvent& e) override {
    sync::MutexLock lock(&mu_);
    repairs_.push_back(e);
  }
  std::vector<GrantEvent> grants() {
    sync::MutexLock lock(&mu_);
    return grants_;
  }
  std::vector<SessionEndEvent> ends() {
    sync::MutexLock lock(&mu_);
    return ends_;
  }
  std::vector<FaultEvent> faults() {
    sync::MutexLock lock(&mu_);
    return faults_;
  }
  std::vector<ResetEvent> resets() {
    sync::MutexLock lock(&mu_);
    return resets_;
  }
  std::vector<RepairEvent> repairs() {
    sync::MutexLock lock(&mu_);
    return repairs_;
  }

 private:
  absl::Mutex mu_;
  std::vector<GrantEvent> grants_ ABSL_GUARDED_BY(mu_);
  std::vector<SessionEndEvent> ends_ ABSL_GUARDED_BY(mu_);
  std::vector<FaultEvent> faults_ ABSL_GUARDED_BY(mu_);
  std::vector<ResetEvent> resets_ ABSL_GUARDED_BY(mu_);
  std::vector<RepairEvent> repairs_ ABSL_GUARDED_BY(mu_);
};

class PodEventsTest : public SchedulerTest {
 protected:
  void SetUp() override {
    SchedulerOptions options = Options();
    options.events = &events_;
    options.clock = [this] { return clock_.Now(); };
    Start(std::move(options));
  }
  // The scheduler tells events_ of the sessions its destruction ends.
  void TearDown() override {
    SchedulerTest::TearDown();
    sched_.reset();
  }
  FakeClock clock_;
  RecordingEvents events_;
};

TEST_F(PodEventsTest, GrantsAndEndsCarryWhoHowManyAndTheCharge) {
  Handle first = MustAttach(alice_, Req(4));
  Handle waiter = MustAttach(bob_, Req(16, /*wait=*/true));
  clock_.Advance(absl::Seconds(10));
  sched_->Release(first.ticket);  // alice held 4 IPUs for 10 s; bob gets the pod
  ASSERT_TRUE(waiter.observer->granted().has_value());
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(sched_->Detach(admin_, waiter.session()).ok());

  const std::vector<GrantEvent> grants = events_.grants();
  ASSERT_EQ(grants.size(), 2u);
  EXPECT_EQ(grants[0].user, "alice");
  EXPECT_EQ(grants[0].ipus, 4);
  EXPECT_EQ(grants[0].waited_seconds, 0);
  EXPECT_EQ(grants[0].account, "alice");  // the default policy: an account per user
  EXPECT_EQ(grants[1].user, "bob");
  EXPECT_EQ(grants[1].ipus, 16);
  EXPECT_DOUBLE_EQ(grants[1].waited_seconds, 10);
  const std::vector<SessionEndEvent> ends = events_.ends();
  ASSERT_EQ(ends.size(), 2u);
  EXPECT_EQ(ends[0].session, grants[0].session);
  EXPECT_DOUBLE_EQ(ends[0].ipu_seconds, 40);
  EXPECT_EQ(ends[0].end_state, accounting::kStateReleased);
  EXPECT_DOUBLE_EQ(ends[1].ipu_seconds, 32);
  EXPECT_EQ(ends[1].end_state, accounting::kStateDetached);  // an admin ended it
}

TEST_F(PodEventsTest, FaultsResetsAndRepairsSayWhatAndWho) {
  Handle held = MustAttach(alice_, Req(2));
  ASSERT_TRUE(sched_->InjectFault(admin_, 1, FaultKind::kPartitionReset).ok());
  ASSERT_TRUE(sched_->InjectFault(admin_, 9, FaultKind::kUnrecoverable).ok());
  sched_->Release(held.ticket);  // its errored IPUs are reset automatically
  // Told when it starts (on this clock, which stands still, it never ends).
  sched_->ResetIpu(bob_, 5, nullptr);
  ASSERT_TRUE(sched_->RepairIpu(admin_, 9).ok());

  const std::vector<FaultEvent> faults = events_.faults();
  ASSERT_EQ(faults.size(), 2u);
  EXPECT_EQ(faults[0].kind, FaultKind::kPartitionReset);
  EXPECT_FALSE(faults[0].random);
  EXPECT_EQ(faults[0].by, "root");
  EXPECT_THAT(faults[0].affected_ipus, ElementsAre(0, 1));
  EXPECT_THAT(faults[0].affected_sessions, ElementsAre(held.session()));
  EXPECT_EQ(FaultKindName(faults[1].kind), "unrecoverable");
  const std::vector<ResetEvent> resets = events_.resets();
  ASSERT_EQ(resets.size(), 2u);
  EXPECT_TRUE(resets[0].automatic);
  EXPECT_EQ(resets[0].level, RecoveryAction::kPartitionReset);
  EXPECT_THAT(resets[0].ipus, ElementsAre(0, 1));
  EXPECT_FALSE(resets[1].automatic);
  EXPECT_EQ(resets[1].level, RecoveryAction::kIpuReset);
  EXPECT_THAT(resets[1].ipus, ElementsAre(5));
  const std::vector<RepairEvent> repairs = events_.repairs();
  ASSERT_EQ(repairs.size(), 1u);
  EXPECT_EQ(repairs[0].ipu, 9);
  EXPECT_EQ(repairs[0].by, "root");
}

TEST_F(PodEventsTest, RandomFaultsAreMarkedRandom) {
  SchedulerOptions options = Options();
  options.events = &events_;
  options.random_faults =
      RandomFaults{.seed = 7, .probability_per_operation = 1.0, .kinds = {FaultKind::kLinkReset}};
  Start(std::move(options));
  Handle held = MustAttach(alice_, Req(2));
  EXPECT_FALSE(sched_->BeginSessionOperation(alice_, held.session()).ok());  // it faulted
  const std::vector<FaultEvent> faults = events_.faults();
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_TRUE(faults[0].random);
  EXPECT_EQ(faults[0].by, "");
  EXPECT_EQ(FaultKindName(faults[0].kind), "link-reset");
}

TEST(PodEventFanoutTest, EveryObserverGetsEveryEventInOrder) {
  RecordingEvents a, b;
  PodEventFanout fanout({&a, &b});
  GrantEvent grant;
  grant.session = "s1-1";
  RepairEvent repair;
  repair.ipu = 3;
  fanout.OnGranted(grant);
  fanout.OnRepaired(repair);
  for (RecordingEvents* events : {&a, &b}) {
    ASSERT_EQ(events->grants().size(), 1u);
    EXPECT_EQ(events->grants()[0].session, "s1-1");
    EXPECT_EQ(events->repairs()[0].ipu, 3);
  }
}

}  // namespace
}  // namespace ipupod::scheduler::testing
