// File: tests/scheduler/test_util.h
//
// Helpers shared by the scheduler tests: an in-memory StateStore (optionally
// failing), an AttachObserver that records events and lets a test wait for
// them with a deadline, and a ResetDone sink. All are thread-safe.
#ifndef IPUPOD_TESTS_SCHEDULER_TEST_UTIL_H_
#define IPUPOD_TESTS_SCHEDULER_TEST_UTIL_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/sync.h"
#include "scheduler/scheduler.h"
#include "scheduler/state_store.h"
#include "tests/support/eventually.h"

namespace ipupod::scheduler::testing {

inline constexpr absl::Duration kWaitLimit = absl::Seconds(10);

// In-memory store. `fail_writes` / `fail_load` make the calls fail with
// UNAVAILABLE so tests can check that a failed write changes nothing.
class FakeStore : public StateStore {
 public:
  absl::StatusOr<StoredState> Load() override {
    if (fail_load) return absl::UnavailableError("store offline");
    StoredState state;
    for (const auto& [name, p] : partitions) state.partitions.push_back(p);
    for (const auto& [ipu, f] : failures) state.failures.push_back(f);
    return state;
  }
  absl::StatusOr<uint64_t> NextBootId() override { return ++boot; }
  absl::Status PutPartition(const StoredPartition& p) override {
    if (fail_writes) return absl::UnavailableError("disk full");
    partitions[p.name] = p;
    return absl::OkStatus();
  }
  absl::Status DeletePartition(absl::string_view name) override {
    if (fail_writes) return absl::UnavailableError("disk full");
    partitions.erase(std::string(name));
    return absl::OkStatus();
  }
  absl::Status PutFailure(const StoredFailure& f) override {
    if (fail_writes) return absl::UnavailableError("disk full");
    failures[f.ipu] = f;
    return absl::OkStatus();
  }
  absl::Status DeleteFailure(int ipu) override {
    if (fail_writes) return absl::UnavailableError("disk full");
    failures.erase(ipu);
    return absl::OkStatus();
  }

  std::map<std::string, StoredPartition> partitions;
  std::map<int, StoredFailure> failures;
  uint64_t boot = 0;
  bool fail_writes = false;
  bool fail_load = false;
};

// A settable clock, read by the test and the timer thread.
class FakeClock {
 public:
  absl::Time Now() {
    sync::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    sync::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::FromUnixSeconds(1'700'000'000);
};

class RecordingObserver : public AttachObserver {
 public:
  void OnQueued(const QueuePositionView& position) override {
    sync::MutexLock lock(&mu_);
    queued_.push_back(position);
  }
  void OnGranted(const SessionView& session) override {
    sync::MutexLock lock(&mu_);
    ++grants_;
    granted_ = session;
    changed_.SignalAll();
  }
  void OnEnded(const absl::Status& why) override {
    sync::MutexLock lock(&mu_);
    ++ends_;
    ended_ = why;
    changed_.SignalAll();
  }

  std::vector<QueuePositionView> queued() const {
    sync::MutexLock lock(&mu_);
    return queued_;
  }
  std::optional<SessionView> granted() const {
    sync::MutexLock lock(&mu_);
    return granted_;
  }
  std::optional<absl::Status> ended() const {
    sync::MutexLock lock(&mu_);
    return ended_;
  }
  int grants() const {
    sync::MutexLock lock(&mu_);
    return grants_;
  }
  int ends() const {
    sync::MutexLock lock(&mu_);
    return ends_;
  }
  // Waits (bounded) for a grant / an end; false on timeout.
  bool WaitGranted(absl::Duration limit = kWaitLimit) const {
    sync::MutexLock lock(&mu_);
    return WaitLocked([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return granted_.has_value(); },
                      limit);
  }
  bool WaitEnded(absl::Duration limit = kWaitLimit) const {
    sync::MutexLock lock(&mu_);
    return WaitLocked([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ended_.has_value(); },
                      limit);
  }

 private:
  // A CondVar loop rather than Mutex::Await: Await re-evaluates its condition
  // inside libabsl, where sync.h cannot annotate it for TSan.
  template <typename Pred>
  bool WaitLocked(Pred done, absl::Duration limit) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const absl::Time deadline = absl::Now() + limit;
    while (!done()) {
      if (absl::Now() >= deadline) return false;
      sync::WaitWithDeadline(&changed_, &mu_, deadline);
    }
    return true;
  }

  mutable absl::Mutex mu_;
  mutable absl::CondVar changed_;
  std::vector<QueuePositionView> queued_ ABSL_GUARDED_BY(mu_);
  std::optional<SessionView> granted_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> ended_ ABSL_GUARDED_BY(mu_);
  int grants_ ABSL_GUARDED_BY(mu_) = 0;
  int ends_ ABSL_GUARDED_BY(mu_) = 0;
};

// Collects the result of a reset. Shared so that a reset that completes after
// the test body (at Shutdown) still writes into live memory.
class ResetSink {
 public:
  static std::shared_ptr<ResetSink> Make() { return std::make_shared<ResetSink>(); }
  static ResetDone Callback(const std::shared_ptr<ResetSink>& sink) {
    return [sink](absl::StatusOr<ResetResult> result) {
      {
        sync::MutexLock lock(&sink->mu_);
        ++sink->calls_;
        sink->result_ = std::move(result);
      }
      sync::Notify(&sink->done_);
    };
  }
  // The result, after waiting (bounded) for it; DEADLINE_EXCEEDED on timeout.
  absl::StatusOr<ResetResult> Wait(absl::Duration limit = kWaitLimit) {
    if (!sync::WaitForNotificationWithTimeout(&done_, limit)) {
      return absl::DeadlineExceededError("reset did not complete");
    }
    sync::MutexLock lock(&mu_);
    return result_;
  }
  bool HasCompleted() { return sync::HasBeenNotified(&done_); }
  int calls() const {
    sync::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  absl::Notification done_;
  mutable absl::Mutex mu_;
  absl::StatusOr<ResetResult> result_ ABSL_GUARDED_BY(mu_) = absl::UnknownError("no result");
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
};

// Polls `condition` every millisecond until it holds or `limit` passes.
inline bool PollUntil(const std::function<bool()>& condition, absl::Duration limit = kWaitLimit) {
  return test_support::Eventually(condition, limit, absl::Milliseconds(1));
}

}  // namespace ipupod::scheduler::testing

#endif  // IPUPOD_TESTS_SCHEDULER_TEST_UTIL_H_
