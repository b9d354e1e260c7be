#include "device/runtime/compute_gate.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/sync.h"

namespace ipupod::runtime {

// Cancellation cannot signal the condition variable, so waits are sliced.
constexpr absl::Duration kCancelPoll = absl::Milliseconds(50);

ComputeGate::Slot::~Slot() {
  if (gate_ != nullptr) gate_->Release();
}

ComputeGate::ComputeGate(int slots, int waiters_max,
                         std::function<void(absl::Duration waited)> on_waited)
    : slots_(std::max(slots, 1)),
      waiters_max_(std::max(waiters_max, 1)),
      on_waited_(std::move(on_waited)) {}

bool ComputeGate::MyTurn(uint64_t ticket) const {
  return running_ < slots_ && !queue_.empty() && queue_.front() == ticket;
}

void ComputeGate::Leave(uint64_t ticket) {
  queue_.erase(std::find(queue_.begin(), queue_.end(), ticket));
  changed_.SignalAll();  // the next in line may be able to start
}

absl::StatusOr<ComputeGate::Slot> ComputeGate::Acquire(absl::Duration timeout,
                                                       const std::function<bool()>& cancelled) {
  const absl::Time start = absl::Now();
  absl::StatusOr<Slot> slot = WaitForTurn(start + timeout, timeout, cancelled);
  if (slot.ok() && on_waited_) on_waited_(absl::Now() - start);
  return slot;
}

absl::StatusOr<ComputeGate::Slot> ComputeGate::WaitForTurn(absl::Time deadline,
                                                           absl::Duration timeout,
                                                           const std::function<bool()>& cancelled) {
  sync::MutexLock lock(&mu_);
  if (static_cast<int>(queue_.size()) >= waiters_max_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        waiters_max_, " steps already wait for the server's compute; retry in a moment"));
  }
  IPUPOD_RETURN_IF_ERROR(WaitInLine(deadline, timeout, cancelled));
  return Slot(this);
}

absl::Status ComputeGate::WaitInLine(absl::Time deadline, absl::Duration timeout,
                                     const std::function<bool()>& cancelled) {
  const uint64_t ticket = next_ticket_++;
  queue_.push_back(ticket);
  while (!MyTurn(ticket)) {
    if (cancelled && cancelled()) {
      Leave(ticket);
      return absl::CancelledError("the client cancelled the run while it waited for compute");
    }
    if (absl::Now() >= deadline) {
      const auto ahead = std::find(queue_.begin(), queue_.end(), ticket) - queue_.begin();
      Leave(ticket);
      return absl::DeadlineExceededError(absl::StrCat(
          "waited ", absl::FormatDuration(timeout), " for the server's compute (", running_,
          " running, ", ahead, " ahead); retry, or ask the operator for more compute_threads"));
    }
    sync::WaitWithDeadline(&changed_, &mu_, std::min(deadline, absl::Now() + kCancelPoll));
  }
  queue_.pop_front();
  ++running_;
  changed_.SignalAll();  // with several slots the next may start too
  return absl::OkStatus();
}

absl::Status ComputeGate::YieldIfDue(Slot& slot, absl::Duration timeout,
                                     const std::function<bool()>& cancelled) {
  const absl::Time now = absl::Now();
  if (slot.gate_ != this || now - slot.since_ < kSliceTime) return absl::OkStatus();
  sync::MutexLock lock(&mu_);
  if (queue_.empty()) return absl::OkStatus();  // nobody waits: keep computing
  // The waiters' steps go first; this one queues behind them, as a new step
  // of its session would.
  --running_;
  changed_.SignalAll();
  absl::Status turn = WaitInLine(now + timeout, timeout, cancelled);
  if (!turn.ok()) {
    slot.gate_ = nullptr;  // it gave its slot up and did not get one back
    return turn;
  }
  slot.since_ = absl::Now();
  return absl::OkStatus();
}

void ComputeGate::Release() {
  sync::MutexLock lock(&mu_);
  --running_;
  changed_.SignalAll();
}

int ComputeGate::running() const {
  sync::MutexLock lock(&mu_);
  return running_;
}

int ComputeGate::waiting() const {
  sync::MutexLock lock(&mu_);
  return static_cast<int>(queue_.size());
}

}  // namespace ipupod::runtime
