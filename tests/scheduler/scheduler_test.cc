// Attach, sizes, names, partitions, the wait queue and sessions.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/scheduler/scheduler_fixture.h"

namespace ipupod::scheduler::testing {
namespace {

using device::IpuState;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
constexpr auto kExhausted = absl::StatusCode::kResourceExhausted;

// ---------------------------------------------------------------- attach & sizes

TEST_F(SchedulerTest, AttachGrantsAnAlignedBlockBeforeReturning) {
  Handle h = MustAttach(alice_, Req(4));
  EXPECT_EQ(h.ticket, "t1-1");
  ASSERT_TRUE(h.observer->granted().has_value());
  const SessionView s = *h.observer->granted();
  EXPECT_EQ(s.id, "s1-1");
  EXPECT_EQ(s.user, "alice");
  EXPECT_THAT(s.ipus, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(s.device_id, 24);
  EXPECT_EQ(s.requested_ipus, 4);
  EXPECT_TRUE(s.idle_ipus.empty());
  EXPECT_EQ(s.partition, "");
  EXPECT_EQ(s.client, "test");
  EXPECT_GT(s.attached_unix_ms, 0);
  EXPECT_FALSE(s.needs_load);
  EXPECT_TRUE(h.observer->queued().empty());

  PodView pod = sched_->GetPod();
  EXPECT_EQ(pod.free_ipus, 12);
  EXPECT_EQ(pod.ipus[2].state, IpuState::kAttached);
  EXPECT_EQ(pod.ipus[2].session, "s1-1");
  EXPECT_EQ(pod.ipus[2].owner, "alice");
  EXPECT_EQ(pod.ipus[4].session, "");
  ASSERT_EQ(pod.sessions.size(), 1u);

  absl::StatusOr<SessionView> got = sched_->GetSession(alice_, "s1-1");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->device_id, 24);
}

TEST_F(SchedulerTest, DeviceIdIsThePodWideIdOfTheBlock) {
  MustAttach(alice_, Req(8));
  Handle pair = MustAttach(bob_, Req(2));
  EXPECT_THAT(pair.observer->granted()->ipus, ElementsAre(8, 9));
  EXPECT_EQ(pair.observer->granted()->device_id, 20);
  Handle all = MustAttach(bob_, Req(1));
  EXPECT_EQ(all.observer->granted()->device_id, 10);
}

TEST_F(SchedulerTest, SessionIdsCarryTheBootId) {
  store_.boot = 4;
  Start(Options());
  EXPECT_EQ(MustAttach(alice_, Req(1)).session(), "s5-1");
  Start(Options(), /*with_store=*/false);
  Handle h = MustAttach(alice_, Req(1));
  EXPECT_EQ(h.session(), "s1-1");
  EXPECT_EQ(h.ticket, "t1-1");
}

TEST_F(SchedulerTest, NonPowerOfTwoNamesTheNearestSizes) {
  absl::Status s = AttachStatus(alice_, Req(3));
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_EQ(s.message(), "3 IPUs is not a power of two; ask for 2 or 4, or use --auto-round");
  EXPECT_THAT(AttachStatus(alice_, Req(12, true)).message(), HasSubstr("ask for 8 or 16"));
  ExpectPristine();
}

TEST_F(SchedulerTest, AutoRoundReservesTheLastIpusIdle) {
  AttachRequest r = Req(3);
  r.auto_round = true;
  Handle h = MustAttach(alice_, r);
  const SessionView s = *h.observer->granted();
  EXPECT_THAT(s.ipus, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(s.requested_ipus, 3);
  EXPECT_THAT(s.idle_ipus, ElementsAre(3));
  r.num_ipus = 5;
  EXPECT_THAT(MustAttach(alice_, r).observer->granted()->idle_ipus, ElementsAre(13, 14, 15));
}

TEST_F(SchedulerTest, LargerThanThePoolFailsAtOnceEvenWithWait) {
  absl::Status s = AttachStatus(alice_, Req(32, true));
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_THAT(s.message(), HasSubstr("32 IPUs requested but the pod (POD16) has 16"));
  MustPartition(alice_, "p1", 4);
  s = AttachStatus(alice_, Req(8, true, "p1"));
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_THAT(s.message(), HasSubstr("8 IPUs requested but partition p1 has 4"));
  AttachRequest r = Req(3, true, "p1");
  r.auto_round = true;
  EXPECT_TRUE(sched_->Attach(alice_, r, nullptr).ok());  // 3 -> 4 fits
  EXPECT_EQ(sched_->GetPod().waiting, 0);
}

TEST_F(SchedulerTest, ZeroNegativeAndHugeCountsAreInvalid) {
  for (int64_t n : {int64_t{0}, int64_t{-1}, int64_t{1} << 40, INT64_MAX, INT64_MIN}) {
    absl::Status s = AttachStatus(alice_, Req(n, true));
    EXPECT_EQ(s.code(), kInvalid) << n;
  }
  EXPECT_THAT(AttachStatus(alice_, Req(0)).message(), HasSubstr("at least 1"));
  AttachRequest r = Req(1, true);
  r.wait_timeout = absl::Seconds(-1);
  EXPECT_EQ(AttachStatus(alice_, r).code(), kInvalid);
  ExpectPristine();
}

TEST_F(SchedulerTest, NullObserverIsAllowed) {
  absl::StatusOr<std::string> t = sched_->Attach(alice_, Req(2), nullptr);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(sched_->GetPod().free_ipus, 14);
  sched_->Release(*t);
  EXPECT_EQ(sched_->GetPod().free_ipus, 16);
}

// ---------------------------------------------------------------- names & partitions

TEST_F(SchedulerTest, PartitionNamesFollowTheRule) {
  for (const std::string& bad :
       std::vector<std::string>{"", "-p", ".p", "_p", "a b", "p/1", "p\n", std::string(65, 'a')}) {
    absl::StatusOr<PartitionView> p = sched_->CreatePartition(alice_, bad, 2);
    EXPECT_EQ(p.status().code(), kInvalid) << bad;
    EXPECT_THAT(p.status().message(), HasSubstr("A-Z a-z 0-9 . _ -")) << bad;
  }
  ExpectPristine();
  MustPartition(alice_, "Ok.name_1-x", 1);
  MustPartition(alice_, std::string(64, 'b'), 1);
  MustPartition(alice_, "9lives", 1);
}

TEST_F(SchedulerTest, MaxNameLengthIsConfigurable) {
  SchedulerOptions o = Options();
  o.max_name_length = 3;
  Start(o);
  EXPECT_TRUE(sched_->CreatePartition(alice_, "abc", 1).ok());
  absl::Status s = sched_->CreatePartition(alice_, "abcd", 1).status();
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_THAT(s.message(), HasSubstr("1 to 3 characters"));
}

TEST_F(SchedulerTest, DuplicatePartitionIsAlreadyExists) {
  MustPartition(alice_, "p1", 2);
  absl::Status s = sched_->CreatePartition(bob_, "p1", 2).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(s.message(), HasSubstr("owner alice"));
  EXPECT_EQ(sched_->ListPartitions().size(), 1u);
}

TEST_F(SchedulerTest, PartitionSizeErrors) {
  absl::Status s = sched_->CreatePartition(alice_, "p", 3).status();
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_EQ(s.message(), "partition size 3 is not a power of two; use 2 or 4");
  EXPECT_EQ(sched_->CreatePartition(alice_, "p", 0).status().code(), kInvalid);
  EXPECT_EQ(sched_->CreatePartition(alice_, "p", -4).status().code(), kInvalid);
  s = sched_->CreatePartition(alice_, "p", 32).status();
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_THAT(s.message(), HasSubstr("larger than the pod"));
  ExpectPristine();
}

TEST_F(SchedulerTest, CreatePartitionPersistsAndReportsTheDeviceId) {
  const PartitionView p = MustPartition(alice_, "p1", 4);
  EXPECT_EQ(p.name, "p1");
  EXPECT_EQ(p.block, (device::Block{0, 4}));
  EXPECT_EQ(p.device_id, 24);
  EXPECT_EQ(p.owner, "alice");
  EXPECT_GT(p.created_unix_ms, 0);
  ASSERT_EQ(store_.partitions.count("p1"), 1u);
  EXPECT_EQ(store_.partitions["p1"].start, 0);
  EXPECT_EQ(store_.partitions["p1"].size, 4);
  EXPECT_EQ(store_.partitions["p1"].owner, "alice");
  PodView pod = sched_->GetPod();
  EXPECT_EQ(pod.free_ipus, 12);  // partitioned IPUs are not in the free pool
  EXPECT_EQ(pod.ipus[1].partition, "p1");
  EXPECT_EQ(pod.ipus[1].owner, "alice");
  absl::StatusOr<PartitionView> got = sched_->GetPartition("p1");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->block, p.block);
  EXPECT_EQ(sched_->GetPartition("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SchedulerTest, CreatePartitionIsBestFit) {
  MustAttach(alice_, Req(1));  // IPU 0
  // Pairs 2-3 (quad 0-3 has one IPU in use) beats 4-5 (empty quad).
  EXPECT_EQ(MustPartition(bob_, "p1", 2).block, (device::Block{2, 2}));
  EXPECT_EQ(MustPartition(bob_, "p2", 1).block, (device::Block{1, 1}));
  EXPECT_EQ(MustPartition(bob_, "p3", 4).block, (device::Block{4, 4}));
  std::vector<PartitionView> all = sched_->ListPartitions();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].name, "p2");  // ordered by first IPU
}

TEST_F(SchedulerTest, CreatePartitionAvoidsAttachedFailedAndFaultedIpus) {
  MustAttach(alice_, Req(4));  // 0-3
  ASSERT_TRUE(sched_->InjectFault(admin_, 4, FaultKind::kUnrecoverable).ok());
  ASSERT_TRUE(sched_->InjectFault(admin_, 8, FaultKind::kIpuReset).ok());
  EXPECT_EQ(MustPartition(bob_, "p1", 4).block, (device::Block{12, 4}));
  absl::Status s = sched_->CreatePartition(bob_, "p2", 4).status();
  EXPECT_EQ(s.code(), kExhausted);
  EXPECT_THAT(s.message(), HasSubstr("session s1-1 (alice"));
  EXPECT_THAT(s.message(), HasSubstr("partition p1 (bob, IPUs 12-15)"));
  EXPECT_THAT(s.message(), HasSubstr("failed IPUs 4"));
  EXPECT_THAT(s.message(), HasSubstr("IPUs in error 8"));
}

TEST_F(SchedulerTest, MaxPartitionsIsABound) {
  SchedulerOptions o = Options();
  o.max_partitions = 2;
  Start(o);
  MustPartition(alice_, "a", 1);
  MustPartition(alice_, "b", 1);
  absl::Status s = sched_->CreatePartition(alice_, "c", 1).status();
  EXPECT_EQ(s.code(), kExhausted);
  EXPECT_THAT(s.message(), HasSubstr("2 partitions"));
}

TEST_F(SchedulerTest, StoreErrorOnCreateChangesNothing) {
  store_.fail_writes = true;
  absl::Status s = sched_->CreatePartition(alice_, "p1", 4).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("disk full"));
  ExpectPristine();
  store_.fail_writes = false;
  EXPECT_EQ(MustPartition(alice_, "p1", 4).name, "p1");
}

TEST_F(SchedulerTest, RemovePartitionOwnerOrAdmin) {
  MustPartition(alice_, "p1", 4);
  absl::Status s = sched_->RemovePartition(bob_, "p1", false).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("partition p1 belongs to alice"));
  EXPECT_EQ(sched_->RemovePartition(bob_, "zz", false).status().code(),
            absl::StatusCode::kNotFound);
  absl::StatusOr<std::vector<std::string>> removed = sched_->RemovePartition(admin_, "p1", false);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_TRUE(removed->empty());
  EXPECT_EQ(store_.partitions.count("p1"), 0u);
  ExpectPristine();
}

