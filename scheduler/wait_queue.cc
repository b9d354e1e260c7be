#include "scheduler/wait_queue.h"

#include <algorithm>
#include <bit>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace ipupod::scheduler {

// The reservations made so far in a pass: the IPUs covered by one whose start
// is not known, and for the others the earliest known start of those that
// cover each IPU, kept as a few masks by start (ascending). So the
// reservations binding a demand are found in one look at each distinct
// start, however many reservations there are.
class BackfillWalk::Reserved {
 public:
  const IpuMask& covered() const { return covered_; }

  void Add(const Reservation& r) {
    const IpuMask bits = MaskOf(r.block);
    covered_ |= bits;
    if (r.start == absl::InfiniteFuture()) {
      unknown_start_ |= bits;
      return;
    }
    // The IPUs whose earliest start this reservation lowers move to its entry.
    IpuMask lowered = bits;
    auto it = by_start_.begin();
    for (; it != by_start_.end() && it->first <= r.start; ++it) lowered &= ~it->second;
    if (lowered.none()) return;
    for (auto later = it; later != by_start_.end(); ++later) later->second &= ~lowered;
    if (it != by_start_.begin() && std::prev(it)->first == r.start) {
      std::prev(it)->second |= lowered;
    } else {
      by_start_.insert(it, {r.start, lowered});
    }
    std::erase_if(by_start_, [](const auto& entry) { return entry.second.none(); });
  }

  // The IPUs a demand of `duration` planned at `now` may not use: every
  // reserved one, except where it would be done before every reservation
  // covering the IPU starts (a reservation whose start is not known binds
  // everyone: its block may free at any moment).
  IpuMask Binding(absl::Duration duration, absl::Time now) const {
    if (duration == absl::InfiniteDuration()) return covered_;
    IpuMask binding = unknown_start_;
    const absl::Time end = now + duration;
    for (const auto& [start, ipus] : by_start_) {
      if (!(end > start)) break;
      binding |= ipus;
    }
    return binding;
  }

 private:
  IpuMask covered_;
  IpuMask unknown_start_;
  std::vector<std::pair<absl::Time, IpuMask>> by_start_;  // ascending, disjoint, none empty
};

BackfillWalk::BackfillWalk(const PlanContext& context)
    : context_(context), free_(context.allocatable), reserved_(std::make_unique<Reserved>()) {}

BackfillWalk::~BackfillWalk() = default;

namespace {

// The memo entry for (size, region, mask) at `version`, made if missing;
// `fresh` tells whether it holds a result for that version.
template <typename Memo>
Memo& Entry(std::vector<Memo>& memos, const Demand& d, const IpuMask& mask, uint64_t version,
            bool* fresh) {
  for (Memo& m : memos) {
    if (m.size == d.size && m.region == d.region && m.mask == mask) {
      *fresh = m.version == version;
      m.version = version;
      return m;
    }
  }
  *fresh = false;
  memos.push_back(Memo{d.size, d.region, mask, version, {}});
  return memos.back();
}

}  // namespace

bool BackfillWalk::FitsIgnoringReservations(const Demand& d) {
  bool fresh = false;
  auto& m = Entry(fits_, d, d.members, grants_, &fresh);
  if (!fresh) m.result = FindFreeBlock(free_ & d.members, IpuMask(), d.region, d.size).has_value();
  return m.result;
}

std::optional<Reservation> BackfillWalk::SoonestFor(const Demand& d) {
  const IpuMask eligible = d.members & context_.healthy;
  bool fresh = false;
  // (grants_ and reservations_ only grow: their sum names the state.)
  auto& m = Entry(soonest_, d, eligible, grants_ + reservations_, &fresh);
  if (!fresh) {
    m.result = SoonestReservation(eligible, eligible & ~free_, plan_.reserved, context_.free_at,
                                  d.region, d.size);
  }
  return m.result;
}

