// File: device/runtime/compute_gate.h
//
// runtime::ComputeGate: how sessions share the host's compute. A run of a
// step computes with every BLAS thread the server has (compute_threads), so
// running several steps at once only splits the same cores and slows each;
// instead at most `slots` steps compute at a time and the rest wait in
// arrival order (FIFO). A session that runs step after step re-enters the
// line behind everyone already waiting, so sessions alternate step by step:
// no session can starve another, whatever its step size. Within a step,
// the computing thread calls YieldIfDue at its interrupt points
// (device/kernels/interrupt.h): once it has held its slot for kSliceTime and
// another step waits, it gives the slot up and queues again behind the
// waiters, so a small step waits for a long one at most kSliceTime plus
// one interrupt point's gap (docs/design.md, "Threads"), not the long
// step's length. Weighted fair share, priorities and quotas are future
// work (docs/design.md).
//
// Usage:
//   IPUPOD_ASSIGN_OR_RETURN(ComputeGate::Slot slot, gate.Acquire(timeout, cancelled));
//   ... compute ...                      // the slot is released when `slot` dies
//
// Metrics: `on_waited`, if set, is told how long each Acquire that got a
// slot waited for it (a wait that ended in an error is not told), after the
// gate's lock is released; it must be quick and thread-safe.
//
// Thread safety: every method is safe to call concurrently.
// Errors: Acquire - RESOURCE_EXHAUSTED when `waiters_max` steps already wait
// (retry later), DEADLINE_EXCEEDED after `timeout` (naming how many were
// ahead), CANCELLED when `cancelled()` turns true (polled every 50 ms).
#ifndef IPUPOD_RUNTIME_COMPUTE_GATE_H_
#define IPUPOD_RUNTIME_COMPUTE_GATE_H_

#include <cstdint>
#include <deque>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ipupod::runtime {

class ComputeGate {
 public:
  // Holds one slot until destroyed (movable, not copyable).
  class Slot {
   public:
    Slot(Slot&& other) noexcept : gate_(other.gate_), since_(other.since_) {
      other.gate_ = nullptr;
    }
    Slot& operator=(Slot&&) = delete;
    Slot(const Slot&) = delete;
    ~Slot();

   private:
    friend class ComputeGate;
    explicit Slot(ComputeGate* gate) : gate_(gate), since_(absl::Now()) {}
    ComputeGate* gate_;  // null: holds nothing (moved from, or a yield that failed)
    absl::Time since_;   // when this holder last got the slot
  };

  // How long a step computes before YieldIfDue gives its slot to a waiter.
  static constexpr absl::Duration kSliceTime = absl::Milliseconds(100);

  // REQUIRES: slots >= 1, waiters_max >= 1.
  ComputeGate(int slots, int waiters_max,
              std::function<void(absl::Duration waited)> on_waited = nullptr);
  ComputeGate(const ComputeGate&) = delete;
  ComputeGate& operator=(const ComputeGate&) = delete;

  absl::StatusOr<Slot> Acquire(absl::Duration timeout, const std::function<bool()>& cancelled);

  // Called by the holder of `slot` while it computes: if it has held the slot
  // for kSliceTime and a step waits, gives the slot up, queues behind the
  // waiters and returns once it has its turn again (errors as Acquire; then
  // `slot` holds nothing). OK at once otherwise.
  absl::Status YieldIfDue(Slot& slot, absl::Duration timeout,
                          const std::function<bool()>& cancelled);

  int running() const;
  int waiting() const;

 private:
  void Release();
  absl::StatusOr<Slot> WaitForTurn(absl::Time deadline, absl::Duration timeout,
                                   const std::function<bool()>& cancelled);
  // Queues `ticket` and waits for its turn; OK: it now runs.
  absl::Status WaitInLine(absl::Time deadline, absl::Duration timeout,
                          const std::function<bool()>& cancelled)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool MyTurn(uint64_t ticket) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Leave(uint64_t ticket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int slots_;
  const int waiters_max_;
  const std::function<void(absl::Duration)> on_waited_;
  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  std::deque<uint64_t> queue_ ABSL_GUARDED_BY(mu_);  // tickets in arrival order
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ipupod::runtime

#endif  // IPUPOD_RUNTIME_COMPUTE_GATE_H_
