#include "device/runtime/compute_gate.h"

#include <atomic>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/sync.h"
#include "tests/support/eventually.h"

namespace ipupod::runtime {
namespace {

using ::testing::HasSubstr;

const std::function<bool()> kNeverCancelled = [] { return false; };

using test_support::Eventually;

TEST(ComputeGateTest, SlotIsHeldUntilDestroyed) {
  ComputeGate gate(1, 8);
  {
    auto slot = gate.Acquire(absl::Seconds(1), kNeverCancelled);
    ASSERT_TRUE(slot.ok()) << slot.status();
    EXPECT_EQ(gate.running(), 1);
    auto second = gate.Acquire(absl::Milliseconds(20), kNeverCancelled);
    EXPECT_EQ(second.status().code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_THAT(second.status().message(), HasSubstr("1 running"));
    EXPECT_EQ(gate.waiting(), 0);  // the timed-out waiter left the line
  }
  EXPECT_EQ(gate.running(), 0);
  EXPECT_TRUE(gate.Acquire(absl::Seconds(1), kNeverCancelled).ok());
}

TEST(ComputeGateTest, CancelledWaiterLeavesTheLine) {
  ComputeGate gate(1, 8);
  auto held = gate.Acquire(absl::Seconds(1), kNeverCancelled);
  ASSERT_TRUE(held.ok());
  std::atomic<bool> cancel{false};
  auto waiter = gate.Acquire(absl::Seconds(1), [&] { return cancel.exchange(true); });
  EXPECT_EQ(waiter.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(gate.waiting(), 0);
}

TEST(ComputeGateTest, FullLineIsResourceExhausted) {
  ComputeGate gate(1, 1);
  auto held = gate.Acquire(absl::Seconds(1), kNeverCancelled);
  ASSERT_TRUE(held.ok());
  std::thread waiter([&] { (void)gate.Acquire(absl::Seconds(10), kNeverCancelled); });
  ASSERT_TRUE(Eventually([&] { return gate.waiting() == 1; }));
  auto refused = gate.Acquire(absl::Seconds(1), kNeverCancelled);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  { auto release = std::move(*held); }
  waiter.join();
}

// Six waiters queue (one after another) behind `slots` held slots; once
// those are released every waiter runs, never more than `slots` at once, and
// with one slot strictly in arrival order (each records its turn while it
// still holds the slot).
void RunSixWaiters(int slots, std::vector<int>* order, int* peak_running) {
  ComputeGate gate(slots, 16);
  std::vector<ComputeGate::Slot> held;
  for (int i = 0; i < slots; ++i) held.push_back(*gate.Acquire(absl::Seconds(1), kNeverCancelled));
  absl::Mutex mu;
  std::atomic<int> peak{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(Eventually([&] { return gate.waiting() == i; }));
    threads.emplace_back([&, i] {
      auto slot = gate.Acquire(absl::Seconds(10), kNeverCancelled);
      ASSERT_TRUE(slot.ok()) << slot.status();
      int now = gate.running();
      int seen = peak.load();
      while (now > seen && !peak.compare_exchange_weak(seen, now)) {
      }
      sync::MutexLock lock(&mu);
      order->push_back(i);
    });
  }
  ASSERT_TRUE(Eventually([&] { return gate.waiting() == 6; }));
  held.clear();
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(gate.running(), 0);
  *peak_running = peak.load();
}

TEST(ComputeGateTest, OneSlotServesWaitersInArrivalOrder) {
  std::vector<int> order;
  int peak = 0;
  RunSixWaiters(1, &order, &peak);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(peak, 1);
}

TEST(ComputeGateTest, NeverMoreThanTheSlotsComputeAtOnce) {
  std::vector<int> order;
  int peak = 0;
  RunSixWaiters(2, &order, &peak);
  EXPECT_EQ(order.size(), 6u);
  EXPECT_LE(peak, 2);
}

// Issue 29: a long step held its slot for its whole length. At its interrupt
// points it now calls YieldIfDue: nothing happens while nobody waits or
// before its slice is up; after it, a waiter computes first and the long
// step gets its slot back.
TEST(ComputeGateTest, AHolderYieldsToAWaiterAfterItsSliceAndGetsItsSlotBack) {
  ComputeGate gate(1, 8);
  const absl::Time acquired = absl::Now();
  auto slot = gate.Acquire(absl::Seconds(10), nullptr);
  ASSERT_TRUE(slot.ok());
  EXPECT_TRUE(gate.YieldIfDue(*slot, absl::Seconds(10), nullptr).ok());  // nobody waits
  std::atomic<bool> waiter_ran{false};
  absl::Time ran_at;
  std::thread waiter([&] {
    auto s = gate.Acquire(absl::Seconds(10), nullptr);
    ran_at = absl::Now();
    waiter_ran = s.ok();
  });
  ASSERT_TRUE(Eventually([&] { return gate.waiting() == 1; }));
  ASSERT_TRUE(Eventually([&] {
    EXPECT_TRUE(gate.YieldIfDue(*slot, absl::Seconds(10), nullptr).ok());
    return waiter_ran.load();
  }));
  waiter.join();
  EXPECT_GE(ran_at - acquired, ComputeGate::kSliceTime) << "yields only once the slice is up";
  EXPECT_EQ(gate.running(), 1) << "the yielding holder has its slot again";
  EXPECT_EQ(gate.waiting(), 0);
}

TEST(ComputeGateTest, AYieldThatCannotGetItsSlotBackHoldsNothing) {
  ComputeGate gate(1, 8);
  auto slot = gate.Acquire(absl::Seconds(10), nullptr);
  ASSERT_TRUE(slot.ok());
  absl::Notification release_waiter;
  std::thread waiter([&] {
    auto s = gate.Acquire(absl::Seconds(10), nullptr);
    release_waiter.WaitForNotificationWithTimeout(absl::Seconds(10));
  });
  ASSERT_TRUE(Eventually([&] { return gate.waiting() == 1; }));
  absl::Status yielded;
  ASSERT_TRUE(Eventually([&] {
    yielded = gate.YieldIfDue(*slot, absl::Seconds(10), [] { return true; });
    return !yielded.ok();
  }));
  EXPECT_EQ(yielded.code(), absl::StatusCode::kCancelled);
  release_waiter.Notify();
  waiter.join();
  { auto gone = std::move(*slot); }  // releases nothing: it holds no slot
  EXPECT_EQ(gate.running(), 0);
  EXPECT_TRUE(gate.Acquire(absl::Seconds(1), nullptr).ok());
}

}  // namespace
}  // namespace ipupod::runtime
