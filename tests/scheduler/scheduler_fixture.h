// File: tests/scheduler/scheduler_fixture.h
//
// The fixture of the scheduler tests: a POD16 scheduler over a FakeStore with
// reset times of a few milliseconds, three callers, and attach helpers.
#ifndef IPUPOD_TESTS_SCHEDULER_SCHEDULER_FIXTURE_H_
#define IPUPOD_TESTS_SCHEDULER_SCHEDULER_FIXTURE_H_

#include <memory>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "device/pod_config.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_impl.h"
#include "tests/scheduler/test_util.h"

namespace ipupod::scheduler::testing {

inline AttachRequest Req(int64_t n, bool wait = false, std::string partition = "") {
  AttachRequest r;
  r.num_ipus = n;
  r.wait = wait;
  r.partition = std::move(partition);
  r.client = "test";
  return r;
}

// The pod's invariants (SchedulerImpl::CheckInvariants) of a scheduler made
// by Scheduler::Create.
inline absl::Status CheckSchedulerInvariants(const Scheduler& scheduler) {
  const auto* impl = dynamic_cast<const SchedulerImpl*>(&scheduler);
  if (impl == nullptr) return absl::InternalError("not a scheduler made by Scheduler::Create");
  return impl->CheckInvariants();
}

class SchedulerTest : public ::testing::Test {
 protected:
  static SchedulerOptions Options(int pod_ipus = 16) {
    SchedulerOptions o;
    o.pod = *device::PodFromSize(pod_ipus);
    o.ipu_reset_time = absl::Milliseconds(5);
    o.partition_reset_time = absl::Milliseconds(10);
    o.pod_reset_time = absl::Milliseconds(15);
    return o;
  }
  void SetUp() override { Start(Options()); }
  // Every test ends on a pod whose invariants hold (the sanitizer builds also
  // check them after each change).
  void TearDown() override {
    if (sched_ != nullptr) {
      EXPECT_EQ(CheckSchedulerInvariants(*sched_), absl::OkStatus());
    }
  }
  void Start(SchedulerOptions options, bool with_store = true) {
    sched_.reset();
    absl::StatusOr<std::unique_ptr<Scheduler>> s =
        Scheduler::Create(std::move(options), with_store ? &store_ : nullptr);
    ASSERT_TRUE(s.ok()) << s.status();
    sched_ = std::move(*s);
  }

  struct Handle {
    std::string ticket;
    std::shared_ptr<RecordingObserver> observer;
    std::string session() const {
      auto g = observer->granted();
      return g ? g->id : "";
    }
  };
  // Attaches and expects success (granted or queued).
  Handle MustAttach(const Caller& caller, const AttachRequest& request) {
    Handle h{"", std::make_shared<RecordingObserver>()};
    absl::StatusOr<std::string> ticket = sched_->Attach(caller, request, h.observer);
    EXPECT_TRUE(ticket.ok()) << ticket.status();
    if (ticket.ok()) h.ticket = *ticket;
    return h;
  }
  absl::Status AttachStatus(const Caller& caller, const AttachRequest& request) {
    return sched_->Attach(caller, request, std::make_shared<RecordingObserver>()).status();
  }
  PartitionView MustPartition(const Caller& caller, const std::string& name, int size) {
    absl::StatusOr<PartitionView> p = sched_->CreatePartition(caller, name, size);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *p : PartitionView{};
  }
  // Nothing attached, queued or partitioned.
  void ExpectPristine() {
    PodView pod = sched_->GetPod();
    EXPECT_EQ(pod.free_ipus, pod.num_ipus);
    EXPECT_EQ(pod.waiting, 0);
    EXPECT_TRUE(pod.sessions.empty());
    EXPECT_TRUE(pod.partitions.empty());
  }
  device::IpuState StateOf(int ipu) { return sched_->GetPod().ipus[ipu].state; }
  absl::StatusOr<ResetResult> WaitReset(const std::function<void(ResetDone)>& start) {
    auto sink = ResetSink::Make();
    start(ResetSink::Callback(sink));
    return sink->Wait();
  }

  FakeStore store_;  // outlives sched_
  std::unique_ptr<Scheduler> sched_;
  const Caller alice_{"alice", false};
  const Caller bob_{"bob", false};
  const Caller admin_{"root", true};
};

}  // namespace ipupod::scheduler::testing

#endif  // IPUPOD_TESTS_SCHEDULER_SCHEDULER_FIXTURE_H_
