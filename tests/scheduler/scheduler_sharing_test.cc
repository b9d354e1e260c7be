// The sharing policy inside the Scheduler: priority order, QoS, limits with
// their reasons, time-aware backfill, fragmentation, policy reloads, shares
// and the usage ledger. A fake clock makes time explicit; the periodic pass
// is off (priority_interval 0) so only the test moves things.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/sync.h"
#include "scheduler/accounting/ledger.h"
#include "tests/scheduler/scheduler_fixture.h"

namespace ipupod::scheduler::testing {
namespace {

using ::testing::HasSubstr;

// Keeps what the scheduler writes; Query returns `seed`.
class FakeLedger : public accounting::Ledger {
 public:
  absl::Status Open(const accounting::UsageRecord& record) override {
    sync::MutexLock lock(&mu_);
    opened_.push_back(record);
    return absl::OkStatus();
  }
  absl::Status Close(absl::string_view id, int64_t end_unix_ms, double ipu_seconds,
                     absl::string_view state) override {
    sync::MutexLock lock(&mu_);
    accounting::UsageRecord r;
    r.id = std::string(id);
    r.end_unix_ms = end_unix_ms;
    r.ipu_seconds = ipu_seconds;
    r.state = std::string(state);
    closed_.push_back(r);
    return absl::OkStatus();
  }
  absl::Status Put(const accounting::UsageRecord& record) override { return absl::OkStatus(); }
  absl::StatusOr<std::vector<accounting::UsageRecord>> Query(
      const accounting::LedgerQuery& query) override {
    return seed;
  }
  absl::StatusOr<int> CloseOpenRecords(int64_t end_unix_ms) override { return 0; }

  std::vector<accounting::UsageRecord> opened() {
    sync::MutexLock lock(&mu_);
    return opened_;
  }
  std::vector<accounting::UsageRecord> closed() {
    sync::MutexLock lock(&mu_);
    return closed_;
  }
  // Waits (bounded) until `n` records were closed.
  bool WaitClosed(size_t n) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (closed().size() < n) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return true;
  }
  std::vector<accounting::UsageRecord> seed;

