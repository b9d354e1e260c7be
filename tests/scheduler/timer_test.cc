#include "scheduler/timer.h"

#include <atomic>
#include <vector>

#include <gtest/gtest.h>

#include "absl/synchronization/notification.h"
#include "tests/scheduler/test_util.h"

namespace ipupod::scheduler {
namespace {

using testing::PollUntil;

TEST(TimerTest, RunsCallbacksInDeadlineOrder) {
  Timer timer(16);
  absl::Mutex mu;
  std::vector<int> order;
  absl::Notification last;
  auto record = [&](int n) {
    sync::MutexLock lock(&mu);
    order.push_back(n);
  };
  ASSERT_TRUE(timer
                  .Schedule(absl::Milliseconds(30),
                            [&] {
                              record(3);
                              sync::Notify(&last);
                            })
                  .ok());
  ASSERT_TRUE(timer.Schedule(absl::Milliseconds(10), [&] { record(2); }).ok());
  ASSERT_TRUE(timer.Schedule(absl::ZeroDuration(), [&] { record(1); }).ok());
  ASSERT_TRUE(sync::WaitForNotificationWithTimeout(&last, testing::kWaitLimit));
  sync::MutexLock lock(&mu);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

TEST(TimerTest, CancelDropsAPendingCallback) {
  Timer timer(4);
  std::atomic<int> runs{0};
  absl::StatusOr<uint64_t> id = timer.Schedule(absl::Seconds(30), [&] { ++runs; });
  ASSERT_TRUE(id.ok());
  EXPECT_NE(*id, 0u);
  EXPECT_EQ(timer.pending(), 1u);
  EXPECT_TRUE(timer.Cancel(*id));
  EXPECT_FALSE(timer.Cancel(*id));
  EXPECT_EQ(timer.pending(), 0u);
  absl::Notification ran;
  ASSERT_TRUE(timer.Schedule(absl::ZeroDuration(), [&] { sync::Notify(&ran); }).ok());
  ASSERT_TRUE(sync::WaitForNotificationWithTimeout(&ran, testing::kWaitLimit));
  EXPECT_EQ(runs.load(), 0);
}

TEST(TimerTest, QueueIsBounded) {
  Timer timer(2);
  ASSERT_TRUE(timer.Schedule(absl::Seconds(30), [] {}).ok());
  ASSERT_TRUE(timer.Schedule(absl::Seconds(30), [] {}).ok());
  EXPECT_EQ(timer.Schedule(absl::Seconds(30), [] {}).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(TimerTest, CallbacksMayScheduleMore) {
  Timer timer(4);
  absl::Notification second;
  ASSERT_TRUE(
      timer
          .Schedule(
              absl::ZeroDuration(),
              [&] {
                EXPECT_TRUE(
                    timer.Schedule(absl::Milliseconds(1), [&] { sync::Notify(&second); }).ok());
              })
          .ok());
  EXPECT_TRUE(sync::WaitForNotificationWithTimeout(&second, testing::kWaitLimit));
}

TEST(TimerTest, StopDropsPendingAndRefusesNewWork) {
  std::atomic<int> runs{0};
  Timer timer(4);
  ASSERT_TRUE(timer.Schedule(absl::Seconds(30), [&] { ++runs; }).ok());
  const absl::Time start = absl::Now();
  timer.Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));  // no wait for the deadline
  timer.Stop();                                      // idempotent
  EXPECT_EQ(runs.load(), 0);
  EXPECT_EQ(timer.Schedule(absl::ZeroDuration(), [] {}).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(TimerTest, StopFromACallbackDoesNotDeadlock) {
  Timer timer(4);
  absl::Notification stopped;
  ASSERT_TRUE(timer
                  .Schedule(absl::ZeroDuration(),
                            [&] {
                              timer.Stop();
                              sync::Notify(&stopped);
                            })
                  .ok());
  EXPECT_TRUE(sync::WaitForNotificationWithTimeout(&stopped, testing::kWaitLimit));
  EXPECT_EQ(timer.Schedule(absl::ZeroDuration(), [] {}).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(TimerTest, IdleTimerStopsPromptly) {
  Timer timer(1);
  EXPECT_TRUE(PollUntil([&] { return timer.pending() == 0; }));
}

}  // namespace
}  // namespace ipupod::scheduler
