#include "server/status/recent_events.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

namespace {

// "IPU 4", "IPUs 0-3", "IPUs 1, 5", "pod".
std::string TargetOf(const std::vector<int>& ipus) {
  if (ipus.size() == 1) return absl::StrCat("IPU ", ipus[0]);
  bool contiguous = !ipus.empty();
  for (size_t i = 1; i < ipus.size(); ++i) contiguous &= ipus[i] == ipus[i - 1] + 1;
  if (contiguous) return absl::StrCat("IPUs ", ipus.front(), "-", ipus.back());
  return absl::StrCat("IPUs ", absl::StrJoin(ipus, ", "));
}

}  // namespace

void RecentEvents::OnFault(const scheduler::FaultEvent& event) {
  Record(PodEvent{event.at_unix_ms, "fault", std::string(scheduler::FaultKindName(event.kind)),
                  event.random ? "random" : event.by, TargetOf({event.ipu}), event.affected_ipus,
                  event.affected_sessions});
}

void RecentEvents::OnResetStarted(const scheduler::ResetEvent& event) {
  const char* what = event.level == RecoveryAction::kFullReset        ? "pod"
                     : event.level == RecoveryAction::kPartitionReset ? "partition"
                                                                      : "ipu";
  Record(PodEvent{event.at_unix_ms, "reset", what, event.automatic ? "automatic" : "requested",
                  event.level == RecoveryAction::kFullReset ? "pod" : TargetOf(event.ipus),
                  event.ipus, event.sessions});
}

void RecentEvents::OnRepaired(const scheduler::RepairEvent& event) {
  Record(PodEvent{
      event.at_unix_ms, "repair", "failed IPU", event.by, TargetOf({event.ipu}), {event.ipu}, {}});
}

}  // namespace ipupod::status