TEST_F(SchedulerTest, RemovePartitionWithSessionsNeedsForce) {
  MustPartition(alice_, "p1", 4);
  Handle h = MustAttach(alice_, Req(2, false, "p1"));
  Handle waiter = MustAttach(alice_, Req(4, true, "p1"));
  absl::Status s = sched_->RemovePartition(alice_, "p1", false).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("s1-1 (alice)"));
  EXPECT_THAT(s.message(), HasSubstr("--force"));
  EXPECT_EQ(sched_->RemovePartition(bob_, "p1", true).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(sched_->ListPartitions().size(), 1u);

  absl::StatusOr<std::vector<std::string>> removed = sched_->RemovePartition(admin_, "p1", true);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_THAT(*removed, ElementsAre("s1-1"));
  ASSERT_TRUE(h.observer->ended().has_value());
  EXPECT_EQ(h.observer->ended()->code(), absl::StatusCode::kAborted);
  EXPECT_EQ(h.observer->ended()->message(), "session s1-1 ended: partition p1 was removed by root");
  ASSERT_TRUE(waiter.observer->ended().has_value());
  EXPECT_EQ(waiter.observer->ended()->code(), absl::StatusCode::kAborted);
  EXPECT_THAT(waiter.observer->ended()->message(), HasSubstr("partition p1 was removed"));
  ExpectPristine();
  sched_->Release(h.ticket);  // no effect, no second event
  EXPECT_EQ(h.observer->ends(), 1);
}

