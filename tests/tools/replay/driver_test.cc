// The replay driver over the real Scheduler: a schedule worked out by hand,
// the tie rule at one instant, determinism, and bad options.
#include "tools/replay/driver.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tools/replay/report.h"
#include "tools/replay/virtual_clock.h"

namespace ipupod::replay {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::Time T0() {
  return absl::FromCivil(absl::CivilSecond(2017, 10, 1, 0, 0, 0), absl::UTCTimeZone());
}

TraceJob Job(int64_t line, double submit_s, double duration_s, int64_t gpus, const char* vc) {
  return TraceJob{line, T0() + absl::Seconds(submit_s), duration_s, gpus, vc};
}

// POD4. Worked by hand, first come first served:
//   line 2  a  t=0    2 IPUs 100 s  starts 0 (IPUs free)
//   line 3  b  t=10   4 IPUs  50 s  waits for job 2's IPUs: starts 100
//   line 4  a  t=20   1 IPU   10 s  behind line 3: starts 150, when it ends
//   line 5  b  t=30   2 IPUs  20 s  starts 150 too (1 + 2 of 4 IPUs)
//   line 6  a  t=40   4 IPUs  10 s  needs all four: starts 170, ends 180
//   line 7  b  t=180  4 IPUs   5 s  arrives as line 6 ends: ends are handled
//                                   first, so it starts at once, 180
Selection HandTrace() {
  Selection s;
  s.jobs = {Job(2, 0, 100, 2, "a"), Job(3, 10, 50, 4, "b"), Job(4, 20, 10, 1, "a"),
            Job(5, 30, 20, 2, "b"), Job(6, 40, 10, 4, "a"), Job(7, 180, 5, 4, "b")};
  s.clusters = {"a", "b"};
  s.in_window = 7;
  s.dropped.too_large = 1;
  return s;
}

ReplayOptions Pod4(sharing::QueueOrder order) {
  ReplayOptions options;
  options.pod = device::PodConfig{"POD4", 4, &device::kGc200};
  options.order = order;
  return options;
}

std::vector<double> Starts(const PolicyRun& run) {
  std::vector<double> starts;
  for (const JobRecord& j : run.jobs) starts.push_back(j.start_s);
  return starts;
}

TEST(DriverTest, FirstComeFirstServedMatchesTheScheduleWorkedByHand) {
  absl::StatusOr<PolicyRun> run = Replay(HandTrace(), Pod4(sharing::QueueOrder::kFifo));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->policy, "fifo");
  EXPECT_EQ(run->pod_ipus, 4);
  EXPECT_EQ(run->dropped, 1);
  EXPECT_THAT(Starts(*run), ElementsAre(0, 100, 150, 150, 170, 180));
  EXPECT_EQ(run->jobs[0].end_s, 100);
  EXPECT_EQ(run->jobs[5].end_s, 185);
  EXPECT_EQ(run->jobs[2].account, "a");
  EXPECT_EQ(run->jobs[2].line, 4);
  // After the instant at t=30 lines 3, 4 and 5 wait and 2 IPUs are busy.
  ASSERT_GE(run->timeline.size(), 4u);
  EXPECT_EQ(run->timeline[3].t_s, 30);
  EXPECT_EQ(run->timeline[3].queue_length, 3);
  EXPECT_EQ(run->timeline[3].busy_ipus, 2);
  EXPECT_EQ(run->timeline.back().t_s, 185);
  EXPECT_EQ(run->timeline.back().queue_length, 0);
  EXPECT_EQ(run->timeline.back().busy_ipus, 0);
}

TEST(DriverTest, BackfillStartsShortJobsThatEndBeforeTheReservation) {
  // Line 3 reserves the whole pod from t=100 (line 2's time limit). Line 4
  // (10 s from t=20) and line 5 (20 s from t=30, once line 4 has ended) will
  // be done by then, so they start at once; lines 3 and 6 follow in order.
  absl::StatusOr<PolicyRun> run = Replay(HandTrace(), Pod4(sharing::QueueOrder::kBackfill));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->policy, "backfill");
  EXPECT_THAT(Starts(*run), ElementsAre(0, 100, 20, 30, 150, 180));
}