void BackfillWalk::Add(const Demand& d, std::string held) {
  const size_t i = plan_.grants.size();
  plan_.grants.emplace_back();
  plan_.reservations.emplace_back();
  plan_.reservation_starts.push_back(absl::InfiniteFuture());
  plan_.held.push_back(std::move(held));
  plan_.fits_without_reservations.push_back(false);
  plan_.fragmented.push_back(false);
  if (!plan_.held[i].empty()) return;
  const IpuMask usable = free_ & d.members;
  const IpuMask binding = reserved_->Binding(d.duration, context_.now);
  // Nothing fits among reservations that does not fit without them.
  const bool fits = FitsIgnoringReservations(d);
  if (fits && !stopped_) plan_.grants[i] = FindFreeBlock(usable, binding, d.region, d.size);
  if (plan_.grants[i]) {
    const IpuMask taken = MaskOf(*plan_.grants[i]);
    free_ &= ~taken;  // later demands see it taken
    const absl::Time end =
        d.duration == absl::InfiniteDuration() ? absl::InfiniteFuture() : context_.now + d.duration;
    for (int ipu : IpusOf(taken)) context_.free_at[ipu] = end;
    ++grants_;
    return;
  }
  plan_.fits_without_reservations[i] = fits;
  plan_.fragmented[i] = !fits && static_cast<int>((usable & ~binding).count()) >= d.size;
  if (context_.fifo) stopped_ = true;
  if (stopped_ && reserved_->covered().any()) return;  // only the fifo head reserves
  const std::optional<Reservation> r = SoonestFor(d);
  if (!r) return;
  plan_.reservations[i] = r->block;
  plan_.reservation_starts[i] = r->start;
  const IpuMask bits = MaskOf(r->block);
  if ((bits & ~plan_.reserved).any()) {
    plan_.reserved |= bits;
    ++reservations_;
  }
  reserved_->Add(*r);
}

bool BackfillWalk::MayStart(int size, absl::Duration duration) const {
  // A demand lasting d may use only free IPUs outside the reservations
  // binding d, which grow with d. Fewer of those than it asks for: it does
  // not fit, and it does not have enough IPUs free to be blocked by
  // fragmentation alone.
  const IpuMask open = free_ & ~reserved_->Binding(duration, context_.now);
  return static_cast<int>(open.count()) >= size;
}

BackfillPlan PlanBackfill(const std::vector<Demand>& demands, const PlanContext& context,
                          const PlanHooks* hooks) {
  BackfillWalk walk(context);
  for (size_t i = 0; i < demands.size(); ++i) {
    std::string held;
    if (hooks != nullptr && hooks->held) held = hooks->held(i);
    walk.Add(demands[i], std::move(held));
    if (walk.plan().grants[i] && hooks != nullptr && hooks->granted) hooks->granted(i);
  }
  return std::move(walk.mutable_plan());
}

// ---------------------------------------------------------------- WaitQueue

int SizeLevel(int size) { return std::countr_zero(static_cast<unsigned>(std::max(1, size))); }

bool WaitQueue::RunOrder::operator()(const Waiter* a, const Waiter* b) const {
  if (by_enqueue && a->enqueued != b->enqueued) return a->enqueued < b->enqueued;
  return a->sequence < b->sequence;
}

std::string WaitQueue::GroupKey(const Waiter& w) {
  return absl::StrCat(w.account, "\x1f", w.qos, "\x1f", w.num_ipus);
}

WaitQueue::WaitQueue(int max_waiters) : max_waiters_(std::max(1, max_waiters)) {}

void WaitQueue::Index(const Waiter* w, bool settled) {
  Group& group = groups_[GroupKey(*w)];
  (settled ? group.settled : group.ageing).insert(w);
  settled_[w] = settled;
}

void WaitQueue::Unindex(const Waiter* w) {
  auto it = groups_.find(GroupKey(*w));
  auto where = settled_.find(w);
  (where->second ? it->second.settled : it->second.ageing).erase(w);
  if (it->second.empty()) groups_.erase(it);
  settled_.erase(where);
}

absl::StatusOr<Waiter*> WaitQueue::Push(Waiter waiter, bool settled) {
  if (full()) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("the attach queue is full (%d waiters); try again later", max_waiters_));
  }
  const std::string ticket = waiter.ticket;
  auto [it, inserted] = waiters_.try_emplace(ticket, std::move(waiter));
  if (!inserted) return absl::AlreadyExistsError(absl::StrCat("ticket ", ticket, " is queued"));
  Waiter* w = &it->second;
  Index(w, settled);
  ++holds_[SizeLevel(w->num_ipus)][w->hold];
  if (w->watches_position) ++watchers_;
  return w;
}

