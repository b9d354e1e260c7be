// Time limits of interactive sessions: a session ends TIMEOUT when the time
// it asked for (attach --time-limit) runs out, or, when it asked for none,
// its QoS's max wall time, as Slurm ends a job at its time limit. The limit
// is fixed when the IPUs are granted; a policy reloaded later does not move
// it. Batch jobs keep their own time limit (the JobManager stops them at it,
// with a checkpoint), so their sessions get no timer here.
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/sync.h"
#include "scheduler/scheduler_impl.h"
#include "spdlog/spdlog.h"

namespace ipupod::scheduler {

absl::Duration SchedulerImpl::WallLimitLocked(const Waiter& w) const {
  if (!w.job.empty()) return absl::ZeroDuration();
  if (w.time_limit > absl::ZeroDuration()) return w.time_limit;
  const sharing::Qos* q = sharing::FindQos(*policy_, w.qos);
  return q != nullptr ? q->max_wall : absl::ZeroDuration();
}

void SchedulerImpl::StartWallTimerLocked(Session& s) {
  if (s.wall_limit <= absl::ZeroDuration()) return;
  const std::string id = s.id;
  absl::StatusOr<uint64_t> timer = timer_.Schedule(s.wall_limit, [this, id] { OnWallLimit(id); });
  if (!timer.ok()) {
    // The timer queue is bounded well above the sessions a pod can hold;
    // should it be full the session runs on rather than fail its grant.
    spdlog::error("scheduler: time limit of {}: {}", id, timer.status().ToString());
    return;
  }
  s.wall_timer_id = *timer;
}

void SchedulerImpl::OnWallLimit(const std::string& id) {
  const NotifyEndedOnExit notify(this);
  MutationLock lock(this);
  if (shutdown_) return;
  Session* found = sessions_.Find(id);
  if (found == nullptr) return;  // it ended first
  const Session& s = *found;
  const sharing::Qos* q = sharing::FindQos(*policy_, s.qos);
  const absl::Duration max_wall = q != nullptr ? q->max_wall : absl::ZeroDuration();
  const std::string limit = absl::FormatDuration(s.wall_limit);
  const std::string what =
      s.wall_limit == max_wall
          ? absl::StrFormat("QoS %s's max wall time of %s", s.qos, limit)
          : absl::StrFormat("the time limit of %s it asked for (--time-limit)", limit);
  const absl::Status why = absl::DeadlineExceededError(absl::StrFormat(
      "session %s reached %s; its IPUs were released: attach again%s", id, what,
      max_wall > absl::ZeroDuration()
          ? absl::StrFormat(" (with --time-limit up to %s)", absl::FormatDuration(max_wall))
          : std::string(" with a longer --time-limit")));
  spdlog::info("scheduler: {}", std::string(why.message()));
  found->wall_timer_id = 0;  // running now: nothing to cancel
  EndSessionLocked(id, &why, accounting::kStateTimeout);
  RunQueueLocked();
}

}  // namespace ipupod::scheduler