TEST(DriverTest, WithoutTimeLimitsBackfillCannotJumpAReservation) {
  ReplayOptions options = Pod4(sharing::QueueOrder::kBackfill);
  options.estimate_factor = 0;  // no job says how long it runs
  absl::StatusOr<PolicyRun> run = Replay(HandTrace(), options);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_THAT(Starts(*run), ElementsAre(0, 100, 150, 150, 170, 180));
}

TEST(DriverTest, MultifactorServesTheAccountBelowItsShareFirst) {
  // a holds the pod for 100 s, then queues four more; b asks once, later.
  Selection s;
  s.jobs = {Job(2, 0, 100, 4, "a"), Job(3, 10, 10, 4, "a"), Job(4, 10, 10, 4, "a"),
            Job(5, 10, 10, 4, "a"), Job(6, 10, 10, 4, "a"), Job(7, 20, 10, 4, "b")};
  s.clusters = {"a", "b"};
  absl::StatusOr<PolicyRun> fifo = Replay(s, Pod4(sharing::QueueOrder::kFifo));
  ASSERT_TRUE(fifo.ok()) << fifo.status();
  EXPECT_THAT(Starts(*fifo), ElementsAre(0, 100, 110, 120, 130, 140));
  absl::StatusOr<PolicyRun> fair = Replay(s, Pod4(sharing::QueueOrder::kMultifactor));
  ASSERT_TRUE(fair.ok()) << fair.status();
  EXPECT_THAT(Starts(*fair), ElementsAre(0, 110, 120, 130, 140, 100));
}

TEST(DriverTest, FragmentationDelayComesFromTheScheduler) {
  // POD4: lines 2-4 take IPUs 0, 1, 2 (best fit). Line 5 wants 2 IPUs; from
  // t=10, when line 3 ends, IPUs 1 and 3 are free but form no aligned pair
  // until lines 2 and 4 end at 100: 90 s of fragmentation.
  Selection s;
  s.jobs = {Job(2, 0, 100, 1, "a"), Job(3, 0, 10, 1, "a"), Job(4, 0, 100, 1, "a"),
            Job(5, 5, 10, 2, "b")};
  s.clusters = {"a", "b"};
  absl::StatusOr<PolicyRun> run = Replay(s, Pod4(sharing::QueueOrder::kBackfill));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_THAT(Starts(*run), ElementsAre(0, 0, 0, 100));
  EXPECT_DOUBLE_EQ(run->jobs[3].fragmentation_delay_s, 90);
  EXPECT_DOUBLE_EQ(run->jobs[0].fragmentation_delay_s, 0);
  EXPECT_DOUBLE_EQ(ComputeMetrics(*run).fragmentation_delay_s, 90 / 4.0);
}

TEST(DriverTest, VirtualClockMovesOnlyForward) {
  VirtualClock clock(T0());
  std::function<absl::Time()> now = clock.AsFunction();
  EXPECT_EQ(now(), T0());
  clock.Set(T0() + absl::Seconds(90));
  EXPECT_EQ(now(), T0() + absl::Seconds(90));
  clock.Set(T0() + absl::Seconds(30));  // events come in time order; never back
  EXPECT_EQ(clock.Now(), T0() + absl::Seconds(90));
}

