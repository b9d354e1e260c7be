// File: scheduler/wait_queue.h
//
// The attach wait queue: a bounded set of waiters kept in the order the
// walk takes them (WaitQueue), and the backfill pass over them (BackfillWalk,
// one demand at a time; PlanBackfill over a list).
//
// The pass walks the demands in order (arrival order, or priority order under
// the multifactor policy) with a growing set of reservations. A demand held
// by a limit is skipped: it neither starts nor reserves. A demand that fits on
// allocatable IPUs outside the reservations that bind it is granted (best
// fit, allocator.h); one that does not reserves the aligned block that is
// expected to free soonest. A reservation binds a later demand unless that
// demand will have ended (its time limit) before the reserved block is
// expected to be free (never when that is not known: a block held by a
// session without a time limit may free at any moment): so a later request
// can never delay anyone ahead of it, and short requests with known limits
// fill the gaps (EASY-style backfill made conservative: every waiter
// reserves). Under the fifo order nothing starts behind the first waiter that
// cannot. BackfillWalk::MayStart tells a caller when no demand still to
// come could start or be blocked by fragmentation alone, so a walk may stop
// there without changing any decision.
//
// The order (WaitQueue) is kept so that a pass costs what it walks, not the
// length of the queue. Waiters are grouped by account, QoS and size: within a
// group every factor of the priority but age is the same. A group keeps the
// waiters whose priority has settled (age at its cap, or an order without
// priorities) in arrival order, where they are equal and the earlier goes
// first, and those still ageing in order of enqueue time, where the one that
// has waited longer is ahead. The walk's order is the merge of these runs by
// their heads' priority at the pass's time, then arrival (WaitQueue::Cursor):
// the same total order as computing every waiter's priority and sorting, for
// priorities that differ by more than rounding (waits apart by more than a
// nanosecond).
//
// WaitQueue also tracks what each waiter was last told (told_position,
// told_length), so positions are sent on entry and on change, never repeated;
// the Scheduler decides when to look (scheduler_impl.h).
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

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
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

// The pass one demand at a time, in order (PlanBackfill is a loop over it), so
// a caller can feed the queue as it walks it and stop when further demands
// cannot change anything.
class BackfillWalk {
 public:
  explicit BackfillWalk(const PlanContext& context);
  ~BackfillWalk();
  BackfillWalk(const BackfillWalk&) = delete;
  BackfillWalk& operator=(const BackfillWalk&) = delete;

  // Plans the next demand (its index in plan() is the number added before).
  // `held`: the limit that holds it ("" = none): it neither starts nor
  // reserves.
  void Add(const Demand& demand, std::string held = "");
  // Whether a demand still to come of `size` IPUs lasting `duration` might
  // be granted or be blocked by fragmentation alone: at least `size` IPUs
  // are free outside the reservations that would bind it. When it is false
  // for the smallest size and shortest duration of every size still to
  // come, the rest of the walk would grant no one and find no one blocked
  // by fragmentation: each would get reason Resources or Priority (the
  // latter when it fits ignoring reservations), and only their own
  // reservations are left out by stopping there. False for (size, d) means
  // false for any larger size or longer duration.
  bool MayStart(int size, absl::Duration duration) const;
  // Allocatable IPUs the demands so far were not granted.
  const IpuMask& free() const { return free_; }
  const BackfillPlan& plan() const { return plan_; }
  BackfillPlan& mutable_plan() { return plan_; }

 private:
  class Reserved;
  // A block search's result, valid while the state it read is unchanged
  // (`version`): a long walk asks the same questions of many demands of one
  // size and pool, most of them after nothing has changed.
  template <typename Result>
  struct Memo {
    int size = 0;
    device::Block region;
    IpuMask mask;
    uint64_t version = 0;
    Result result;
  };
  // Whether an aligned block of `d` fits in free IPUs, ignoring reservations.
  bool FitsIgnoringReservations(const Demand& d);
  std::optional<Reservation> SoonestFor(const Demand& d);