std::optional<Waiter> WaitQueue::Remove(absl::string_view ticket) {
  auto it = waiters_.find(ticket);
  if (it == waiters_.end()) return std::nullopt;
  const Waiter* w = &it->second;
  Unindex(w);
  Holds& holds = holds_[SizeLevel(w->num_ipus)];
  if (auto h = holds.find(w->hold); --h->second == 0) holds.erase(h);
  if (w->watches_position) --watchers_;
  fragmented_.erase(w);
  Waiter removed = std::move(it->second);
  waiters_.erase(it);
  return removed;
}

Waiter* WaitQueue::Find(absl::string_view ticket) {
  auto it = waiters_.find(ticket);
  return it == waiters_.end() ? nullptr : &it->second;
}

const Waiter* WaitQueue::Find(absl::string_view ticket) const {
  auto it = waiters_.find(ticket);
  return it == waiters_.end() ? nullptr : &it->second;
}

std::vector<Waiter> WaitQueue::TakeAll() {
  std::vector<Waiter> all;
  all.reserve(waiters_.size());
  for (auto& [ticket, w] : waiters_) all.push_back(std::move(w));
  std::sort(all.begin(), all.end(),
            [](const Waiter& a, const Waiter& b) { return a.sequence < b.sequence; });
  waiters_.clear();
  groups_.clear();
  settled_.clear();
  for (Holds& holds : holds_) holds.clear();
  watchers_ = 0;
  fragmented_.clear();
  return all;
}

std::vector<const Waiter*> WaitQueue::All() const {
  std::vector<const Waiter*> all;
  all.reserve(waiters_.size());
  for (const auto& [ticket, w] : waiters_) all.push_back(&w);
  return all;
}

void WaitQueue::Settle(const WalkPriority& priority) {
  for (auto& [key, group] : groups_) {
    // The earliest enqueued has waited longest: it settles first.
    while (!group.ageing.empty() && priority.settled(**group.ageing.begin())) {
      const Waiter* w = *group.ageing.begin();
      group.ageing.erase(group.ageing.begin());
      group.settled.insert(w);
      settled_[w] = true;
    }
  }
}

void WaitQueue::Rebuild(const WalkPriority& priority,
                        const std::function<absl::Duration(const Waiter&)>& hold) {
  groups_.clear();
  settled_.clear();
  for (Holds& holds : holds_) holds.clear();
  for (auto& [ticket, w] : waiters_) {
    w.hold = hold(w);
    ++holds_[SizeLevel(w.num_ipus)][w.hold];
    Index(&w, priority.settled(w));
  }
}

absl::Status WaitQueue::CheckRuns() const {
  size_t indexed = 0;
  for (const auto& [key, group] : groups_) {
    if (group.empty()) return absl::InternalError(absl::StrCat("wait queue: empty group ", key));
    for (const Run* run : {&group.settled, &group.ageing}) {
      const bool settled = run == &group.settled;
      const Waiter* previous = nullptr;
      for (const Waiter* w : *run) {
        if (previous != nullptr && !run->key_comp()(previous, w)) {
          return absl::InternalError(
              absl::StrCat("wait queue: ", w->ticket, " is out of order after ", previous->ticket));
        }
        previous = w;
        auto where = settled_.find(w);
        if (GroupKey(*w) != key || where == settled_.end() || where->second != settled) {
          return absl::InternalError(
              absl::StrCat("wait queue: ", w->ticket, " is indexed in the wrong run"));
        }
        ++indexed;
      }
    }
  }
  if (indexed != waiters_.size() || settled_.size() != waiters_.size()) {
    return absl::InternalError(absl::StrFormat("wait queue: %d waiters, %d indexed, %d marked",
                                               waiters_.size(), indexed, settled_.size()));
  }
  return absl::OkStatus();
}

