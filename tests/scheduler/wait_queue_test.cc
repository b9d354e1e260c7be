#include "scheduler/wait_queue.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace ipupod::scheduler {
namespace {

using device::Block;

const Block kPod16{0, 16};

Demand Pool(int size) { return Demand{size, kPod16, MaskOf(kPod16)}; }

IpuMask FreeExcept(const std::vector<Block>& busy) {
  IpuMask mask = MaskOf(kPod16);
  for (const Block& b : busy) mask &= ~MaskOf(b);
  return mask;
}

const absl::Time kNow = absl::FromUnixSeconds(1000000);

// IPUs not free are busy until `busy_until` (InfiniteFuture: not known).
PlanContext Context(const IpuMask& free, const IpuMask& healthy,
                    absl::Time busy_until = absl::InfiniteFuture()) {
  PlanContext c;
  c.allocatable = free;
  c.healthy = healthy;
  c.now = kNow;
  for (int i = 0; i < device::kMaxPodIpus; ++i) c.free_at[i] = free.test(i) ? kNow : busy_until;
  return c;
}

BackfillPlan Plan(const std::vector<Demand>& demands, const IpuMask& free, const IpuMask& healthy) {
  return PlanBackfill(demands, Context(free, healthy));
}

Demand Timed(int size, absl::Duration duration) {
  Demand d = Pool(size);
  d.duration = duration;
  return d;
}

Waiter W(const std::string& ticket) {
  Waiter w;
  w.ticket = ticket;
  w.num_ipus = 1;
  return w;
}

TEST(WaitQueueTest, FirstComeFirstServedOnAnEmptyPod) {
  const BackfillPlan plan =
      Plan({Pool(8), Pool(4), Pool(4), Pool(1)}, MaskOf(kPod16), MaskOf(kPod16));
  EXPECT_EQ(plan.grants[0], (Block{0, 8}));
  EXPECT_EQ(plan.grants[1], (Block{8, 4}));
  EXPECT_EQ(plan.grants[2], (Block{12, 4}));
  EXPECT_EQ(plan.grants[3], std::nullopt);
  EXPECT_TRUE(plan.reserved.any());  // the last one reserves a block
}

TEST(WaitQueueTest, HeadReservesAndLaterRequestsMayNotDelayIt) {
  // 0-7 and 8-11 in use; 12-15 free. The head wants 8: it reserves 8-15
  // (4 in use, fewer than 0-7). A later pair would fit on 12-13 but that
  // would delay the head, so it is not granted.
  const IpuMask free = FreeExcept({{0, 8}, {8, 4}});
  const BackfillPlan plan = Plan({Pool(8), Pool(2)}, free, MaskOf(kPod16));
  EXPECT_EQ(plan.grants[0], std::nullopt);
  EXPECT_EQ(plan.reservations[0], (Block{8, 8}));
  EXPECT_EQ(plan.grants[1], std::nullopt);
  EXPECT_EQ(plan.reserved, MaskOf(Block{8, 8}) | MaskOf(*plan.reservations[1]));
}

TEST(WaitQueueTest, BackfillsOutsideTheHeadsReservation) {
  // 0-3 and 8-11 in use. The head wants 8: 0-7 and 8-15 tie (4 in use each),
  // so it reserves 0-7. A later pair fits on 12-13, outside, and is granted.
  const IpuMask free = FreeExcept({{0, 4}, {8, 4}});
  const BackfillPlan plan = Plan({Pool(8), Pool(2), Pool(4)}, free, MaskOf(kPod16));
  EXPECT_EQ(plan.reservations[0], (Block{0, 8}));
  EXPECT_EQ(plan.grants[1], (Block{12, 2}));
  // The quad would fit on 4-7 only, inside the reservation: not granted.
  EXPECT_EQ(plan.grants[2], std::nullopt);
}

TEST(WaitQueueTest, NonWaitRequestIsPlannedAtTheTail) {
  // Same as above, the pair planned as the last demand: granted only outside.
  const IpuMask free = FreeExcept({{0, 8}, {8, 4}});
  const BackfillPlan plan = Plan({Pool(8), Pool(2)}, free, MaskOf(kPod16));
  EXPECT_FALSE(plan.grants.back().has_value());
}

TEST(WaitQueueTest, DemandsOfDifferentPoolsDoNotInterfere) {
  const Demand partition{4, Block{0, 4}, MaskOf(Block{0, 4})};
  const Demand pool{8, kPod16, MaskOf(kPod16) & ~MaskOf(Block{0, 4})};
  const IpuMask free = FreeExcept({{0, 2}, {8, 1}});
  const BackfillPlan plan = Plan({partition, pool, Pool(1)}, free, MaskOf(kPod16));
  EXPECT_EQ(plan.reservations[0], (Block{0, 4}));
  EXPECT_EQ(plan.grants[1], std::nullopt);
  EXPECT_EQ(plan.reservations[1], (Block{8, 8}));
  EXPECT_EQ(plan.grants[2], (Block{4, 1}));  // neither reservation covers 4-7
}

TEST(WaitQueueTest, NoReservationWhenEveryBlockHoldsAFailedIpu) {
  IpuMask healthy = MaskOf(kPod16);
  healthy.reset(3);
  IpuMask free = healthy;
  free.reset(9);
  const BackfillPlan plan = Plan({Pool(16), Pool(2)}, free, healthy);
  EXPECT_EQ(plan.reservations[0], std::nullopt);
  // Pairs 0-1 and 10-11 both sit in a quad with one unavailable IPU: lowest wins.
  EXPECT_EQ(plan.grants[1], (Block{0, 2}));
}

TEST(WaitQueueTest, ReservationIsTheBlockThatFreesSoonest) {
  // 0-7 busy for an hour, 8-11 busy for a minute; 12-15 free. An eight
  // reserves 8-15 (free in a minute), not 0-7.
  PlanContext c = Context(FreeExcept({{0, 8}, {8, 4}}), MaskOf(kPod16));
  for (int i = 0; i < 8; ++i) c.free_at[i] = kNow + absl::Hours(1);
  for (int i = 8; i < 12; ++i) c.free_at[i] = kNow + absl::Minutes(1);
  const BackfillPlan plan = PlanBackfill({Pool(8)}, c);
  EXPECT_EQ(plan.reservations[0], (Block{8, 8}));
  EXPECT_EQ(plan.reservation_starts[0], kNow + absl::Minutes(1));
}

TEST(WaitQueueTest, ShortRequestsBackfillOverAReservationTheyEndBefore) {
  // 0-7 and 8-11 busy for ten minutes; the head reserves 8-15 from then on.
  // A pair that will be done in five minutes may use 12-13 now; one of an
  // hour or of unknown length may not.
  const PlanContext c =
      Context(FreeExcept({{0, 8}, {8, 4}}), MaskOf(kPod16), kNow + absl::Minutes(10));
  const BackfillPlan plan =
      PlanBackfill({Pool(8), Timed(2, absl::Hours(1)), Pool(2), Timed(2, absl::Minutes(5))}, c);
  EXPECT_EQ(plan.reservations[0], (Block{8, 8}));
  EXPECT_EQ(plan.grants[1], std::nullopt);
  EXPECT_EQ(plan.grants[2], std::nullopt);
  ASSERT_TRUE(plan.grants[3].has_value());
  EXPECT_TRUE((MaskOf(*plan.grants[3]) & MaskOf(Block{12, 4})).any());
}

TEST(WaitQueueTest, AReservationThatMayFreeAnyMomentIsNeverBackfilled) {
  // The sessions on 8-11 have no time limit: the head's block may free at
  // any moment, so even a one-minute request keeps off it.
  const PlanContext c = Context(FreeExcept({{0, 8}, {8, 4}}), MaskOf(kPod16));
  const BackfillPlan plan = PlanBackfill({Pool(8), Timed(2, absl::Minutes(1))}, c);
  EXPECT_EQ(plan.reservations[0], (Block{8, 8}));
  EXPECT_EQ(plan.reservation_starts[0], absl::InfiniteFuture());
  EXPECT_EQ(plan.grants[1], std::nullopt);
}

TEST(WaitQueueTest, FifoStartsNothingBehindAHeadThatCannotStart) {
  const IpuMask free = FreeExcept({{0, 8}, {8, 4}});
  PlanContext c = Context(free, MaskOf(kPod16));
  c.fifo = true;
  const BackfillPlan plan = PlanBackfill({Pool(8), Pool(1)}, c);
  EXPECT_EQ(plan.grants[0], std::nullopt);
  EXPECT_EQ(plan.grants[1], std::nullopt);  // 12-15 are free, but it is behind the head
  EXPECT_TRUE(plan.fits_without_reservations[1]);
}

TEST(WaitQueueTest, HeldDemandsNeitherStartNorReserve) {
  const IpuMask free = FreeExcept({{0, 8}, {8, 4}});
  int granted = -1;
  const PlanHooks hooks{[](size_t i) { return i == 0 ? std::string("UserMaxIpus") : ""; },
                        [&](size_t i) { granted = static_cast<int>(i); }};
  const BackfillPlan plan = PlanBackfill({Pool(8), Pool(2)}, Context(free, MaskOf(kPod16)), &hooks);
  EXPECT_EQ(plan.held[0], "UserMaxIpus");
  EXPECT_EQ(plan.reservations[0], std::nullopt);
  EXPECT_TRUE(plan.grants[1].has_value());  // nothing reserved ahead of it
  EXPECT_EQ(granted, 1);
}

TEST(WaitQueueTest, FragmentationIsToldApartFromLackOfIpus) {
  // Four free IPUs, 1, 3, 5 and 7, no aligned pair among them.
  IpuMask free;
  for (int i : {1, 3, 5, 7}) free.set(i);
  const BackfillPlan plan = Plan({Pool(2), Pool(8)}, free, MaskOf(kPod16));
  EXPECT_TRUE(plan.fragmented[0]);
  EXPECT_FALSE(plan.fragmented[1]);  // eight need more than are free
  EXPECT_FALSE(plan.fits_without_reservations[0]);
}

TEST(WaitQueueTest, AWalkKnowsWhenNoOneFurtherCouldStart) {
  // 0-11 busy for ten minutes; the head reserves the pod from then on; 12-15
  // are free for demands that end within the ten minutes.
  BackfillWalk walk(
      Context(FreeExcept({{0, 8}, {8, 4}}), MaskOf(kPod16), kNow + absl::Minutes(10)));
  walk.Add(Pool(16));
  EXPECT_TRUE(walk.MayStart(4, absl::Minutes(5)));
  EXPECT_FALSE(walk.MayStart(8, absl::Minutes(5)));   // only four are free
  EXPECT_FALSE(walk.MayStart(1, absl::Minutes(11)));  // would delay the head
  EXPECT_FALSE(walk.MayStart(1, absl::InfiniteDuration()));
  walk.Add(Timed(4, absl::Minutes(5)));  // takes 12-15
  ASSERT_TRUE(walk.plan().grants[1].has_value());
  EXPECT_FALSE(walk.MayStart(1, absl::Minutes(1)));
}

// Priorities as a table by ticket; every waiter settled unless named in
// `ageing`, where priority rises with time waited (an hour = 1).
struct FakePriorities {
  std::map<std::string, double> base;
  std::set<std::string> ageing;
  absl::Time now = kNow;
  WalkPriority Get() const {
    return WalkPriority{[this](const Waiter& w) {
                          const double age =
                              ageing.count(w.ticket) ? absl::ToDoubleHours(now - w.enqueued) : 0;
                          return base.at(w.ticket) + age;
                        },
                        [this](const Waiter& w) { return ageing.count(w.ticket) == 0; }};
  }
};

Waiter Queued(const std::string& ticket, uint64_t sequence, const std::string& account,
              absl::Time enqueued = kNow) {
  Waiter w = W(ticket);
  w.sequence = sequence;
  w.account = account;
  w.enqueued = enqueued;
  return w;
}

std::vector<std::string> Order(const WaitQueue& queue, const WalkPriority& priority,
                               const Waiter* extra = nullptr) {
  std::vector<std::string> tickets;
  WaitQueue::Cursor cursor = queue.Walk(priority, extra);
  while (const Waiter* w = cursor.Next()) tickets.push_back(w->ticket);
  return tickets;
}

TEST(WaitQueueTest, TheOrderIsPriorityThenArrival) {
  WaitQueue queue(8);
  FakePriorities p;
  // Each account its own priority (settled waiters of a group are equal).
  p.base = {{"a", 1}, {"b", 5}, {"c", 1}, {"d", 3}, {"e", 2}};
  const WalkPriority priority = p.Get();
  ASSERT_TRUE(queue.Push(Queued("a", 1, "x"), true).ok());
  ASSERT_TRUE(queue.Push(Queued("b", 2, "y"), true).ok());
  ASSERT_TRUE(queue.Push(Queued("c", 3, "x"), true).ok());
  ASSERT_TRUE(queue.Push(Queued("d", 4, "w"), true).ok());
  EXPECT_EQ(Order(queue, priority), (std::vector<std::string>{"b", "d", "a", "c"}));
  // A request not queued is walked at its place.
  const Waiter e = Queued("e", 5, "z");
  EXPECT_EQ(Order(queue, priority, &e), (std::vector<std::string>{"b", "d", "e", "a", "c"}));
}

TEST(WaitQueueTest, AgeingWaitersOvertakeAsTheyAgeAndSettle) {
  WaitQueue queue(8);
  FakePriorities p;
  p.base = {{"old", 10}, {"young", 0}, {"new", 0}};
  p.ageing = {"young", "new"};
  const WalkPriority priority = p.Get();
  ASSERT_TRUE(queue.Push(Queued("old", 1, "x"), true).ok());
  ASSERT_TRUE(queue.Push(Queued("young", 2, "x", kNow - absl::Hours(5)), false).ok());
  ASSERT_TRUE(queue.Push(Queued("new", 3, "x"), false).ok());
  EXPECT_EQ(Order(queue, priority), (std::vector<std::string>{"old", "young", "new"}));
  p.now = kNow + absl::Hours(6);  // young: 11, new: 6
  EXPECT_EQ(Order(queue, priority), (std::vector<std::string>{"young", "old", "new"}));
  // At its cap young's priority is old's (a group's settled waiters are
  // equal): the earlier arrival goes first.
  p.ageing.erase("young");
  p.base["young"] = 10;
  queue.Settle(priority);
  EXPECT_EQ(Order(queue, priority), (std::vector<std::string>{"old", "young", "new"}));
}

TEST(WaitQueueTest, PushIsBounded) {
  WaitQueue queue(2);
  ASSERT_TRUE(queue.Push(W("a"), true).ok());
  ASSERT_TRUE(queue.Push(W("b"), true).ok());
  EXPECT_TRUE(queue.full());
  absl::StatusOr<Waiter*> full = queue.Push(W("c"), true);
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(queue.size(), 2);
}

TEST(WaitQueueTest, RemoveFindAndTakeAll) {
  WaitQueue queue(8);
  for (uint64_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(queue.Push(Queued(std::string(1, static_cast<char>('a' + i)), i, "x"), true).ok());
  }
  EXPECT_NE(queue.Find("c"), nullptr);
  EXPECT_EQ(queue.Find("zzz"), nullptr);
  std::optional<Waiter> b = queue.Remove("b");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->ticket, "b");
  EXPECT_FALSE(queue.Remove("b").has_value());
  FakePriorities p;
  p.base = {{"a", 0}, {"c", 0}};
  EXPECT_EQ(Order(queue, p.Get()), (std::vector<std::string>{"a", "c"}));
  std::vector<Waiter> all = queue.TakeAll();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].ticket, "a");
  EXPECT_TRUE(queue.empty());
}