TEST_F(SchedulerTest, RemovePartitionStoreErrorChangesNothing) {
  MustPartition(alice_, "p1", 4);
  Handle h = MustAttach(alice_, Req(2, false, "p1"));
  store_.fail_writes = true;
  EXPECT_EQ(sched_->RemovePartition(alice_, "p1", true).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_FALSE(h.observer->ended().has_value());
  EXPECT_EQ(sched_->ListPartitions().size(), 1u);
  EXPECT_EQ(sched_->GetPod().sessions.size(), 1u);
}

TEST_F(SchedulerTest, PartitionAttachIsForTheOwnerOrAnAdmin) {
  MustPartition(alice_, "p1", 4);
  absl::Status s = AttachStatus(bob_, Req(1, false, "p1"));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("partition p1 belongs to alice"));
  EXPECT_EQ(AttachStatus(bob_, Req(1, false, "nope")).code(), absl::StatusCode::kNotFound);
  Handle a = MustAttach(alice_, Req(2, false, "p1"));
  EXPECT_EQ(a.observer->granted()->partition, "p1");
  Handle root = MustAttach(admin_, Req(2, false, "p1"));
  EXPECT_THAT(root.observer->granted()->ipus, ElementsAre(2, 3));
  EXPECT_THAT(sched_->GetPartition("p1")->sessions, ElementsAre("s1-1", "s1-2"));
}