TEST(DriverTest, APassEverySecondChangesNoDecisionUnderArrivalOrder) {
  for (sharing::QueueOrder order : {sharing::QueueOrder::kFifo, sharing::QueueOrder::kBackfill}) {
    ReplayOptions often = Pod4(order);
    often.priority_interval = absl::Seconds(1);
    ReplayOptions never = Pod4(order);
    never.priority_interval = absl::ZeroDuration();
    absl::StatusOr<PolicyRun> a = Replay(HandTrace(), often);
    absl::StatusOr<PolicyRun> b = Replay(HandTrace(), never);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(Starts(*a), Starts(*b));
    // Someone waits from t=10 to t=170: a pass each virtual second then.
    EXPECT_GT(a->pass.calls, 140);
    EXPECT_LT(b->pass.calls, 20);
  }
}

TEST(DriverTest, TwoRunsGiveIdenticalResults) {
  Selection s = HandTrace();
  // More of the same, so ties and a longer queue are in play.
  for (int i = 0; i < 40; ++i) {
    s.jobs.push_back(
        Job(8 + i, 200 + 3 * (i / 4), 7 + (i * 13) % 30, 1 << (i % 3), i % 2 ? "a" : "b"));
  }
  for (sharing::QueueOrder order : {sharing::QueueOrder::kFifo, sharing::QueueOrder::kBackfill,
                                    sharing::QueueOrder::kMultifactor}) {
    absl::StatusOr<PolicyRun> first = Replay(s, Pod4(order));
    absl::StatusOr<PolicyRun> second = Replay(s, Pod4(order));
    ASSERT_TRUE(first.ok()) << first.status();
    ASSERT_TRUE(second.ok()) << second.status();
    EXPECT_EQ(Starts(*first), Starts(*second));
    EXPECT_EQ(MetricsJson(ComputeMetrics(*first)).dump(),
              MetricsJson(ComputeMetrics(*second)).dump());
  }
}

TEST(DriverTest, BadOptionsAreRefused) {
  ReplayOptions factor = Pod4(sharing::QueueOrder::kFifo);
  factor.estimate_factor = -1;
  absl::StatusOr<PolicyRun> run = Replay(HandTrace(), factor);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(run.status().message(), HasSubstr("estimate factor -1 must be a number >= 0"));

  ReplayOptions shares = Pod4(sharing::QueueOrder::kFifo);
  shares.shares = {{"zzz", 2}};
  run = Replay(HandTrace(), shares);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(run.status().message(), HasSubstr("shares name zzz, which has no job in the "
                                                "selection; its clusters are: a, b"));

  shares.shares = {{"a", 0}};
  run = Replay(HandTrace(), shares);
  ASSERT_FALSE(run.ok());
  EXPECT_THAT(run.status().message(), HasSubstr("shares of a must be greater than 0"));

  ReplayOptions no_accounts = Pod4(sharing::QueueOrder::kFifo);
  no_accounts.configure_accounts = false;
  no_accounts.shares = {{"a", 2}};
  run = Replay(HandTrace(), no_accounts);
  ASSERT_FALSE(run.ok());
  EXPECT_THAT(run.status().message(), HasSubstr("shares need accounts"));

  run = Replay(Selection{}, Pod4(sharing::QueueOrder::kFifo));
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DriverTest, PolicyHasOneAccountPerClusterWithItsShares) {
  ReplayOptions options = Pod4(sharing::QueueOrder::kMultifactor);
  options.shares = {{"b", 3}};
  absl::StatusOr<sharing::SharingPolicy> policy = ReplayPolicy(HandTrace(), options);
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(policy->order, sharing::QueueOrder::kMultifactor);
  ASSERT_EQ(policy->accounts.size(), 2u);
  EXPECT_EQ(policy->accounts[0].name, "a");
  EXPECT_EQ(policy->accounts[0].shares, 1);
  EXPECT_THAT(policy->accounts[0].users, ElementsAre("a"));
  EXPECT_EQ(policy->accounts[1].name, "b");
  EXPECT_EQ(policy->accounts[1].shares, 3);

  options.configure_accounts = false;
  options.shares.clear();
  policy = ReplayPolicy(HandTrace(), options);
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_TRUE(policy->accounts.empty());
}

}  // namespace
}  // namespace ipupod::replay