 private:
  absl::Mutex mu_;
  std::vector<accounting::UsageRecord> opened_ ABSL_GUARDED_BY(mu_);
  std::vector<accounting::UsageRecord> closed_ ABSL_GUARDED_BY(mu_);
};

class SharingTest : public SchedulerTest {
 protected:
  void SetUp() override { StartWith(sharing::DefaultPolicy()); }
  void StartWith(sharing::SharingPolicy policy) {
    SchedulerOptions o = Options();
    o.clock = [clock = clock_] { return clock->Now(); };
    o.priority_interval = absl::ZeroDuration();
    o.policy = std::make_shared<const sharing::SharingPolicy>(std::move(policy));
    o.ledger = &ledger_;
    Start(o);
  }
  // Alice's 16-IPU session held for `seconds` then released: usage.
  void Use(const Caller& who, absl::Duration d) {
    Handle h = MustAttach(who, Req(16));
    clock_->Advance(d);
    sched_->Release(h.ticket);
  }
  std::vector<std::string> QueueUsers() {
    std::vector<std::string> users;
    for (const QueueEntryView& e : sched_->ListQueue()) users.push_back(e.user);
    return users;
  }
  static sharing::SharingPolicy Teams() {
    sharing::SharingPolicy p = sharing::DefaultPolicy();
    sharing::Account a;
    a.name = "vision";
    a.shares = 3;
    a.users = {"alice"};
    sharing::Account b;
    b.name = "speech";
    b.shares = 1;
    b.users = {"bob", "alice"};
    p.accounts = {a, b};
    return p;
  }

  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>();
  FakeLedger ledger_;  // the scheduler writes it until TearDown destroys the scheduler
  void TearDown() override {
    SchedulerTest::TearDown();
    sched_.reset();
  }
  const Caller carol_{"carol", false};
};

TEST_F(SharingTest, TheUserWhoUsedLessGoesFirst) {
  Use(alice_, absl::Hours(1));
  Handle holder = MustAttach(carol_, Req(16));
  Handle a = MustAttach(alice_, Req(16, true));
  clock_->Advance(absl::Seconds(10));
  Handle b = MustAttach(bob_, Req(16, true));  // later, but bob used nothing
  EXPECT_EQ(QueueUsers(), (std::vector<std::string>{"bob", "alice"}));
  const std::vector<QueueEntryView> q = sched_->ListQueue();
  EXPECT_DOUBLE_EQ(q[0].factors.fair_share, 1.0);
  EXPECT_LT(q[1].factors.fair_share, 0.5);
  EXPECT_GT(q[0].priority, q[1].priority);
  sched_->Release(holder.ticket);
  EXPECT_TRUE(b.observer->granted().has_value());
  EXPECT_FALSE(a.observer->granted().has_value());
}

TEST_F(SharingTest, AgeRaisesPriorityUpToItsCap) {
  Handle holder = MustAttach(carol_, Req(16));
  MustAttach(alice_, Req(4, true));
  sched_->Reprioritize();
  EXPECT_DOUBLE_EQ(sched_->ListQueue()[0].factors.age, 0.0);
  clock_->Advance(absl::Hours(12));
  sched_->Reprioritize();
  EXPECT_DOUBLE_EQ(sched_->ListQueue()[0].factors.age, 0.5);
  clock_->Advance(absl::Hours(24));
  sched_->Reprioritize();
  EXPECT_DOUBLE_EQ(sched_->ListQueue()[0].factors.age, 1.0);
  EXPECT_DOUBLE_EQ(sched_->ListQueue()[0].factors.size, 0.25);
}

TEST_F(SharingTest, HighQosGoesFirstAndIsForAdminsOnly) {
  Handle holder = MustAttach(carol_, Req(16));
  MustAttach(alice_, Req(16, true));
  AttachRequest high = Req(16, true);
  high.qos = "high";
  EXPECT_EQ(AttachStatus(bob_, high).code(), absl::StatusCode::kPermissionDenied);
  Handle urgent = MustAttach(admin_, high);
  EXPECT_EQ(QueueUsers(), (std::vector<std::string>{"root", "alice"}));
  EXPECT_EQ(sched_->ListQueue()[0].qos, "high");
  AttachRequest unknown = Req(1);
  unknown.qos = "platinum";
  absl::Status st = AttachStatus(bob_, unknown);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("normal, high, scavenger"));
}