TEST_F(SchedulerTest, PoolAttachUsesOnlyIpusInNoPartition) {
  MustPartition(alice_, "p1", 8);  // 0-7
  Handle h = MustAttach(bob_, Req(8));
  EXPECT_THAT(h.observer->granted()->ipus.front(), 8);
  absl::Status s = AttachStatus(bob_, Req(1));
  EXPECT_EQ(s.code(), kExhausted);
  EXPECT_TRUE(sched_->Attach(alice_, Req(1, false, "p1"), nullptr).ok());  // the partition has room
}

TEST_F(SchedulerTest, PartitionRemovalFreesIpusForPoolWaiters) {
  MustPartition(alice_, "p1", 8);
  MustAttach(bob_, Req(8));
  Handle waiter = MustAttach(bob_, Req(4, true));
  EXPECT_FALSE(waiter.observer->granted().has_value());
  ASSERT_TRUE(sched_->RemovePartition(alice_, "p1", false).ok());
  ASSERT_TRUE(waiter.observer->granted().has_value());
  EXPECT_THAT(waiter.observer->granted()->ipus.front(), 0);
}

// ---------------------------------------------------------------- no fit, queue

TEST_F(SchedulerTest, NoFitWithoutWaitListsHoldersAndWaitersAhead) {
  MustAttach(alice_, Req(8));
  MustAttach(bob_, Req(8));
  absl::Status s = AttachStatus(bob_, Req(4));
  EXPECT_EQ(s.code(), kExhausted);
  EXPECT_THAT(s.message(), HasSubstr("session s1-1 (alice, IPUs 0-7)"));
  EXPECT_THAT(s.message(), HasSubstr("session s1-2 (bob, IPUs 8-15)"));
  EXPECT_THAT(s.message(), HasSubstr("no one is waiting"));
  EXPECT_THAT(s.message(), HasSubstr("--wait"));
  MustAttach(bob_, Req(2, true));
  s = AttachStatus(bob_, Req(4));
  EXPECT_THAT(s.message(), HasSubstr("1 waiting ahead of you"));
  EXPECT_EQ(sched_->GetPod().waiting, 1);
}

