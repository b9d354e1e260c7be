#include "status/recent_events.h"

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
