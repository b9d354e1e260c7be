#include "scheduler/scheduler.h"

namespace ipupod::scheduler {

bool MaySeeClientLabel(const Caller& caller, absl::string_view owner) {
  return caller.admin || caller.user == owner;
}

void HideClientLabels(const Caller& caller, PodView& pod) {
  for (SessionView& session : pod.sessions) {
    if (!MaySeeClientLabel(caller, session.user)) session.client.clear();
  }
}

void HideClientLabels(const Caller& caller, std::vector<QueueEntryView>& queue) {
  for (QueueEntryView& entry : queue) {
    if (!MaySeeClientLabel(caller, entry.user)) entry.client.clear();
  }
}

}  // namespace ipupod::scheduler