TEST_F(SchedulerTest, QueueFullIsResourceExhausted) {
  SchedulerOptions o = Options();
  o.max_waiters = 2;
  Start(o);
  MustAttach(alice_, Req(16));
  MustAttach(bob_, Req(1, true));
  MustAttach(bob_, Req(1, true));
  absl::Status s = AttachStatus(bob_, Req(1, true));
  EXPECT_EQ(s.code(), kExhausted);
  EXPECT_THAT(s.message(), HasSubstr("queue is full"));
  EXPECT_EQ(sched_->GetPod().waiting, 2);
}

TEST_F(SchedulerTest, WaiterIsGrantedWhenIpusAreReleased) {
  Handle holder = MustAttach(alice_, Req(16));
  Handle waiter = MustAttach(bob_, Req(4, true));
  EXPECT_FALSE(waiter.observer->granted().has_value());
  std::vector<QueuePositionView> q = waiter.observer->queued();
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q[0].ticket, waiter.ticket);
  EXPECT_EQ(q[0].position, 1);
  EXPECT_EQ(q[0].queue_length, 1);
  EXPECT_THAT(q[0].blocking_sessions, ElementsAre("s1-1"));
  sched_->Release(holder.ticket);
  ASSERT_TRUE(waiter.observer->granted().has_value());
  EXPECT_EQ(waiter.observer->granted()->id, "s1-2");
  EXPECT_EQ(waiter.observer->granted()->user, "bob");
  EXPECT_FALSE(holder.observer->ended().has_value());  // Release sends no OnEnded
  EXPECT_EQ(sched_->GetPod().waiting, 0);
}