  PlanContext context_;  // free_at moves with each grant
  IpuMask free_;
  std::unique_ptr<Reserved> reserved_;
  bool stopped_ = false;  // fifo: someone ahead could not start
  BackfillPlan plan_;
  uint64_t grants_ = 0;        // changes of free_ and free_at
  uint64_t reservations_ = 0;  // changes of plan_.reserved
  std::vector<Memo<bool>> fits_;
  std::vector<Memo<std::optional<Reservation>>> soonest_;
};

// Block sizes are powers of two up to kMaxPodIpus: this many of them.
inline constexpr int kSizeLevels = 9;
static_assert(1 << (kSizeLevels - 1) == device::kMaxPodIpus);
// The index of a block size among them (log2).
int SizeLevel(int size);

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
  // Set by the Scheduler before Push (and on a policy change, Rebuild): how
  // long it holds its IPUs once granted (Demand::duration), and whether its
  // observer wants its queue position.
  absl::Duration hold = absl::InfiniteDuration();
  bool watches_position = false;
  // Set by the Scheduler at each walk that reaches it (`walk`: that walk's id).
  uint64_t walk = 0;
  std::string reason;  // QueueEntryView::reason
  // While blocked by fragmentation alone: since when (InfinitePast = not now),
  // and the time so blocked before that.
  absl::Time fragmented_since = absl::InfinitePast();
  absl::Duration fragmentation_delay = absl::ZeroDuration();
  // What the waiter was last told (0 = nothing yet).
  int told_position = 0;
  int told_length = 0;
  // The Scheduler's cache of its factors and priority in one priority pass
  // (`priority_pass` names it; 0 = none), kept under the Scheduler's mutex.
  mutable uint64_t priority_pass = 0;
  mutable double priority = 0;
  mutable sharing::Factors factors;
};

// The walk's order as the Scheduler defines it (scheduler/sharing/priority.h).
struct WalkPriority {
  // The waiter's priority at the pass's time.
  std::function<double(const Waiter&)> of;
  // Whether the waiter's priority no longer changes with time (its age factor
  // is at its cap, or the order uses no priorities). It must stay true as
  // time goes on, until the rules change (WaitQueue::Rebuild).
  std::function<bool(const Waiter&)> settled;
};

class WaitQueue {
 public:
  class Cursor;

  // REQUIRES: max_waiters >= 1.
  explicit WaitQueue(int max_waiters);
  WaitQueue(const WaitQueue&) = delete;
  WaitQueue& operator=(const WaitQueue&) = delete;

  int size() const { return static_cast<int>(waiters_.size()); }
  bool empty() const { return waiters_.empty(); }
  bool full() const { return size() >= max_waiters_; }
  int max_waiters() const { return max_waiters_; }

  // Adds a waiter (its ticket and sequence unique) at its place in the order;
  // `settled` is priority.settled(waiter) now. Returns it as stored (the
  // pointer stays valid until it leaves). RESOURCE_EXHAUSTED (changes
  // nothing) when full.
  absl::StatusOr<Waiter*> Push(Waiter waiter, bool settled);
  // Removes and returns the waiter with `ticket`; nullopt if absent.
  std::optional<Waiter> Remove(absl::string_view ticket);
  Waiter* Find(absl::string_view ticket);
  const Waiter* Find(absl::string_view ticket) const;
  // The stored waiter behind a pointer a Cursor returned. REQUIRES: in this queue.
  Waiter* Mutable(const Waiter* waiter) { return const_cast<Waiter*>(waiter); }
  // Empties the queue, returning the waiters in arrival order.
  std::vector<Waiter> TakeAll();
  // Every waiter, in no particular order.
  std::vector<const Waiter*> All() const;

