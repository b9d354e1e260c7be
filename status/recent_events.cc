#include "status/recent_events.h"

#include <utility>

#include "common/sync.h"

namespace ipupod::status {

void RecentEvents::Record(PodEvent event) {
  sync::MutexLock lock(&mu_);
  ++total_;
  if (capacity_ == 0) return;
  if (events_.size() == capacity_) events_.pop_front();
  events_.push_back(std::move(event));
}

std::vector<PodEvent> RecentEvents::Snapshot() const {
  sync::MutexLock lock(&mu_);
  return std::vector<PodEvent>(events_.rbegin(), events_.rend());
}

int64_t RecentEvents::total() const {
  sync::MutexLock lock(&mu_);
  return total_;
}

}  // namespace ipupod::status