absl::Status WaitQueue::CheckInvariants() const {
  std::array<Holds, kSizeLevels> holds;
  int watchers = 0;
  for (const auto& [ticket, w] : waiters_) {
    if (w.ticket != ticket) {
      return absl::InternalError(absl::StrCat("wait queue: ", w.ticket, " stored as ", ticket));
    }
    if (!settled_.contains(&w)) {
      return absl::InternalError(absl::StrCat("wait queue: ", ticket, " is not indexed"));
    }
    ++holds[SizeLevel(w.num_ipus)][w.hold];
    if (w.watches_position) ++watchers;
  }
  IPUPOD_RETURN_IF_ERROR(CheckRuns());
  if (holds != holds_ || watchers != watchers_) {
    return absl::InternalError("wait queue: holds or watchers do not match the waiters");
  }
  for (const Waiter* w : fragmented_) {
    if (!settled_.contains(w)) {
      return absl::InternalError("wait queue: a fragmented waiter is not in the queue");
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> WaitQueue::Accounts() const {
  absl::flat_hash_set<std::string> accounts;
  for (const auto& [key, group] : groups_) {
    const Run& run = group.settled.empty() ? group.ageing : group.settled;
    accounts.insert((*run.begin())->account);
  }
  return std::vector<std::string>(accounts.begin(), accounts.end());
}

void WaitQueue::SetFragmented(const Waiter* w, bool fragmented) {
  if (fragmented) {
    fragmented_.insert(w);
  } else {
    fragmented_.erase(w);
  }
}

std::vector<const Waiter*> WaitQueue::Fragmented() const {
  return std::vector<const Waiter*>(fragmented_.begin(), fragmented_.end());
}

// ---------------------------------------------------------------- Cursor

WaitQueue::Cursor WaitQueue::Walk(const WalkPriority& priority, const Waiter* extra) const {
  Cursor cursor(&priority);
  cursor.heap_.reserve(2 * groups_.size() + 1);
  for (const auto& [key, group] : groups_) {
    for (const Run* run : {&group.settled, &group.ageing}) {
      if (run->empty()) continue;
      const Waiter* first = *run->begin();
      cursor.Push(
          {priority.of(*first), first, run, std::next(run->begin()), run == &group.settled});
    }
  }
  if (extra != nullptr) cursor.Push({priority.of(*extra), extra, nullptr, {}, false});
  return cursor;
}

int WaitQueue::PositionOf(const Waiter* waiter, const WalkPriority& priority) const {
  const double own = priority.of(*waiter);
  // Whether a waiter of priority `p` goes before `waiter` (Cursor::After).
  const auto first = [&](double p, const Waiter* w) {
    return p != own ? p > own : w->sequence < waiter->sequence;
  };
  int ahead = 0;
  for (const auto& [key, group] : groups_) {
    for (const Run* run : {&group.settled, &group.ageing}) {
      if (run->empty()) continue;
      // A settled run shares its head's priority (as in Cursor::Next).
      const bool settled = run == &group.settled;
      const double head = priority.of(**run->begin());
      if (!first(head, *run->begin())) continue;
      const Waiter* last = *run->rbegin();
      if (first(settled ? head : priority.of(*last), last)) {
        ahead += static_cast<int>(run->size());
        continue;
      }
      for (const Waiter* w : *run) {
        if (!first(settled ? head : priority.of(*w), w)) break;
        ++ahead;
      }
    }
  }
  return ahead + 1;
}

bool WaitQueue::Cursor::After(const Head& a, const Head& b) {
  if (a.priority != b.priority) return a.priority < b.priority;
  return a.waiter->sequence > b.waiter->sequence;
}

void WaitQueue::Cursor::Push(const Head& head) {
  heap_.push_back(head);
  std::push_heap(heap_.begin(), heap_.end(), &After);
}

const Waiter* WaitQueue::Cursor::Next() {
  if (heap_.empty()) return nullptr;
  std::pop_heap(heap_.begin(), heap_.end(), &After);
  Head& head = heap_.back();
  const Waiter* waiter = head.waiter;
  if (head.run == nullptr || head.next == head.run->end()) {
    heap_.pop_back();
    return waiter;
  }
  // The run's next waiter takes its place; in a settled run it has the same
  // priority (the group's), so it need not be computed again.
  head.waiter = *head.next;
  ++head.next;
  if (!head.settled) head.priority = priority_->of(*head.waiter);
  std::push_heap(heap_.begin(), heap_.end(), &After);
  return waiter;
}

}  // namespace ipupod::scheduler