TEST_F(SchedulerTest, WaitTimeoutIsDeadlineExceeded) {
  MustAttach(alice_, Req(16));
  AttachRequest r = Req(4, true);
  r.wait_timeout = absl::Milliseconds(20);
  Handle waiter = MustAttach(bob_, r);
  ASSERT_TRUE(waiter.observer->WaitEnded());
  const absl::Status why = *waiter.observer->ended();
  EXPECT_EQ(why.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(why.message(), HasSubstr("waited 0."));
  EXPECT_THAT(why.message(), HasSubstr("s for 4 IPUs"));
  EXPECT_THAT(why.message(), HasSubstr("s1-1"));
  EXPECT_EQ(sched_->GetPod().waiting, 0);
  EXPECT_FALSE(waiter.observer->granted().has_value());
}

TEST_F(SchedulerTest, GrantedWaiterDoesNotTimeOut) {
  Handle holder = MustAttach(alice_, Req(16));
  AttachRequest r = Req(4, true);
  r.wait_timeout = absl::Milliseconds(30);
  Handle waiter = MustAttach(bob_, r);
  sched_->Release(holder.ticket);
  ASSERT_TRUE(waiter.observer->granted().has_value());
  // Poll past the old deadline: the session must stay.
  EXPECT_FALSE(
      PollUntil([&] { return waiter.observer->ended().has_value(); }, absl::Milliseconds(100)));
  EXPECT_TRUE(sched_->GetSession(bob_, waiter.session()).ok());
}

TEST_F(SchedulerTest, LaterSmallRequestMayNotDelayTheHead) {
  Handle a = MustAttach(alice_, Req(8));  // 0-7
  Handle b = MustAttach(bob_, Req(4));    // 8-11; 12-15 free
  Handle head = MustAttach(bob_, Req(8, true));
  EXPECT_FALSE(head.observer->granted().has_value());  // reserves 8-15
  Handle late = MustAttach(alice_, Req(2, true));
  EXPECT_FALSE(late.observer->granted().has_value());          // 12-13 would delay the head
  EXPECT_EQ(AttachStatus(alice_, Req(2)).code(), kExhausted);  // same without wait
  sched_->Release(b.ticket);
  ASSERT_TRUE(head.observer->granted().has_value());
  EXPECT_THAT(head.observer->granted()->ipus.front(), 8);
  EXPECT_FALSE(late.observer->granted().has_value());
  sched_->Release(a.ticket);
  ASSERT_TRUE(late.observer->granted().has_value());
}

TEST_F(SchedulerTest, BackfillGrantsOutsideTheReservation) {
  Handle a = MustAttach(alice_, Req(4));  // 0-3
  Handle b = MustAttach(bob_, Req(4));    // 4-7 (best fit: next to 0-3)
  Handle c = MustAttach(bob_, Req(4));    // 8-11
  EXPECT_THAT(b.observer->granted()->ipus.front(), 4);
  EXPECT_THAT(c.observer->granted()->ipus.front(), 8);
  sched_->Release(b.ticket);                     // in use: 0-3, 8-11; free: 4-7, 12-15
  Handle head = MustAttach(bob_, Req(8, true));  // 0-7 and 8-15 tie: reserves 0-7
  EXPECT_FALSE(head.observer->granted().has_value());
  Handle pair = MustAttach(alice_, Req(2, true));
  ASSERT_TRUE(pair.observer->granted().has_value());  // outside the reservation
  EXPECT_THAT(pair.observer->granted()->ipus, ElementsAre(12, 13));
  Handle quad = MustAttach(alice_, Req(4, true));  // only 4-7 would fit: reserved
  EXPECT_FALSE(quad.observer->granted().has_value());
  sched_->Release(a.ticket);
  ASSERT_TRUE(head.observer->granted().has_value());
  EXPECT_THAT(head.observer->granted()->ipus.front(), 0);
}

TEST_F(SchedulerTest, BackfillGrantsAWaiterBehindABlockedHead) {
  MustAttach(alice_, Req(4));           // 0-3
  Handle b = MustAttach(bob_, Req(4));  // 4-7
  MustAttach(bob_, Req(4));             // 8-11
  sched_->Release(b.ticket);            // in use: 0-3, 8-11; free: 4-7, 12-15
  Handle head = MustAttach(bob_, Req(16, true));
  EXPECT_FALSE(head.observer->granted().has_value());
  Handle held = MustAttach(alice_, Req(1, true));
  EXPECT_FALSE(held.observer->granted().has_value());  // the head reserved the whole pod
  sched_->Release(head.ticket);                        // the reservation goes: the waiter runs
  ASSERT_TRUE(held.observer->granted().has_value());
}

// The worked example of docs/scheduling.md.
TEST_F(SchedulerTest, DocsExampleOnAPod16) {
  const Caller carol{"carol"};
  EXPECT_THAT(MustAttach(alice_, Req(4)).observer->granted()->ipus.front(), 0);  // 0-3
  EXPECT_THAT(MustAttach(alice_, Req(2)).observer->granted()->ipus, ElementsAre(4, 5));
  EXPECT_THAT(MustAttach(alice_, Req(4)).observer->granted()->ipus.front(), 8);  // 8-11
  Handle bob = MustAttach(bob_, Req(8, true));  // 8-15 has 4 in use, 0-7 has 6: reserves 8-15
  EXPECT_FALSE(bob.observer->granted().has_value());
  EXPECT_THAT(bob.observer->queued().back().blocking_sessions, ElementsAre("s1-3"));
  Handle pair = MustAttach(carol, Req(2));
  ASSERT_TRUE(pair.observer->granted().has_value());
  EXPECT_THAT(pair.observer->granted()->ipus, ElementsAre(6, 7));
  EXPECT_EQ(AttachStatus(carol, Req(4)).code(), kExhausted);  // only 12-15: reserved by bob
  Handle quad = MustAttach(carol, Req(4, true));
  EXPECT_FALSE(quad.observer->granted().has_value());
}

TEST_F(SchedulerTest, PositionsAreSentOnlyWhenTheyChange) {
  Handle holder = MustAttach(alice_, Req(16));
  Handle w1 = MustAttach(bob_, Req(16, true));
  Handle w2 = MustAttach(bob_, Req(16, true));
  Handle w3 = MustAttach(bob_, Req(16, true));
  EXPECT_EQ(w1.observer->queued().size(), 3u);  // (1,1) (1,2) (1,3)
  EXPECT_EQ(w2.observer->queued().size(), 2u);  // (2,2) (2,3)
  EXPECT_EQ(w3.observer->queued().size(), 1u);  // (3,3)
  EXPECT_EQ(w3.observer->queued().back().position, 3);
  EXPECT_EQ(w3.observer->queued().back().queue_length, 3);
  // An unrelated change (a partition-free detach of nothing) sends nothing.
  sched_->Release("t-unknown");
  EXPECT_EQ(w3.observer->queued().size(), 1u);
  sched_->Release(w1.ticket);
  EXPECT_EQ(w2.observer->queued().back().position, 1);
  EXPECT_EQ(w2.observer->queued().back().queue_length, 2);
  EXPECT_EQ(w3.observer->queued().back().position, 2);
  EXPECT_EQ(w1.observer->ends(), 0);
  std::vector<QueueEntryView> q = sched_->ListQueue();
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(q[0].ticket, w2.ticket);
  EXPECT_EQ(q[0].position, 1);
  EXPECT_EQ(q[0].user, "bob");
  EXPECT_EQ(q[0].num_ipus, 16);
  EXPECT_EQ(q[0].client, "test");
  EXPECT_GE(q[0].waited_seconds, 0);
  EXPECT_EQ(q[1].position, 2);
  sched_->Release(holder.ticket);
  EXPECT_TRUE(w2.observer->granted().has_value());
  EXPECT_EQ(w3.observer->queued().back().position, 1);
}

TEST_F(SchedulerTest, ListQueueShowsTimeouts) {
  MustAttach(alice_, Req(16));
  AttachRequest r = Req(2, true, "");
  r.wait_timeout = absl::Seconds(60);
  r.client = "host:1 train.py";
  MustAttach(bob_, r);
  std::vector<QueueEntryView> q = sched_->ListQueue();
  ASSERT_EQ(q.size(), 1u);
  EXPECT_DOUBLE_EQ(q[0].timeout_seconds, 60);
  EXPECT_EQ(q[0].client, "host:1 train.py");
}

// ---------------------------------------------------------------- release, detach, get

TEST_F(SchedulerTest, ReleaseIsIdempotent) {
  Handle h = MustAttach(alice_, Req(4));
  sched_->Release(h.ticket);
  sched_->Release(h.ticket);
  sched_->Release("nonsense");
  ExpectPristine();
  EXPECT_EQ(h.observer->ends(), 0);
  EXPECT_EQ(sched_->GetSession(alice_, h.session()).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SchedulerTest, ReleasingAQueuedTicketLeavesTheQueueSilently) {
  MustAttach(alice_, Req(16));
  Handle w = MustAttach(bob_, Req(4, true));
  sched_->Release(w.ticket);
  EXPECT_EQ(sched_->GetPod().waiting, 0);
  EXPECT_EQ(w.observer->ends(), 0);
  EXPECT_EQ(w.observer->grants(), 0);
}

TEST_F(SchedulerTest, DetachIsForTheOwnerOrAnAdmin) {
  Handle h = MustAttach(alice_, Req(4));
  absl::Status s = sched_->Detach(bob_, h.session()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("session s1-1 belongs to alice"));
  EXPECT_EQ(sched_->Detach(bob_, "s9-9").status().code(), absl::StatusCode::kNotFound);
  const Caller bob_admin{"bob", true};
  absl::StatusOr<std::vector<int>> released = sched_->Detach(bob_admin, h.session());
  ASSERT_TRUE(released.ok());
  EXPECT_THAT(*released, ElementsAre(0, 1, 2, 3));
  ASSERT_TRUE(h.observer->ended().has_value());
  EXPECT_EQ(h.observer->ended()->code(), absl::StatusCode::kAborted);
  EXPECT_EQ(h.observer->ended()->message(), "session s1-1 was detached by bob");
  EXPECT_EQ(DetachedBy(*h.observer->ended()), "bob");
  ExpectPristine();
  sched_->Release(h.ticket);
  EXPECT_EQ(h.observer->ends(), 1);
}

TEST_F(SchedulerTest, OnlyADetachNamesWhoDetached) {
  Handle h = MustAttach(alice_, Req(4));
  ASSERT_TRUE(sched_->Detach(alice_, h.session()).ok());
  ASSERT_TRUE(h.observer->ended().has_value());
  EXPECT_EQ(DetachedBy(*h.observer->ended()), "alice");
  EXPECT_EQ(DetachedBy(absl::AbortedError("session s1-1 was detached by alice")), "");
  EXPECT_EQ(DetachedBy(absl::OkStatus()), "");
}

TEST_F(SchedulerTest, OwnerDetachGrantsWaiters) {
  Handle h = MustAttach(alice_, Req(16));
  Handle w = MustAttach(bob_, Req(16, true));
  ASSERT_TRUE(sched_->Detach(alice_, h.session()).ok());
  EXPECT_TRUE(w.observer->granted().has_value());
}

TEST_F(SchedulerTest, GetSessionIsForTheOwnerOrAnAdmin) {
  Handle h = MustAttach(alice_, Req(1));
  EXPECT_EQ(sched_->GetSession(bob_, h.session()).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(sched_->GetSession(admin_, h.session()).ok());
  EXPECT_EQ(sched_->GetSession(alice_, "s1-99").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SchedulerTest, GetPodCounts) {
  MustPartition(alice_, "p1", 4);
  MustAttach(bob_, Req(2));
  ASSERT_TRUE(sched_->InjectFault(admin_, 15, FaultKind::kUnrecoverable).ok());
  PodView pod = sched_->GetPod();
  EXPECT_EQ(pod.name, "POD16");
  EXPECT_EQ(pod.num_ipus, 16);
  EXPECT_EQ(pod.free_ipus, 9);
  EXPECT_EQ(pod.failed_ipus, 1);
  EXPECT_EQ(pod.ipus.size(), 16u);
  EXPECT_EQ(pod.ipus[15].state, IpuState::kFailed);
  EXPECT_EQ(pod.ipus[15].memory_total_bytes, device::kGc200.memory_bytes);
  EXPECT_EQ(pod.partitions.size(), 1u);
  EXPECT_EQ(pod.sessions.size(), 1u);
}

TEST_F(SchedulerTest, CreateRejectsBadOptions) {
  SchedulerOptions o = Options();
  o.pod.num_ipus = 12;
  EXPECT_EQ(Scheduler::Create(o, nullptr).status().code(), kInvalid);
  o = Options();
  o.max_waiters = 0;
  EXPECT_EQ(Scheduler::Create(o, nullptr).status().code(), kInvalid);
  o = Options();
  o.random_faults.probability_per_operation = 1.5;
  EXPECT_EQ(Scheduler::Create(o, nullptr).status().code(), kInvalid);
  o = Options();
  o.ipu_reset_time = absl::Seconds(-1);
  EXPECT_EQ(Scheduler::Create(o, nullptr).status().code(), kInvalid);
}

TEST_F(SchedulerTest, SingleIpuPod) {
  Start(Options(1));
  Handle h = MustAttach(alice_, Req(1));
  EXPECT_EQ(h.observer->granted()->device_id, 0);
  EXPECT_EQ(AttachStatus(alice_, Req(2, true)).code(), kInvalid);
}

}  // namespace
}  // namespace ipupod::scheduler::testing
