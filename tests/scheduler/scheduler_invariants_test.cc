// The pod's invariants across the Scheduler's parts (scheduler_impl.h
// CheckPodInvariants): each is broken on purpose and seen to fail, and a real
// scheduler keeps them through its operations.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "scheduler/scheduler_impl.h"
#include "tests/scheduler/scheduler_fixture.h"

namespace ipupod::scheduler::testing {
namespace {

using device::Block;

constexpr int kIpus = 16;

struct Pod {
  std::vector<device::Ipu> ipus;
  SessionTable sessions{kIpus};
  PartitionTable partitions{kIpus};
  WaitQueue queue{8};
  ResetBook resets{kIpus};
  uint64_t sequence = 0;
  Pod() {
    for (int i = 0; i < kIpus; ++i) ipus.emplace_back(i);
  }
  absl::Status Check() const {
    return CheckPodInvariants(ipus, sessions, partitions, queue, resets);
  }
  // A session as GrantLocked makes it: its IPUs attached.
  void Grant(const std::string& id, Block block, const std::string& partition = "") {
    Session s;
    s.id = id;
    s.ticket = "t" + id;
    s.block = block;
    s.partition = partition;
    for (int i = block.start; i < block.start + block.size; ++i) ASSERT_TRUE(ipus[i].Attach().ok());
    sessions.Add(std::move(s));
  }
  void Wait(const std::string& ticket, const std::string& partition = "") {
    Waiter w;
    w.ticket = ticket;
    w.sequence = ++sequence;  // unique, as WaitQueue::Push requires
    w.num_ipus = 1;
    w.partition = partition;
    ASSERT_TRUE(queue.Push(std::move(w), true).ok());
  }
};

void ExpectBroken(const absl::Status& status, absl::string_view what) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  EXPECT_NE(status.message().find(what), absl::string_view::npos) << status;
}

TEST(PodInvariantsTest, AConsistentPodPasses) {
  Pod pod;
  EXPECT_EQ(pod.Check(), absl::OkStatus());
  pod.partitions.Add(Partition{"p", Block{8, 8}, "bob", 1});
  pod.Grant("s1", Block{0, 4});
  pod.Grant("s2", Block{8, 2}, "p");
  pod.Wait("w1", "p");
  pod.Wait("w2");
  EXPECT_EQ(pod.Check(), absl::OkStatus());
}

TEST(PodInvariantsTest, AnIpuAttachedOutsideASessionFails) {
  Pod pod;
  ASSERT_TRUE(pod.ipus[3].Attach().ok());
  ExpectBroken(pod.Check(), "IPU 3 is attached but held by ''");
}

TEST(PodInvariantsTest, AHeldIpuThatIsNotAttachedFails) {
  Pod pod;
  pod.Grant("s1", Block{0, 2});
  ASSERT_TRUE(pod.ipus[1].Detach().ok());  // as a release that forgot the table would
  ExpectBroken(pod.Check(), "IPU 1 is not attached but held by 's1'");
}

TEST(PodInvariantsTest, APoolSessionOnPartitionedIpusFails) {
  Pod pod;
  pod.Grant("s1", Block{0, 4});
  pod.partitions.Add(Partition{"p", Block{0, 8}, "bob", 1});
  ExpectBroken(pod.Check(), "pool session s1 holds partitioned IPUs 0-3");
}

TEST(PodInvariantsTest, ASessionOutsideItsPartitionFails) {
  Pod pod;
  pod.partitions.Add(Partition{"p", Block{8, 8}, "bob", 1});
  pod.Grant("s1", Block{0, 4}, "p");
  ExpectBroken(pod.Check(), "not inside its partition p");
}

TEST(PodInvariantsTest, AWaiterOfARemovedPartitionFails) {
  Pod pod;
  pod.partitions.Add(Partition{"p", Block{8, 8}, "bob", 1});
  pod.Wait("w1", "p");
  ASSERT_TRUE(pod.partitions.Remove("p"));
  ExpectBroken(pod.Check(), "waits for partition p that is gone");
}

TEST(PodInvariantsTest, ATicketBothWaitingAndGrantedFails) {
  Pod pod;
  pod.Grant("s1", Block{0, 1});
  pod.Wait("ts1");  // s1's ticket
  ExpectBroken(pod.Check(), "ticket ts1 both waits and holds s1");
}

TEST(PodInvariantsTest, EachPartsOwnInvariantsAreChecked) {
  Pod pod;
  pod.Grant("s1", Block{0, 4});
  pod.sessions.Find("s1")->block = Block{4, 4};
  ExpectBroken(pod.Check(), "recorded held");
}

TEST(PodInvariantsTest, ACoveredIpuThatIsNotResettingFails) {
  Pod pod;
  pod.resets.Add(pod.resets.NextId(), PendingReset{{2}, {}, 1, nullptr});
  ExpectBroken(pod.Check(), "IPU 2 is covered by reset 1 but is idle");
  ASSERT_TRUE(pod.ipus[2].BeginReset(RecoveryAction::kIpuReset).ok());
  EXPECT_EQ(pod.Check(), absl::OkStatus());
}

// Until the book closes (Shutdown), a resetting IPU belongs to a reset that
// will end it; after, it may stay resetting with none.
TEST(PodInvariantsTest, AResettingIpuNoResetCoversFailsWhileTheBookIsOpen) {
  Pod pod;
  ASSERT_TRUE(pod.ipus[5].BeginReset(RecoveryAction::kIpuReset).ok());
  ExpectBroken(pod.Check(), "IPU 5 is resetting but no pending reset covers it");
  EXPECT_TRUE(pod.resets.Close().empty());
  EXPECT_EQ(pod.Check(), absl::OkStatus());
}

// A real scheduler keeps them through attach, queueing, partitions, faults,
// resets and release (the fixture's TearDown checks once more).
class SchedulerInvariantsTest : public SchedulerTest {};

TEST_F(SchedulerInvariantsTest, HoldThroughTheOperations) {
  const Scheduler& sched = *sched_;
  MustPartition(bob_, "p", 4);
  Handle a = MustAttach(alice_, Req(8));
  Handle b = MustAttach(bob_, Req(2, false, "p"));
  Handle queued = MustAttach(alice_, Req(8, /*wait=*/true));
  EXPECT_NE(a.session(), "");
  EXPECT_NE(b.session(), "");
  EXPECT_EQ(CheckSchedulerInvariants(sched), absl::OkStatus());
  ASSERT_TRUE(sched_->InjectFault(admin_, 0, FaultKind::kIpuReset).ok());
  ASSERT_TRUE(sched_->InjectFault(admin_, 1, FaultKind::kUnrecoverable).ok());
  EXPECT_EQ(CheckSchedulerInvariants(sched), absl::OkStatus());
  ASSERT_TRUE(WaitReset([&](ResetDone done) { sched_->ResetIpu(admin_, 0, done); }).ok());
  EXPECT_EQ(CheckSchedulerInvariants(sched), absl::OkStatus());
  sched_->Release(a.ticket);
  ASSERT_TRUE(queued.observer->WaitGranted(kWaitLimit));
  EXPECT_EQ(CheckSchedulerInvariants(sched), absl::OkStatus());
  ASSERT_TRUE(sched_->RemovePartition(bob_, "p", /*force=*/true).ok());
  ASSERT_TRUE(sched_->RepairIpu(admin_, 1).ok());
  sched_->Release(queued.ticket);
  EXPECT_EQ(CheckSchedulerInvariants(sched), absl::OkStatus());
}

}  // namespace
}  // namespace ipupod::scheduler::testing
