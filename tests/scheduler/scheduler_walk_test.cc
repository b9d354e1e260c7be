// The queue walk at scale: its bound (max_backfill_waiters), its early stop,
// and the coalesced position messages (docs/scheduling.md, "Speed").
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/scheduler/scheduler_fixture.h"

namespace ipupod::scheduler::testing {
namespace {

using ::testing::ElementsAre;

AttachRequest Timed(int64_t n, absl::Duration limit, bool wait = true) {
  AttachRequest r = Req(n, wait);
  r.time_limit = limit;
  return r;
}

class WalkTest : public SchedulerTest {
 protected:
  // Carol holds 0-7 and 8-11 for an hour, so 12-15 are free; Bob's request
  // for the whole pod reserves it from then on, and Dave's waits behind it.
  // (Multifactor: the larger requests go first.)
  void Crowd() {
    MustAttach(carol_, Timed(8, absl::Hours(1), false));
    MustAttach(carol_, Timed(4, absl::Hours(1), false));
    head_ = MustAttach(bob_, Timed(16, absl::Hours(2)));
    second_ = MustAttach(dave_, Timed(16, absl::Hours(2)));
  }
  std::vector<std::string> Reasons() {
    std::vector<std::string> reasons;
    for (const QueueEntryView& e : sched_->ListQueue()) reasons.push_back(e.reason);
    return reasons;
  }

  const Caller carol_{"carol", false};
  const Caller dave_{"dave", false};
  const Caller erin_{"erin", false};
  Handle head_, second_;
};

TEST_F(WalkTest, AWaiterPastTheBoundIsNotBackfilledInThatWalkButIsLater) {
  SchedulerOptions options = Options();
  options.max_backfill_waiters = 1;  // the head and one more
  Start(options);
  Crowd();
  // Erin's pair would end long before the head's block frees, but two
  // waiters are ahead of her: the walk does not reach her.
  Handle pair = MustAttach(erin_, Timed(2, absl::Minutes(10)));
  EXPECT_FALSE(pair.observer->granted().has_value());
  EXPECT_THAT(Reasons(), ElementsAre("Resources", "Resources", "Priority"));
  sched_->Release(second_.ticket);  // one fewer ahead: now within the bound
  ASSERT_TRUE(pair.observer->granted().has_value());
  EXPECT_THAT(pair.observer->granted()->ipus, ElementsAre(12, 13));
}

TEST_F(WalkTest, WithoutTheBoundTheSameWaiterIsBackfilledAtOnce) {
  SchedulerOptions options = Options();
  options.max_backfill_waiters = 0;
  Start(options);
  Crowd();
  Handle pair = MustAttach(erin_, Timed(2, absl::Minutes(10)));
  ASSERT_TRUE(pair.observer->granted().has_value());
  EXPECT_THAT(pair.observer->granted()->ipus, ElementsAre(12, 13));
}

TEST_F(WalkTest, TheWalkGoesOnWhileAnyoneFurtherBackCouldStart) {
  MustAttach(carol_, Timed(8, absl::Hours(1), false));
  MustAttach(carol_, Timed(4, absl::Hours(1), false));
  MustAttach(carol_, Timed(2, absl::Hours(1), false));  // 14-15 free
  MustAttach(bob_, Timed(16, absl::Hours(2)));
  // Twenty quads that cannot start (two IPUs are free), then a single that
  // would delay the head, then one short enough to run before it starts.
  for (int i = 0; i < 20; ++i) MustAttach(dave_, Timed(4, absl::Hours(2)));
  Handle late = MustAttach(erin_, Timed(1, absl::Hours(3)));
  EXPECT_FALSE(late.observer->granted().has_value());
  Handle quick = MustAttach(erin_, Timed(1, absl::Minutes(10)));
  ASSERT_TRUE(quick.observer->granted().has_value());
  // The next walk stops after the head (nothing free fits anyone behind it
  // but the long single): the reasons are still those of a whole walk.
  sched_->Reprioritize();
  std::vector<std::string> expected(22, "Resources");
  expected.back() = "Priority";  // the single fits, were nothing reserved
  EXPECT_EQ(Reasons(), expected);
}

// An observer that ignores positions, as the trace replay's does.
class QuietObserver : public RecordingObserver {
 public:
  bool WantsPositions() const override { return false; }
};

TEST_F(WalkTest, PositionsPastTheFirstTenWaitForThePeriodicPass) {
  MustAttach(alice_, Req(16));
  std::vector<Handle> waiters;
  for (int i = 0; i < 12; ++i) waiters.push_back(MustAttach(bob_, Req(16, true)));
  const Handle& twelfth = waiters.back();
  ASSERT_EQ(twelfth.observer->queued().size(), 1u);  // on entry
  EXPECT_EQ(twelfth.observer->queued()[0].position, 12);
  MustAttach(bob_, Req(16, true));
  EXPECT_EQ(waiters[0].observer->queued().back().queue_length, 13);  // near the front: at once
  EXPECT_EQ(twelfth.observer->queued().size(), 1u);
  sched_->Release(waiters[0].ticket);
  EXPECT_EQ(waiters[10].observer->queued().back().position, 10);
  EXPECT_EQ(twelfth.observer->queued().size(), 1u);  // 11th now: not yet told
  sched_->Reprioritize();                            // the periodic pass
  ASSERT_EQ(twelfth.observer->queued().size(), 2u);
  EXPECT_EQ(twelfth.observer->queued().back().position, 11);
  EXPECT_EQ(twelfth.observer->queued().back().queue_length, 12);
  auto quiet = std::make_shared<QuietObserver>();
  ASSERT_TRUE(sched_->Attach(bob_, Req(16, true), quiet).ok());
  sched_->Reprioritize();
  EXPECT_TRUE(quiet->queued().empty());
}

}  // namespace
}  // namespace ipupod::scheduler::testing
