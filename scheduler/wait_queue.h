// File: scheduler/wait_queue.h
//
// The attach wait queue: a bounded FIFO of waiters (WaitQueue) and the
// conservative-backfill pass over it (PlanBackfill).
//
// The pass walks the demands in arrival order with a growing "reserved" mask.
// A demand that fits on allocatable IPUs outside the mask is granted (best
// fit, allocator.h); one that does not adds its reservation (the block it will
// get first) to the mask. So a later request is granted only on IPUs no one
// ahead of it has reserved, and can never delay them. A request without
// `wait` is planned as one more demand at the tail.
//
// WaitQueue also tracks what each waiter was last told: TakePositionChanges
// returns only the waiters whose position or the queue length changed since,
// so OnQueued is sent on entry and on change, never repeated.
//
// Thread safety: none; the Scheduler serialises access under its mutex.
// Errors: Push returns RESOURCE_EXHAUSTED when the queue holds max_waiters.
#ifndef IPUPOD_SCHEDULER_WAIT_QUEUE_H_
#define IPUPOD_SCHEDULER_WAIT_QUEUE_H_

#include <cstdint>
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
};

struct BackfillPlan {
  // Per demand, in order: the block granted, or nullopt.
  std::vector<std::optional<device::Block>> grants;
  // Per demand not granted: the block it reserves (nullopt if every block of
  // its region holds a failed IPU, or when granted).
  std::vector<std::optional<device::Block>> reservations;
  IpuMask reserved;  // union of the reservations
};

// Conservative backfill. `allocatable`: IPUs that may be granted now (idle).
// `healthy`: IPUs that are not failed (may become allocatable later).
BackfillPlan PlanBackfill(const std::vector<Demand>& demands, const IpuMask& allocatable,
                          const IpuMask& healthy);

struct Waiter {
  std::string ticket;
  std::string user;
  std::string partition;  // "" = free pool
  std::string client;
  int num_ipus = 0;        // block size to grant
  int requested_ipus = 0;  // before auto-round
  absl::Time enqueued;
  absl::Duration timeout = absl::ZeroDuration();  // zero = none
  uint64_t timer_id = 0;                          // 0 = no timeout scheduled
  std::shared_ptr<AttachObserver> observer;       // may be null
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
