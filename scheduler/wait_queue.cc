#include "scheduler/wait_queue.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"

namespace ipupod::scheduler {

BackfillPlan PlanBackfill(const std::vector<Demand>& demands, const IpuMask& allocatable,
                          const IpuMask& healthy) {
  BackfillPlan plan;
  plan.grants.resize(demands.size());
  plan.reservations.resize(demands.size());
  IpuMask free = allocatable;
  for (size_t i = 0; i < demands.size(); ++i) {
    const Demand& d = demands[i];
    plan.grants[i] = FindFreeBlock(free & d.members, plan.reserved, d.region, d.size);
    if (plan.grants[i]) {
      free &= ~MaskOf(*plan.grants[i]);  // later demands see it taken
      continue;
    }
    const IpuMask eligible = d.members & healthy;
    plan.reservations[i] =
        ReservationFor(eligible, eligible & ~free, plan.reserved, d.region, d.size);
    if (plan.reservations[i]) plan.reserved |= MaskOf(*plan.reservations[i]);
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
