#include "scheduler/wait_queue.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_format.h"

namespace ipupod::scheduler {

namespace {

// The reservations made so far in a pass: the IPUs covered by one whose start
// is not known, and for the others the earliest known start of those that
// cover each IPU, kept as a few masks by start (ascending). So the
// reservations binding a demand are found in one look at each distinct
// start, however many reservations there are.
class ReservedIpus {
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

void Resize(BackfillPlan& plan, size_t n) {
  plan.grants.resize(n);
  plan.reservations.resize(n);
  plan.reservation_starts.assign(n, absl::InfiniteFuture());
  plan.held.resize(n);
  plan.fits_without_reservations.assign(n, false);
  plan.fragmented.assign(n, false);
}

}  // namespace

BackfillPlan PlanBackfill(const std::vector<Demand>& demands, const PlanContext& context,
                          const PlanHooks* hooks) {
  BackfillPlan plan;
  Resize(plan, demands.size());
  IpuMask free = context.allocatable;
  FreeTimes free_at = context.free_at;
  ReservedIpus reserved;
  bool stopped = false;  // fifo: someone ahead could not start
  for (size_t i = 0; i < demands.size(); ++i) {
    const Demand& d = demands[i];
    if (hooks != nullptr && hooks->held) {
      plan.held[i] = hooks->held(i);
      if (!plan.held[i].empty()) continue;
    }
    const IpuMask usable = free & d.members;
    const IpuMask binding = reserved.Binding(d.duration, context.now);
    plan.grants[i] = stopped ? std::nullopt : FindFreeBlock(usable, binding, d.region, d.size);
    if (plan.grants[i]) {
      const IpuMask taken = MaskOf(*plan.grants[i]);
      free &= ~taken;  // later demands see it taken
      const absl::Time end = d.duration == absl::InfiniteDuration() ? absl::InfiniteFuture()
                                                                    : context.now + d.duration;
      for (int ipu : IpusOf(taken)) free_at[ipu] = end;
      if (hooks != nullptr && hooks->granted) hooks->granted(i);
      continue;
    }
    plan.fits_without_reservations[i] =
        FindFreeBlock(usable, IpuMask(), d.region, d.size).has_value();
    plan.fragmented[i] = !plan.fits_without_reservations[i] &&
                         static_cast<int>((usable & ~binding).count()) >= d.size;
    if (context.fifo) stopped = true;
    if (stopped && reserved.covered().any()) continue;  // only the fifo head reserves
    const IpuMask eligible = d.members & context.healthy;
    std::optional<Reservation> r =
        SoonestReservation(eligible, eligible & ~free, plan.reserved, free_at, d.region, d.size);
    if (!r) continue;
    plan.reservations[i] = r->block;
    plan.reservation_starts[i] = r->start;
    plan.reserved |= MaskOf(r->block);
    reserved.Add(*r);
  }
  return plan;
}

WaitQueue::WaitQueue(int max_waiters) : max_waiters_(std::max(1, max_waiters)) {}

absl::Status WaitQueue::Push(Waiter waiter) {
  if (full()) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("the attach queue is full (%d waiters); try again later", max_waiters_));
  }
  waiters_.push_back(std::move(waiter));
  return absl::OkStatus();
}

absl::Status WaitQueue::Insert(Waiter waiter,
                               const std::function<bool(const Waiter&, const Waiter&)>& before) {
  if (full()) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("the attach queue is full (%d waiters); try again later", max_waiters_));
  }
  auto it = std::find_if(waiters_.begin(), waiters_.end(),
                         [&](const Waiter& w) { return before(waiter, w); });
  waiters_.insert(it, std::move(waiter));
  return absl::OkStatus();
}

void WaitQueue::Sort(const std::function<bool(const Waiter&, const Waiter&)>& before) {
  std::stable_sort(waiters_.begin(), waiters_.end(), before);
}

std::optional<Waiter> WaitQueue::Remove(absl::string_view ticket) {
  auto it = std::find_if(waiters_.begin(), waiters_.end(),
                         [&](const Waiter& w) { return w.ticket == ticket; });
  if (it == waiters_.end()) return std::nullopt;
  Waiter removed = std::move(*it);
  waiters_.erase(it);
  return removed;
}

const Waiter* WaitQueue::Find(absl::string_view ticket) const {
  const int position = PositionOf(ticket);
  return position == 0 ? nullptr : &waiters_[position - 1];
}

int WaitQueue::PositionOf(absl::string_view ticket) const {
  for (size_t i = 0; i < waiters_.size(); ++i) {
    if (waiters_[i].ticket == ticket) return static_cast<int>(i) + 1;
  }
  return 0;
}

std::vector<Waiter> WaitQueue::TakeAll() { return std::exchange(waiters_, {}); }

std::vector<PositionChange> WaitQueue::TakePositionChanges() {
  std::vector<PositionChange> changes;
  const int length = size();
  for (int i = 0; i < length; ++i) {
    Waiter& w = waiters_[i];
    if (w.told_position == i + 1 && w.told_length == length) continue;
    w.told_position = i + 1;
    w.told_length = length;
    changes.push_back(PositionChange{w.ticket, i + 1, length, w.observer});
  }
  return changes;
}

}  // namespace ipupod::scheduler