  // Moves the ageing waiters whose priority has settled into their group's
  // arrival order. Call at each pass, before Walk, with time not going back.
  void Settle(const WalkPriority& priority);
  // After the rules of the order changed (a new policy): recomputes each
  // waiter's hold with `hold` and its place with `priority`.
  void Rebuild(const WalkPriority& priority,
               const std::function<absl::Duration(const Waiter&)>& hold);
  // The waiters in the walk's order by `priority` (which must outlive the
  // cursor), with `extra` (a request not in the queue) at its place.
  // REQUIRES: the queue is not changed while the cursor is in use.
  Cursor Walk(const WalkPriority& priority, const Waiter* extra = nullptr) const;
  // The 1-based place of `waiter` in that order, without walking it: each
  // run is in the order's sense, so the waiters of a run that go first are a
  // prefix of it, counted whole when its last goes first, skipped when its
  // first does not. Costs the number of groups plus the prefixes of runs
  // that straddle the waiter. REQUIRES: `waiter` is in this queue.
  int PositionOf(const Waiter* waiter, const WalkPriority& priority) const;

  // What a walk needs to know of the waiters it has not reached yet: for
  // each block size (index log2 of the size), how many waiters hold their
  // IPUs how long.
  using Holds = absl::btree_map<absl::Duration, int>;
  const std::array<Holds, kSizeLevels>& holds() const { return holds_; }
  // Waiters whose observer wants its position.
  int watchers() const { return watchers_; }
  // The accounts of the waiters.
  std::vector<std::string> Accounts() const;

  // Waiters blocked by fragmentation now (fragmented_since set), kept by the
  // Scheduler with SetFragmented.
  void SetFragmented(const Waiter* waiter, bool fragmented);
  std::vector<const Waiter*> Fragmented() const;
  size_t fragmented_count() const { return fragmented_.size(); }

  // INTERNAL naming the first broken invariant: every waiter stored under its
  // ticket and indexed in exactly one run of its group (account, QoS, size);
  // each run strictly in its order (so no caller changed, through Mutable, a
  // field the order or the grouping reads: sequence, enqueued, account, qos,
  // num_ipus); the holds, watcher count and fragmented set matching the
  // waiters. Costs O(waiters); the Scheduler runs it under IPUPOD_DCHECK.
  absl::Status CheckInvariants() const;

 private:
  // A run of waiters of one group: settled ones by sequence, ageing ones by
  // enqueue time then sequence.
  struct RunOrder {
    bool by_enqueue;
    bool operator()(const Waiter* a, const Waiter* b) const;
  };
  using Run = absl::btree_set<const Waiter*, RunOrder>;
  struct Group {
    Run settled{RunOrder{false}};
    Run ageing{RunOrder{true}};
    bool empty() const { return settled.empty() && ageing.empty(); }
  };
  static std::string GroupKey(const Waiter& waiter);
  void Index(const Waiter* waiter, bool settled);
  void Unindex(const Waiter* waiter);
  // CheckInvariants' part over groups_ and settled_.
  absl::Status CheckRuns() const;

  const int max_waiters_;
  absl::node_hash_map<std::string, Waiter> waiters_;  // by ticket; pointers stay valid
  absl::flat_hash_map<std::string, Group> groups_;
  absl::flat_hash_map<const Waiter*, bool> settled_;  // in which run of its group
  std::array<Holds, kSizeLevels> holds_;
  int watchers_ = 0;
  absl::flat_hash_set<const Waiter*> fragmented_;
};

// The merge of a queue's runs (WaitQueue::Walk).
class WaitQueue::Cursor {
 public:
  // The next waiter in the walk's order; nullptr after the last.
  const Waiter* Next();

 private:
  friend class WaitQueue;
  struct Head {
    double priority = 0;
    const Waiter* waiter = nullptr;
    const Run* run = nullptr;  // null for the extra request
    Run::const_iterator next;  // in `run`, after `waiter`
    bool settled = false;      // every waiter of `run` has this priority
  };
  // Heap order: the head that goes first is at the front.
  static bool After(const Head& a, const Head& b);
  Cursor(const WalkPriority* priority) : priority_(priority) {}
  void Push(const Head& head);

  const WalkPriority* priority_;
  std::vector<Head> heap_;
};

}  // namespace ipupod::scheduler

#endif  // IPUPOD_SCHEDULER_WAIT_QUEUE_H_
