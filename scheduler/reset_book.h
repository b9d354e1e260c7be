// File: scheduler/reset_book.h
//
// The pod's pending resets: each reset started and not yet finished, by its
// id, and which pending reset covers each IPU. One part of the Scheduler
// (scheduler_impl.h); the IPUs' states (device/ipu.h), the timer that ends a
// reset and who may start one stay with the Scheduler (faults.cc).
//
// A reset lists the IPUs it started on (PendingReset::ipus, what its
// ResetResult reports) and covers them until it finishes. An IPU that fails
// while its reset runs leaves it (Uncover): once repaired it may be reset
// again, and only the reset now covering it may end that.
//
// Invariants (CheckInvariants reports the first one broken):
//   * every pending reset is stored under its id, which NextId handed out;
//     its IPUs are inside the pod, in ascending order, at least one;
//   * an IPU is covered by at most one pending reset, and only by one that
//     lists it: Covered() is exactly the IPUs with a covering reset;
//   * once Close has run the book stays empty.
// What holds between the book and the IPUs' states is CheckPodInvariants'
// (scheduler_impl.h): a covered IPU is kResetting, and while the book is
// open every kResetting IPU is covered. Close (Shutdown) drops the pending
// resets but leaves their IPUs kResetting, hence the "while open".
// Add, Take, Uncover and Close keep them; the book hands out const resets
// only.
//
// Ownership: the book owns its PendingResets (and their ResetDone callbacks
// until Take or Close hands them back); a pointer it returns stays valid
// until the next Add, Take or Close.
//
// Thread safety: not thread-safe; SchedulerImpl holds its lock (mu_) around
// every call. It never calls a ResetDone.
// Errors: none returned. The REQUIRES of Add, Uncover and CoveringReset are
// programmer errors, checked with IPUPOD_CHECK (common/check.h): a breach
// aborts.
#ifndef IPUPOD_SCHEDULER_RESET_BOOK_H_
#define IPUPOD_SCHEDULER_RESET_BOOK_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "scheduler/allocator.h"
#include "scheduler/scheduler.h"

namespace ipupod::scheduler {

struct PendingReset {
  std::vector<int> ipus;              // as started, ascending
  std::vector<std::string> sessions;  // the sessions that held them
  double simulated_seconds = 0;
  ResetDone done;  // empty for automatic resets
};

class ResetBook {
 public:
  using Map = absl::flat_hash_map<uint64_t, PendingReset>;

  // An empty, open book for a pod of `pod_size` IPUs.
  // REQUIRES: 1 <= pod_size <= device::kMaxPodIpus.
  explicit ResetBook(int pod_size);
  ResetBook(const ResetBook&) = delete;
  ResetBook& operator=(const ResetBook&) = delete;

  // Hands out a new reset id (1, 2, ...; never 0): the caller schedules the
  // reset's end under it before it Adds the reset. An id handed out and never
  // added is simply unused.
  uint64_t NextId() { return next_id_++; }
  // Stores `reset` under `id`; it covers its IPUs.
  // REQUIRES: the book is open; NextId handed out `id` and it is not pending;
  // reset.ipus is non-empty, ascending, inside the pod, and none is covered.
  void Add(uint64_t id, PendingReset reset);
  // Removes the reset `id` and returns it, its IPUs no longer covered;
  // nullopt if it is not pending (finished, or dropped by Close).
  std::optional<PendingReset> Take(uint64_t id);
  // `ipu` leaves the reset covering it, which still lists it; returns that
  // reset's id, 0 if none covered it. REQUIRES: 0 <= ipu < pod size.
  uint64_t Uncover(int ipu);
  // Closes the book and returns every pending reset, in no particular order,
  // for the caller to tell their ResetDone. Later Closes return nothing.
  std::vector<PendingReset> Close();

  // The id of the reset covering `ipu`, 0 if none. REQUIRES: 0 <= ipu < pod size.
  uint64_t CoveringReset(int ipu) const;
  // The IPUs the reset `id` covers (none if it is not pending).
  IpuMask CoveredBy(uint64_t id) const;
  // The IPUs some pending reset covers.
  IpuMask Covered() const { return covered_; }
  // The reset `id`; null if it is not pending.
  const PendingReset* Find(uint64_t id) const;

  bool closed() const { return closed_; }
  size_t size() const { return resets_.size(); }
  bool empty() const { return resets_.empty(); }

  // OK, or INTERNAL naming the first broken invariant (see above). Costs
  // O(pod size + IPUs of the pending resets).
  absl::Status CheckInvariants() const;

 private:
  const int pod_size_;
  Map resets_;                      // by id
  std::vector<uint64_t> covering_;  // per IPU; 0 = none
  IpuMask covered_;                 // IPUs with a covering reset
  uint64_t next_id_ = 1;
  bool closed_ = false;
};

}  // namespace ipupod::scheduler

#endif  // IPUPOD_SCHEDULER_RESET_BOOK_H_