TEST_F(SharingTest, AccountsAreResolvedAndCheckedAtAttach) {
  StartWith(Teams());
  Handle h = MustAttach(alice_, Req(1));
  EXPECT_EQ(h.observer->granted()->account, "vision");  // her first account
  AttachRequest r = Req(1);
  r.account = "speech";
  EXPECT_EQ(MustAttach(alice_, r).observer->granted()->account, "speech");
  r.account = "vision";
  EXPECT_EQ(AttachStatus(bob_, r).code(), absl::StatusCode::kPermissionDenied);
  r.account = "nope";
  EXPECT_EQ(AttachStatus(bob_, r).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AttachStatus(carol_, Req(1)).code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(SharingTest, AUserLimitHoldsARequestWithItsReasonAndRefusesOneThatCouldNeverFit) {
  sharing::SharingPolicy p = sharing::DefaultPolicy();
  p.user_limits.max_ipus = 4;
  StartWith(p);
  Handle first = MustAttach(alice_, Req(4));
  absl::Status never = AttachStatus(alice_, Req(8, true));
  EXPECT_EQ(never.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(never.message(), HasSubstr("UserMaxIpus"));
  EXPECT_THAT(never.message(), HasSubstr("could never start"));
  absl::Status now = AttachStatus(alice_, Req(2));
  EXPECT_EQ(now.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(now.message(), HasSubstr("UserMaxIpus: alice holds 4 IPUs, the limit is 4"));
  Handle waiting = MustAttach(alice_, Req(2, true));
  EXPECT_EQ(sched_->ListQueue()[0].reason, "UserMaxIpus");
  MustAttach(bob_, Req(4));  // bob is not held by alice's limit
  sched_->Release(first.ticket);
  EXPECT_TRUE(waiting.observer->granted().has_value());
}

TEST_F(SharingTest, QosPerUserAndJobsRunningLimitsNameThemselves) {
  sharing::SharingPolicy p = sharing::DefaultPolicy();
  p.qos[0].per_user.max_ipus = 2;        // normal: 2 IPUs per user
  p.qos[0].limits.max_jobs_running = 1;  // normal: one batch job at a time
  StartWith(p);
  MustAttach(alice_, Req(2));
  MustAttach(alice_, Req(2, true));
  EXPECT_EQ(sched_->ListQueue()[0].reason, "QosMaxIpusPerUser");
  AttachRequest job = Req(1, true);
  job.job = "j1";
  MustAttach(bob_, job);
  job.job = "j2";
  MustAttach(carol_, job);
  EXPECT_EQ(sched_->ListQueue().back().reason, "QosMaxJobsRunning");
}

TEST_F(SharingTest, IpuHoursInTheWindowHoldFurtherRequests) {
  sharing::SharingPolicy p = sharing::DefaultPolicy();
  p.user_limits.max_ipu_hours = 16;
  StartWith(p);
  Use(alice_, absl::Hours(1));  // 16 IPU-hours
  absl::Status st = AttachStatus(alice_, Req(1));
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(st.message(), HasSubstr("UserMaxIpuHours"));
  clock_->Advance(absl::Hours(24 * 8));  // out of the 7-day window
  EXPECT_TRUE(AttachStatus(alice_, Req(1)).ok());
}

TEST_F(SharingTest, AShortJobBackfillsOverTheHeadsReservationButALongOneWaits) {
  AttachRequest running = Req(8);
  running.time_limit = absl::Minutes(10);
  running.job = "j1";
  MustAttach(carol_, running);        // 0-7 (or 8-15) for ten minutes
  MustAttach(admin_, Req(16, true));  // the head: all sixteen, in ten minutes
  AttachRequest long_job = Req(8);
  long_job.time_limit = absl::Hours(1);
  long_job.job = "j2";
  EXPECT_EQ(AttachStatus(bob_, long_job).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(AttachStatus(bob_, Req(8)).code(), absl::StatusCode::kResourceExhausted);
  AttachRequest short_job = Req(8);
  short_job.time_limit = absl::Minutes(5);
  short_job.job = "j3";
  EXPECT_TRUE(AttachStatus(bob_, short_job).ok());
}

TEST_F(SharingTest, FifoOrderStartsNothingBehindTheHead) {
  sharing::SharingPolicy p = sharing::DefaultPolicy();
  p.order = sharing::QueueOrder::kFifo;
  StartWith(p);
  MustAttach(carol_, Req(8));
  MustAttach(alice_, Req(16, true));
  EXPECT_EQ(AttachStatus(bob_, Req(1)).code(), absl::StatusCode::kResourceExhausted);
  MustAttach(bob_, Req(1, true));
  EXPECT_EQ(sched_->ListQueue()[1].reason, "Priority");
}

TEST_F(SharingTest, FragmentationIsTheReasonAndItsDelayIsCounted) {
  std::vector<Handle> ones;
  for (int i = 0; i < 16; ++i) ones.push_back(MustAttach(carol_, Req(1)));
  for (int i : {1, 3, 5, 7}) sched_->Release(ones[i].ticket);  // four free, no aligned pair
  Handle pair = MustAttach(alice_, Req(2, true));
  EXPECT_EQ(sched_->ListQueue()[0].reason, "Fragmentation");
  clock_->Advance(absl::Seconds(30));
  sched_->Release(ones[0].ticket);
  ASSERT_TRUE(pair.observer->granted().has_value());
  EXPECT_DOUBLE_EQ(pair.observer->granted()->fragmentation_delay_seconds, 30.0);
}

TEST_F(SharingTest, ABadPolicyIsRefusedAndTheOldOneStays) {
  sharing::SharingPolicy bad = sharing::DefaultPolicy();
  bad.default_qos = "gold";
  absl::Status st = sched_->SetPolicy(std::make_shared<const sharing::SharingPolicy>(bad));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sched_->policy()->default_qos, "normal");
  EXPECT_TRUE(sched_->SetPolicy(std::make_shared<const sharing::SharingPolicy>(Teams())).ok());
  EXPECT_EQ(sched_->policy()->accounts.size(), 2u);
}

TEST_F(SharingTest, SharesShowUsageAgainstShares) {
  StartWith(Teams());
  AttachRequest speech = Req(16);
  speech.account = "speech";
  Handle h = MustAttach(bob_, speech);
  clock_->Advance(absl::Minutes(30));
  sched_->Release(h.ticket);
  const std::vector<ShareView> shares = sched_->GetShares();
  ASSERT_EQ(shares.size(), 2u);
  EXPECT_EQ(shares[0].account, "speech");
  EXPECT_DOUBLE_EQ(shares[0].shares_fraction, 0.25);
  EXPECT_NEAR(shares[0].usage_ipu_seconds, 16 * 1800, 1);
  EXPECT_DOUBLE_EQ(shares[0].usage_fraction, 1.0);
  EXPECT_DOUBLE_EQ(shares[0].fair_share_factor, 1.0 / 16);  // 2^-(1/0.25)
  EXPECT_EQ(shares[1].account, "vision");
  EXPECT_DOUBLE_EQ(shares[1].fair_share_factor, 1.0);
}

TEST_F(SharingTest, AnOwnDetachEndsReleasedAnotherUsersDetached) {
  Handle own = MustAttach(alice_, Req(1));
  Handle other = MustAttach(bob_, Req(1));
  ASSERT_TRUE(sched_->Detach(alice_, own.session()).ok());  // how `attach -- COMMAND` ends
  ASSERT_TRUE(sched_->Detach(admin_, other.session()).ok());
  std::map<std::string, std::string> states;
  for (const accounting::UsageRecord& r : ledger_.closed()) states[r.id] = r.state;
  EXPECT_EQ(states[own.session()], "RELEASED");
  EXPECT_EQ(states[other.session()], "DETACHED");
}

TEST_F(SharingTest, SessionsWriteTheLedgerAndUsageIsRebuiltFromIt) {
  Handle h = MustAttach(alice_, Req(4));
  clock_->Advance(absl::Seconds(100));
  ASSERT_TRUE(sched_->Detach(admin_, h.session()).ok());
  ASSERT_EQ(ledger_.opened().size(), 1u);
  EXPECT_EQ(ledger_.opened()[0].user, "alice");
  EXPECT_EQ(ledger_.opened()[0].account, "alice");
  EXPECT_EQ(ledger_.opened()[0].qos, "normal");
  ASSERT_EQ(ledger_.closed().size(), 1u);
  EXPECT_EQ(ledger_.closed()[0].state, "DETACHED");
  EXPECT_DOUBLE_EQ(ledger_.closed()[0].ipu_seconds, 400);

  accounting::UsageRecord r = ledger_.opened()[0];
  r.end_unix_ms = absl::ToUnixMillis(clock_->Now());
  r.ipu_seconds = 400;
  r.state = "DETACHED";
  ledger_.seed = {r};
  StartWith(sharing::DefaultPolicy());  // a restart: usage comes back from the ledger
  const std::vector<ShareView> shares = sched_->GetShares();
  ASSERT_EQ(shares.size(), 1u);
  EXPECT_NEAR(shares[0].usage_ipu_seconds, 400, 1e-6);
}

TEST_F(SharingTest, EveryWayASessionEndsIsRecordedWithItsState) {
  AttachRequest job = Req(2);
  job.job = "j7";
  job.time_limit = absl::Minutes(5);
  Handle released = MustAttach(alice_, job);
  MustPartition(bob_, "p", 4);
  Handle in_partition = MustAttach(bob_, Req(4, false, "p"));
  Handle open = MustAttach(carol_, Req(1));
  clock_->Advance(absl::Seconds(10));
  sched_->Release(released.ticket);
  ASSERT_TRUE(sched_->RemovePartition(bob_, "p", /*force=*/true).ok());
  sched_->Shutdown();
  const std::vector<accounting::UsageRecord> opened = ledger_.opened();
  ASSERT_EQ(opened.size(), 3u);
  EXPECT_EQ(opened[0].job, "j7");
  EXPECT_EQ(opened[0].ipus, 2);
  EXPECT_EQ(opened[0].state, "RUNNING");
  EXPECT_EQ(opened[1].partition, "p");
  std::map<std::string, std::string> states;
  for (const accounting::UsageRecord& r : ledger_.closed()) states[r.id] = r.state;
  EXPECT_EQ(states[released.session()], "RELEASED");
  EXPECT_EQ(states[in_partition.session()], "DETACHED");
  EXPECT_EQ(states[open.session()], "SHUTDOWN");
  EXPECT_EQ(released.observer->granted()->expected_end_unix_ms,
            released.observer->granted()->attached_unix_ms + 5 * 60 * 1000);
}

// ---------------------------------------------------------------- time limits

sharing::SharingPolicy WithMaxWall(absl::Duration normal_max_wall) {
  sharing::SharingPolicy p = sharing::DefaultPolicy();
  for (sharing::Qos& q : p.qos) {
    if (q.name == "normal") q.max_wall = normal_max_wall;
  }
  return p;
}

TEST_F(SharingTest, AnInteractiveSessionEndsTimeoutAtItsQosMaxWall) {
  StartWith(WithMaxWall(absl::Hours(1)));
  Handle h = MustAttach(alice_, Req(4));
  Handle waiter = MustAttach(bob_, Req(16, true));
  clock_->Advance(absl::Minutes(59));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(h.observer->ended().has_value());
  clock_->Advance(absl::Minutes(2));  // the timer re-reads the clock
  ASSERT_TRUE(h.observer->WaitEnded());
  EXPECT_EQ(h.observer->ended()->code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(h.observer->ended()->message(),
              HasSubstr("reached QoS normal's max wall time of 1h; its IPUs were released"));
  ASSERT_TRUE(waiter.observer->WaitGranted());  // the IPUs went to the next in line
  EXPECT_TRUE(ledger_.WaitClosed(1));
  EXPECT_EQ(ledger_.closed().back().state, "TIMEOUT");
}

TEST_F(SharingTest, AnAskedTimeLimitEndsTheSessionThereAndAReleaseBeforeItStopsTheTimer) {
  StartWith(WithMaxWall(absl::Hours(1)));
  AttachRequest r = Req(4);
  r.time_limit = absl::Minutes(10);
  Handle asked = MustAttach(alice_, r);
  Handle released = MustAttach(bob_, r);
  sched_->Release(released.ticket);
  clock_->Advance(absl::Minutes(11));
  ASSERT_TRUE(asked.observer->WaitEnded());
  EXPECT_THAT(asked.observer->ended()->message(),
              HasSubstr("the time limit of 10m it asked for (--time-limit)"));
  EXPECT_THAT(asked.observer->ended()->message(), HasSubstr("with --time-limit up to 1h"));
  EXPECT_TRUE(ledger_.WaitClosed(2));
  std::map<std::string, std::string> states;
  for (const accounting::UsageRecord& rec : ledger_.closed()) states[rec.id] = rec.state;
  EXPECT_EQ(states[released.session()], "RELEASED");
  EXPECT_EQ(states[asked.session()], "TIMEOUT");
}

TEST_F(SharingTest, JobSessionsAndSessionsWithoutALimitRunOn) {
  StartWith(WithMaxWall(absl::Hours(1)));
  AttachRequest job = Req(4);
  job.job = "j1";  // the JobManager stops a job at its own limit, with a checkpoint
  Handle j = MustAttach(alice_, job);
  AttachRequest scavenger = Req(4);
  scavenger.qos = "scavenger";  // no max wall
  Handle s = MustAttach(bob_, scavenger);
  clock_->Advance(absl::Hours(2));
  absl::SleepFor(absl::Milliseconds(700));  // longer than the timer's idle wait
  EXPECT_FALSE(j.observer->ended().has_value());
  EXPECT_FALSE(s.observer->ended().has_value());
}

// ---------------------------------------------------------------- preemption

// Records the notice (tests/scheduler/test_util.h's observer records the rest).
class PreemptionObserver : public RecordingObserver {
 public:
  void OnPreempted(const PreemptionView& notice) override {
    sync::MutexLock lock(&mu_);
    notice_ = notice;
  }
  std::optional<PreemptionView> notice() {
    sync::MutexLock lock(&mu_);
    return notice_;
  }

 private:
  absl::Mutex mu_;
  std::optional<PreemptionView> notice_ ABSL_GUARDED_BY(mu_);
};

class PreemptionTest : public SharingTest {
 protected:
  struct Held {
    std::string ticket;
    std::shared_ptr<PreemptionObserver> observer;
  };
  Held Scavenge(const Caller& who, int ipus) {
    AttachRequest r = Req(ipus);
    r.qos = "scavenger";
    Held h{"", std::make_shared<PreemptionObserver>()};
    absl::StatusOr<std::string> t = sched_->Attach(who, r, h.observer);
    EXPECT_TRUE(t.ok()) << t.status();
    if (t.ok()) h.ticket = *t;
    return h;
  }
};

TEST_F(PreemptionTest, ScavengerWorkIsNoticedThenEndedWhenTheGraceRunsOut) {
  Held a = Scavenge(alice_, 8);
  Held b = Scavenge(alice_, 8);
  Handle waiter = MustAttach(bob_, Req(8, true));
  // One block of eight is enough: exactly one scavenger session is told.
  const int told = (a.observer->notice() ? 1 : 0) + (b.observer->notice() ? 1 : 0);
  ASSERT_EQ(told, 1);
  Held& victim = a.observer->notice() ? a : b;
  const PreemptionView notice = *victim.observer->notice();
  EXPECT_EQ(notice.by_user, "bob");
  EXPECT_DOUBLE_EQ(notice.grace_seconds, 30);
  EXPECT_THAT(notice.message, HasSubstr("preempted for bob's request for 8 IPUs"));
  EXPECT_FALSE(waiter.observer->granted().has_value());
  clock_->Advance(absl::Seconds(31));  // the timer re-reads the clock
  ASSERT_TRUE(victim.observer->WaitEnded());
  EXPECT_EQ(victim.observer->ended()->code(), absl::StatusCode::kAborted);
  ASSERT_TRUE(waiter.observer->WaitGranted());
  // The timer thread writes the record after the scheduler's mutex is released.
  EXPECT_TRUE(ledger_.WaitClosed(1));
  EXPECT_EQ(ledger_.closed().back().state, "PREEMPTED");
}

TEST_F(PreemptionTest, ASessionThatGivesItsIpusBackInTimeEndsPreempted) {
  Held a = Scavenge(alice_, 16);
  Handle waiter = MustAttach(bob_, Req(4, true));
  ASSERT_TRUE(a.observer->notice().has_value());
  sched_->Release(a.ticket);  // a job checkpoints and lets go
  EXPECT_TRUE(waiter.observer->granted().has_value());
  // A release's record is written on the scheduler's timer thread.
  ASSERT_TRUE(ledger_.WaitClosed(1));
  EXPECT_EQ(ledger_.closed().back().state, "PREEMPTED");
}

TEST_F(PreemptionTest, NoOtherQosIsPreemptedNorDoesScavengerPreempt) {
  Handle normal = MustAttach(carol_, Req(8));
  Held scavenger = Scavenge(alice_, 8);
  AttachRequest r = Req(16, true);
  r.qos = "scavenger";
  MustAttach(bob_, r);  // a scavenger request preempts nothing
  EXPECT_FALSE(scavenger.observer->notice().has_value());
  Handle waiter = MustAttach(bob_, Req(16, true));
  // Sixteen need carol's normal session too: no block is free of it, so nothing
  // is preempted.
  EXPECT_FALSE(scavenger.observer->notice().has_value());
  EXPECT_FALSE(normal.observer->ended().has_value());
}

}  // namespace
}  // namespace ipupod::scheduler::testing
