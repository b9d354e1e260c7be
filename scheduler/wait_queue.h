// File: scheduler/wait_queue.h
//
// The attach wait queue: a bounded list of waiters kept in the order the
// walk takes them (WaitQueue), and the backfill pass over it (PlanBackfill).
//
// The pass walks the demands in order (arrival order, or priority order under
// the multifactor policy; the Scheduler sorts) with a growing set of
// reservations. A demand held by a limit is skipped: it neither starts nor
// reserves. A demand that fits on allocatable IPUs outside the reservations
// that bind it is granted (best fit, allocator.h); one that does not reserves
// the aligned block that is expected to free soonest. A reservation binds a
// later demand unless that demand will have ended (its time limit) before the
// reserved block is expected to be free (never when that is not known: a
// block held by a session without a time limit may free at any moment): so a
// later request can never delay
// anyone ahead of it, and short requests with known limits fill the gaps
// (EASY-style backfill made conservative: every waiter reserves). Under the
// fifo order nothing starts behind the first waiter that cannot.
//
// WaitQueue also tracks what each waiter was last told: TakePositionChanges
// returns only the waiters whose position or the queue length changed since,
// so OnQueued is sent on entry and on change, never repeated.
//
// Thread safety: none; the Scheduler serialises access under its mutex.
// Errors: Push returns RESOURCE_EXHAUSTED when the queue holds max_waiters.
#ifndef IPUPOD_SCHEDULER_WAIT_QUEUE_H_
#define IPUPOD_SCHEDULER_WAIT_QUEUE_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "device/device_ids.h"
#include "scheduler/allocator.h"
#include "scheduler/scheduler.h"

namespace ipupod::scheduler {

// A request as the backfill pass sees it.
struct Demand {
  int size = 0;          // IPUs to grant (a power of two, after auto-round)
  device::Block region;  // the pod, or the partition's block
  IpuMask members;       // IPUs of the region the request may use (pool: in no partition)
  // How long it holds its IPUs once granted; infinite = not known (such a
  // request is never backfilled over a reservation).
  absl::Duration duration = absl::InfiniteDuration();
};

// What the pass knows about the pod.
struct PlanContext {
  IpuMask allocatable;  // IPUs that may be granted now (idle)
  IpuMask healthy;      // IPUs that are not failed (may become allocatable later)
  // When each IPU is expected to be free: now for allocatable ones, a
  // session's expected end, InfiniteFuture when not known.
  std::array<absl::Time, device::kMaxPodIpus> free_at{};
  absl::Time now;
  bool fifo = false;  // nothing starts behind the first demand that cannot
};

// Per-demand hooks for limits: `held(i)` returns the limit that holds demand
// i ("" = none), asked just before it is considered; `granted(i)` is told of
// each grant, in order, so later demands see the IPUs taken.
struct PlanHooks {
  std::function<std::string(size_t)> held;
  std::function<void(size_t)> granted;
};

struct BackfillPlan {
  // Per demand, in order: the block granted, or nullopt.
  std::vector<std::optional<device::Block>> grants;
  // Per demand not granted: the block it reserves (nullopt if every block of
  // its region holds a failed IPU, when held, when granted, or behind a fifo
  // head).
  std::vector<std::optional<device::Block>> reservations;
  // Per reservation: when its block is expected to be free (InfiniteFuture:
  // not known).
  std::vector<absl::Time> reservation_starts;
  // Per demand not granted: the limit that holds it ("" = none).
  std::vector<std::string> held;
  // Per demand not granted: would it fit now were nothing reserved ahead of
  // it ("Priority" rather than "Resources"), and do enough of its IPUs sit
  // free without an aligned block among them ("Fragmentation")?
  std::vector<bool> fits_without_reservations;
  std::vector<bool> fragmented;
  IpuMask reserved;  // union of the reservations
};

BackfillPlan PlanBackfill(const std::vector<Demand>& demands, const PlanContext& context,
                          const PlanHooks* hooks = nullptr);

struct Waiter {
  std::string ticket;
  uint64_t sequence = 0;  // arrival order (ties in priority go to the earlier)
  std::string user;
  bool admin = false;
  std::string account;
  std::string qos;
  std::string job;
  absl::Duration time_limit = absl::ZeroDuration();  // zero = none given
  std::string partition;                             // "" = free pool
  std::string client;
  int num_ipus = 0;        // block size to grant
  int requested_ipus = 0;  // before auto-round
  absl::Time enqueued;
  absl::Duration timeout = absl::ZeroDuration();  // zero = none
  uint64_t timer_id = 0;                          // 0 = no timeout scheduled
  std::shared_ptr<AttachObserver> observer;       // may be null
  // Set by the Scheduler at each walk.
  double priority = 0;
  sharing::Factors factors;
  std::string reason;  // QueueEntryView::reason
  // While blocked by fragmentation alone: since when (InfinitePast = not now),
  // and the time so blocked before that.
  absl::Time fragmented_since = absl::InfinitePast();
  absl::Duration fragmentation_delay = absl::ZeroDuration();
  // What the waiter was last told (0 = nothing yet); kept by WaitQueue.
  int told_position = 0;
  int told_length = 0;
};

struct PositionChange {
  std::string ticket;
  int position = 0;  // 1-based
  int queue_length = 0;
  std::shared_ptr<AttachObserver> observer;
};

class WaitQueue {
 public:
  // REQUIRES: max_waiters >= 1.
  explicit WaitQueue(int max_waiters);
  WaitQueue(const WaitQueue&) = delete;
  WaitQueue& operator=(const WaitQueue&) = delete;

  int size() const { return static_cast<int>(waiters_.size()); }
  bool empty() const { return waiters_.empty(); }
  bool full() const { return size() >= max_waiters_; }
  int max_waiters() const { return max_waiters_; }
  // Arrival order (position i+1).
  const std::vector<Waiter>& waiters() const { return waiters_; }

  // Appends at the tail. RESOURCE_EXHAUSTED (changes nothing) when full.
  absl::Status Push(Waiter waiter);
  // Inserts before the first waiter that `before(waiter, w)` says it goes
  // ahead of. RESOURCE_EXHAUSTED (changes nothing) when full.
  absl::Status Insert(Waiter waiter,
                      const std::function<bool(const Waiter&, const Waiter&)>& before);
  // Re-orders the waiters (stable).
  void Sort(const std::function<bool(const Waiter&, const Waiter&)>& before);
  std::vector<Waiter>& mutable_waiters() { return waiters_; }
  // Removes and returns the waiter with `ticket`; nullopt if absent.
  std::optional<Waiter> Remove(absl::string_view ticket);
  const Waiter* Find(absl::string_view ticket) const;
  // 1-based position of `ticket`, 0 if absent.
  int PositionOf(absl::string_view ticket) const;
  // Empties the queue, returning the waiters in order.
  std::vector<Waiter> TakeAll();

  // The waiters whose position or queue length differ from what they were
  // last told, in queue order; records the new values as told.
  std::vector<PositionChange> TakePositionChanges();

 private:
  const int max_waiters_;
  std::vector<Waiter> waiters_;
};

}  // namespace ipupod::scheduler

#endif  // IPUPOD_SCHEDULER_WAIT_QUEUE_H_
