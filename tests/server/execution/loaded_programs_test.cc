// LoadedPrograms and SessionSlot: one slot per session, one operation at a
// time with a bounded wait (UNAVAILABLE naming the session), the loaded
// state and its generation, run counts, and dropping slots.
#include "server/execution/loaded_programs.h"

#include <atomic>
#include <memory>
#include <thread>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ipupod::execution {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kShortWait = absl::Milliseconds(50);

TEST(LoadedProgramsTest, EachSessionHasItsOwnSlot) {
  LoadedPrograms programs(kShortWait);
  absl::StatusOr<std::shared_ptr<SessionSlot>> a = programs.Acquire("s1-1");
  absl::StatusOr<std::shared_ptr<SessionSlot>> b = programs.Acquire("s1-2");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status() << ": another session's operation does not wait";
  EXPECT_NE(a->get(), b->get());
  EXPECT_EQ(programs.size(), 2u);
  (*a)->Release();
  absl::StatusOr<std::shared_ptr<SessionSlot>> again = programs.Acquire("s1-1");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), a->get()) << "the same session keeps its slot";
  (*again)->Release();
  (*b)->Release();
}

TEST(LoadedProgramsTest, ASecondOperationWaitsBoundedlyThenIsUnavailable) {
  LoadedPrograms programs(kShortWait);
  absl::StatusOr<std::shared_ptr<SessionSlot>> held = programs.Acquire("s1-1");
  ASSERT_TRUE(held.ok());
  const absl::Time start = absl::Now();
  absl::StatusOr<std::shared_ptr<SessionSlot>> second = programs.Acquire("s1-1");
  EXPECT_GE(absl::Now() - start, kShortWait);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(),
              HasSubstr("session s1-1 is busy with another load, weight transfer or run "
                        "(waited 50ms); retry when it has finished"));
  (*held)->Release();
  EXPECT_TRUE(programs.Acquire("s1-1").ok()) << "free again once released";
}

TEST(LoadedProgramsTest, AWaitingOperationRunsWhenTheFirstReleases) {
  LoadedPrograms programs(absl::Seconds(30));
  absl::StatusOr<std::shared_ptr<SessionSlot>> held = programs.Acquire("s1-1");
  ASSERT_TRUE(held.ok());
  std::atomic<bool> released{false};
  std::atomic<bool> second_ok{false};
  std::atomic<bool> overlapped{false};
  std::thread waiter([&] {
    absl::StatusOr<std::shared_ptr<SessionSlot>> slot = programs.Acquire("s1-1");
    second_ok = slot.ok();
    overlapped = !released.load();
    if (slot.ok()) (*slot)->Release();
  });
  released = true;
  (*held)->Release();
  waiter.join();
  EXPECT_TRUE(second_ok.load());
  EXPECT_FALSE(overlapped.load()) << "the second operation ran while the first held the slot";
}

TEST(LoadedProgramsTest, StateKeepsItsGenerationAndCountsRunsSinceTheLoad) {
  SessionSlot slot;
  EXPECT_EQ(slot.state().program, nullptr);
  EXPECT_EQ(slot.state().load_generation, 0u);
  LoadedState loaded;
  loaded.load_generation = 3;
  loaded.executable_size_bytes = 1234;
  loaded.simulated_load_seconds = 0.5;
  slot.set_state(loaded);
  EXPECT_EQ(slot.CountRun(), 1u);
  EXPECT_EQ(slot.CountRun(), 2u);
  LoadedState now = slot.state();
  EXPECT_EQ(now.load_generation, 3u);
  EXPECT_EQ(now.executable_size_bytes, 1234);
  EXPECT_DOUBLE_EQ(now.simulated_load_seconds, 0.5);
  EXPECT_EQ(now.runs, 2u);
  loaded.load_generation = 4;  // a new load starts counting again
  slot.set_state(loaded);
  EXPECT_EQ(slot.state().load_generation, 4u);
  EXPECT_EQ(slot.CountRun(), 1u);
}

TEST(LoadedProgramsTest, DropForgetsTheSlotButAnOperationFinishesOnIt) {
  LoadedPrograms programs(kShortWait);
  absl::StatusOr<std::shared_ptr<SessionSlot>> held = programs.Acquire("s1-1");
  ASSERT_TRUE(held.ok());
  std::weak_ptr<SessionSlot> watch = *held;
  programs.Drop("s1-1");
  programs.Drop("s1-9");  // unknown: nothing happens
  EXPECT_EQ(programs.size(), 0u);
  EXPECT_EQ((*held)->CountRun(), 1u) << "the running operation still has its slot";
  (*held)->Release();
  held->reset();
  EXPECT_TRUE(watch.expired()) << "freed once the operation let go";
  absl::StatusOr<std::shared_ptr<SessionSlot>> fresh = programs.Acquire("s1-1");
  ASSERT_TRUE(fresh.ok()) << "a dropped slot never blocks";
  (*fresh)->Release();
}

TEST(LoadedProgramsTest, DropIfUnloadedDropsOnlyThatEmptySlot) {
  LoadedPrograms programs(kShortWait);
  absl::StatusOr<std::shared_ptr<SessionSlot>> slot = programs.Acquire("s1-1");
  ASSERT_TRUE(slot.ok());
  (*slot)->Release();
  SessionSlot other;
  programs.DropIfUnloaded("s1-1", &other);
  EXPECT_EQ(programs.size(), 1u) << "another slot: kept";
  programs.DropIfUnloaded("s1-1", slot->get());
  EXPECT_EQ(programs.size(), 0u) << "no program: dropped";
}

}  // namespace
}  // namespace ipupod::execution
