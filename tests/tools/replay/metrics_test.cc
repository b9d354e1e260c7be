// The figures of a replay, on schedules made by hand.
#include "tools/replay/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ipupod::replay {
namespace {

TEST(MetricsTest, PercentileIsNearestRank) {
  EXPECT_EQ(Percentile({}, 50), 0);
  EXPECT_EQ(Percentile({7}, 99), 7);
  std::vector<double> ten = {10, 1, 9, 2, 8, 3, 7, 4, 6, 5};
  EXPECT_EQ(Percentile(ten, 50), 5);
  EXPECT_EQ(Percentile(ten, 95), 10);
  EXPECT_EQ(Percentile(ten, 10), 1);
  EXPECT_EQ(Percentile(ten, 11), 2);
  EXPECT_EQ(Percentile(ten, 0), 1);
  EXPECT_EQ(Percentile(ten, 100), 10);
  std::vector<double> hundred;
  for (int i = 1; i <= 100; ++i) hundred.push_back(i);
  EXPECT_EQ(Percentile(hundred, 99), 99);
  EXPECT_EQ(Percentile(hundred, 95), 95);
}

TEST(MetricsTest, JainIndex) {
  EXPECT_DOUBLE_EQ(JainIndex({}), 1);
  EXPECT_DOUBLE_EQ(JainIndex({3, 3, 3}), 1);
  EXPECT_DOUBLE_EQ(JainIndex({1, 0, 0, 0}), 0.25);  // one of four served: 1/n
  EXPECT_DOUBLE_EQ(JainIndex({1, 3}), 16.0 / 20.0);
}

TEST(MetricsTest, BoundedSlowdownFloorsShortJobsAndIsAtLeastOne) {
  // Waited 90 s, ran 30 s: (90 + 30) / 30.
  EXPECT_DOUBLE_EQ(BoundedSlowdown(JobRecord{1, "a", 1, 0, 90, 120, 0}), 4);
  // Waited 18 s, ran 2 s: (18 + 2) / max(2, 10).
  EXPECT_DOUBLE_EQ(BoundedSlowdown(JobRecord{1, "a", 1, 0, 18, 20, 0}), 2);
  // Started at once, ran 1 s: 1 / 10 floored to 1.
  EXPECT_DOUBLE_EQ(BoundedSlowdown(JobRecord{1, "a", 1, 5, 5, 6, 0}), 1);
}

// A POD4 schedule drawn by hand (seconds):
//   job 1: a, 4 IPUs, submitted 0,   runs 0-100
//   job 2: b, 2 IPUs, submitted 10,  waits 90, runs 100-200
//   job 3: a, 2 IPUs, submitted 20,  waits 80, runs 100-150, 3 s of it fragmentation
//   job 4: b, 1 IPU,  submitted 300, runs 300-400
PolicyRun HandSchedule() {
  PolicyRun run;
  run.policy = "fifo";
  run.pod_ipus = 4;
  run.dropped = 2;
  run.jobs = {JobRecord{2, "a", 4, 0, 0, 100, 0}, JobRecord{3, "b", 2, 10, 100, 200, 0},
              JobRecord{4, "a", 2, 20, 100, 150, 3}, JobRecord{5, "b", 1, 300, 300, 400, 0}};
  run.timeline = {{0, 0, 4},   {10, 1, 4},  {20, 2, 4},  {100, 0, 4},
                  {150, 0, 2}, {200, 0, 0}, {300, 0, 1}, {400, 0, 0}};
  return run;
}

TEST(MetricsTest, FiguresOfAHandMadeSchedule) {
  const Metrics m = ComputeMetrics(HandSchedule());
  EXPECT_EQ(m.policy, "fifo");
  EXPECT_EQ(m.jobs, 4);
  EXPECT_EQ(m.dropped, 2);
  EXPECT_DOUBLE_EQ(m.avg_jct_s, (100 + 190 + 130 + 100) / 4.0);
  EXPECT_DOUBLE_EQ(m.avg_queue_s, (0 + 90 + 80 + 0) / 4.0);
  EXPECT_DOUBLE_EQ(m.p50_queue_s, 0);
  EXPECT_DOUBLE_EQ(m.p95_queue_s, 90);
  EXPECT_DOUBLE_EQ(m.p99_queue_s, 90);
  EXPECT_DOUBLE_EQ(m.makespan_s, 400);
  // 4x100 + 2x100 + 2x50 + 1x100 = 800 IPU-seconds of 4 x 400.
  EXPECT_DOUBLE_EQ(m.utilisation, 0.5);
  EXPECT_DOUBLE_EQ(m.fragmentation_delay_s, 0.75);
  EXPECT_EQ(m.max_queue_length, 2);
  ASSERT_EQ(m.accounts.size(), 2u);
  // a: slowdowns 1 and 130/50; b: 190/100 and 1.
  EXPECT_EQ(m.accounts[0].account, "a");
  EXPECT_EQ(m.accounts[0].jobs, 2);
  EXPECT_DOUBLE_EQ(m.accounts[0].avg_queue_s, 40);
  EXPECT_DOUBLE_EQ(m.accounts[0].slowdown, (1 + 2.6) / 2);
  EXPECT_DOUBLE_EQ(m.accounts[0].ipu_hours, 500.0 / 3600);
  EXPECT_EQ(m.accounts[1].account, "b");
  EXPECT_DOUBLE_EQ(m.accounts[1].slowdown, (1.9 + 1) / 2);
  EXPECT_DOUBLE_EQ(m.jain, JainIndex({1.8, 1.45}));
}

TEST(MetricsTest, EmptyRunGivesZeros) {
  PolicyRun run;
  run.policy = "backfill";
  run.pod_ipus = 16;
  const Metrics m = ComputeMetrics(run);
  EXPECT_EQ(m.jobs, 0);
  EXPECT_EQ(m.makespan_s, 0);
  EXPECT_EQ(m.utilisation, 0);
  EXPECT_EQ(m.jain, 1);
  EXPECT_TRUE(m.accounts.empty());
}

}  // namespace
}  // namespace ipupod::replay
