#include "server/status/recent_events.h"

#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace ipupod::status {
namespace {

PodEvent Fault(int64_t t) {
  PodEvent event;
  event.time_unix_ms = t;
  event.kind = "fault";
  event.what = "ipu-reset";
  return event;
}

TEST(RecentEventsTest, KeepsTheNewestFirstUpToItsCapacity) {
  RecentEvents events(3);
  for (int64_t t = 1; t <= 5; ++t) events.Record(Fault(t));
  std::vector<PodEvent> shown = events.Snapshot();
  ASSERT_EQ(shown.size(), 3u);
  EXPECT_EQ(shown[0].time_unix_ms, 5);
  EXPECT_EQ(shown[2].time_unix_ms, 3);
  EXPECT_EQ(events.total(), 5);
}

TEST(RecentEventsTest, FaultsResetsAndRepairsBecomeEventsAsThePageShowsThem) {
  RecentEvents events;
  scheduler::PodEventObserver& observer = events;
  observer.OnGranted(scheduler::GrantEvent{});  // not a fault, reset or repair: not kept
  observer.OnFault(scheduler::FaultEvent{
      2, scheduler::FaultKind::kUnrecoverable, false, {2}, {"s-1"}, "admin", 1000});
  observer.OnFault(
      scheduler::FaultEvent{5, scheduler::FaultKind::kIpuReset, true, {5}, {}, "", 1500});
  observer.OnResetStarted(
      scheduler::ResetEvent{RecoveryAction::kPartitionReset, true, {4, 5, 6, 7}, {}, 0.5, 2000});
  observer.OnResetStarted(
      scheduler::ResetEvent{RecoveryAction::kFullReset, false, {0, 1, 3}, {"s-2"}, 1, 2500});
  observer.OnRepaired(scheduler::RepairEvent{2, "admin", 3000});
  const std::vector<PodEvent> shown = events.Snapshot();
  ASSERT_EQ(shown.size(), 5u);
  EXPECT_EQ(events.total(), 5);
  const PodEvent& injected = shown[4];
  EXPECT_EQ(injected.kind, "fault");
  EXPECT_EQ(injected.what, "unrecoverable");
  EXPECT_EQ(injected.origin, "admin");
  EXPECT_EQ(injected.target, "IPU 2");
  EXPECT_EQ(injected.sessions, std::vector<std::string>{"s-1"});
  EXPECT_EQ(shown[3].origin, "random");
  EXPECT_EQ(shown[3].what, "ipu-reset");
  EXPECT_EQ(shown[2].kind, "reset");
  EXPECT_EQ(shown[2].what, "partition");
  EXPECT_EQ(shown[2].origin, "automatic");
  EXPECT_EQ(shown[2].target, "IPUs 4-7");
  EXPECT_EQ(shown[1].what, "pod");
  EXPECT_EQ(shown[1].target, "pod");
  EXPECT_EQ(shown[1].origin, "requested");
  EXPECT_EQ(shown[0].kind, "repair");
  EXPECT_EQ(shown[0].origin, "admin");
  EXPECT_EQ(shown[0].time_unix_ms, 3000);
}

TEST(RecentEventsTest, ZeroCapacityKeepsNothingButCounts) {
  RecentEvents events(0);
  events.Record(Fault(1));
  EXPECT_TRUE(events.Snapshot().empty());
  EXPECT_EQ(events.total(), 1);
}

TEST(RecentEventsTest, ConcurrentRecordsAndSnapshotsStayBounded) {
  RecentEvents events(10);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&events] {
      for (int i = 0; i < 1000; ++i) events.Record(Fault(i));
    });
  }
  for (int i = 0; i < 200; ++i) EXPECT_LE(events.Snapshot().size(), 10u);
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(events.total(), 4000);
  EXPECT_EQ(events.Snapshot().size(), 10u);
}

}  // namespace
}  // namespace ipupod::status