TEST(WaitQueueTest, InvariantsHoldThroughPushRemoveSettleAndRebuild) {
  WaitQueue queue(8);
  EXPECT_TRUE(queue.CheckInvariants().ok());
  FakePriorities p;
  p.base = {{"a", 1}, {"b", 1}, {"c", 1}};
  p.ageing = {"b"};
  ASSERT_TRUE(queue.Push(Queued("a", 1, "x"), true).ok());
  ASSERT_TRUE(queue.Push(Queued("b", 2, "x", kNow - absl::Hours(1)), false).ok());
  ASSERT_TRUE(queue.Push(Queued("c", 3, "y"), true).ok());
  queue.SetFragmented(queue.Find("c"), true);
  EXPECT_TRUE(queue.CheckInvariants().ok());
  p.ageing.clear();
  queue.Settle(p.Get());
  EXPECT_TRUE(queue.CheckInvariants().ok());
  queue.Rebuild(p.Get(), [](const Waiter&) { return absl::Hours(2); });
  EXPECT_TRUE(queue.CheckInvariants().ok());
  ASSERT_TRUE(queue.Remove("c").has_value());
  EXPECT_TRUE(queue.CheckInvariants().ok());
}

// A caller that changes, through Mutable, a field the order reads breaks the
// run's order; one that changes the group's fields files it in the wrong run.
TEST(WaitQueueTest, InvariantsCatchAWaiterChangedBehindTheQueuesBack) {
  WaitQueue queue(8);
  ASSERT_TRUE(queue.Push(Queued("a", 1, "x"), true).ok());
  ASSERT_TRUE(queue.Push(Queued("b", 2, "x"), true).ok());
  queue.Find("a")->sequence = 9;
  absl::Status broken = queue.CheckInvariants();
  EXPECT_EQ(broken.code(), absl::StatusCode::kInternal);
  EXPECT_NE(broken.message().find("out of order"), absl::string_view::npos) << broken;
  queue.Find("a")->sequence = 1;
  ASSERT_TRUE(queue.CheckInvariants().ok());
  queue.Find("b")->account = "elsewhere";
  broken = queue.CheckInvariants();
  EXPECT_EQ(broken.code(), absl::StatusCode::kInternal);
  EXPECT_NE(broken.message().find("wrong run"), absl::string_view::npos) << broken;
}

// Push REQUIRES a unique sequence: a run keeps one waiter per sequence, so a
// second with the same one would be stored but never walked.
TEST(WaitQueueTest, InvariantsCatchAWaiterTheOrderLost) {
  WaitQueue queue(8);
  ASSERT_TRUE(queue.Push(Queued("a", 1, "x"), true).ok());
  ASSERT_TRUE(queue.Push(Queued("b", 1, "x"), true).ok());
  EXPECT_NE(queue.CheckInvariants().message().find("2 waiters, 1 indexed"), absl::string_view::npos)
      << queue.CheckInvariants();
}

TEST(WaitQueueTest, KeepsTheFiguresAWalkStopsOn) {
  WaitQueue queue(8);
  Waiter a = Queued("a", 1, "x");
  a.num_ipus = 4;
  a.hold = absl::Minutes(5);
  a.watches_position = true;
  Waiter b = Queued("b", 2, "x");
  b.hold = absl::Hours(1);
  ASSERT_TRUE(queue.Push(a, true).ok());
  ASSERT_TRUE(queue.Push(b, true).ok());
  EXPECT_EQ(queue.holds()[SizeLevel(4)].begin()->first, absl::Minutes(5));
  EXPECT_EQ(queue.holds()[SizeLevel(1)].begin()->first, absl::Hours(1));
  EXPECT_EQ(queue.watchers(), 1);
  queue.Remove("a");
  EXPECT_TRUE(queue.holds()[SizeLevel(4)].empty());
  EXPECT_EQ(queue.watchers(), 0);
}

}  // namespace
}  // namespace ipupod::scheduler
